"""The reduction of instance logs in Spark: one group per log through the kernel
`reduce.reduce_rows`, each instance out as a table row with what cascades, accounts and
fallback counts need, and the owners an update's log looks up found by a join. Whole
builds and incremental ones share it (`reduce_instance_logs`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from pyspark import Broadcast, StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import Row as SparkRow
from pyspark.sql import functions as F

from p2panda_assets.engine.corpus import (
    Catalog,
)
from p2panda_assets.pipeline.build import increments
from p2panda_assets.pipeline.kernels.batches import Row
from p2panda_assets.pipeline.kernels.reduce import (
    OWNERS,
    REDUCE_INPUT,
    REDUCED_ARROW,
    reduce_rows,
)
from p2panda_assets.pipeline.spark.frames import local_frame
from p2panda_assets.pipeline.spark.groups import map_groups
from p2panda_assets.tuning import tuning

# The columns of the reduced rows that the builds collect to the driver.
COLLECTED = (
    "row_type",
    "schema",
    "hash",
    "deleted",
    "cascade_target",
    "cascade_ref",
    "fell_back",
    "message",
)


def reduce_logs(
    items: DataFrame,
    broadcast: Broadcast[Catalog],
    *,
    incremental: bool = False,
    owners_given: bool = True,
) -> DataFrame:
    """`reduce_rows` for every log of `items`; `incremental`: the items carry the batch
    their schema's table was built up to (`built_batch`), and `before` rows come out.
    Without `owners_given`, the items carry no owner rows (`with_owners`)."""

    def reduce_group(rows: list[Row]) -> list[Row]:
        built = cast(int, rows[0]["built_batch"]) if incremental else None
        return reduce_rows(broadcast.value, rows, built, owners_given=owners_given)

    if not owners_given:
        items = items.withColumns(
            {
                "owner_author": F.lit(None).cast("binary"),
                "owner_log": F.lit(None).cast("decimal(20,0)"),
            }
        )
    columns = [*REDUCE_INPUT, "built_batch"] if incremental else list(REDUCE_INPUT)
    return map_groups(
        items.select(*columns), ("author", "log_id"), ("seq",), reduce_group, REDUCED_ARROW
    )


def reduce_instance_logs(
    items: DataFrame,
    decoded: DataFrame,
    broadcast: Broadcast[Catalog],
    collect: Sequence[str],
    *,
    incremental: bool = False,
) -> tuple[DataFrame, list[SparkRow]]:
    """Every log of `items` reduced (`reduce_logs`), on disk (not in the JVM's heap: it
    holds every row of every table, pickled), and its rows whose type is in `collect`
    (columns `COLLECTED`), collected.

    The engine looks an instance's owner up only to tell why an update or delete of an
    instance the log did not create is rejected; a sound log never does. So the logs
    are reduced without owner rows first, and only those that looked an owner up are
    reduced again, with the owners of what they looked up (`with_owners`). The join of
    every named instance with every create of the store is paid by any build, however
    few its schemas: one schema's 55k messages in the bench's store of 1M reduced in
    4.0-4.5 s without it against 6.6-9.2 s with it (three pairs, one warm session); all
    20 schemas in 49-54 s either way. Rule A-ONCE (docs/semantics.md)."""
    first = reduce_logs(items, broadcast, incremental=incremental, owners_given=False)
    first = first.persist(StorageLevel.DISK_ONLY)
    rows = _collected(first, [*collect, OWNERS])
    looking = [row for row in rows if row["row_type"] == OWNERS]
    if not looking:
        return first, rows
    spark = items.sparkSession
    logs = local_frame(
        spark,
        sorted({(bytes(row["author"]), row["log_id"]) for row in looking}),
        "author binary, log_id decimal(20,0)",
    )
    again = items.join(F.broadcast(logs), ["author", "log_id"], "left_semi")
    instances = {bytes(row["hash"]) for row in looking}
    second = reduce_logs(with_owners(again, decoded, instances), broadcast, incremental=incremental)
    second = second.persist(StorageLevel.DISK_ONLY)
    rows = [row for row in rows if row["row_type"] != OWNERS]
    rows += _collected(second, collect)
    return first.filter(F.col("row_type") != OWNERS).unionByName(second), rows


def _collected(reduced: DataFrame, row_types: Sequence[str]) -> list[SparkRow]:
    """The reduced rows of `row_types`, in the driver (an `owners` row with its log)."""
    wanted = reduced.filter(F.col("row_type").isin(*row_types))
    return wanted.select(*COLLECTED, "author", "log_id").collect()


def with_owners(items: DataFrame, decoded: DataFrame, instances: set[bytes]) -> DataFrame:
    """The items, and beside them an owner row for each update and delete whose create
    (anywhere in the store, chain-accepted) is found: the update's log, the instance,
    and the log of its create (`owner_author`, `owner_log`), the engine's owner lookup
    for `not-author`. The rows of a log group together in `reduce_logs`.

    Only the narrow columns are joined: the items, with their payloads, are shuffled
    once, by the grouping, not a second time by the join of each with its create.

    `instances`: the instances whose owners are wanted. The creates of those alone are
    looked up, by broadcast, instead of a join that shuffles every create of the store."""
    creates = decoded.filter(F.col("kind") == "create")
    if len(instances) <= tuning().broadcast_keys:
        creates = F.broadcast(increments.among(creates, "hash", instances))
    owners = creates.select(
        F.col("hash").alias("instance"),
        F.col("author").alias("owner_author"),
        F.col("log_id").alias("owner_log"),
    )
    group = [c for c in ("author", "log_id", "schema", "built_batch") if c in items.columns]
    named = items.filter(F.col("instance").isNotNull()).select(*group, "instance")
    return items.unionByName(named.join(owners, "instance"), allowMissingColumns=True)
