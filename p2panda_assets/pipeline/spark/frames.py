"""Rows the driver holds, as a Spark frame, without a Python job.

`spark.createDataFrame(rows, schema)` on a list parallelizes the pickled rows, and each
job that reads them runs a Python stage to turn them into Java objects: the first one in
a session took 1.0-1.1 s (the plan frame of the index step in bench/pipeline.py, at 100k
and at 1M), later ones 0.05-0.1 s. From an Arrow table the JVM reads the rows itself (a
`LocalRelation`). The index, increments and builds make several such frames each run.
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
