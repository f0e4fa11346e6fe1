"""The instances a whole build's cascades delete: those pointing along a cascade
relation at a deleted instance, upstream (the stored sets of schemas built before) or
in this build, as `engine.cascade.apply_cascades` decides them. The instances a message
deletes are flagged already (the reduction's `deleted`): a row is live when neither
(`staging.flag_live`).

Few instances take part: those with a cascade reference, and those a message deleted
in the schemas the references point at (in bench/pipeline.py's store of 100,000 entries,
~3,000 of ~62,000). The driver collects them in one Spark job and settles the cascades
with `cascade.cascade_increments`, the rule the increments already settle theirs
by; a build without a cascade field that names a known schema runs no job at all.
Above `PipelineTuning.collect_cascade_rows` of them, the cascades run in Spark, a fixpoint of joins
over all the build's schemas.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import cast

import psycopg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.pipeline.kernels.cascade import Again, cascade_increments, cascade_targets
from p2panda_assets.pipeline.spark.frames import local_frame
from p2panda_assets.store import tables
from p2panda_assets.tuning import tuning

# Up to this many rows of `_cascading` (a row per cascade reference, and one per
# instance a message deleted in a schema that references point at), the driver settles
# the cascades (`_in_driver`); the set of what they delete is then at most as large,
# small enough to broadcast (`PipelineTuning.broadcast_keys`). The bound is
# `collect_cascade_rows` (200,000).

DELETED_DDL = "schema string, hash binary"


def stored_deleted(
    conn: psycopg.Connection, schema_ids: Sequence[str], among: Collection[bytes] | None = None
) -> dict[str, set[bytes]]:
    """The stored deleted sets of `schema_ids` (schema -> instance ids); with `among`,
    only which of those ids each set holds."""
    stored: dict[str, set[bytes]] = {}
    for schema_id, instance_id in tables.deleted_sets(conn, schema_ids, among):
        stored.setdefault(schema_id, set()).add(instance_id)
    return stored


def deleted_instances(
    spark: SparkSession,
    conn: psycopg.Connection,
    catalog: Catalog,
    instances: DataFrame,
    schema_ids: list[str],
) -> tuple[DataFrame, int]:
    """The deleted instances (`schema`, `hash`) among the reduced `instances` of
    `schema_ids` (upstream first): at least every one the cascades delete (those a
    message deleted may be left out), and how many rows that is. The frame is read by
    the flags (`staging.flag_live`), whose scan also copies the deleted sets."""
    targets = {t for s in schema_ids for t in cascade_targets(catalog, s)}
    outside = sorted(t for t in targets if t is not None and t not in schema_ids)
    within = sorted(t for t in targets if t in schema_ids)
    if not outside and not within:  # no cascade field names a known schema
        return local_frame(spark, [], DELETED_DDL), 0
    cascading = _cascading(instances, within)
    if cascading is not None:
        return _in_driver(spark, catalog, cascading, schema_ids, stored_deleted(conn, outside))
    deleted = _in_spark(spark, conn, instances, outside, bool(within))
    return deleted, deleted.count()


# (schema, instance id, deleted by a message, cascade target, reference): a row per
# reference of an instance, one with no target and no reference if it has none.
Cascading = list[tuple[str, bytes, bool, str | None, bytes | None]]


def _cascading(instances: DataFrame, within: list[str]) -> Cascading | None:
    """The instances with a cascade reference, a row per reference, and those a message
    deleted in the schemas `within` the build that references point at, if at most
    `PipelineTuning.collect_cascade_rows` rows (one Spark job; None if more). Flat columns: out of
    Arrow, list columns cost six times as much (0.39 s against 0.07 s for 130,000 rows,
    measured alone)."""
    pairs = F.explode_outer(F.arrays_zip("cascade_target", "cascade_ref")).alias("c")
    pointed_at = F.col("deleted") & F.col("schema").isin(within)
    wanted = instances.filter((F.size("cascade_ref") > 0) | pointed_at)
    flat = wanted.select("schema", "hash", "deleted", pairs).select(
        "schema", "hash", "deleted", "c.cascade_target", "c.cascade_ref"
    )
    most = tuning().collect_cascade_rows
    table = flat.limit(most + 1).toArrow()
    if table.num_rows > most:
        return None
    columns = (table.column(i).to_pylist() for i in range(table.num_columns))
    return cast(Cascading, list(zip(*columns, strict=True)))


def _in_driver(
    spark: SparkSession,
    catalog: Catalog,
    cascading: Cascading,
    schema_ids: list[str],
    stored: dict[str, set[bytes]],
) -> tuple[DataFrame, int]:
    """The cascades of these instances settled schema by schema, upstream first, with
    the stored deleted sets of the schemas outside the build (`stored`); back, the
    instances they delete. The instances left out cannot be deleted by a cascade and
    are not pointed at by one: they do not change what is decided."""
    found: dict[tuple[str, bytes], tuple[bool, list[tuple[str | None, bytes]]]] = {}
    for schema_id, instance_id, by_message, target, ref in cascading:
        _, pointing = found.setdefault((schema_id, instance_id), (by_message, []))
        if ref is not None:
            pointing.append((target, ref))
    again: dict[str, dict[bytes, Again]] = {s: {} for s in schema_ids}
    for (schema_id, instance_id), (by_message, pointing) in found.items():
        again[schema_id][instance_id] = Again(by_message, tuple(pointing), ())
    deleted_now, _ = cascade_increments(catalog, schema_ids, again, stored)
    rows = [(s, h) for s in schema_ids for h in sorted(deleted_now[s]) if not again[s][h].deleted]
    return local_frame(spark, rows, DELETED_DDL), len(rows)


def _in_spark(
    spark: SparkSession,
    conn: psycopg.Connection,
    instances: DataFrame,
    outside: list[str],
    within: bool,
) -> DataFrame:
    """The cascades as a fixpoint of joins over all the build's schemas at once; only the
    joins the cascade fields need are run (each is a Spark job or more): references into
    the schemas `outside` the build, and, if `within`, into the build's own. Back, every
    deleted instance, those a message deleted too. Checkpointed (a union of checkpoints),
    whichever way it ends: it is counted, then read by the flags.

    The rounds are semi-naive: each joins the references with the instances the round
    before found, not with every deleted one, and the set grows as a union of the rounds'
    checkpoints, not by checkpointing the union again (a Spark job a round: 0.77 s at
    1M entries, bench/pipeline.py --spark-events). Rule R-CASCADE-DELETE (docs/semantics.md)."""
    deleted = instances.filter("deleted").select("schema", "hash")
    refs = (
        instances.select(
            "schema", "hash", F.explode(F.arrays_zip("cascade_target", "cascade_ref")).alias("c")
        )
        .select(
            "schema",
            "hash",
            F.col("c.cascade_target").alias("target"),
            F.col("c.cascade_ref").alias("ref"),
        )
        .localCheckpoint()
    )
    if outside:
        stored = tables.deleted_sets(conn, outside)
        gone = local_frame(spark, stored, "target string, ref binary")
        deleted = deleted.unionByName(_reached(refs, F.broadcast(gone))).distinct()
    # Each round is checkpointed: its plan would otherwise hold every round before it, and
    # Spark's planning (and the plan's text) grows with it until the driver runs out.
    deleted = deleted.localCheckpoint()
    if not within:
        return deleted
    found = deleted
    while True:
        gone = found.select(F.col("schema").alias("target"), F.col("hash").alias("ref"))
        found = (
            _reached(refs, gone).join(deleted, ["schema", "hash"], "left_anti").localCheckpoint()
        )
        if found.isEmpty():
            return deleted
        deleted = deleted.unionByName(found)


def _reached(refs: DataFrame, gone: DataFrame) -> DataFrame:
    """The instances (`schema`, `hash`) whose cascade field points at a `gone` one."""
    return refs.join(gone, ["target", "ref"], "left_semi").select("schema", "hash").distinct()
