"""Materializing many schemas in one Spark job.

The instance logs of every schema to build are reduced together, one Spark group per
log, by the engine's `reduce_instance_log`; the cascades are settled over all of them
(`pipeline.cascades`: upstream schemas built earlier contribute their stored deleted
sets); the rows are written by binary COPY from the partitions into one staging table
per schema; then the schemas are swapped in one transaction, each in a savepoint of
its own (`tables.swap_schemas`). A schema whose build fails (a value PostgreSQL
refuses, a swap that cannot be done) is recorded `failed` with the message and keeps
its old table; the others are built.

The same steps build a lens in time (`as_of`): the table as it was at an older version
of the schema, beside the current one, from the same immutable messages.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import psycopg
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from p2panda_assets.engine.compatibility import history_compatibility
from p2panda_assets.engine.corpus import (
    Catalog,
)
from p2panda_assets.engine.readiness import in_build_order, other_upstream, unbuilt_upstream
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.errors import Pending, Reason
from p2panda_assets.failpoints import Failpoint, failpoint
from p2panda_assets.pipeline.cascades import deleted_instances, stored_deleted
from p2panda_assets.pipeline.columns import pg_type
from p2panda_assets.pipeline.increment_paths import choose_steps
from p2panda_assets.pipeline.increments import (
    Again,
    BuildPlan,
    cascade_increments,
    cascade_sources,
    cascade_targets,
    cascading_from,
    layer_sums,
    layers_after,
    plan_builds,
    reached_rows,
)
from p2panda_assets.pipeline.index import IndexResult
from p2panda_assets.pipeline.jvm_failures import jvm_failures_explained
from p2panda_assets.pipeline.reduction import (
    reduce_instance_logs,
)
from p2panda_assets.pipeline.spark import sized_for_the_store
from p2panda_assets.pipeline.staging import row_target, stage_reduced
from p2panda_assets.protocol.ids import checked_schema_id
from p2panda_assets.statuses import Assignment, BuildPath, BuildStatus
from p2panda_assets.store import tables
from p2panda_assets.store.pipeline_state import (
    Stage,
    count_good_entries,
    drop_tables,
    hold_pipeline_lock,
    release_pipeline_lock,
)
from p2panda_assets.store.registry import table_name_for, version_table_name_for
from p2panda_assets.store.tables import BuildState, Outcome


def ordered(schema_ids: Sequence[str], order: BuildOrder) -> list[str]:
    """`schema_ids`, once each, upstream first; those outside the build order after
    them (`readiness.in_build_order`, rule R-ORDER)."""
    return in_build_order(order, set(schema_ids))


def materialize_schemas(
    spark: SparkSession,
    conn: psycopg.Connection,
    url: str,
    index: IndexResult,
    schema_ids: Sequence[str],
) -> list[Outcome]:
    """Build the tables of `schema_ids` (registered schemas) in one Spark job, upstream
    first; one outcome per schema. Under the pipeline lock: builds and swaps of other
    processes wait for this one."""
    with jvm_failures_explained(spark):
        hold_pipeline_lock(conn)
        try:
            with sized_for_the_store(spark, count_good_entries(conn)):
                return _materialize(spark, conn, url, index, index.catalog, schema_ids, None)
        finally:
            release_pipeline_lock(conn)


def materialize_version(
    spark: SparkSession,
    conn: psycopg.Connection,
    url: str,
    index: IndexResult,
    catalog: Catalog,
    schema_id: str,
    version: int,
) -> Outcome:
    """Build `schema_id` as it was at `version` (`catalog` holds its log cut there)."""
    with jvm_failures_explained(spark):
        hold_pipeline_lock(conn)
        try:
            with sized_for_the_store(spark, count_good_entries(conn)):
                return _materialize(spark, conn, url, index, catalog, [schema_id], version)[0]
        finally:
            release_pipeline_lock(conn)


def _materialize(
    spark: SparkSession,
    conn: psycopg.Connection,
    url: str,
    index: IndexResult,
    catalog: Catalog,
    schema_ids: Sequence[str],
    as_of: int | None,
) -> list[Outcome]:
    order = catalog.order()
    schema_ids = ordered([checked_schema_id(s) for s in schema_ids], order)
    outcomes = {s: _outcome(catalog, order, s, as_of) for s in schema_ids}
    built_from = tables.built_fingerprints(conn, schema_ids) if as_of is None else {}
    previous = tables.build_states(conn, schema_ids) if as_of is None else {}
    ready: list[str] = []
    for schema_id in schema_ids:
        outcome = outcomes[schema_id]
        why = why_pending(conn, catalog, order, schema_id, set(ready))
        if why is not None:
            outcome.status, outcome.reason, outcome.message = (
                BuildStatus.PENDING,
                str(why.reason),
                why.message,
            )
            if as_of is None:
                tables.record_status(conn, outcome)
        elif built_from.get(schema_id) == index.fingerprint and _cascades_unchanged(
            conn, catalog, previous.get(schema_id), schema_id, ready
        ):
            outcome.status = BuildStatus.UNCHANGED
        else:
            ready.append(schema_id)
    if not ready:
        return [outcomes[s] for s in schema_ids]
    if as_of is not None:
        _build(spark, conn, url, index, catalog, [outcomes[s] for s in ready], as_of, {})
        return [outcomes[s] for s in schema_ids]
    sums = layer_sums(spark, conn, index.warehouse, index.layers) if index.layers else None
    plan = plan_builds(conn, catalog, order, sums, index.batch, ready, previous)
    deleted_anew: set[bytes] = set()
    if plan.first:
        first = [outcomes[s] for s in ready if s in plan.first]
        plan, deleted_anew = _build_first(spark, conn, url, index, catalog, first, plan)
    whole = [outcomes[s] for s in ready if s not in plan.increments and s not in plan.first]
    if plan.increments:
        # Before the rest: a whole build may cascade from their deleted sets.
        increments = [outcomes[s] for s in ready if s in plan.increments]
        whole += _build_increments(spark, conn, url, index, catalog, increments, plan, deleted_anew)
    if whole:  # upstream first, as the cascades and the swap's build states read them
        built = {o.schema_id for o in whole}
        whole = [outcomes[s] for s in ready if s in built]
        _build(spark, conn, url, index, catalog, whole, None, plan.states)
    return [outcomes[s] for s in schema_ids]


def _cascades_unchanged(
    conn: psycopg.Connection,
    catalog: Catalog,
    was: BuildState | None,
    schema_id: str,
    built_before: list[str],
) -> bool:
    """Whether a table built from the current index is still what a build would give:
    no schema its cascades read is built earlier in this run (`built_before`), and their
    deleted sets are those it was written with (a run that built one of them alone may
    have changed them since). A table without a recorded state (dropped, or built before
    states were recorded) is taken as it is, as before."""
    sources = cascade_sources(catalog, schema_id)
    if any(source in built_before for source in sources):
        return False
    return was is None or not tables.cascades_changed(conn, was, sources)


def _outcome(catalog: Catalog, order: BuildOrder, schema_id: str, as_of: int | None) -> Outcome:
    history = catalog.histories.get(schema_id)
    table_name = (
        table_name_for(schema_id) if as_of is None else version_table_name_for(schema_id, as_of)
    )
    outcome = Outcome(
        schema_id,
        BuildStatus.MATERIALIZED if history is not None and history.lens else BuildStatus.DROPPED,
        table_name=table_name,
        upstream=order.upstream.get(schema_id, ()),
    )
    if history is not None:
        latest = history.latest
        if latest is not None:
            outcome.version, outcome.version_hash = latest.seq, latest.hash.hex()
            outcome.description = latest.meta.description if latest.meta else None
        outcome.name = history.name
        outcome.migrations = {
            str(seq): str(c.kind) for seq, c in history_compatibility(history).items()
        }
    return outcome


def why_pending(
    conn: psycopg.Connection,
    catalog: Catalog,
    order: BuildOrder,
    schema_id: str,
    built_before: set[str],
) -> Pending | None:
    """Why the schema cannot be built now: not in the build order, or an upstream schema
    neither materialized nor built earlier in this run (the deleted set its cascades
    read would be missing)."""
    if schema_id not in order.order:
        return catalog.not_built(schema_id, order)
    others = other_upstream(order, schema_id)
    missing = unbuilt_upstream(
        order, schema_id, built_before | tables.materialized_schemas(conn, others)
    )
    if missing:
        return Pending(
            Reason.AWAITING_SCHEMA, f"upstream schema {missing[0]} is not materialized yet"
        )
    return None


# --- writing and swapping ----------------------------------------------------------------


def _build(
    spark: SparkSession,
    conn: psycopg.Connection,
    url: str,
    index: IndexResult,
    catalog: Catalog,
    outcomes: list[Outcome],
    as_of: int | None,
    states: Mapping[str, BuildState],
) -> None:
    """Build the tables of `outcomes` whole, from every message of their schemas."""
    by_id = {o.schema_id: o for o in outcomes}
    schema_ids = list(by_id)
    for outcome in outcomes:  # as the swap records it
        outcome.path = BuildPath.SPARK
    decoded = index.decoded(spark)
    token = secrets.token_hex(6)
    stages: dict[str, Stage] = {}
    accounts = deleted_stage = None
    broadcast = spark.sparkContext.broadcast(catalog)
    try:
        _row_stages(conn, catalog, outcomes, token, stages, as_of)
        accounts = tables.create_shared_stage(conn, f"stage_{token}_accounts", "accounts")
        deleted_stage = tables.create_shared_stage(
            conn, f"stage_{token}_deleted", "deleted_instances"
        )
        if decoded is not None:
            items = decoded.filter(
                F.col("schema").isin(schema_ids)
                & (F.col("assignment") == Assignment.ASSIGNED.value)
            )
            reduced, errors = reduce_instance_logs(items, decoded, broadcast, ["error"])
            ok = _fail_errors(conn, errors, by_id, as_of)
            _write(
                spark,
                conn,
                url,
                catalog,
                reduced,
                ok,
                by_id,
                stages,
                accounts,
                deleted_stage,
                as_of,
            )
        tables.index_shared_stage(conn, accounts)
        tables.index_shared_stage(conn, deleted_stage)
        failpoint(Failpoint.STAGED)
        built = [o for o in by_id.values() if o.status is not BuildStatus.FAILED]
        # Each staged table's key, built before the swap's transaction (which then holds
        # its locks the shorter).
        failed = _failures(
            [o for o in built if o.schema_id in stages],
            lambda o: tables.index_stage(conn, stages[o.schema_id]),
        )
        built = [o for o in built if o.schema_id not in failed]
        if as_of is None:
            swaps = [
                tables.Swap(o, stages.get(o.schema_id), states.get(o.schema_id)) for o in built
            ]
            failed |= tables.swap_schemas(conn, swaps, accounts, deleted_stage, index.fingerprint)
        else:  # a version table each, in a transaction each
            failed |= _failures(
                built, lambda o: tables.swap_version(conn, o, stages.get(o.schema_id))
            )
        for schema_id, error in failed.items():
            _fail(conn, by_id[schema_id], f"swap failed: {database_error(error)}", as_of)
        for outcome in built:
            if outcome.schema_id not in failed:  # its stage is its table now
                stages.pop(outcome.schema_id, None)
    finally:
        drop_tables(conn, [*stages.values(), accounts, deleted_stage])
        # What this build persisted (the reduction, the cascade's rounds): the session
        # outlives the run in the resident worker, and runs never share cached frames.
        spark.catalog.clearCache()
        broadcast.unpersist()


def _failures(
    outcomes: list[Outcome], action: Callable[[Outcome], None]
) -> dict[str, psycopg.Error]:
    """`action` for each of `outcomes`, one failing not stopping the others; the
    database errors of those it failed for, by schema."""
    failed: dict[str, psycopg.Error] = {}
    for outcome in outcomes:
        try:
            action(outcome)
        except psycopg.Error as error:
            failed[outcome.schema_id] = error
    return failed


def _row_stages(
    conn: psycopg.Connection,
    catalog: Catalog,
    outcomes: list[Outcome],
    token: str,
    stages: dict[str, Stage],
    as_of: int | None,
) -> None:
    """A staging table for the rows of each schema whose lens has a field, added to
    `stages` as it is made (the caller drops what is there, whatever fails later). A
    schema whose table PostgreSQL refuses (a lens of more fields than a table may have
    columns) fails alone: it stopped the build of every schema before."""
    for i, outcome in enumerate(outcomes):
        lens = catalog.histories[outcome.schema_id].lens
        if lens:
            schema, _ = tables.split_table_name(outcome.table_name)
            columns = [(name, pg_type(spec.type)) for name, spec in lens.items()]
            try:
                stages[outcome.schema_id] = tables.create_stage(
                    conn, schema, f"stage_{token}_{i}", columns
                )
            except psycopg.Error as error:
                _fail(conn, outcome, f"staging its table failed: {database_error(error)}", as_of)


def _build_first(
    spark: SparkSession,
    conn: psycopg.Connection,
    url: str,
    index: IndexResult,
    catalog: Catalog,
    outcomes: list[Outcome],
    plan: BuildPlan,
) -> tuple[BuildPlan, set[bytes]]:
    """Build `outcomes` whole before the increments (`plan.first`: they cascade from
    none of them). Back: the plan, less the increments that cascade from an instance
    these builds no longer hold deleted (built whole after them: their stored cascades
    would have to be undone); and the instances they hold deleted anew, where the
    increments' cascades may reach."""
    built = {o.schema_id for o in outcomes}
    read = sorted({t for s in plan.increments for t in cascade_targets(catalog, s) if t in built})
    before = stored_deleted(conn, read)
    _build(spark, conn, url, index, catalog, outcomes, None, plan.states)
    after = stored_deleted(conn, read)
    revived = {t for t in read if before.get(t, set()) - after.get(t, set())}
    moved = cascading_from(catalog, plan.increments, revived)
    increments = {s: batch for s, batch in plan.increments.items() if s not in moved}
    deleted_anew = {h for t in read for h in after.get(t, set()) - before.get(t, set())}
    return replace(plan, increments=increments), deleted_anew


def _build_increments(
    spark: SparkSession,
    conn: psycopg.Connection,
    url: str,
    index: IndexResult,
    catalog: Catalog,
    outcomes: list[Outcome],
    plan: BuildPlan,
    deleted_anew: set[bytes],
) -> list[Outcome]:
    """Add what is new to the tables of `outcomes` (`pipeline.increments`): the
    instances new messages name, and the rows a delete among them, or among
    `deleted_anew` (by the whole builds before), may reach, are reduced again together
    for all schemas, in Spark or, for a small increment, in the driver
    (`increment_paths`), and replace their old rows, accounts and deleted ids, schema
    by schema. The outcomes of the schemas that must be built whole after all come back."""
    by_id = {o.schema_id: o for o in outcomes}
    token = secrets.token_hex(6)
    stages: dict[str, Stage] = {}
    accounts = None
    steps = choose_steps(spark, index, catalog, plan)
    try:
        after = min(plan.increments.values())
        keys = steps.new_keys(layers_after(conn, index.layers, after), after) | deleted_anew
        keys |= reached_rows(conn, catalog, list(by_id), keys)
        rows = steps.reduce(plan.increments, keys)
        ok, again, before = _reduced_again(conn, rows, by_id)
        targets = {t for s in ok for t in cascade_targets(catalog, s) if t is not None}
        stored = stored_deleted(conn, sorted(targets | set(ok)))
        deleted_now, whole = _settle_cascades(catalog, ok, again, stored)
        ok = [s for s in ok if s not in whole]
        _row_stages(conn, catalog, [by_id[s] for s in ok], token, stages, None)
        ok = [s for s in ok if s in stages]
        accounts = tables.create_shared_stage(conn, f"stage_{token}_accounts", "accounts")
        gone = [(s, h) for s in ok for h in deleted_now[s]]
        row_targets = {s: row_target(stages[s], catalog.histories[s].lens) for s in ok}
        result = steps.stage(url, ok, gone, row_targets, accounts)
        for schema_id, error in result.errors.items():
            _fail(conn, by_id[schema_id], f"writing rows failed: {error}", None)
        tables.index_shared_stage(conn, accounts)
        for schema_id in ok:
            outcome = by_id[schema_id]
            if outcome.status is BuildStatus.FAILED:
                continue
            outcome.incremental, outcome.path = True, steps.path
            outcome.fallbacks = _fallbacks_after(
                conn, catalog, schema_id, again, before, deleted_now, stored
            )
            try:
                tables.apply_increment(
                    conn,
                    outcome,
                    stages[schema_id],
                    sorted(set(again[schema_id]) | set(before[schema_id])),
                    sorted(deleted_now[schema_id]),
                    accounts,
                    index.fingerprint,
                    plan.states[schema_id],
                )
            except psycopg.Error as error:
                _fail(conn, outcome, f"adding to the table failed: {database_error(error)}", None)
        return [by_id[s] for s in by_id if s in whole]
    finally:
        drop_tables(conn, [*stages.values(), accounts])
        steps.close()


ByInstance = dict[str, dict[bytes, Again]]  # schema -> instance id -> how it reduced


def _reduced_again(
    conn: psycopg.Connection, rows: list[Any], by_id: dict[str, Outcome]
) -> tuple[list[str], ByInstance, ByInstance]:
    """The schemas whose logs all reduced (the others fail, `_fail_errors`), and
    their instances reduced again: as all their messages make them, and as the messages
    the table was built from made them (`before`), from the reduction's collected
    `error`, `instance` and `before` rows (Spark's rows, or the driver path's dicts)."""
    ok = _fail_errors(conn, [r for r in rows if r["row_type"] == "error"], by_id, None)
    again: ByInstance = {s: {} for s in ok}
    before: ByInstance = {s: {} for s in ok}
    for row in rows:
        if row["row_type"] == "error" or row["schema"] not in again:
            continue
        targets, refs = row["cascade_target"] or (), row["cascade_ref"] or ()
        found = Again(
            bool(row["deleted"]),
            tuple(zip(targets, map(bytes, refs), strict=True)),
            tuple(row["fell_back"] or ()),
        )
        into = again if row["row_type"] == "instance" else before
        into[row["schema"]][bytes(row["hash"])] = found
    return ok, again, before


def _settle_cascades(
    catalog: Catalog,
    schema_ids: list[str],
    again: ByInstance,
    stored: dict[str, set[bytes]],
) -> tuple[dict[str, set[bytes]], set[str]]:
    """The cascades of the increment (`schema_ids` upstream first, as a build takes
    them); a schema where a delete would be undone, and what cascades from it, leaves
    the increment (to be built whole)."""
    whole: set[str] = set()
    while True:
        left = [s for s in schema_ids if s not in whole]
        deleted_now, revived = cascade_increments(
            catalog, left, {s: again[s] for s in left}, stored
        )
        if not revived:
            return deleted_now, whole
        whole |= revived
        whole |= cascading_from(catalog, left, whole)


def _fallbacks_after(
    conn: psycopg.Connection,
    catalog: Catalog,
    schema_id: str,
    again: ByInstance,
    before: ByInstance,
    deleted_now: dict[str, set[bytes]],
    stored: dict[str, set[bytes]],
) -> dict[str, int]:
    """The table's fallback counts, less those of the replaced rows as they were (the
    `before` instances that were live), plus those of the rows that replace them."""
    counts = dict(tables.registry_outcome(conn, schema_id).fallbacks)
    was_deleted = stored.get(schema_id, set())
    for instance_id, instance in before[schema_id].items():
        if not instance.deleted and instance_id not in was_deleted:
            for name in instance.fell_back:
                counts[name] = counts.get(name, 0) - 1
    for instance_id, instance in again[schema_id].items():
        if instance_id not in deleted_now[schema_id]:
            for name in instance.fell_back:
                counts[name] = counts.get(name, 0) + 1
    return {name: counts.get(name, 0) for name in catalog.histories[schema_id].lens}


def _write(
    spark: SparkSession,
    conn: psycopg.Connection,
    url: str,
    catalog: Catalog,
    reduced: DataFrame,
    ok: list[str],
    by_id: dict[str, Outcome],
    stages: dict[str, Stage],
    accounts: Stage,
    deleted_stage: Stage,
    as_of: int | None,
) -> None:
    """Cascades, then the live rows, the accounts and the deleted sets into staging, of
    the schemas `ok` (whose logs all reduced)."""
    instances = reduced.filter((F.col("row_type") == "instance") & F.col("schema").isin(ok))
    deleted = deleted_instances(spark, conn, catalog, instances, ok)
    targets = {
        s: row_target(stage, catalog.histories[s].lens) for s, stage in stages.items() if s in ok
    }
    kept = as_of is None  # a version's build keeps no accounts and no deleted set
    result = stage_reduced(
        url,
        reduced,
        ok,
        deleted,
        targets,
        accounts if kept else None,
        deleted_stage if kept else None,
    )
    for schema_id, error in result.errors.items():
        _fail(conn, by_id[schema_id], f"writing rows failed: {error}", as_of)
    for schema_id in ok:
        by_id[schema_id].rows = result.rows.get(schema_id, 0)
        by_id[schema_id].fallbacks = _fallbacks(catalog, schema_id, result.tallies)


def _fail_errors(
    conn: psycopg.Connection, errors: list[Row], by_id: dict[str, Outcome], as_of: int | None
) -> list[str]:
    """Fail the schemas of these collected `error` rows of a reduction; the others, still
    to build."""
    for row in errors:
        _fail(conn, by_id[row["schema"]], f"reduction failed: {row['message']}", as_of)
    return [s for s, o in by_id.items() if o.status is not BuildStatus.FAILED]


def _fallbacks(
    catalog: Catalog, schema_id: str, tallies: dict[str, dict[str, int]]
) -> dict[str, int]:
    """Rows per field whose value fell back to the field's default, as the copy of the
    rows tallied them (`copy_partitions`): counted in the scan that copies the rows, not
    by a Spark job of its own (1.5-1.8 s at 1M entries)."""
    tally = tallies.get(schema_id, {})
    return {name: tally.get(name, 0) for name in catalog.histories[schema_id].lens}


def database_error(error: psycopg.Error) -> str:
    """PostgreSQL's message and its detail (which names the objects involved) on one line."""
    primary = error.diag.message_primary or str(error).strip()
    detail = error.diag.message_detail
    return f"{primary} ({'; '.join(detail.splitlines())})" if detail else primary


def _fail(conn: psycopg.Connection, outcome: Outcome, message: str, as_of: int | None) -> None:
    """A schema whose build failed keeps its old table; its registry row says why."""
    outcome.status, outcome.reason = BuildStatus.FAILED, str(Reason.INTERNAL)
    outcome.message = message
    if as_of is None:
        tables.record_status(conn, outcome)
