"""Chaining in Spark: every log's verified entries through the chain rules
(`chain.chain_group`), in Spark partitions (`chain_logs`) or, for a few entries,
collected to Spark's driver (`chain_in_driver`). What comes back is small: a row per log
(its summary, where it now stands, its accepted entries summed by batch) and an account
per entry the rules reject or hold. The accepted entries are all the others
(`accepted_entries`): their payloads never pass through this step."""

from __future__ import annotations

from decimal import Decimal

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from p2panda_assets.engine.corpus import (
    LogKey,
)
from p2panda_assets.pipeline.kernels.batches import (
    Row,
    python_rows,
)
from p2panda_assets.pipeline.kernels.chain import (
    CHAIN_ARROW,
    CHAIN_INPUT,
    ChainedLogs,
    chain_group,
    chain_locally,
    chained_logs_of,
    tip_columns,
)
from p2panda_assets.pipeline.kernels.declared import CHAIN_ACCOUNT, CHAIN_LOG
from p2panda_assets.pipeline.spark.expressions import column
from p2panda_assets.pipeline.spark.frames import local_frame
from p2panda_assets.pipeline.spark.groups import map_groups
from p2panda_assets.protocol.log import LogTip
from p2panda_assets.tuning import tuning


def tips_frame(spark: SparkSession, tips: dict[LogKey, LogTip]) -> DataFrame:
    """One row per continued log: its tip, for `tip_of` in the chain step."""
    rows = []
    for (author, log_id), tip in tips.items():
        seq, ended, hashes = tip_columns(tip)
        rows.append((author, Decimal(log_id), Decimal(seq), ended, hashes))
    return local_frame(
        spark,
        rows,
        "author binary, log_id decimal(20,0), tip_seq decimal(20,0), tip_ended boolean,"
        " tip_hashes string",
    )


def chain_logs(verified: DataFrame, extra: tuple[str, ...] = ()) -> DataFrame:
    """Every log of these verified entries through the chain rules (`chain_group`),
    persisted on disk, not in the JVM's heap: a row per log and per entry held, read
    three times."""
    narrow = verified.select(*CHAIN_INPUT, *extra)
    chained = map_groups(narrow, ("author", "log_id"), ("seq",), chain_group, CHAIN_ARROW)
    return chained.persist(StorageLevel.DISK_ONLY)


# Up to `collect_chain_entries` (20,000) entries to chain, they are collected to Spark's
# driver and chained there (`chain_in_driver`).


def few_to_chain(entries: int) -> bool:
    """Whether `entries` are few enough for the driver to chain (`rows_to_chain`)."""
    return entries <= tuning().collect_chain_entries


def rows_to_chain(verified: DataFrame) -> list[Row] | None:
    """What `chain_logs` reads of `verified`, in the driver, if it is at most
    `PipelineTuning.collect_chain_entries` entries (one Spark job); None if more."""
    most = tuning().collect_chain_entries
    table = verified.select(*CHAIN_INPUT).limit(most + 1).toArrow()
    if table.num_rows > most:
        return None
    return [row for batch in table.to_batches() for row in python_rows(batch)]


def chain_in_driver(spark: SparkSession, rows: list[Row], tips: dict[LogKey, LogTip]) -> DataFrame:
    """`chain_logs` of these entries (`rows_to_chain`), each log continued from its tip in
    `tips`, by the same `chain_group`, in the driver: the shuffle by log and the Python
    stage of `map_groups` cost more than the work for a few entries (the sensors' runs,
    an increment's index step). A frame of the rows it holds, as `chain_logs`'s."""
    table = chain_locally(rows, tips)
    return spark.createDataFrame(table, from_arrow_schema(CHAIN_ARROW))


def chained_logs(chained: DataFrame) -> ChainedLogs:
    """What the chain step found (`ChainedLogs`), from its `log` rows, in the driver."""
    rows = chained.filter(column(CHAIN_LOG)).collect()
    return chained_logs_of(row.asDict() for row in rows)


# Up to `broadcast_held` (200,000) rejected or held entries, `accepted_entries` broadcasts
# their hashes (~40 bytes each in the join); above, both sides are shuffled.


def accepted_entries(verified: DataFrame, chained: DataFrame, held: int) -> DataFrame:
    """The entries of `verified` that the chain rules accepted, payloads included: all
    but those `chained` accounts for (rejected or held). A store whose logs are sound
    has none of those: its verified batches are read as they are."""
    if held == 0:
        return verified
    hashes = chained.filter(column(CHAIN_ACCOUNT)).select("hash")
    return verified.join(
        F.broadcast(hashes) if held <= tuning().broadcast_held else hashes, "hash", "left_anti"
    )
