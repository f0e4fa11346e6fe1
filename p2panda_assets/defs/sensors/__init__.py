"""Sensors: the deployment's automation, idempotent across ticks.

- `schema_registration_sensor` (`registration`) adds the partition of every registered
  schema and requests a schema's family when it is registered, and again when it stops
  being pending for its relations (or when an upstream it cascades from was rebuilt after
  it);
- `schema_entries_sensor` (`entries`) requests a rebuild of the schemas new entries concern;
- `schema_revert_sensor` (`reverts`) fans a verified schema-revert out to the schemas that
  relate to the reverted one.

Relations are ours to order (a partition cannot depend on another partition of the same
asset): a schema's table is requested only when every schema it relates to is registered
and materialized; a schema in a relation cycle is reported and never requested. Those
decisions are pure, in `engine.readiness`; what the sensors read of the store is in
`store.feed`; run requests, batches and the queue are in `requests`, the cursors in
`cursors`.
"""

from p2panda_assets.defs.sensors.cursors import (
    HOLE_TTL_SECONDS,
    MAX_HOLES,
    EntryCursor,
    RegistrationCursor,
    RevertCursor,
)
from p2panda_assets.defs.sensors.entries import (
    PEEK_ENTRIES,
    Route,
    entries_requests,
    entries_tick,
    read_new_entries,
    route_entries,
    schema_entries_sensor,
)
from p2panda_assets.defs.sensors.registration import registration_tick, schema_registration_sensor
from p2panda_assets.defs.sensors.requests import (
    FAMILY,
    MINIMUM_INTERVAL_SECONDS,
    PARTITION_TAG,
    PLAN_AND_TABLE,
    QUEUED,
    UNFINISHED,
    UP_TO_PLAN,
    batched,
    busy_partitions,
    load_relations,
    queued_selections,
    request,
)
from p2panda_assets.defs.sensors.reverts import revert_requests, revert_tick, schema_revert_sensor

sensors = [schema_registration_sensor, schema_entries_sensor, schema_revert_sensor]

__all__ = [
    "FAMILY",
    "HOLE_TTL_SECONDS",
    "MAX_HOLES",
    "MINIMUM_INTERVAL_SECONDS",
    "PARTITION_TAG",
    "PEEK_ENTRIES",
    "PLAN_AND_TABLE",
    "QUEUED",
    "UNFINISHED",
    "UP_TO_PLAN",
    "EntryCursor",
    "RegistrationCursor",
    "RevertCursor",
    "Route",
    "batched",
    "busy_partitions",
    "entries_requests",
    "entries_tick",
    "load_relations",
    "queued_selections",
    "read_new_entries",
    "registration_tick",
    "request",
    "revert_requests",
    "revert_tick",
    "route_entries",
    "schema_entries_sensor",
    "schema_registration_sensor",
    "schema_revert_sensor",
    "sensors",
]
