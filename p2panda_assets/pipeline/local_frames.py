"""Rows the driver holds, as a Spark frame, without a Python job.

`spark.createDataFrame(rows, schema)` on a list parallelizes the pickled rows, and the
first job that reads them runs Python workers to turn them into Java objects: ~1 s when
Spark has to fork a worker for it (the plan frame of bench/pipeline.py's index step, at
100k and at 1M), ~0.05 s when one is idle. From an Arrow table the JVM reads the rows
itself. The index, increments and builds make several such frames each run.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType


def local_frame(spark: SparkSession, rows: Sequence[Sequence[object]], ddl: str) -> DataFrame:
    """`rows` (tuples in the order of `ddl`'s columns) as a frame of the schema `ddl`
    ("name type, ..."), sent to the JVM as one Arrow table."""
    struct = StructType.fromDDL(ddl)
    assert isinstance(struct, StructType), ddl
    schema = to_arrow_schema(struct)
    columns = [pa.array([row[i] for row in rows], field.type) for i, field in enumerate(schema)]
    return spark.createDataFrame(pa.Table.from_arrays(columns, schema=schema), struct)
