"""Chaining in Spark: every log's verified entries through the chain rules
(`chain.chain_group`), in Spark partitions (`chain_logs`) or, for a few entries,
collected to Spark's driver (`chain_in_driver`). What comes back is a row per log (its
summary, where it now stands, its accepted entries summed by batch) and an account per
entry the rules reject or hold. The accepted entries are all the others
(`accepted_entries`): their payloads never pass through this step.

The log rows stay in Spark: they are planned by author in tasks (`plan_in_spark`), and
the driver collects only the schema logs (`schema_logs_in_spark`) and the plans'
totals (`totals_in_spark`), never a row per log of the store (issue 58: 500,000 logs of
100,000 authors outgrew the driver's heap)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from functools import partial

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from p2panda_assets.engine.corpus import Catalog, LogKey
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.pipeline.index.log_plan import (
    CHAIN_LOG_INPUT,
    PLAN_INPUT,
    PLANNED_ARROW,
    TOTALS_COLUMNS,
    WAITING_COLUMNS,
    PlanTotals,
    added_totals,
    plan_author,
    plan_totals,
    schema_logs_among,
)
from p2panda_assets.pipeline.kernels.batches import Row, python_rows, record_batch
from p2panda_assets.pipeline.kernels.chain import (
    CHAIN_ARROW,
    CHAIN_INPUT,
    chain_group,
    chain_locally,
    tip_columns,
)
from p2panda_assets.pipeline.kernels.declared import CHAIN_ACCOUNT, CHAIN_LOG, PLANNED_WAITING
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


def schema_logs_in_spark(chained: DataFrame, kept: set[LogKey]) -> dict[LogKey, bool]:
    """The chained logs that are schema logs by their new entries, or that `kept` names:
    whether each is one by its new entries (`IndexSteps.schema_logs`). `kept` is the
    schema logs of the authors an append touches: a few authors."""
    logs = chained.filter(column(CHAIN_LOG))
    authors = sorted({author for author, _ in kept})
    wanted = F.col("is_schema")
    if authors:
        wanted = wanted | F.col("author").isin([bytearray(a) for a in authors])
    found = logs.filter(wanted).select("author", "log_id", "is_schema").collect()
    keys = (((bytes(row["author"]), int(row["log_id"])), bool(row["is_schema"])) for row in found)
    return schema_logs_among(keys, kept)


def logs_to_plan(chained: DataFrame) -> list[Row] | None:
    """The chain step's `log` rows as `log_plan.plan_author` reads them, in the driver, if
    they are at most `PipelineTuning.collect_plan_logs` (one Spark job); None if more."""
    most = tuning().collect_plan_logs
    logs = chained.filter(column(CHAIN_LOG)).select(*CHAIN_LOG_INPUT)
    table = logs.limit(most + 1).toArrow()
    if table.num_rows > most:
        return None
    return [row for batch in table.to_batches() for row in python_rows(batch)]


def plan_in_spark(
    spark: SparkSession, chained: DataFrame, stored: list[Row], catalog: Catalog, order: BuildOrder
) -> DataFrame:
    """The plans of the chained logs' authors' logs (`log_plan.plan_author`), in tasks
    grouped by author, with what was decided of the `stored` ones (the logs of the
    authors an append touches); persisted on disk, read by the totals, the layer's write,
    the pending accounts and the logs rows."""
    logs = chained.filter(column(CHAIN_LOG)).select(*CHAIN_LOG_INPUT)
    if stored:
        columns = {name: [row.get(name) for row in stored] for name in PLAN_INPUT.names}
        batch = record_batch(columns, PLAN_INPUT)
        kept = spark.createDataFrame(pa.Table.from_batches([batch]), from_arrow_schema(PLAN_INPUT))
        logs = logs.unionByName(kept, allowMissingColumns=True)
    fn = partial(plan_author, catalog, order)
    planned = map_groups(logs, ("author",), ("log_id",), fn, PLANNED_ARROW)
    return planned.persist(StorageLevel.DISK_ONLY)


def totals_in_spark(planned: DataFrame) -> PlanTotals:
    """The `PlanTotals` of the `planned` logs: a task's each, added up in the driver."""

    def totals(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield pa.record_batch([pa.array([plan_totals(batches).to_json()])], names=["totals"])

    parts = planned.select(*TOTALS_COLUMNS).mapInArrow(totals, "totals string").collect()
    return added_totals(PlanTotals.from_json(row["totals"]) for row in parts)


def waiting_in_spark(planned: DataFrame) -> DataFrame:
    """The chained logs whose entries the index accounts for (`log_plan.waits`), with
    what `accounts.pending_group` reads of their plans."""
    return planned.filter(column(PLANNED_WAITING)).select(*WAITING_COLUMNS)


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
