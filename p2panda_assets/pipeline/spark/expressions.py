"""The rules declared once in `pipeline.kernels.declared`, as Spark Columns: the Spark
path's half of each (the driver path's is `declared.expression`)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from p2panda_assets.pipeline.kernels.declared import (
    ELEMENT,
    And,
    AnyElement,
    Chars,
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
    Matches,
    Not,
    Or,
    When,
)


def column(expr: Expr, element: Column | None = None) -> Column:
    """`expr` as a Spark Column; `element`: what `Col(ELEMENT)` is (inside an
    `AnyElement`'s rule)."""

    def of(inner: Expr) -> Column:
        return column(inner, element)

    match expr:
        case Col(name):
            if name == ELEMENT and element is not None:
                return element
            return F.col(name)
        case Lit(value, type_name):
            return F.lit(value).cast(type_name)
        case Length(value):
            return F.length(of(value))  # bytes of a binary value
        case Chars(value):
            return F.length(of(value))  # characters of a string
        case Matches(value, pattern):
            return of(value).rlike(pattern)
        case AnyElement(value, rule):
            return F.exists(of(value), lambda x: column(rule, x))
        case Eq(left, right):
            return of(left) == of(right)
        case Gt(left, right):
            return of(left) > of(right)
        case In(value, among):
            return of(value).isin(list(among))
        case IsNull(value):
            return of(value).isNull()
        case And(left, right):
            return of(left) & of(right)
        case Or(left, right):
            return of(left) | of(right)
        case Not(value):
            return ~of(value)
        case Coalesce(values):
            return F.coalesce(*map(of, values))
        case When(condition, then):
            return F.when(of(condition), of(then))
    raise TypeError(expr)


def project(frame: DataFrame, columns: Columns, where: Expr | None = None) -> DataFrame:
    """`declared.project` in Spark: the rows `where` keeps, as the `columns`."""
    kept = frame if where is None else frame.filter(column(where))
    return kept.select(*(column(expr).alias(name) for name, expr in columns.items()))
