"""Reading PostgreSQL into Spark through JDBC: the tables the checks read back. New
entries are read by binary COPY (`pipeline.index.verify`), and nothing is written through
JDBC: Spark's JDBC writer changes values, so tables are written by binary COPY
(`pipeline.postgres.copy`)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

Jdbc = dict[str, str]  # url, user, password, driver


def read_query(spark: SparkSession, jdbc: Jdbc, query: str, *, partitions: int = 1) -> DataFrame:
    """The rows of `query` (a SELECT) as a DataFrame."""
    reader = spark.read.format("jdbc").options(**jdbc).option("query", query)
    reader = reader.option("fetchsize", "10000")
    frame = reader.load()
    return frame.repartition(partitions) if partitions > 1 else frame
