"""Running the asset family through Dagster from the command line, upstream schemas first.

The runs go to the persistent Dagster instance under `DAGSTER_HOME` (default
`$P2PANDA_HOME/dagster`), whose storage is the product's PostgreSQL, so they appear in
`dagster dev` like runs launched from the UI.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import dagster as dg
import psycopg
from dagster._utils.error import SerializableErrorInfo

from p2panda_assets.defs.dead_runs import fail_dead_runs, process_tags
from p2panda_assets.defs.partitions import (
    BUILT_FROM,
    carry_materializations,
    partition_key,
    partition_keys,
    schema_names,
    sync_partitions,
)
from p2panda_assets.defs.partitions import SCHEMAS as SCHEMAS  # the command line's name for it
from p2panda_assets.engine.readiness import in_build_order
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.home import p2panda_home
from p2panda_assets.store.database import DATABASE_URL_ENV, connect, database_url, ensure_schema
from p2panda_assets.store.tables import built_fingerprints, stale_cascades

JOB = "materialize_schema"
AS_OF_JOB = "materialize_as_of_version"
TABLE = dg.AssetKey("materialized_table")


def dagster_home() -> Path:
    """Dagster's home: `DAGSTER_HOME`, else `$P2PANDA_HOME/dagster`."""
    return Path(os.environ.get("DAGSTER_HOME", str(p2panda_home() / "dagster")))


def prepare_environment() -> str:
    """Start (or find) the database and point Dagster at it; returns the database URL."""
    url = database_url()
    os.environ.setdefault(DATABASE_URL_ENV, url)
    home = dagster_home()
    os.environ.setdefault("DAGSTER_HOME", str(home))
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        with resources.as_file(resources.files("p2panda_assets") / "dagster.yaml") as template:
            shutil.copyfile(template, config)
    return url


@contextmanager
def a_short_run() -> Iterator[None]:
    """Around a command that starts its own Spark session for a few runs (`panda
    materialize`): the driver JVM compiled for the store's size
    (`compiled_for_a_short_run`)."""
    from p2panda_assets.pipeline.spark.session import compiled_for_a_short_run
    from p2panda_assets.store.new_entries import entries_at_most

    prepare_environment()
    with connect(autocommit=True) as conn:
        ensure_schema(conn)
        entries = entries_at_most(conn)
    with compiled_for_a_short_run(entries):
        yield


def add_partition(schema_id: str, earlier_key: str | None = None) -> None:
    """Make a newly registered schema a partition of the asset family, under its key
    (`partition_key`: a schema registered again with another name changes key, and its
    builds go along, `carry_materializations`). `earlier_key`: its key before, which a
    sensor's tick may have removed already."""
    prepare_environment()
    with connect(autocommit=True) as conn:
        ensure_schema(conn)
        key = partition_keys(conn).get(schema_id, partition_key(None, schema_id))
        names = schema_names(conn)
    with dg.DagsterInstance.get() as instance:
        sync_partitions(instance, [key], of_schema=schema_id, names=names)
        if earlier_key is not None:
            carry_materializations(instance, [earlier_key], key, names.get(schema_id))


@dataclass(frozen=True, slots=True)
class Failed:
    """A schema whose run failed: the reason code and message its run reported."""

    schema_id: str
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Materialized:
    schema_ids: list[str]  # the schemas materialized (their runs ran in this order), upstream first
    failed: list[Failed]
    launched: bool = True  # False: nothing was new for them, no run was launched (`up_to_date`)


def materialize(schema_ids: list[str] | None = None) -> Materialized:
    """Materialize the named registered schemas (all, if none are named) and the
    registered schemas they relate to, upstream first, each in its own run of the asset
    family: the runs share one batch (`p2panda/batch`), so the first builds them all in
    one Spark job and the others report theirs. A schema whose run fails does not stop
    the others. With nothing new for any of them (`up_to_date`), no run is launched."""
    from p2panda_assets.store.pipeline_state import current_index

    prepare_environment()
    with dg.DagsterInstance.get() as instance, connect(autocommit=True) as conn:
        ensure_schema(conn)
        keys = partition_keys(conn)
        registered = list(keys)
        targets = list(schema_ids or registered)
        unknown = [s for s in targets if s not in registered]
        if unknown:
            raise P2pandaError(Reason.AWAITING_SCHEMA, f"not registered: {', '.join(unknown)}")
        if not targets:
            return Materialized([], [])
        sync_partitions(instance, list(keys.values()), names=schema_names(conn))
        fail_dead_runs(instance)
        fingerprint = current_index(conn)
        if fingerprint is not None:
            ordered = _in_build_order(conn, targets, registered)
            if up_to_date(instance, conn, {s: keys[s] for s in ordered}, fingerprint):
                return Materialized(ordered, [], launched=False)
        # Not before: the code location imports Spark, pandera and pandas (seconds).
        from p2panda_assets.definitions import defs
        from p2panda_assets.defs.assets import BATCH_TAG

        job = defs.resolve_job_def(JOB)
        # The index step (asset raw_entries) comes first: the relation order needs it.
        first = targets[0]
        index_run = _run(job, instance, keys[first], first, [dg.AssetKey("raw_entries")], {})
        if index_run is not None:
            raise P2pandaError(index_run.reason, index_run.message)
        ordered = _in_build_order(conn, targets, registered)
        batch = {BATCH_TAG: ",".join(ordered)}
        failed = [
            failure
            for schema_id in ordered
            if (failure := _run(job, instance, keys[schema_id], schema_id, None, batch)) is not None
        ]
    return Materialized(ordered, failed)


def materialize_as_of(schema_id: str, version: int) -> None:
    """Build the table of a registered schema as it was at `version`, beside the current
    one (job `materialize_as_of_version`); `pipeline.build.as_of` says what that means."""
    from p2panda_assets.definitions import defs

    prepare_environment()
    with dg.DagsterInstance.get() as instance:
        fail_dead_runs(instance)
        result = defs.resolve_job_def(AS_OF_JOB).execute_in_process(
            run_config={
                "loggers": {"console": {"config": {"log_level": "WARNING"}}},
                "ops": {
                    "build_version_table": {"config": {"schema_id": schema_id, "version": version}}
                },
            },
            instance=instance,
            tags=process_tags(),
            raise_on_error=False,
        )
    if not result.success:
        failure = run_failure(result, schema_id)
        raise P2pandaError(failure.reason, failure.message)


def up_to_date(
    instance: dg.DagsterInstance, conn: psycopg.Connection, keys: Mapping[str, str], index: str
) -> bool:
    """Whether runs of `schema_ids` would change nothing, `index` being the fingerprint of
    an index with nothing left to do (`current_index`): each table built from it (so
    every upstream schema is built too), and each partition's latest materialization of
    `materialized_table` saying so. The second keeps the UI true: a run killed after the
    build, before it reported, leaves the partition showing an older build, and the
    next run reports this one. A table whose cascades read a deleted set that a run of
    its source changed since is not up to date either (`stale_cascades`). `keys`: the
    partition key of each schema id."""
    schema_ids = list(keys)
    built = built_fingerprints(conn, schema_ids)
    if stale_cascades(conn, schema_ids):
        return False
    return all(
        built.get(s) == index and shown_built_from(instance, s, key) == index
        for s, key in keys.items()
    )


def shown_built_from(instance: dg.DagsterInstance, schema_id: str, key: str) -> str | None:
    """The index the partition's latest `materialized_table` materialization was built
    from (None: none, or a pending one); under its key, or under its bare id, the key
    of an instance from before the names (`defs.partitions`): that history counts."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=TABLE, asset_partitions=sorted({key, schema_id})),
        limit=1,
    ).records
    shown = records[0].asset_materialization if records else None
    value = shown.metadata.get(BUILT_FROM) if shown is not None else None
    return None if value is None else str(value.value)


def _in_build_order(
    conn: psycopg.Connection, targets: list[str], registered: list[str]
) -> list[str]:
    """`targets` and the registered schemas they relate to, upstream first, as the last
    index step's catalog orders them (`readiness.in_build_order`, rule R-ORDER)."""
    from p2panda_assets.store.catalog import stored_catalog

    order = stored_catalog(conn).order()
    wanted = _with_upstream(set(targets), order.upstream)
    buildable = set(order.order)
    return in_build_order(order, {s for s in wanted if s in buildable or s in registered})


def _with_upstream(targets: set[str], upstream: dict[str, tuple[str, ...]]) -> set[str]:
    wanted, todo = set(targets), list(targets)
    while todo:
        for parent in upstream.get(todo.pop(), ()):
            if parent not in wanted:
                wanted.add(parent)
                todo.append(parent)
    return wanted


def _run(
    job: dg.JobDefinition,
    instance: dg.DagsterInstance,
    key: str,
    schema_id: str,
    selection: list[dg.AssetKey] | None,
    tags: dict[str, str],
) -> Failed | None:
    """One run of the family for `schema_id` (its partition `key`); how it failed, if
    it did."""
    result = job.execute_in_process(
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        instance=instance,
        partition_key=key,
        asset_selection=selection,
        tags={**tags, **process_tags()},
        raise_on_error=False,
    )
    return None if result.success else run_failure(result, schema_id)


def run_failure(result: dg.ExecuteInProcessResult, schema_id: str) -> Failed:
    """A failed run as a reason code and a message: the reason a typed failure (a
    `dg.Failure` with `reason` metadata) carries, else `internal` with the error."""
    for event in result.all_events:
        data = event.step_failure_data if event.is_step_failure else None
        failure = data.user_failure_data if data else None
        if failure is not None and "reason" in failure.metadata:
            reason = Reason(str(failure.metadata["reason"].value))  # text metadata
            return Failed(schema_id, reason, failure.description or "")
    for event in result.all_events:
        data = event.step_failure_data if event.is_step_failure else None
        typed = typed_failure(data.error) if data is not None else None
        if typed is not None:  # a `P2pandaError` the step raised (`busy`, `no-executors`, ...)
            return Failed(schema_id, *typed)
    for event in result.all_events:
        data = event.step_failure_data if event.is_step_failure else None
        if data is not None and data.error is not None:
            error = data.error.cause or data.error
            text = error.message.strip().splitlines()[-1] if error.message.strip() else ""
            if "OperationalError" in (error.cls_name or "") or "connection" in text.lower():
                return Failed(schema_id, Reason.DATABASE_UNAVAILABLE, text)
            return Failed(schema_id, Reason.INTERNAL, text or error.cls_name or "failed")
    failures = [e.message for e in result.all_events if e.is_failure and e.message]
    return Failed(schema_id, Reason.INTERNAL, "; ".join(failures) or "the run failed")


def typed_failure(error: SerializableErrorInfo | None) -> tuple[Reason, str] | None:
    """The reason and message of a `P2pandaError` in a step's error or the errors it
    was raised from (its text: `p2panda_assets.errors.P2pandaError: <reason>: <message>`)."""
    while error is not None:
        if error.cls_name == P2pandaError.__name__:
            text = error.message.strip().partition(f"{P2pandaError.__name__}: ")[2]
            code, _, message = text.partition(": ")
            if code in Reason._value2member_map_:
                return Reason(code), message.strip()
        error = error.cause or error.context
    return None
