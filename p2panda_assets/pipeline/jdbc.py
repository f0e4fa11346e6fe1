"""Reading PostgreSQL into Spark through JDBC (new entries, and tables the checks read
back). Nothing is written through JDBC: Spark's JDBC writer changes values, so tables
are written by binary COPY (`pipeline.copy`)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

Jdbc = dict[str, str]  # url, user, password, driver


def read_query(spark: SparkSession, jdbc: Jdbc, query: str, *, partitions: int = 1) -> DataFrame:
    """The rows of `query` (a SELECT) as a DataFrame."""
    reader = spark.read.format("jdbc").options(**jdbc).option("query", query)
    reader = reader.option("fetchsize", "10000")
    frame = reader.load()
    return frame.repartition(partitions) if partitions > 1 else frame


def read_partitioned(
    spark: SparkSession,
    jdbc: Jdbc,
    query: str,
    *,
    column: str,
    partitions: int,
    bounds: tuple[int, int] | None = None,
) -> DataFrame:
    """The rows of `query` read over `partitions` JDBC connections at once, split on
    `column` (an integer column the query selects): one connection would feed every core
    through a single socket. The bounds of `column` are `bounds` when the caller knows
    them, else they come from the query's own rows (one more Spark job)."""
    if bounds is None:
        found = read_query(
            spark, jdbc, f"SELECT min({column}) AS lo, max({column}) AS hi FROM ({query}) q"
        ).first()
        bounds = (found[0], found[1]) if found is not None else None
    lo, hi = bounds if bounds is not None else (None, None)
    if lo is None or hi is None or partitions <= 1 or hi <= lo:
        return read_query(spark, jdbc, query)
    return (
        spark.read.format("jdbc")
        .options(**jdbc)
        .option("dbtable", f"({query}) AS q")
        .option("partitionColumn", column)
        .option("lowerBound", str(lo))
        .option("upperBound", str(hi + 1))
        .option("numPartitions", str(partitions))
        .option("fetchsize", "10000")
        .load()
    )
