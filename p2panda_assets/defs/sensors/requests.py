"""What every sensor shares: the assets a run builds, the runs in the queue, run requests
and how one tick's requests run as one batch, and the relation graph as the store has it.

Requests of one tick are listed upstream first and tagged `QUEUE_TAG`, so a run queue
that limits that tag to one run executes them in relation order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import dagster as dg
import psycopg

from p2panda_assets.defs.assets import BATCH_TAG, QUEUE_TAG, materialize_schema_job
from p2panda_assets.defs.partitions import FAMILY, PARTITION_TAG, SCHEMAS, schema_id_of, schemas
from p2panda_assets.engine.readiness import Relations, Scope
from p2panda_assets.store.catalog import stored_catalog
from p2panda_assets.store.feed import registry

# The daemon looks at its sensors every 5 s (dagster._daemon.sensor.MIN_INTERVAL_LOOP_TIME,
# not configurable, and no `dagster.yaml` setting changes it): that is how often they run,
# and what the UI shows as their frequency. (A loop that starts a moment early skips a
# tick, 10 s between those two; the listener, `p2panda_assets.live`, brings a committed
# entry's run without waiting for any tick.)
MINIMUM_INTERVAL_SECONDS = 5
UP_TO_PLAN = FAMILY[:3]  # verify and index, decode, fold: everything but the table
PLAN_AND_TABLE = FAMILY[2:]
SCOPES: dict[Scope, list[dg.AssetKey] | None] = {Scope.FAMILY: None, Scope.UP_TO_PLAN: UP_TO_PLAN}
QUEUED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED]  # not begun
IN_PROGRESS = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
UNFINISHED = [*QUEUED, *IN_PROGRESS]
MAX_SKIP_CHARS = 2000


def load_relations(conn: psycopg.Connection) -> Relations:
    """The relation graph from the catalog as of the last index step, with the registry."""
    catalog = stored_catalog(conn)
    return Relations(catalog, catalog.order(), registry(conn))


def busy_partitions(instance: dg.DagsterInstance) -> set[str]:
    """Schemas with a run in progress: what it writes is not known yet. A queued run of
    another schema is not waited for: what a sensor requests now is queued after it and
    runs after it, one run at a time (`dagster.yaml`). Waiting for queued runs starved
    the revert fan-out and the registration builds under steady ingest: the entries
    sensor queues a run for a schema with new entries at nearly every tick."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=IN_PROGRESS), limit=1000)
    return {schema_id_of(run.tags[PARTITION_TAG]) for run in runs if PARTITION_TAG in run.tags}


def queued_selections(instance: dg.DagsterInstance) -> dict[str, frozenset[dg.AssetKey]]:
    """Per schema, the assets its runs still in the queue will build. A queued run indexes
    the store when it starts, so it reads every entry ingested before that."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=QUEUED), limit=1000)
    selections: dict[str, frozenset[dg.AssetKey]] = {}
    for run in runs:
        if PARTITION_TAG in run.tags:
            sid = schema_id_of(run.tags[PARTITION_TAG])
            selection = frozenset(run.asset_selection or FAMILY)
            selections[sid] = selections.get(sid, frozenset()) | selection
    return selections


def queued_tables(instance: dg.DagsterInstance) -> set[str]:
    """Schemas whose table a queued run will build (`queued_selections`): a request for
    one now would build it twice (a UI backfill queues a run for every partition)."""
    return {s for s, assets in queued_selections(instance).items() if FAMILY[-1] in assets}


def request(key: str, run_key: str, assets: list[dg.AssetKey] | None = None) -> dg.RunRequest:
    """A run of the family (or of `assets` of it) of the schema whose partition key is
    `key` (`defs.partitions.partition_key`); checks of those assets follow."""
    return dg.RunRequest(
        run_key=run_key,
        partition_key=key,
        asset_selection=assets,
        tags=QUEUE_TAG,
    )


def batched(requests: list[dg.RunRequest]) -> list[dg.RunRequest]:
    """The requests of one tick, each naming all of them as its batch (`BATCH_TAG`): the
    first to run builds them all in one Spark job, the others report their tables."""
    table = FAMILY[-1]
    keys = [
        r.partition_key
        for r in requests
        if r.partition_key and (r.asset_selection is None or table in r.asset_selection)
    ]
    if len(keys) < 2:
        return requests
    batch = {BATCH_TAG: ",".join(dict.fromkeys(schema_id_of(key) for key in keys))}
    return [
        dg.RunRequest(
            run_key=r.run_key,
            partition_key=r.partition_key,
            asset_selection=r.asset_selection,
            tags={**r.tags, **batch},
        )
        for r in requests
    ]


def requested_schema(run_request: dg.RunRequest) -> str:
    """The schema id a request of `request` is for."""
    return schema_id_of(run_request.partition_key or "")


def missing_partitions(
    instance: dg.DagsterInstance, requests: Iterable[dg.RunRequest]
) -> list[str]:
    """The partition keys `requests` name that the instance lacks: Dagster refuses a
    request for a partition that does not exist, and a schema's key may be new
    (registered, renamed, or an instance from before the names) while the registration
    sensor has not ticked yet."""
    wanted = {r.partition_key for r in requests if r.partition_key}
    return sorted(wanted - set(instance.get_dynamic_partitions(SCHEMAS))) if wanted else []


def with_partitions(instance: dg.DagsterInstance, result: dg.SensorResult) -> dg.SensorResult:
    """`result`, adding in the same tick the partitions its requests lack
    (`missing_partitions`)."""
    missing = missing_partitions(instance, result.run_requests or [])
    if not missing:
        return result
    return dg.SensorResult(
        run_requests=result.run_requests,
        skip_reason=result.skip_reason,
        cursor=result.cursor,
        dynamic_partitions_requests=[
            *(result.dynamic_partitions_requests or []),
            schemas.build_add_request(missing),
        ],
        asset_events=result.asset_events,
    )


def table_holds(built: Mapping[str, int], schema_id: str, ingest_seq: int) -> bool:
    """Whether the schema's table holds what the entry `ingest_seq` makes of it: the table
    was built after every entry up to a bound at or past it was verified (`built`:
    `store.feed.built_through`). A run for that entry would find the table UNCHANGED."""
    return built.get(schema_id, 0) >= ingest_seq


def skip_reason(lines: list[str], default: str) -> str:
    """A tick's notes as one skip reason, cut to what the UI shows."""
    text = "; ".join(lines) or default
    return text if len(text) <= MAX_SKIP_CHARS else text[: MAX_SKIP_CHARS - 3] + "..."


# Every sensor requests the family job, on by default, at the interval the latency goal asks.
pipeline_sensor = dg.sensor(
    job=materialize_schema_job,
    minimum_interval_seconds=MINIMUM_INTERVAL_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
