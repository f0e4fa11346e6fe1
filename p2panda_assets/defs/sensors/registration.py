"""`schema_registration_sensor`: adds the partition of every registered schema (and
removes the keys no registered schema has: bare ids from before the names, a renamed
schema's old key, whose builds the new key takes along, an unregistered schema's;
`defs.partitions`) and requests a schema's
family when it is registered, and again when it stops being pending for its relations
(or when an upstream it cascades from was rebuilt after it). What to build is
`engine.readiness.build_key`'s decision."""

import hashlib
from collections.abc import Mapping

import dagster as dg
import psycopg

from p2panda_assets.defs.partitions import (
    carried_materializations,
    keys_in_use,
    partition_changes,
    partition_keys,
    schema_id_of,
    schema_names,
    schemas,
)
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.defs.sensors.cursors import RegistrationCursor
from p2panda_assets.defs.sensors.requests import (
    batched,
    busy_partitions,
    load_relations,
    pipeline_sensor,
    queued_tables,
    request,
    skip_reason,
)
from p2panda_assets.engine.readiness import build_key
from p2panda_assets.errors import Reason
from p2panda_assets.store.feed import registry_state


def _partitions(instance: dg.DagsterInstance) -> set[str]:
    """The partition keys there are already."""
    assert schemas.name is not None  # defined with its own name, not of an asset
    return set(instance.get_dynamic_partitions(schemas.name))


def _state(conn: psycopg.Connection, busy: set[str], partitions: set[str]) -> str:
    """Everything a registration tick decides on but the cursor: the index, the registry,
    runs in progress and existing partitions. Unchanged, the tick has nothing to do."""
    text = registry_state(conn) + "|" + ",".join(sorted(busy)) + "|" + str(len(partitions))
    return hashlib.sha1(text.encode()).hexdigest()


PartitionRequest = dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest


def _partition_requests(
    instance: dg.DagsterInstance, partitions: set[str], keys: Mapping[str, str]
) -> tuple[list[PartitionRequest], list[str]]:
    """Add the keys of registered schemas that have none; remove the keys no registered
    schema has, unless a run or backfill not finished works on them (`partition_changes`).
    Also the keys added."""
    add, remove = partition_changes(partitions, keys.values())
    if remove:
        add, remove = partition_changes(partitions, keys.values(), keys_in_use(instance))
    requests: list[PartitionRequest] = [
        *([schemas.build_add_request(add)] if add else []),
        *([schemas.build_delete_request(remove)] if remove else []),
    ]
    return requests, add


def _carried(
    conn: psycopg.Connection, instance: dg.DagsterInstance, partitions: set[str], added: list[str]
) -> list[dg.AssetMaterialization]:
    """The builds the keys `added` take along from their schemas' earlier keys (a rename:
    `carried_materializations`)."""
    if not added:
        return []
    names = schema_names(conn)
    return [
        event
        for key in added
        for event in carried_materializations(
            instance,
            [k for k in partitions if schema_id_of(k) == schema_id_of(key)],
            key,
            names.get(schema_id_of(key)),
        )
    ]


def registration_tick(
    conn: psycopg.Connection, instance: dg.DagsterInstance, cursor: RegistrationCursor
) -> tuple[dg.SensorResult, list[str]]:
    """One evaluation of the registration sensor; also the warnings to log. The
    partitions are read before the registry: a key added after they were read belongs
    to a schema registered before the registry is (`panda register` adds it after its
    row), so it is never taken for a stale one."""
    partitions = _partitions(instance)
    busy = busy_partitions(instance)
    queued = queued_tables(instance)
    state = _state(conn, busy | queued, partitions)
    keys = partition_keys(conn)
    changes, added = _partition_requests(instance, partitions, keys)
    if state == cursor.state and not changes:
        return dg.SensorResult(skip_reason="nothing changed", cursor=cursor.dumps()), []
    rel = load_relations(conn)
    cycles = rel.cycles()
    issued, requests, notes = dict(cursor.issued), [], []
    pending = {s for s in rel.registry if not rel.ready(s)}
    for sid in rel.ordered(rel.registry):
        key = build_key(rel, sid, sid in cursor.pending)
        if key is None or issued.get(sid) == key or sid not in keys:  # not: registered now
            if sid in pending and sid not in cycles:
                notes.append(f"{sid} waits: {rel.why_pending(sid)}")
            continue
        if busy & {sid, *rel.upstream(sid)} or sid in queued:
            notes.append(f"{sid} waits for a run in progress or queued")
            if sid in cursor.pending:
                pending.add(sid)  # still owed the build its wait ended with
            continue
        issued[sid] = key
        requests.append(request(keys[sid], key))
    reported = sorted(set(cycles.values()))
    new_cycles = [msg for msg in reported if msg not in cursor.cycles]
    notes += [f"{msg}: not built ({', '.join(_members(cycles, msg))})" for msg in reported]
    next_cursor = RegistrationCursor(
        issued={s: k for s, k in issued.items() if s in rel.registry},
        pending=sorted(pending),
        cycles=reported,
        state=state,
    )
    result = dg.SensorResult(
        run_requests=batched(requests),
        skip_reason=None if requests else skip_reason(notes, "no schema to build"),
        cursor=next_cursor.dumps(),
        dynamic_partitions_requests=changes,
        asset_events=[
            *_cycle_observations(cycles, new_cycles, keys),
            *_carried(conn, instance, partitions, added),
        ],
    )
    warnings = [f"{msg}: not built ({', '.join(_members(cycles, msg))})" for msg in new_cycles]
    return result, warnings


def _members(cycles: Mapping[str, str], message: str) -> list[str]:
    return sorted(s for s, m in cycles.items() if m == message)


def _cycle_observations(
    cycles: Mapping[str, str], new: list[str], keys: Mapping[str, str]
) -> list[dg.AssetObservation]:
    """A cycle is reported on each schema in it: an observation of its plan's partition
    (`keys`: every registered schema's, there after this tick)."""
    return [
        dg.AssetObservation(
            asset_key="migration_plan",
            partition=keys[sid],
            metadata={"pending": f"{Reason.RELATION_CYCLE}: {msg}"},
        )
        for sid, msg in sorted(cycles.items())
        if msg in new and sid in keys
    ]


@pipeline_sensor
def schema_registration_sensor(
    context: dg.SensorEvaluationContext, postgres: PostgresResource
) -> dg.SensorResult:
    """Adds a partition per registered schema and builds it once its relations are ready;
    rebuilds a schema when it stops being pending, or when a schema it cascades from was
    rebuilt. Relation cycles are reported (log, skip reason, an observation per schema),
    not built."""
    with postgres.connect() as conn:
        result, warnings = registration_tick(
            conn, context.instance, RegistrationCursor.parse(context.cursor)
        )
    for warning in warnings:
        context.log.warning(warning)
    return result
