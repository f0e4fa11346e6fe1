"""Staging a build's reduced rows in Spark: the live rows into each schema's staging
table, and the accounts and deleted sets derived from the same scan (`copy_partitions`).
Whole builds and the Spark path of increments share it; the driver path stages rows it
holds by the same writer (`pipeline.build.driver_path.stage_locally`)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from p2panda_assets.engine.lens import Lens
from p2panda_assets.pipeline.build.columns import pg_type
from p2panda_assets.pipeline.kernels.reduce import ACCOUNTED, accounts_of, deleted_of
from p2panda_assets.pipeline.postgres.copy import (
    ACCOUNT_COLUMNS,
    DELETED_COLUMNS,
    CopyResult,
    Derived,
    copy_partitions,
)
from p2panda_assets.store import tables
from p2panda_assets.store.copying import Target, copy_type
from p2panda_assets.store.staging import Stage
from p2panda_assets.tuning import tuning

# The system columns as the binary COPY names their types, from the one table of them.
SYSTEM_TYPES = tuple(copy_type(pg) for _, pg in tables.SYSTEM_COLUMNS)


def flag_live(rows: DataFrame, deleted: DataFrame, deleted_rows: int) -> DataFrame:
    """The rows with `live`: not deleted by a message (the reduction's `deleted`) and
    not in `deleted` (schema, hash), of `deleted_rows` rows: the cascades' deletes, or
    all. Up to `PipelineTuning.broadcast_keys` rows, `deleted` is broadcast; above, both sides are
    shuffled (at 1M, ~100,000 deleted ids: the rows were copied in 4.2 s broadcast
    against 10.3-10.6 s shuffled, bench/pipeline.py --spark-events)."""
    gone = deleted.withColumn("gone", F.lit(True))
    if deleted_rows <= tuning().broadcast_keys:
        gone = F.broadcast(gone)
    joined = rows.join(gone, ["schema", "hash"], "left")
    by_message = F.coalesce(F.col("deleted"), F.lit(False))
    return joined.withColumn("live", ~by_message & F.col("gone").isNull())


def stage_reduced(
    url: str,
    reduced: DataFrame,
    ok: list[str],
    deleted: tuple[DataFrame, int],
    targets: dict[str, Target],
    accounts: Stage | None,
    deleted_into: Stage | None = None,
) -> CopyResult:
    """In one scan of the reduction (`copy_partitions`), of the schemas `ok`: each live
    instance's table row into its schema's stage in `targets` (its fallbacks tallied),
    unless `accounts` is None, every account into it (`reduce.accounts_of`), and
    unless `deleted_into` is None, the deleted set into it (`reduce.deleted_of`).
    `deleted`: the instances the cascades left deleted, and how many. At 1M entries
    the rows and the accounts took 4.6 and 4.8 s in two scans, 7.4 s in one, and the
    deleted set 0.48 s in a scan of its own (bench/pipeline.py --spark-events)."""
    staged = reduced.filter(
        F.col("row_type").isin("instance", "account") & F.col("schema").isin(ok)
    )
    flagged = flag_live(staged, *deleted)
    is_row = (F.col("row_type") == "instance") & F.col("live") & F.col("schema").isin(list(targets))
    columns: list[Column | str] = [
        F.when(is_row, F.col("schema")).alias("dest"),
        F.when(is_row, F.col("row")).alias("row"),  # no pickle of a row not copied
        "fell_back",
    ]
    derived = []
    if accounts is not None:
        derived.append(Derived(Target.into(accounts, ACCOUNT_COLUMNS), accounts_of))
    if deleted_into is not None:
        derived.append(Derived(Target.into(deleted_into, DELETED_COLUMNS), deleted_of))
    if derived:
        columns += [*ACCOUNTED, "live"]  # what both read
    return copy_partitions(
        flagged.select(*columns), url, targets, tally="fell_back", derived=derived
    )


def row_target(stage: Stage, lens: Lens) -> Target:
    columns = tuple(c for c, _ in tables.SYSTEM_COLUMNS) + tuple(lens)
    types = SYSTEM_TYPES + tuple(pg_type(spec.type) for spec in lens.values())
    return Target(stage.schema, stage.name, columns, types)
