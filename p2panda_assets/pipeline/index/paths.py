"""The two paths of the index step (issue 47's driver path): what `pipeline.index.step`
reads, chains, writes and accounts for, through one of these.

- `SparkIndexSteps`: Spark jobs over the verified batches, for many entries;
- `DriverIndexSteps`: the same rules in the process that runs the step, with pyarrow
  (`pipeline.index.driver_path`), when the entries to chain are at most
  `arrow_io.driver_path_entries()` and pyarrow can open the warehouse. A published
  entry's run then launches no Spark job to index it.

`index_steps` picks one. Both are `sequence.IndexSteps`, generic over the frames the steps
pass each other: Spark's DataFrames on one path, Arrow tables on the other (the index
accounts included); the sequence never looks inside.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from decimal import Decimal
from typing import cast

import psycopg
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from p2panda_assets.engine.corpus import Catalog, LogKey
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.pipeline.columnar.arrow_io import driver_path_entries, readable
from p2panda_assets.pipeline.columnar.layers import merge_chained, read_layers, write_chained
from p2panda_assets.pipeline.columnar.warehouse import Warehouse, remove
from p2panda_assets.pipeline.index.accounts import ACCOUNT_ARROW, pending_group
from p2panda_assets.pipeline.index.chaining import (
    accepted_entries,
    chain_in_driver,
    chain_logs,
    few_to_chain,
    logs_to_plan,
    plan_in_spark,
    rows_to_chain,
    schema_logs_in_spark,
    tips_frame,
    totals_in_spark,
    waiting_in_spark,
)
from p2panda_assets.pipeline.index.driver_path import (
    accepted_at_locally,
    accepted_locally,
    chain_rows,
    count_new_verified,
    decoded_locally,
    read_layers_locally,
    read_verified_locally,
    remove_locally,
    rows_of,
    write_chained_locally,
)
from p2panda_assets.pipeline.index.log_plan import (
    CHAIN_LOG_INPUT,
    PLANNED_ARROW,
    WAITING_COLUMNS,
    PlanTotals,
    plan_locally,
    plan_totals,
    schema_logs_among,
)
from p2panda_assets.pipeline.index.sequence import IndexSteps, LogPosition
from p2panda_assets.pipeline.index.verify import read_new_verified, read_verified
from p2panda_assets.pipeline.kernels import declared
from p2panda_assets.pipeline.kernels.batches import Row, map_groups_locally
from p2panda_assets.pipeline.kernels.chain import TIP_COLUMNS, chain_locally
from p2panda_assets.pipeline.kernels.declared import (
    CHAIN_ACCOUNT,
    CHAIN_ACCOUNTS,
    CHAIN_LOG,
    PLANNED_CHAINED,
    PLANNED_WAITING,
    expression,
)
from p2panda_assets.pipeline.postgres.copy import ACCOUNT_COLUMNS, copy_frame
from p2panda_assets.pipeline.spark import expressions
from p2panda_assets.pipeline.spark.frames import local_frame
from p2panda_assets.pipeline.spark.groups import map_groups
from p2panda_assets.protocol.log import LogTip
from p2panda_assets.statuses import BuildPath
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store.copying import Target, copy_rows
from p2panda_assets.store.logs import LOG_COLUMN_TYPES
from p2panda_assets.store.staging import Stage
from p2panda_assets.tuning import tuning

# The index accounts as the driver path holds them (`ACCOUNT_TARGET_COLUMNS`), and none.
ACCOUNT_ORIGIN_ARROW = pa.schema([*ACCOUNT_ARROW, pa.field("origin", pa.string())])
NO_ACCOUNTS = ACCOUNT_ORIGIN_ARROW.empty_table()
NO_PLANS = PLANNED_ARROW.empty_table()
ACCOUNT_TARGET_COLUMNS = (*ACCOUNT_COLUMNS, ("origin", "text"))


# --- Spark -------------------------------------------------------------------------------


class SparkIndexSteps(IndexSteps[DataFrame]):
    """The index step in Spark jobs (the driver chains a few entries, `chain_in_driver`)."""

    path = BuildPath.SPARK

    def __init__(self, spark: SparkSession, warehouse: Warehouse) -> None:
        self._spark = spark
        self._warehouse = warehouse
        # The plans this step made in the driver (`collect_plan_logs`), by their frame.
        self._planned_here: dict[int, pa.Table] = {}

    def verified(self, state: state_sql.PipelineState, since: int | None = None) -> DataFrame:
        if since is None:
            frame = read_verified(self._spark, self._warehouse, state)
        else:
            frame = read_new_verified(self._spark, self._warehouse, since, state.batch)
        return frame.filter(F.col("verdict") == "ok")

    def rows(self, verified: DataFrame, entries: int | None = None) -> list[Row] | None:
        if entries is not None and not few_to_chain(entries):
            return None  # not even the job that would find out
        return rows_to_chain(verified)

    def seqs(self, verified: DataFrame) -> dict[LogKey, list[int]]:
        by_log = verified.groupBy("author", "log_id").agg(F.collect_list("seq").alias("seqs"))
        return {
            (bytes(row["author"]), int(row["log_id"])): [int(n) for n in row["seqs"]]
            for row in by_log.collect()
        }

    def chain(
        self, verified: DataFrame, rows: list[Row] | None, tips: dict[LogKey, LogTip]
    ) -> DataFrame:
        if rows is not None:
            return chain_in_driver(self._spark, rows, tips)
        if not tips:
            return chain_logs(verified)
        tipped = verified.join(
            F.broadcast(tips_frame(self._spark, tips)), ["author", "log_id"], "left"
        )
        return chain_logs(tipped, TIP_COLUMNS)

    def schema_logs(self, chained: DataFrame, kept: set[LogKey]) -> dict[LogKey, bool]:
        return schema_logs_in_spark(chained, kept)

    def plan(
        self, chained: DataFrame, stored: list[Row], catalog: Catalog, order: BuildOrder
    ) -> DataFrame:
        logs = logs_to_plan(chained)
        if logs is None:
            return plan_in_spark(self._spark, chained, stored, catalog, order)
        table = plan_locally([*logs, *stored], catalog, order)
        frame = self._spark.createDataFrame(table, from_arrow_schema(PLANNED_ARROW))
        self._planned_here[id(frame)] = table
        return frame

    def totals(self, planned: DataFrame) -> PlanTotals:
        table = self._planned_here.get(id(planned))
        return totals_in_spark(planned) if table is None else plan_totals(table.to_batches())

    def accepted(self, verified: DataFrame, chained: DataFrame, held: int) -> DataFrame:
        return accepted_entries(verified, chained, held)

    def write(self, accepted: DataFrame, planned: DataFrame, totals: PlanTotals, few: bool) -> str:
        broadcast = totals.logs <= tuning().broadcast_keys
        return write_chained(accepted, planned, self._warehouse, totals.unexplained, few, broadcast)

    def merge(self, layers: Sequence[str]) -> str:
        return merge_chained(self._spark, layers, self._warehouse)

    def accounts(
        self, chained: DataFrame, pending: DataFrame | None, schema_rows: list[tuple[object, ...]]
    ) -> DataFrame:
        chain = expressions.project(chained, CHAIN_ACCOUNTS, CHAIN_ACCOUNT)
        frames: list[DataFrame] = [chain]
        if schema_rows:
            frames.append(local_frame(self._spark, schema_rows, ACCOUNT_DDL))
        if pending is not None:
            frames.append(pending)
        result = frames[0]
        for frame in frames[1:]:
            result = result.unionByName(frame)
        return result

    def pending(self, accepted: DataFrame, planned: DataFrame, waiting: int) -> DataFrame:
        logs = waiting_in_spark(planned)
        items = accepted.select("author", "log_id", "seq", "hash", "payload", "message")
        small = waiting <= tuning().broadcast_keys
        joined = items.join(F.broadcast(logs) if small else logs, ["author", "log_id"])
        accounts = map_groups(joined, ("author", "log_id"), ("seq",), pending_group, ACCOUNT_ARROW)
        return accounts.withColumn("origin", F.lit("pending"))

    def copy_accounts(self, accounts: DataFrame, url: str, stage: Stage) -> None:
        copy_frame(accounts, url, Target.into(stage, ACCOUNT_TARGET_COLUMNS))

    def copy_logs(self, planned: DataFrame, url: str, stage: Stage) -> None:
        table = self._planned_here.get(id(planned))
        if table is not None:  # no Spark task to copy what the driver holds
            _copy_table(
                table.filter(expression(PLANNED_CHAINED)), url, Target.into(stage, LOG_COLUMN_TYPES)
            )
            return
        chained = planned.filter(expressions.column(PLANNED_CHAINED))
        copy_frame(chained, url, Target.into(stage, LOG_COLUMN_TYPES))

    def accepted_at(
        self, layers: Sequence[str], positions: list[LogPosition]
    ) -> list[tuple[LogPosition, bytes]]:
        rows = [(author, Decimal(log_id), Decimal(seq)) for author, log_id, seq in positions]
        anchors = local_frame(
            self._spark, rows, "author binary, log_id decimal(20,0), seq decimal(20,0)"
        )
        chained = read_layers(self._spark, list(layers))
        assert chained is not None  # layers is not empty
        found = chained.select("author", "log_id", "seq", "hash").join(
            F.broadcast(anchors), ["author", "log_id", "seq"], "left_semi"
        )
        return [
            ((bytes(row["author"]), int(row["log_id"]), int(row["seq"])), bytes(row["hash"]))
            for row in found.collect()
        ]

    def remove_run(self, run: str) -> None:
        remove(self._spark, self._warehouse.chained(run))

    def release(self, frame: DataFrame) -> None:
        self._planned_here.pop(id(frame), None)
        frame.unpersist()


ACCOUNT_DDL = (
    "hash binary, schema_id string, state string, reason string, message string, origin string"
)


# --- the driver ----------------------------------------------------------------------------


class DriverIndexSteps(IndexSteps[pa.Table]):
    """The index step in this process (`pipeline.index.driver_path`): no Spark job."""

    path = BuildPath.DRIVER

    def __init__(self, warehouse: Warehouse) -> None:
        self._warehouse = warehouse

    def verified(self, state: state_sql.PipelineState, since: int | None = None) -> pa.Table:
        return read_verified_locally(self._warehouse, state, since)

    def rows(self, verified: pa.Table, entries: int | None = None) -> list[Row] | None:
        return chain_rows(verified)  # few enough: the path was chosen by their number

    def seqs(self, verified: pa.Table) -> dict[LogKey, list[int]]:
        raise AssertionError("the driver path always holds the rows")  # `rows` never None

    def chain(
        self, verified: pa.Table, rows: list[Row] | None, tips: dict[LogKey, LogTip]
    ) -> pa.Table:
        assert rows is not None
        return chain_locally(rows, tips)

    def schema_logs(self, chained: pa.Table, kept: set[LogKey]) -> dict[LogKey, bool]:
        logs = rows_of(chained.filter(expression(CHAIN_LOG)), ["author", "log_id", "is_schema"])
        keys = (
            ((cast(bytes, r["author"]), cast(int, r["log_id"])), bool(r["is_schema"])) for r in logs
        )
        return schema_logs_among(keys, kept)

    def plan(
        self, chained: pa.Table, stored: list[Row], catalog: Catalog, order: BuildOrder
    ) -> pa.Table:
        logs = rows_of(chained.filter(expression(CHAIN_LOG)), CHAIN_LOG_INPUT)
        return plan_locally([*logs, *stored], catalog, order)

    def totals(self, planned: pa.Table) -> PlanTotals:
        return plan_totals(planned.to_batches())

    def accepted(self, verified: pa.Table, chained: pa.Table, held: int) -> pa.Table:
        return accepted_locally(verified, chained, held)

    def write(self, accepted: pa.Table, planned: pa.Table, totals: PlanTotals, few: bool) -> str:
        run = secrets.token_hex(6)
        write_chained_locally(
            decoded_locally(accepted, planned, totals.unexplained), self._warehouse.chained(run)
        )
        return run

    def merge(self, layers: Sequence[str]) -> str:
        run = secrets.token_hex(6)
        write_chained_locally(read_layers_locally(layers), self._warehouse.chained(run))
        return run

    def accounts(
        self, chained: pa.Table, pending: pa.Table | None, schema_rows: list[tuple[object, ...]]
    ) -> pa.Table:
        chain = declared.project(chained, CHAIN_ACCOUNTS, CHAIN_ACCOUNT).cast(ACCOUNT_ORIGIN_ARROW)
        schema = pa.Table.from_pylist(
            [dict(zip(ACCOUNT_ORIGIN_ARROW.names, row, strict=True)) for row in schema_rows],
            ACCOUNT_ORIGIN_ARROW,
        )
        return pa.concat_tables([chain, schema, *([] if pending is None else [pending])])

    def pending(self, accepted: pa.Table, planned: pa.Table, waiting: int) -> pa.Table:
        logs = rows_of(planned.filter(expression(PLANNED_WAITING)), WAITING_COLUMNS)
        plans = {(row["author"], row["log_id"]): row for row in logs}
        items = []
        for row in rows_of(accepted, ["author", "log_id", "seq", "hash", "payload", "message"]):
            plan = plans.get((row["author"], row["log_id"]))
            if plan is not None:
                items.append({**row, **plan})
        table = map_groups_locally(
            items, ("author", "log_id"), ("seq",), pending_group, ACCOUNT_ARROW
        )
        origin = pa.array(["pending"] * table.num_rows, pa.string())
        return table.append_column("origin", origin)

    def copy_accounts(self, accounts: pa.Table, url: str, stage: Stage) -> None:
        _copy_table(accounts, url, Target.into(stage, ACCOUNT_TARGET_COLUMNS))

    def copy_logs(self, planned: pa.Table, url: str, stage: Stage) -> None:
        chained = planned.filter(expression(PLANNED_CHAINED))
        _copy_table(chained, url, Target.into(stage, LOG_COLUMN_TYPES))

    def accepted_at(
        self, layers: Sequence[str], positions: list[LogPosition]
    ) -> list[tuple[LogPosition, bytes]]:
        return accepted_at_locally(layers, positions)

    def remove_run(self, run: str) -> None:
        remove_locally(self._warehouse.chained(run))

    def release(self, frame: pa.Table) -> None:
        return None


def _copy_table(table: pa.Table, url: str, target: Target) -> None:
    """The `target` columns of `table` into `target`, over a connection of their own."""
    columns = [column.to_pylist() for column in table.select(list(target.columns)).columns]
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        copy_rows(conn, target, zip(*columns, strict=True))


def index_steps(
    spark: SparkSession, warehouse: Warehouse, entries: int | None, since: int = 0, through: int = 0
) -> SparkIndexSteps | DriverIndexSteps:
    """The driver path when the entries to chain are few and pyarrow can open the
    warehouse; else Spark's. `entries`: how many (every good one, for a step that
    chains them all); None: those of the verified batches in (since, through], which
    their files' footers count."""
    if not readable(warehouse.base):
        return SparkIndexSteps(spark, warehouse)
    if entries is None:
        entries = count_new_verified(warehouse, since, through)
    if entries <= driver_path_entries():
        return DriverIndexSteps(warehouse)
    return SparkIndexSteps(spark, warehouse)
