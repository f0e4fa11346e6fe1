"""How a materialization builds its tables: from every message of their schemas
(`build_whole`, the whole builds that others cascade from first: `build_first`), or by
adding what is new (`build_increments`). The instance logs of every schema to build are
reduced together, one Spark group per log, by the engine's `reduce_instance_log` (an
increment's, in Spark or in the driver: `pipeline.build.paths`); the cascades are settled over
all of them (`pipeline.build.cascades`: upstream schemas built earlier contribute their stored
deleted sets); `pipeline.build.writing` stages and swaps what they make."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import functions as F

from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.failpoints import Failpoint, failpoint
from p2panda_assets.pipeline.build import writing
from p2panda_assets.pipeline.build.cascades import deleted_instances, stored_deleted
from p2panda_assets.pipeline.build.increments import BuildPlan, layers_after, reached_rows
from p2panda_assets.pipeline.build.paths import choose_steps
from p2panda_assets.pipeline.build.reduction import reduce_instance_logs
from p2panda_assets.pipeline.context import BuildContext
from p2panda_assets.pipeline.kernels.cascade import (
    Again,
    cascade_increments,
    cascade_targets,
    cascading_from,
)
from p2panda_assets.pipeline.spark.jvm_failures import cleaned_up
from p2panda_assets.statuses import Assignment, BuildPath, BuildStatus
from p2panda_assets.store import tables
from p2panda_assets.store.tables import BuildState, Outcome

ByInstance = dict[str, dict[bytes, Again]]  # schema -> instance id -> how it reduced


def build_whole(
    ctx: BuildContext, outcomes: list[Outcome], states: Mapping[str, BuildState]
) -> None:
    """Build the tables of `outcomes` whole, from every message of their schemas, and
    swap them in with the build states `states` (none for a version)."""
    by_id = {o.schema_id: o for o in outcomes}
    schema_ids = list(by_id)
    for outcome in outcomes:  # as the swap records it
        outcome.path = BuildPath.SPARK
    decoded = ctx.index.decoded(ctx.spark)
    broadcast = ctx.spark.sparkContext.broadcast(ctx.catalog)
    # What this build persisted (the reduction, the cascade's rounds) goes at its end: the
    # session outlives the run in the resident worker, and runs never share cached frames.
    with (
        cleaned_up(ctx.spark.catalog.clearCache, broadcast.unpersist),
        writing.stage_tables(ctx, outcomes, deleted_sets=True) as staged,
    ):
        if decoded is not None:
            items = decoded.filter(
                F.col("schema").isin(schema_ids)
                & (F.col("assignment") == Assignment.ASSIGNED.value)
            )
            reduced, errors = reduce_instance_logs(items, decoded, broadcast, ["error"])
            ok = writing.fail_errors(ctx, errors, by_id)
            instances = reduced.filter((F.col("row_type") == "instance") & F.col("schema").isin(ok))
            deleted = deleted_instances(ctx.spark, ctx.conn, ctx.catalog, instances, ok)
            writing.write_reduced(ctx, reduced, [by_id[s] for s in ok], deleted, staged)
        writing.index_shared(ctx, staged)
        failpoint(Failpoint.STAGED)
        writing.swap_in(ctx, outcomes, staged, states)


def build_first(
    ctx: BuildContext, outcomes: list[Outcome], plan: BuildPlan
) -> tuple[BuildPlan, set[bytes]]:
    """Build `outcomes` whole before the increments (`plan.first`: they cascade from
    none of them). Back: the plan, less the increments that cascade from an instance
    these builds no longer hold deleted (built whole after them: their stored cascades
    would have to be undone); and the instances they hold deleted anew, where the
    increments' cascades may reach."""
    catalog = ctx.catalog
    built = {o.schema_id for o in outcomes}
    read = sorted({t for s in plan.increments for t in cascade_targets(catalog, s) if t in built})
    before = stored_deleted(ctx.conn, read)
    build_whole(ctx, outcomes, plan.states)
    after = stored_deleted(ctx.conn, read)
    revived = {t for t in read if before.get(t, set()) - after.get(t, set())}
    moved = cascading_from(catalog, plan.increments, revived)
    increments = {s: batch for s, batch in plan.increments.items() if s not in moved}
    deleted_anew = {h for t in read for h in after.get(t, set()) - before.get(t, set())}
    return replace(plan, increments=increments), deleted_anew


@dataclass(frozen=True)
class Settled:
    """An increment's schemas, reduced again and their cascades settled: each one's
    instances as all their messages make them (`again`) and as the messages its table
    was built from made them (`before`), those its cascades leave deleted
    (`deleted_now`), and the deleted sets as stored (`stored`, with those of the
    schemas they cascade to), as far as the increment asks of them (`_asked_of`)."""

    again: ByInstance
    before: ByInstance
    deleted_now: dict[str, set[bytes]]
    stored: dict[str, set[bytes]]

    def replaced(self, schema_id: str) -> list[bytes]:
        """The instances whose rows the increment replaces in the schema's table."""
        return sorted(set(self.again[schema_id]) | set(self.before[schema_id]))


def build_increments(
    ctx: BuildContext, outcomes: list[Outcome], plan: BuildPlan, deleted_anew: set[bytes]
) -> list[Outcome]:
    """Add what is new to the tables of `outcomes` (`pipeline.build.increments`): the
    instances new messages name, and the rows a delete among them, or among
    `deleted_anew` (by the whole builds before), may reach, are reduced again together
    for all schemas, in Spark or, for a small increment, in the driver
    (`pipeline.build.paths`), and replace their old rows, accounts and deleted ids, schema
    by schema. The outcomes of the schemas that must be built whole after all come back."""
    conn, catalog = ctx.conn, ctx.catalog
    by_id = {o.schema_id: o for o in outcomes}
    steps = choose_steps(ctx.spark, ctx.index, catalog, plan)
    with cleaned_up(steps.close):
        after = min(plan.increments.values())
        keys = steps.new_keys(layers_after(conn, ctx.index.layers, after), after) | deleted_anew
        keys |= reached_rows(conn, catalog, list(by_id), keys)
        rows = steps.reduce(plan.increments, keys)
        ok, again, before = _reduced_again(ctx, rows, by_id)
        targets = {t for s in ok for t in cascade_targets(catalog, s) if t is not None}
        stored = stored_deleted(conn, sorted(targets | set(ok)), _asked_of(again, before))
        deleted_now, whole = _settle_cascades(catalog, ok, again, stored)
        settled = Settled(again, before, deleted_now, stored)
        ok = [s for s in ok if s not in whole]
        with writing.stage_tables(ctx, [by_id[s] for s in ok], deleted_sets=False) as staged:
            ok = [s for s in ok if s in staged.rows]
            gone = [(s, h) for s in ok for h in deleted_now[s]]
            row_targets = writing.row_targets(ctx, staged, ok)
            result = steps.stage(ctx.url, ok, gone, row_targets, staged.accounts)
            writing.fail_unwritten(ctx, result, by_id)
            writing.index_shared(ctx, staged)
            for schema_id in ok:
                outcome = by_id[schema_id]
                if outcome.status is BuildStatus.FAILED:
                    continue
                outcome.incremental, outcome.path = True, steps.path
                outcome.fallbacks = _fallbacks_after(ctx, schema_id, settled)
                writing.apply_increment(
                    ctx,
                    outcome,
                    staged,
                    settled.replaced(schema_id),
                    sorted(deleted_now[schema_id]),
                    plan.states[schema_id],
                )
        return [by_id[s] for s in by_id if s in whole]


def _reduced_again(
    ctx: BuildContext, rows: list[Any], by_id: dict[str, Outcome]
) -> tuple[list[str], ByInstance, ByInstance]:
    """The schemas whose logs all reduced (the others fail, `writing.fail_errors`), and
    their instances reduced again: as all their messages make them, and as the messages
    the table was built from made them (`before`), from the reduction's collected
    `error`, `instance` and `before` rows (Spark's rows, or the driver path's dicts)."""
    ok = writing.fail_errors(ctx, [r for r in rows if r["row_type"] == "error"], by_id)
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


def _asked_of(again: ByInstance, before: ByInstance) -> set[bytes]:
    """The instance ids whose stored deletion an increment's cascades and fallback counts
    ask about: those reduced again (as they are now and as they were) and those their
    cascade fields point at. Read by key, so the increment costs what it touches, not
    the size of the deleted sets."""
    asked = {h for by_id in (*again.values(), *before.values()) for h in by_id}
    asked |= {ref for by_id in again.values() for found in by_id.values() for _, ref in found.refs}
    return asked


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


def _fallbacks_after(ctx: BuildContext, schema_id: str, settled: Settled) -> dict[str, int]:
    """The table's fallback counts, less those of the replaced rows as they were (the
    `before` instances that were live), plus those of the rows that replace them."""
    counts = dict(tables.registry_outcome(ctx.conn, schema_id).fallbacks)
    was_deleted = settled.stored.get(schema_id, set())
    for instance_id, instance in settled.before[schema_id].items():
        if not instance.deleted and instance_id not in was_deleted:
            for name in instance.fell_back:
                counts[name] = counts.get(name, 0) - 1
    for instance_id, instance in settled.again[schema_id].items():
        if instance_id not in settled.deleted_now[schema_id]:
            for name in instance.fell_back:
                counts[name] = counts.get(name, 0) + 1
    return {name: counts.get(name, 0) for name in ctx.catalog.histories[schema_id].lens}
