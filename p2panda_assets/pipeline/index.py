"""The index step: verify new entries (once, ever), chain every log, fold the schema logs,
assign the instance logs, and account for everything a schema's materialization does not
decide. It runs the engine's own stage functions (`check_record`, `chain_log`,
`Catalog`, `waiting_accounts`) over Spark partitions; only small things reach the
driver (one summary per log, the schema logs).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pandas as pd
import psycopg
import pyarrow as pa
from psycopg import sql
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from p2panda_assets.engine.corpus import (
    Accounts,
    Assignment,
    Catalog,
    ChainedLog,
    LogKey,
    LogSummary,
    chain_log,
    check_record,
    duplicate_log_accounts,
    schema_id_of,
    waiting_accounts,
)
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.pipeline.columns import column_names, rows_frame
from p2panda_assets.pipeline.jdbc import (
    Jdbc,
    append,
    read_partitioned,
    require_autocommit,
)
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.protocol.log import Rejection
from p2panda_assets.protocol.messages import (
    SchemaHashRef,
    SchemaVersionRef,
    VersionedSchema,
    decode_message,
)
from p2panda_assets.store.catalog import load_catalog, registered_schemas
from p2panda_assets.store.catalog import stored_catalog as stored_catalog  # re-exported

INDEX_LOCK = 0x70326E64  # advisory lock: one index step at a time

SET_VERDICTS = """
UPDATE p2panda.entries e SET verdict = s.verdict, verdict_message = s.verdict_message
FROM {} s WHERE e.hash = s.hash AND e.verdict IS NULL
"""
INDEX_MESSAGES = """
INSERT INTO p2panda.message_index (hash, kind, schema_id, schema_version, schema_hash, instance)
SELECT hash, kind, schema_id, schema_version, schema_hash, instance FROM {}
WHERE verdict = 'ok' ON CONFLICT (hash) DO NOTHING
"""
UPSERT_ACCOUNTS = """
ON CONFLICT (hash) DO UPDATE SET schema_id = EXCLUDED.schema_id, state = EXCLUDED.state,
  reason = EXCLUDED.reason, message = EXCLUDED.message, origin = EXCLUDED.origin
"""
INDEX_ACCOUNTS = (
    """
INSERT INTO p2panda.accounts (hash, schema_id, state, reason, message, origin)
SELECT hash, NULL, 'rejected', verdict, verdict_message, 'verify' FROM p2panda.entries
WHERE verdict IS NOT NULL AND verdict <> 'ok'
UNION ALL SELECT hash, schema_id, state, reason, message, origin FROM {}
"""
    + UPSERT_ACCOUNTS
)
# Entries rejected before their log was classified get the schema of their log.
ATTRIBUTE_ACCOUNTS = """
UPDATE p2panda.accounts a SET schema_id = g.schema_id
FROM p2panda.entries e JOIN p2panda.logs g ON e.author = g.author AND e.log_id = g.log_id
WHERE a.hash = e.hash AND a.origin IN ('verify', 'chain') AND a.schema_id IS NULL
"""

VERIFY_ARROW = pa.schema(
    [
        ("hash", pa.binary()),
        ("verdict", pa.string()),
        ("verdict_message", pa.string()),
        ("kind", pa.string()),
        ("schema_id", pa.string()),
        ("schema_version", pa.decimal128(20, 0)),
        ("schema_hash", pa.binary()),
        ("instance", pa.binary()),
    ]
)
VERIFY_SPARK = (
    "hash binary, verdict string, verdict_message string, kind string, schema_id string, "
    "schema_version decimal(20,0), schema_hash binary, instance binary"
)
ACCOUNT_SPARK = "hash binary, schema_id string, state string, reason string, message string"
CHAIN_SPARK = (
    "row_type string, author binary, log_id decimal(20,0), is_schema boolean, "
    "ref_schema_id string, ref_version decimal(20,0), ref_hash binary, " + ACCOUNT_SPARK
)


# --- verification -----------------------------------------------------------------------


def _verify_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Verify each entry (`check_record`) and index the message of those that pass."""
    for batch in batches:
        columns = batch.to_pydict()
        out: dict[str, list[object]] = {name: [] for name in VERIFY_ARROW.names}
        for entry_hash, raw, payload in zip(
            columns["hash"], columns["entry"], columns["payload"], strict=True
        ):
            checked = check_record(raw, payload)
            out["hash"].append(entry_hash)
            if checked.rejection is not None:
                out["verdict"].append(str(checked.rejection.reason))
                out["verdict_message"].append(checked.rejection.message)
                index: tuple[object, ...] = (None,) * 5
            else:
                out["verdict"].append("ok")
                out["verdict_message"].append(None)
                index = message_index(payload)
            for name, value in zip(VERIFY_ARROW.names[3:], index, strict=True):
                out[name].append(value)
        yield pa.RecordBatch.from_pydict(out, schema=VERIFY_ARROW)


def message_index(payload: bytes) -> tuple[object, ...]:
    """(kind, schema id, version, schema hash, instance) of a payload, for lookups that
    should not decode payloads again (sensors, status)."""
    try:
        message = decode_message(payload)
    except P2pandaError:
        return (None,) * 5
    schema_id, version, schema_hash = ref_columns(getattr(message, "schema", None))
    return (message.kind, schema_id, version, schema_hash, getattr(message, "instance", None))


def ref_columns(ref: VersionedSchema | None) -> tuple[str | None, Decimal | None, bytes | None]:
    """A schema reference as (schema id, version, hash) columns: one of the two forms."""
    if isinstance(ref, SchemaVersionRef):
        return ref.schema_id, Decimal(ref.version), None
    if isinstance(ref, SchemaHashRef):
        return None, None, ref.hash
    return None, None, None


def ref_from_columns(
    schema_id: str | None, version: Decimal | None, schema_hash: bytes | None
) -> VersionedSchema | None:
    if schema_hash is not None:
        return SchemaHashRef(bytes(schema_hash))
    if schema_id is None or version is None:
        return None
    author, log_id = schema_id.rsplit("-", 1)
    return SchemaVersionRef(bytes.fromhex(author), int(log_id), int(version))


def verify_new_entries(spark: SparkSession, conn: psycopg.Connection, jdbc: Jdbc) -> int:
    """Verify every stored entry without a verdict; returns how many were verified."""
    pending = conn.execute("SELECT count(*) FROM p2panda.entries WHERE verdict IS NULL").fetchone()[
        0
    ]
    if not pending:
        return 0
    stage = _stage_table(
        conn,
        "verify",
        "LIKE p2panda.message_index INCLUDING DEFAULTS",
        extra=", verdict text, verdict_message text",
    )
    frame = read_partitioned(
        spark,
        jdbc,
        "SELECT ingest_seq, hash, entry, payload FROM p2panda.entries WHERE verdict IS NULL",
        column="ingest_seq",
        partitions=_partitions(spark, pending),
    )
    append(frame.mapInArrow(_verify_batches, VERIFY_SPARK), jdbc, stage.as_string(conn))
    with conn.transaction():
        conn.execute(sql.SQL(SET_VERDICTS).format(stage))
        conn.execute(sql.SQL(INDEX_MESSAGES).format(stage))
        conn.execute(sql.SQL("DROP TABLE {}").format(stage))
    return pending


def _partitions(spark: SparkSession, rows: int) -> int:
    return max(1, min(spark.sparkContext.defaultParallelism * 2, rows // 5000 + 1))


def _stage_table(
    conn: psycopg.Connection, purpose: str, columns: str, extra: str = ""
) -> sql.Composed:
    """A fresh unlogged table for one run's intermediate rows (runs never share one)."""
    name = sql.Identifier("p2panda", f"stage_{purpose}_{uuid.uuid4().hex[:12]}")
    conn.execute(sql.SQL("CREATE UNLOGGED TABLE {} (" + columns + extra + ")").format(name))
    return name


# --- chaining every log ---------------------------------------------------------------


def verified_entries(spark: SparkSession, jdbc: Jdbc, where: str = "TRUE") -> DataFrame:
    return read_partitioned(
        spark,
        jdbc,
        "SELECT ingest_seq, author, log_id, seq_num, hash, entry, payload FROM p2panda.entries e"
        f" WHERE verdict = 'ok' AND {where}",
        column="ingest_seq",
        partitions=spark.sparkContext.defaultParallelism * 2,
    )


def chained_log(pdf: pd.DataFrame) -> ChainedLog:
    """A log's rows (one group of verified entries) through the engine's `chain_log`."""
    entries = [
        (decode_entry(raw), payload)
        for raw, payload in zip(pdf["entry"], pdf["payload"], strict=True)
    ]
    return chain_log(bytes(pdf["author"].iloc[0]), int(pdf["log_id"].iloc[0]), entries)


def account_rows(accounts: Accounts) -> list[dict[str, object]]:
    return [
        {
            "hash": h,
            "schema_id": a.schema_id,
            "state": str(a.state),
            "reason": None if a.reason is None else str(a.reason),
            "message": a.message,
        }
        for h, a in accounts.items()
    ]


def _chain_group(pdf: pd.DataFrame) -> pd.DataFrame:
    log = chained_log(pdf)
    summary = log.summary
    ref = summary.first_ref
    head = {
        "row_type": "log",
        "author": log.author,
        "log_id": Decimal(log.log_id),
        "is_schema": summary.is_schema,
    }
    head["ref_schema_id"], head["ref_version"], head["ref_hash"] = ref_columns(ref)
    rows = [head] + [{"row_type": "account", **row} for row in account_rows(log.accounts)]
    return rows_frame(rows, column_names(CHAIN_SPARK))


def summary_of(row: dict[str, Any]) -> tuple[LogKey, LogSummary]:
    """A collected `log` row back as (log key, summary)."""
    ref = ref_from_columns(row["ref_schema_id"], row["ref_version"], row["ref_hash"])
    return (bytes(row["author"]), int(row["log_id"])), LogSummary(bool(row["is_schema"]), ref)


@dataclass(frozen=True, slots=True)
class IndexResult:
    verified: int
    logs: int
    catalog: Catalog
    assignment: Assignment
    order: BuildOrder
    up_to_date: bool = False  # nothing changed since the last index step


def run_index(spark: SparkSession, conn: psycopg.Connection, jdbc: Jdbc) -> IndexResult:
    """The whole index step, under an advisory lock (concurrent runs wait, then find
    nothing left to verify)."""
    require_autocommit(conn)
    conn.execute("SELECT pg_advisory_lock(%s)", (INDEX_LOCK,))
    try:
        return _run_index(spark, conn, jdbc)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (INDEX_LOCK,))


FINGERPRINT = """
SELECT (SELECT count(*) || ':' || coalesce(max(ingest_seq), 0) FROM p2panda.entries) || ':'
    || (SELECT md5(coalesce(string_agg(schema_id, ',' ORDER BY schema_id), ''))
        FROM p2panda.schemas)
"""


def _fingerprint(conn: psycopg.Connection) -> str:
    return conn.execute(FINGERPRINT).fetchone()[0]


def _run_index(spark: SparkSession, conn: psycopg.Connection, jdbc: Jdbc) -> IndexResult:
    before = _fingerprint(conn)
    stored = conn.execute("SELECT fingerprint FROM p2panda.index_state").fetchone()
    if stored is not None and stored[0] == before:
        catalog = stored_catalog(conn)
        summaries = conn.execute("SELECT count(*) FROM p2panda.logs").fetchone()[0]
        return IndexResult(0, summaries, catalog, Assignment(), catalog.order(), up_to_date=True)
    verified = verify_new_entries(spark, conn, jdbc)
    chained = (
        verified_entries(spark, jdbc)
        .groupBy("author", "log_id")
        .applyInPandas(_chain_group, CHAIN_SPARK)
    )
    chained = chained.cache()
    summaries = dict(
        summary_of(r.asDict()) for r in chained.filter(F.col("row_type") == "log").collect()
    )
    catalog = load_catalog(
        conn, [k for k, s in summaries.items() if s.is_schema], registered_schemas(conn)
    )
    assignment = catalog.assign(summaries)
    order = catalog.order()
    stage = _stage_table(
        conn,
        "accounts",
        "hash bytea, schema_id text, state text, reason text, message text, origin text",
    )
    chain_accounts = chained.filter(F.col("row_type") == "account").select(
        *column_names(ACCOUNT_SPARK)
    )
    append(chain_accounts.withColumn("origin", F.lit("chain")), jdbc, stage.as_string(conn))
    chained.unpersist()
    _append_waiting_accounts(spark, conn, jdbc, stage, catalog, assignment, order)
    schema_accounts: Accounts = {}
    for schema_id in catalog.histories:
        schema_accounts.update(catalog.schema_accounts(schema_id))
    _copy_accounts(conn, stage, schema_accounts, "schema")
    _write_logs(conn, summaries, assignment)
    _merge_accounts(conn, stage)
    conn.execute(
        "INSERT INTO p2panda.index_state VALUES (1, %s) ON CONFLICT (id) DO UPDATE"
        " SET fingerprint = EXCLUDED.fingerprint",
        (before,),
    )
    return IndexResult(verified, len(summaries), catalog, assignment, order)


def _append_waiting_accounts(
    spark: SparkSession,
    conn: psycopg.Connection,
    jdbc: Jdbc,
    stage: sql.Composed,
    catalog: Catalog,
    assignment: Assignment,
    order: BuildOrder,
) -> None:
    """Accounts of the instance logs no materialization will reduce: logs whose schema
    cannot be determined, an author's second logs, and logs of schemas not built."""
    built = set(order.order)
    plan: list[tuple[bytes, Decimal, str, str | None, str, str]] = []
    for key, why in assignment.waiting.items():
        plan.append((key[0], Decimal(key[1]), "waiting", None, str(why.reason), why.message))
    for key, schema_id in assignment.duplicate.items():
        plan.append((key[0], Decimal(key[1]), "duplicate", schema_id, "", ""))
    for key, schema_id in assignment.schema_of.items():
        if schema_id not in built:
            why = catalog.not_built(schema_id, order)
            plan.append(
                (key[0], Decimal(key[1]), "waiting", schema_id, str(why.reason), why.message)
            )
    if not plan:
        return
    wanted = spark.createDataFrame(
        plan,
        "author binary, log_id decimal(20,0), plan string, plan_schema string, "
        "why_reason string, why_message string",
    )
    frame = verified_entries(spark, jdbc).join(F.broadcast(wanted), ["author", "log_id"])
    accounts = frame.groupBy("author", "log_id").applyInPandas(_waiting_group, ACCOUNT_SPARK)
    append(accounts.withColumn("origin", F.lit("waiting")), jdbc, stage.as_string(conn))


def _waiting_group(pdf: pd.DataFrame) -> pd.DataFrame:
    log = chained_log(pdf)
    first = pdf.iloc[0]
    schema_id = first["plan_schema"]
    if first["plan"] == "duplicate":
        accounts = duplicate_log_accounts(log, schema_id)
    else:
        accounts = waiting_accounts(
            log, Rejection(Reason(first["why_reason"]), first["why_message"]), schema_id
        )
    return rows_frame(account_rows(accounts), column_names(ACCOUNT_SPARK))


def _copy_accounts(
    conn: psycopg.Connection, stage: sql.Composed, accounts: Accounts, origin: str
) -> None:
    with conn.cursor().copy(
        sql.SQL("COPY {} (hash, schema_id, state, reason, message, origin) FROM STDIN").format(
            stage
        )
    ) as copy:
        for row in account_rows(accounts):
            copy.write_row((*row.values(), origin))


def _write_logs(
    conn: psycopg.Connection, summaries: dict[LogKey, LogSummary], assignment: Assignment
) -> None:
    rows = []
    for key, summary in summaries.items():
        ref = summary.first_ref
        if summary.is_schema:
            kind, schema_id = "schema", schema_id_of(key)
        elif key in assignment.schema_of:
            kind, schema_id = "assigned", assignment.schema_of[key]
        elif key in assignment.duplicate:
            kind, schema_id = "duplicate", assignment.duplicate[key]
        else:
            kind, schema_id = "waiting", None
        rows.append(
            (
                key[0],
                key[1],
                summary.is_schema,
                *ref_columns(ref),
                schema_id,
                kind,
            )
        )
    with conn.transaction():
        conn.execute("DELETE FROM p2panda.logs")
        with conn.cursor().copy(
            "COPY p2panda.logs (author, log_id, is_schema, ref_schema_id, ref_version,"
            " ref_hash, schema_id, assignment) FROM STDIN"
        ) as copy:
            for row in rows:
                copy.write_row(row)


def _merge_accounts(conn: psycopg.Connection, stage: sql.Composed) -> None:
    """Replace every account the index step decides, in one transaction: verification
    rejections, chain rejections and pending, schema log entries, and waiting logs; then
    give the verification and chain ones the schema of their log."""
    with conn.transaction():
        conn.execute("DELETE FROM p2panda.accounts WHERE origin <> 'instance'")
        conn.execute(sql.SQL(INDEX_ACCOUNTS).format(stage))
        conn.execute(ATTRIBUTE_ACCOUNTS)
        conn.execute(sql.SQL("DROP TABLE {}").format(stage))
