"""The deleted instances of a whole build: deleted by a message, or pointing along a
cascade relation at a deleted instance, upstream (the stored sets of schemas built
before) or in this build, as `engine.cascade.apply_cascades` decides them.

Few instances are deleted or carry a cascade reference (at 1M entries in
bench/pipeline.py, ~125,000 of ~490,000): those the driver collects in one Spark job
and settles with `increments.cascade_increments`, the rule the increments already
settle theirs by. Above `DRIVER_CASCADE_ROWS` of them, the cascades run in Spark, a
fixpoint of joins over all the build's schemas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import psycopg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.pipeline.increments import Again, cascade_increments, cascade_targets
from p2panda_assets.pipeline.local_frames import local_frame
from p2panda_assets.store import tables

# Up to this many instances deleted or with a cascade reference, the driver settles the
# cascades (`_in_driver`); the deleted set it finds is then at most as large, small
# enough to broadcast (`increments.BROADCAST_KEYS`).
DRIVER_CASCADE_ROWS = 200_000

DELETED_DDL = "schema string, hash binary"


def stored_deleted(conn: psycopg.Connection, schema_ids: Sequence[str]) -> dict[str, set[bytes]]:
    """The stored deleted sets of `schema_ids` (schema -> instance ids)."""
    stored: dict[str, set[bytes]] = {}
    for schema_id, instance_id in tables.deleted_sets(conn, schema_ids):
        stored.setdefault(schema_id, set()).add(instance_id)
    return stored


def deleted_instances(
    spark: SparkSession,
    conn: psycopg.Connection,
    catalog: Catalog,
    instances: DataFrame,
    schema_ids: list[str],
) -> tuple[DataFrame, int]:
    """Every deleted instance (`schema`, `hash`) among the reduced `instances` of
    `schema_ids` (upstream first), and how many there are. The frame is read by the
    flags (`materialize._flag_live`), whose scan also copies the deleted sets."""
    targets = {t for s in schema_ids for t in cascade_targets(catalog, s)}
    outside = sorted(t for t in targets if t is not None and t not in schema_ids)
    cascading = _cascading(instances)
    if cascading is not None:
        return _in_driver(spark, catalog, cascading, schema_ids, stored_deleted(conn, outside))
    deleted = _in_spark(spark, conn, instances, outside, bool(targets & set(schema_ids)))
    return deleted, deleted.count()


Cascading = list[tuple[str, bytes, bool, list[str | None], list[bytes]]]


def _cascading(instances: DataFrame) -> Cascading | None:
    """The instances deleted by a message or with a cascade reference, as (schema, id,
    deleted, cascade targets, references), if at most `DRIVER_CASCADE_ROWS` (one Spark
    job; None if more)."""
    columns = ("schema", "hash", "deleted", "cascade_target", "cascade_ref")
    wanted = instances.filter(F.col("deleted") | (F.size("cascade_ref") > 0))
    table = wanted.select(*columns).limit(DRIVER_CASCADE_ROWS + 1).toArrow()
    if table.num_rows > DRIVER_CASCADE_ROWS:
        return None
    return cast(Cascading, list(zip(*(table.column(c).to_pylist() for c in columns), strict=True)))


def _in_driver(
    spark: SparkSession,
    catalog: Catalog,
    cascading: Cascading,
    schema_ids: list[str],
    stored: dict[str, set[bytes]],
) -> tuple[DataFrame, int]:
    """The cascades of these instances settled schema by schema, upstream first, with
    the stored deleted sets of the schemas outside the build (`stored`). An instance
    neither deleted nor pointing anywhere cannot be deleted, so the others are not read."""
    again: dict[str, dict[bytes, Again]] = {s: {} for s in schema_ids}
    for schema_id, instance_id, deleted, targets, refs in cascading:
        refs_of = tuple(zip(targets, refs, strict=True))
        again[schema_id][instance_id] = Again(deleted, refs_of, ())
    deleted_now, _ = cascade_increments(catalog, schema_ids, again, stored)
    rows = [(s, h) for s in schema_ids for h in sorted(deleted_now[s])]
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
    the schemas `outside` the build, and, if `within`, into the build's own. Checkpointed
    (a union of checkpoints), whichever way it ends: it is counted, then read by the flags.

    The rounds are semi-naive: each joins the references with the instances the round
    before found, not with every deleted one, and the set grows as a union of the rounds'
    checkpoints, not by checkpointing the union again (a Spark job a round: 0.77 s at
    1M entries, bench/pipeline.py --spark-events)."""
    deleted = instances.filter("deleted").select("schema", "hash")
    if not outside and not within:
        return deleted.localCheckpoint()
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
