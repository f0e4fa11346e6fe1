"""Which schemas of a materialization build, in what order, and which wait and why:
the decisions taken before any Spark job. Each schema gets its outcome; a schema whose
upstream is not materialized waits (rule R-ORDER), one whose table was built from the
current index and whose cascades read the same deleted sets is left alone, and the rest
are planned as a first build, an increment or a whole build (`increments.plan_builds`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from p2panda_assets.engine.compatibility import history_compatibility
from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.engine.readiness import in_build_order, other_upstream, unbuilt_upstream
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.errors import Pending, Reason
from p2panda_assets.pipeline.build.increments import BuildPlan, layer_sums, plan_builds
from p2panda_assets.pipeline.build.writing import record_status
from p2panda_assets.pipeline.context import BuildContext
from p2panda_assets.pipeline.kernels.cascade import cascade_sources
from p2panda_assets.protocol.ids import checked_schema_id
from p2panda_assets.statuses import BuildStatus
from p2panda_assets.store import tables
from p2panda_assets.store.registry import table_name_for, version_table_name_for
from p2panda_assets.store.tables import BuildState, Outcome


@dataclass(frozen=True)
class Readiness:
    """A run's schemas (`schema_ids`, upstream first) with their outcomes: those that
    wait or whose table is current say so already; `ready` (upstream first) are to
    build, and `previous` holds the build states their tables were written with."""

    schema_ids: list[str]
    outcomes: dict[str, Outcome]
    ready: list[str]
    previous: dict[str, BuildState]

    def all(self) -> list[Outcome]:
        """Every schema's outcome, in the run's order."""
        return [self.outcomes[s] for s in self.schema_ids]


def ordered(schema_ids: Sequence[str], order: BuildOrder) -> list[str]:
    """`schema_ids`, once each, upstream first; those outside the build order after
    them (`readiness.in_build_order`, rule R-ORDER)."""
    return in_build_order(order, set(schema_ids))


def ready_to_build(ctx: BuildContext, schema_ids: Sequence[str]) -> Readiness:
    """Sort out `schema_ids`: each waits (its registry row says why, unless the build is
    of a version), is unchanged, or is ready, upstream first."""
    schema_ids = ordered([checked_schema_id(s) for s in schema_ids], ctx.order)
    outcomes = {s: _outcome(ctx, s) for s in schema_ids}
    current = ctx.as_of is None
    built_from = tables.built_fingerprints(ctx.conn, schema_ids) if current else {}
    previous = tables.build_states(ctx.conn, schema_ids) if current else {}
    ready: list[str] = []
    for schema_id in schema_ids:
        outcome = outcomes[schema_id]
        why = why_pending(ctx.conn, ctx.catalog, ctx.order, schema_id, set(ready))
        if why is not None:
            outcome.status, outcome.reason, outcome.message = (
                BuildStatus.PENDING,
                str(why.reason),
                why.message,
            )
            record_status(ctx, outcome)
        elif built_from.get(schema_id) == ctx.index.fingerprint and _cascades_unchanged(
            ctx, previous.get(schema_id), schema_id, ready
        ):
            outcome.status = BuildStatus.UNCHANGED
        else:
            ready.append(schema_id)
    return Readiness(schema_ids, outcomes, ready, previous)


def build_plan(ctx: BuildContext, readiness: Readiness) -> BuildPlan:
    """Which of the ready schemas build first, which only add what is new, and which
    build whole (`increments.plan_builds`), from the sums of the store's layers."""
    index = ctx.index
    sums = layer_sums(ctx.spark, ctx.conn, index.warehouse, index.layers) if index.layers else None
    return plan_builds(
        ctx.conn, ctx.catalog, ctx.order, sums, index.batch, readiness.ready, readiness.previous
    )


def _cascades_unchanged(
    ctx: BuildContext, was: BuildState | None, schema_id: str, built_before: list[str]
) -> bool:
    """Whether a table built from the current index is still what a build would give:
    no schema its cascades read is built earlier in this run (`built_before`), and their
    deleted sets are those it was written with (a run that built one of them alone may
    have changed them since). A table without a recorded state (dropped, or built before
    states were recorded) is taken as it is, as before."""
    sources = cascade_sources(ctx.catalog, schema_id)
    if any(source in built_before for source in sources):
        return False
    return was is None or not tables.cascades_changed(ctx.conn, was, sources)


def _outcome(ctx: BuildContext, schema_id: str) -> Outcome:
    """The outcome a build of `schema_id` starts from: its table (or version table), its
    latest version, name and migrations; materialized if its lens has a field, else
    dropped."""
    history = ctx.catalog.histories.get(schema_id)
    table_name = (
        table_name_for(schema_id)
        if ctx.as_of is None
        else version_table_name_for(schema_id, ctx.as_of)
    )
    outcome = Outcome(
        schema_id,
        BuildStatus.MATERIALIZED if history is not None and history.lens else BuildStatus.DROPPED,
        table_name=table_name,
        upstream=ctx.order.upstream.get(schema_id, ()),
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
    read would be missing). Also asked by the table check, outside any build."""
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
