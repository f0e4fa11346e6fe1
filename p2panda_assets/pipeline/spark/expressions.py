"""The rules declared once in `pipeline.kernels.declared`, as Spark Columns: the Spark
path's half of each (the driver path's is `declared.expression`)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from p2panda_assets.pipeline.kernels.declared import (
    And,
    Coalesce,
    Col,
    Columns,
    Eq,
    Expr,
    Gt,
    In,
    IsNull,
    Length,
    Lit,
    Not,
    Or,
    When,
)


def column(expr: Expr) -> Column:
    """`expr` as a Spark Column."""
    match expr:
        case Col(name):
            return F.col(name)
        case Lit(value, type_name):
            return F.lit(value).cast(type_name)
        case Length(value):
            return F.length(column(value))
        case Eq(left, right):
            return column(left) == column(right)
        case Gt(left, right):
            return column(left) > column(right)
        case In(value, among):
            return column(value).isin(list(among))
        case IsNull(value):
            return column(value).isNull()
        case And(left, right):
            return column(left) & column(right)
        case Or(left, right):
            return column(left) | column(right)
        case Not(value):
            return ~column(value)
        case Coalesce(values):
            return F.coalesce(*map(column, values))
        case When(condition, then):
            return F.when(column(condition), column(then))
    raise TypeError(expr)


def project(frame: DataFrame, columns: Columns, where: Expr | None = None) -> DataFrame:
    """`declared.project` in Spark: the rows `where` keeps, as the `columns`."""
    kept = frame if where is None else frame.filter(column(where))
    return kept.select(*(column(expr).alias(name) for name, expr in columns.items()))
