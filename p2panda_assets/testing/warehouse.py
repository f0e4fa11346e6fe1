"""Columnar-store files as the pipeline writes them, for the tests and benchmarks of
its reads (`pipeline.columnar.layers.read_layers`, `pipeline.index.verify.read_new_verified`)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.columnar.layers import LAYER_SPARK
from p2panda_assets.pipeline.columnar.warehouse import Warehouse
from p2panda_assets.pipeline.index.verify import VERIFIED_ARROW, verify_rows


def write_layer(
    spark: SparkSession, path: str, layer: int, schemas: Sequence[str], seqs: Sequence[int]
) -> None:
    """A chained layer as the index step writes one: each schema a `schema=` partition,
    a message per (schema, seq). `layer`, the schemas' count and the seqs stay under 256."""
    rows = [
        (
            bytes([layer, s]),
            Decimal(s),
            Decimal(seq),
            bytes([layer, s, seq]),
            layer,
            s == 0,
            "create",
            Decimal(1),
            None,
            b"\xa0",
            None,
            None,
            "assigned",
            schema,
        )
        for s, schema in enumerate(schemas)
        for seq in seqs
    ]
    frame = spark.createDataFrame(rows, LAYER_SPARK)
    frame.repartition("schema").write.partitionBy("schema").parquet(path)


def write_rejected_batch(warehouse: Warehouse, number: int, entries: int) -> None:
    """A verified batch of `entries` entries rejected at ingest (no signature to make)."""
    rows = [
        (
            entries * number + i,
            number.to_bytes(8, "big") + bytes([i]),
            b"",
            None,
            "bad_signature",
            "",
        )
        for i in range(entries)
    ]
    path = Path(warehouse.batch(number))
    path.mkdir(parents=True)
    pq.write_table(pa.Table.from_batches([verify_rows(rows)], VERIFIED_ARROW), path / "p.parquet")
