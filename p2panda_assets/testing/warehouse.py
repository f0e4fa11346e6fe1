"""Columnar-store files as the pipeline writes them, for the tests and benchmarks of
its reads (`pipeline.columnar.layers.read_layers`, `pipeline.index.verify.read_new_verified`,
`pipeline.columnar.key_index.located`)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.columnar.arrow_io import SCHEMA_PARTITIONING
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


def write_layer_locally(table: pa.Table, root: Path, tasks: int, rows_per_group: int) -> None:
    """`table` (`arrow_io.LAYER_ARROW`'s columns) as a chained layer at `root`, as
    `tasks` Spark tasks write one: each task a slice of the rows, a file for each schema
    it holds, in row groups of `rows_per_group` messages."""
    cuts = [task * table.num_rows // tasks for task in range(tasks + 1)]
    for task in range(tasks):
        ds.write_dataset(
            table.slice(cuts[task], cuts[task + 1] - cuts[task]),
            str(root),
            format="parquet",
            partitioning=SCHEMA_PARTITIONING,
            basename_template=f"part-{task:05d}-{{i}}.parquet",
            existing_data_behavior="overwrite_or_ignore",
            max_rows_per_group=rows_per_group,
        )


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
