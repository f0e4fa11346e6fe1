"""The decoded messages of one schema: its schema log and the instance logs assigned to
it, chained by the engine's `chain_log`, one Parquet row per accepted entry, in log
order. The materialization reduces from here; checks and people inspect it."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession

from p2panda_assets.engine.corpus import ChainedLog
from p2panda_assets.errors import P2pandaError
from p2panda_assets.home import p2panda_home
from p2panda_assets.pipeline.columns import column_names, rows_frame
from p2panda_assets.pipeline.index import chained_log, verified_entries
from p2panda_assets.pipeline.jdbc import Jdbc
from p2panda_assets.protocol.messages import SchemaVersionRef, decode_message

DECODED_SPARK = (
    "author binary, log_id decimal(20,0), seq decimal(20,0), hash binary, is_schema_log boolean, "
    "kind string, schema_version decimal(20,0), error string, payload binary"
)


def decoded_path(schema_id: str) -> Path:
    return p2panda_home() / "data" / "decoded" / schema_id


def _decode_group(pdf: pd.DataFrame) -> pd.DataFrame:
    log = chained_log(pdf)
    payloads = dict(zip(pdf["hash"].map(bytes), pdf["payload"], strict=True))
    is_schema_log = bool(pdf["is_schema_log"].iloc[0])
    rows = []
    for seq, entry_hash, message in log.items:
        error = message.reason if isinstance(message, P2pandaError) else None
        ref = None if error else getattr(message, "schema", None)
        rows.append(
            {
                "author": log.author,
                "log_id": Decimal(log.log_id),
                "seq": Decimal(seq),
                "hash": entry_hash,
                "is_schema_log": is_schema_log,
                "kind": None if error else message.kind,  # type: ignore[union-attr]
                "schema_version": Decimal(ref.version)
                if isinstance(ref, SchemaVersionRef)
                else None,
                "error": None if error is None else str(error),
                "payload": payloads[entry_hash],
            }
        )
    return rows_frame(rows, column_names(DECODED_SPARK))


def decode_schema(spark: SparkSession, jdbc: Jdbc, schema_id: str) -> DataFrame:
    """Write the schema's decoded messages to Parquet; return them, read back."""
    where = (
        "(author, log_id) IN (SELECT author, log_id FROM p2panda.logs WHERE schema_id = "
        f"'{schema_id}' AND assignment IN ('schema', 'assigned'))"
    )
    entries = verified_entries(spark, jdbc, where).selectExpr(
        "*",
        f"concat(lower(hex(author)), '-', cast(log_id as string)) = '{schema_id}' AS is_schema_log",
    )
    decoded = entries.groupBy("author", "log_id").applyInPandas(_decode_group, DECODED_SPARK)
    path = str(decoded_path(schema_id))
    decoded.write.mode("overwrite").parquet(path)
    return spark.read.parquet(path)


def items_log(pdf: pd.DataFrame) -> ChainedLog:
    """A log's decoded rows back as the engine's `ChainedLog` (messages decoded again
    from their payload: Parquet holds bytes, not Python objects)."""
    pdf = pdf.sort_values("seq")
    items = []
    for seq, entry_hash, payload in zip(pdf["seq"], pdf["hash"], pdf["payload"], strict=True):
        try:
            message: object = decode_message(bytes(payload))
        except P2pandaError as error:
            message = error
        items.append((int(seq), bytes(entry_hash), message))
    return ChainedLog(bytes(pdf["author"].iloc[0]), int(pdf["log_id"].iloc[0]), items, {})  # type: ignore[arg-type]
