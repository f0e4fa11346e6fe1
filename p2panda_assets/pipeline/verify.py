"""Verification: each entry read from the entry store once and verified once, ever.

One Spark pass over the entries ingested since the last one (`ingest_seq` above the
progress row's mark) runs the engine's `check_record` and indexes the message of every
entry that passes. The result is appended to the columnar store as one batch; the
message index of the good entries and the accounts of the rejected ones are appended to
PostgreSQL from that batch. Nothing updates `p2panda.entries`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from decimal import Decimal

import psycopg
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from p2panda_assets.engine.corpus import check_record
from p2panda_assets.failpoints import Failpoint, failpoint
from p2panda_assets.pipeline.copy import ACCOUNT_COLUMNS, Target, copy_frame, copy_rows
from p2panda_assets.pipeline.groups import arrow_schema
from p2panda_assets.pipeline.jdbc import read_partitioned
from p2panda_assets.pipeline.warehouse import Warehouse, children, exists, remove, warehouse_root
from p2panda_assets.protocol.message_index import message_index
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store.database import jdbc_options

VERIFIED_ARROW = arrow_schema(
    [
        ("ingest_seq", pa.int64()),
        ("hash", pa.binary()),
        ("verdict", pa.string()),  # "ok" or a reason code
        ("verdict_message", pa.string()),
        ("author", pa.binary()),
        ("log_id", pa.decimal128(20, 0)),
        ("seq", pa.decimal128(20, 0)),
        ("entry", pa.binary()),  # good entries only, from here on
        ("payload", pa.binary()),
        ("kind", pa.string()),  # the message index: NULL where the payload does not decode
        ("schema_id", pa.string()),
        ("schema_version", pa.decimal128(20, 0)),
        ("schema_hash", pa.binary()),
        ("instance", pa.binary()),
    ]
)
VERIFIED_SPARK = (
    "ingest_seq long, hash binary, verdict string, verdict_message string, author binary, "
    "log_id decimal(20,0), seq decimal(20,0), entry binary, payload binary, kind string, "
    "schema_id string, schema_version decimal(20,0), schema_hash binary, instance binary"
)
INDEX_COLUMNS = (
    ("hash", "bytea"),
    ("kind", "text"),
    ("schema_id", "text"),
    ("schema_version", "numeric"),
    ("schema_hash", "bytea"),
    ("instance", "bytea"),
)


def _verify_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Entries rejected at ingest keep their verdict; the others are verified here."""
    for batch in batches:
        columns = batch.to_pydict()
        out: dict[str, list[object]] = {name: [] for name in VERIFIED_ARROW.names}
        for seq, stored_hash, raw, payload, verdict, message in zip(
            columns["ingest_seq"],
            columns["hash"],
            columns["entry"],
            columns["payload"],
            columns["verdict"],
            columns["verdict_message"],
            strict=True,
        ):
            row: dict[str, object] = dict.fromkeys(VERIFIED_ARROW.names)
            row["ingest_seq"], row["hash"] = seq, stored_hash
            if verdict is not None:
                row["verdict"], row["verdict_message"] = verdict, message
            else:
                checked = check_record(raw, payload)
                if checked.rejection is not None:
                    row["verdict"] = str(checked.rejection.reason)
                    row["verdict_message"] = checked.rejection.message
                else:
                    entry = checked.entry
                    assert entry is not None
                    row |= {
                        "verdict": "ok",
                        "author": entry.author,
                        "log_id": Decimal(entry.log_id),
                        "seq": Decimal(entry.seq_num),
                        "entry": raw,
                        "payload": payload,
                    }
                    index = message_index(payload)
                    for name, value in zip(VERIFIED_ARROW.names[-5:], index, strict=True):
                        row[name] = value
            for name, column_value in row.items():
                out[name].append(column_value)
        yield pa.RecordBatch.from_pydict(out, schema=VERIFIED_ARROW)


def current_warehouse(spark: SparkSession, conn: psycopg.Connection) -> Warehouse:
    """This database's columnar store; verification starts over if its files are gone."""
    state = state_sql.pipeline_state(conn)
    warehouse = Warehouse(warehouse_root(), state.warehouse_token)
    if state.batch > 0 and not exists(spark, warehouse.batch(state.batch)):
        state = state_sql.restart_verification(conn)
        warehouse = Warehouse(warehouse_root(), state.warehouse_token)
    return warehouse


SMALL_BATCH = 2_000  # up to this many new entries are verified in the driver


def verify_new_entries(spark: SparkSession, conn: psycopg.Connection, url: str) -> int:
    """Verify the entries stored since the last verification; how many there were.
    The caller holds `PIPELINE_LOCK`.

    A few new entries (the sensors' usual case) are verified in the driver: the same
    `_verify_batches`, without the five Spark jobs a distributed pass costs; the batch
    still goes to the columnar store through Spark (one job), so any warehouse URI works.
    """
    warehouse = current_warehouse(spark, conn)
    state = state_sql.pipeline_state(conn)
    _forget_unfinished_batches(spark, warehouse, state.batch)
    high = state_sql.committed_bound(conn)
    new = state_sql.count_new_entries(conn, state.verified_through, high)
    if not new:
        return 0
    batch = state.batch + 1
    path = warehouse.batch(batch)
    query = state_sql.new_entries_query(state.verified_through, high)
    token = secrets.token_hex(6)
    index = state_sql.stage_table(conn, "message_index", token)
    accounts = state_sql.stage_table(conn, "accounts", token)
    try:
        if new <= SMALL_BATCH:
            _verify_in_driver(spark, conn, query, path, index, accounts)
        else:
            bounds = (state.verified_through + 1, high)
            _verify_in_spark(spark, url, query, new, bounds, path, index, accounts)
        failpoint(Failpoint.VERIFIED)
        state_sql.commit_verification(conn, index, accounts, high, batch)
    except BaseException:
        state_sql.drop_tables(conn, [index, accounts])
        remove(spark, path)
        raise
    return new


def _verify_in_spark(
    spark: SparkSession,
    url: str,
    query: str,
    new: int,
    bounds: tuple[int, int],
    path: str,
    index: state_sql.Stage,
    accounts: state_sql.Stage,
) -> None:
    frame = read_partitioned(
        spark,
        jdbc_options(url),
        query,
        column="ingest_seq",
        partitions=max(1, min(spark.sparkContext.defaultParallelism * 2, new // 5000 + 1)),
        bounds=bounds,
    )
    frame.mapInArrow(_verify_batches, VERIFIED_SPARK).write.mode("overwrite").parquet(path)
    verified = spark.read.parquet(path)
    good = verified.filter(F.col("verdict") == "ok")
    index_target = Target.into(index, INDEX_COLUMNS)
    copy_frame(good.select(*index_target.columns), url, index_target)
    rejected = verified.filter(F.col("verdict") != "ok").select(
        "hash",
        F.lit(None).cast("string").alias("schema_id"),
        F.lit("rejected").alias("state"),
        F.col("verdict").alias("reason"),
        F.col("verdict_message").alias("message"),
    )
    copy_frame(rejected, url, Target.into(accounts, ACCOUNT_COLUMNS))


def _verify_in_driver(
    spark: SparkSession,
    conn: psycopg.Connection,
    query: str,
    path: str,
    index: state_sql.Stage,
    accounts: state_sql.Stage,
) -> None:
    rows = conn.execute(query).fetchall()
    columns = ["ingest_seq", "hash", "entry", "payload", "verdict", "verdict_message"]
    stored = pa.RecordBatch.from_pydict(
        {
            name: [bytes(v) if isinstance(v, memoryview) else v for v in values]
            for name, values in zip(columns, zip(*rows, strict=True), strict=True)
        }
    )
    table = pa.Table.from_batches(list(_verify_batches(iter([stored]))), schema=VERIFIED_ARROW)
    spark.createDataFrame(table).write.mode("overwrite").parquet(path)
    verified = table.to_pylist()
    copy_rows(
        conn,
        Target.into(index, INDEX_COLUMNS),
        ([r[c] for c, _ in INDEX_COLUMNS] for r in verified if r["verdict"] == "ok"),
    )
    copy_rows(
        conn,
        Target.into(accounts, ACCOUNT_COLUMNS),
        (
            [r["hash"], None, "rejected", r["verdict"], r["verdict_message"]]
            for r in verified
            if r["verdict"] != "ok"
        ),
    )


def _forget_unfinished_batches(spark: SparkSession, warehouse: Warehouse, batch: int) -> None:
    """Batches above the committed one were written by a run that died before its
    commit: their entries will be verified again, so their files must go."""
    for name in children(spark, warehouse.entries):
        number = name.removeprefix("batch=")
        if number.isdigit() and int(number) > batch:
            remove(spark, f"{warehouse.entries}/{name}")
