"""Each rule declared once in `pipeline.kernels.declared` gives the same rows built as a
Spark Column (`pipeline.spark.expressions.column`) as built as pyarrow: a predicate keeps
the same rows, a value is the same value (`tests/pipeline/test_declared.py` holds the
pyarrow half to the rule, fast)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.kernels import declared
from p2panda_assets.pipeline.kernels.declared import CHAIN_ACCOUNT, CHAIN_ACCOUNTS, Col, Expr
from p2panda_assets.pipeline.spark import expressions
from tests.pipeline.test_declared import ARRAY_RULES, CASES, arrays_table, every, table_of

pytestmark = pytest.mark.spark

VALUES = {"chain log", "message key"}  # compared as values; the others as filters


def rows(table: Any) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=repr)


@pytest.mark.parametrize(
    ("name", "expr", "columns"), [c[:3] for c in CASES], ids=[c[0] for c in CASES]
)
def test_spark_and_pyarrow_build_the_same_rule(
    spark: SparkSession, name: str, expr: Expr, columns: tuple[str, ...]
) -> None:
    table = table_of(every(*columns))
    frame = spark.createDataFrame(table)
    if name in VALUES:
        wanted: dict[str, Expr] = {**{c: Col(c) for c in columns}, "value": expr}
        spark_rows = expressions.project(frame, wanted).toArrow()
        arrow_rows = declared.project(table, wanted)
    else:
        spark_rows = frame.filter(expressions.column(expr)).toArrow()
        arrow_rows = table.filter(declared.expression(expr))
    assert rows(spark_rows) == rows(arrow_rows)


def test_the_chain_accounts_are_projected_the_same(spark: SparkSession) -> None:
    table = table_of(every("row_type", "hash", "state", "reason", "message"))
    frame = spark.createDataFrame(table)
    spark_rows = expressions.project(frame, CHAIN_ACCOUNTS, CHAIN_ACCOUNT).toArrow()
    assert rows(spark_rows) == rows(declared.project(table, CHAIN_ACCOUNTS, CHAIN_ACCOUNT))


@pytest.mark.parametrize("expr", [r[1] for r in ARRAY_RULES], ids=[r[0] for r in ARRAY_RULES])
def test_spark_counts_the_arrays_pyarrow_counts(spark: SparkSession, expr: Expr) -> None:
    frame = spark.createDataFrame(arrays_table())
    assert frame.filter(expressions.column(expr)).count() == declared.count_where(
        arrays_table(), expr
    )
