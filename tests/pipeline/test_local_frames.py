"""`local_frame` gives the frame `createDataFrame` gives for the same rows and schema,
values exact at their edges, and runs no Python job to read them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.spark.frames import local_frame
from p2panda_assets.protocol.ids import MAX_U64

pytestmark = pytest.mark.spark

DDL = "`author` binary, log_id decimal(20,0), schema string, flag boolean, n bigint, x double"
ROWS = [
    (bytes(32), Decimal(MAX_U64), "s" * 66, True, 2**63 - 1, float("nan")),
    (b"", Decimal(0), "é😀", False, -(2**63), float("-inf")),
    (b"\xff", Decimal(2**53 + 1), None, None, None, None),
]


def test_rows_and_schema_equal_those_of_create_data_frame(spark: SparkSession) -> None:
    made = local_frame(spark, ROWS, DDL)
    expected = spark.createDataFrame(ROWS, DDL)
    assert made.schema == expected.schema
    got, want = made.collect(), expected.collect()
    assert [r[:5] for r in got] == [r[:5] for r in want]
    assert repr([r[5] for r in got]) == repr([r[5] for r in want])  # nan == nan is False


def test_u64_values_may_be_given_as_ints(spark: SparkSession) -> None:
    made = local_frame(spark, [(b"a", MAX_U64, "s", True, 1, 0.5)], DDL)
    assert made.collect()[0]["log_id"] == Decimal(MAX_U64)


def test_no_rows_make_an_empty_frame_of_the_schema(spark: SparkSession) -> None:
    made = local_frame(spark, [], DDL)
    assert made.schema == spark.createDataFrame([], DDL).schema
    assert made.count() == 0


def test_the_rows_reach_the_jvm_without_a_python_job(spark: SparkSession) -> None:
    """From a list, Spark's plan reads a Python RDD (`applySchemaToPythonRDD`); from
    Arrow, a local relation the JVM holds."""
    plan = local_frame(spark, ROWS, DDL)._jdf.queryExecution().analyzed().toString()
    listed = spark.createDataFrame(ROWS, DDL)._jdf.queryExecution().analyzed().toString()
    assert "LocalRelation" in plan and "PythonRDD" not in plan
    assert "LocalRelation" not in listed
