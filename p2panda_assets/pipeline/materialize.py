"""Materializing many schemas in one Spark job: the entry point, which takes the
pipeline lock, sizes the session for the store, and wires the three steps together.

- `pipeline.build.planning`: which schemas build, in what order, which wait and why, and
  which only add what is new;
- `pipeline.build.building`: the reduction, the whole builds (those others cascade from
  first), the increments, the cascades settled;
- `pipeline.build.writing`: the staging tables, the rows copied into them, the swaps, and a
  schema whose write fails failing alone (recorded `failed`, its old table kept).

Each step takes the build's `BuildContext` (`pipeline.context`). The same steps
build a lens in time (`as_of`): the table as it was at an older version of the schema,
beside the current one, from the same immutable messages.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from pyspark.sql import SparkSession

from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.pipeline.build import building, planning
from p2panda_assets.pipeline.context import BuildContext
from p2panda_assets.pipeline.index.step import IndexResult
from p2panda_assets.pipeline.spark.jvm_failures import jvm_failures_explained
from p2panda_assets.pipeline.spark.session import sized_for_the_store
from p2panda_assets.store.pipeline_lock import hold_pipeline_lock, release_pipeline_lock
from p2panda_assets.store.pipeline_state import count_good_entries
from p2panda_assets.store.tables import Outcome
from p2panda_assets.tuning import tuned, tuning


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
    with _exclusive(spark, conn):
        return _materialize(BuildContext.of(spark, conn, url, index, index.catalog), schema_ids)


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
    with _exclusive(spark, conn):
        ctx = BuildContext.of(spark, conn, url, index, catalog, as_of=version)
        return _materialize(ctx, [schema_id])[0]


@contextmanager
def _exclusive(spark: SparkSession, conn: psycopg.Connection) -> Iterator[None]:
    """Under the pipeline lock, with the session sized for the store and one tuning for
    the whole build (the one in force when it started); a JVM that runs out of heap is
    named (`jvm_failures`)."""
    with tuned(tuning()), jvm_failures_explained(spark):
        hold_pipeline_lock(conn)
        try:
            with sized_for_the_store(spark, count_good_entries(conn)):
                yield
        finally:
            release_pipeline_lock(conn)


def _materialize(ctx: BuildContext, schema_ids: Sequence[str]) -> list[Outcome]:
    # `building.build_whole` and `building.build_increments` are called through their
    # module: bench/pipeline.py times them by wrapping them there.
    readiness = planning.ready_to_build(ctx, schema_ids)
    outcomes, ready = readiness.outcomes, readiness.ready
    if not ready:
        return readiness.all()
    if ctx.as_of is not None:
        building.build_whole(ctx, [outcomes[s] for s in ready], {})
        return readiness.all()
    plan = planning.build_plan(ctx, readiness)
    deleted_anew = set(plan.deleted_anew)  # what builds in other runs deleted since
    if plan.first:
        first = [outcomes[s] for s in ready if s in plan.first]
        plan, deleted_first = building.build_first(ctx, first, plan)
        deleted_anew |= deleted_first
    whole = [outcomes[s] for s in ready if s not in plan.increments and s not in plan.first]
    if plan.increments:
        # Before the rest: a whole build may cascade from their deleted sets.
        increments = [outcomes[s] for s in ready if s in plan.increments]
        whole += building.build_increments(ctx, increments, plan, deleted_anew)
    if whole:  # upstream first, as the cascades and the swap's build states read them
        built = {o.schema_id for o in whole}
        building.build_whole(ctx, [outcomes[s] for s in ready if s in built], plan.states)
    return readiness.all()
