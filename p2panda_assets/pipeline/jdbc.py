"""Moving DataFrames between Spark and PostgreSQL through JDBC.

Spark never creates tables here: every target is created by the product with exact
column types, and Spark only appends to it (so `varchar(255)`, `timestamptz` and arrays
are what SPEC says, not what Spark's dialect would guess).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

Jdbc = dict[str, str]  # url, user, password, driver


def require_autocommit(conn: object) -> None:
    """The pipeline's connections autocommit, so that each `conn.transaction()` block is a
    real transaction: committed when it ends, and so visible to Spark's own JDBC
    connections. (Inside an open transaction, psycopg makes it a mere savepoint.)"""
    if not getattr(conn, "autocommit", False):
        raise ValueError("the pipeline needs an autocommit connection: connect(autocommit=True)")


def read_query(spark: SparkSession, jdbc: Jdbc, query: str, *, partitions: int = 1) -> DataFrame:
    """The rows of `query` (a SELECT) as a DataFrame."""
    reader = spark.read.format("jdbc").options(**jdbc).option("query", query)
    reader = reader.option("fetchsize", "10000")
    frame = reader.load()
    return frame.repartition(partitions) if partitions > 1 else frame


def read_partitioned(
    spark: SparkSession, jdbc: Jdbc, query: str, *, column: str, partitions: int
) -> DataFrame:
    """The rows of `query` read over `partitions` JDBC connections at once, split on
    `column` (an integer column the query selects): one connection would feed every core
    through a single socket. The bounds come from the query's own rows."""
    bounds = read_query(
        spark, jdbc, f"SELECT min({column}) AS lo, max({column}) AS hi FROM ({query}) q"
    )
    lo, hi = bounds.first()
    if lo is None or partitions <= 1 or hi <= lo:
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


def append(frame: DataFrame, jdbc: Jdbc, table: str) -> None:
    """Append `frame` to an existing table (columns matched by name)."""
    (
        frame.write.format("jdbc")
        .options(**jdbc)
        .option("dbtable", table)
        .option("batchsize", "10000")
        .option("stringtype", "unspecified")
        .mode("append")
        .save()
    )
