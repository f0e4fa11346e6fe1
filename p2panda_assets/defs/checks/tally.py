"""pandera building blocks of the checks: `Tally`, which counts the bad rows of many
checks in one pass of a Spark frame, `ArrowTally`, the same counts of an Arrow table in the
driver (for pandera's pandas backend: a small frame's check without a Spark job), and the
findings as lines and a check result. A rule both count is declared once
(`pipeline.kernels.declared`), and built as a Spark Column (`SparkChecks`) or counted
over the Arrow table (`ArrowTally`): a check's model is written once for both backends
(`Checks`).

`pandera.pyspark` does not raise: its findings are read from `df.pandera.errors`. Field
columns are renamed `f0`, `f1`, ... in Spark (a field name is data: it may hold dots or
backticks) and named back in the reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg
import pandas as pd
import pandera.pandas as pandas_pa
import pandera.pyspark as pa
import pyarrow as arrow
from pandera.config import ValidationDepth, config_context
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from p2panda_assets.pipeline.kernels.declared import Col, Expr, count_where
from p2panda_assets.pipeline.spark.expressions import column as spark_column

MAX_REPORTED = 20
ROWS = "rows"  # Tally.count of every frame: its row count

Findings = dict[str, int]  # check name -> failing rows, for the check's metadata


def quoted(name: str) -> Column:
    """The column `name`, whatever characters it holds."""
    return F.col("`" + name.replace("`", "``") + "`")


class Tally:
    """Bad-row counts of many checks, in one pass over a frame.

    pandera.pyspark runs every check as a Spark job of its own, ~0.1 s apiece however
    small the frame: most of a blocking check's time, which every new entry waits for.
    The checks made here register what they count up front; the first one pandera calls
    runs one aggregation for all of them, the others read its result. A check whose
    columns the frame lacks stays out of it (pandera reports the missing column), so it
    cannot break the others. `findings` holds the failing rows per check, for the check's
    metadata."""

    def __init__(self) -> None:
        self.findings: Findings = {}
        # label -> (count of the bad rows, the columns it reads)
        self._aggregates: dict[str, tuple[Column, tuple[str, ...]]] = {}
        self._frame: DataFrame | None = None
        self._counts: dict[str, int] = {}

    def column(
        self, column: str, name: str, error: str, bad: Callable[[Column], Column]
    ) -> pa.Check:
        """Fails on the rows where `bad(column)` holds."""
        bad_rows = rows_where(bad(quoted(column)))
        return self._check(f"{column}: {name}", name, error, bad_rows, (column,))

    def not_null(self, column: str) -> pa.Check:
        return self.column(column, "not_nullable", "the column has no nulls", Column.isNull)

    def rows(self, name: str, error: str, bad: Column, columns: tuple[str, ...]) -> pa.Check:
        """A frame check: fails on the rows where `bad` (of `columns`) holds."""
        return self._check(name, name, error, rows_where(bad), columns)

    def unique(self, name: str, error: str, columns: list[str]) -> pa.Check:
        """A frame check: fails when rows repeat the values of `columns`."""
        duplicates = F.count(F.lit(1)) - F.countDistinct(F.struct(*map(quoted, columns)))
        return self._check(name, name, error, duplicates, tuple(columns))

    def count(self, frame: DataFrame, label: str) -> int:
        """Failing rows of the check `label` (or the frame's `ROWS`); a KeyError for a
        check whose columns the frame lacks."""
        if frame is not self._frame:
            present = set(frame.columns)
            countable = {
                key: aggregate
                for key, (aggregate, columns) in self._aggregates.items()
                if present.issuperset(columns)
            }
            labels = [*countable, ROWS]
            aggregates = [*countable.values(), F.count(F.lit(1))]
            row = frame.agg(*(a.alias(f"c{i}") for i, a in enumerate(aggregates))).first()
            assert row is not None  # an aggregate: always one row
            self._counts = {label: int(row[i] or 0) for i, label in enumerate(labels)}
            self._frame = frame
        return self._counts[label]

    def _check(
        self, key: str, name: str, error: str, aggregate: Column, columns: tuple[str, ...]
    ) -> pa.Check:
        self._aggregates[key] = (aggregate, columns)

        def check(data: Any, label: str) -> bool:
            frame = data if isinstance(data, DataFrame) else data.dataframe
            failing = self.count(frame, key)
            if failing:
                self.findings[key] = failing
            return failing == 0

        return pa.Check(check, name=name, error=f"{name}: {error}", label=name)


class SparkChecks:
    """A model's checks counted by a Spark `Tally`, each declared rule
    (`pipeline.kernels.declared`) built as a Spark Column, so that a model is written
    once for both backends (`ArrowTally`)."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    @property
    def findings(self) -> Findings:
        return self.tally.findings

    def column(self, column: str, name: str, error: str, bad: Callable[[Expr], Expr]) -> pa.Check:
        return self.tally.column(column, name, error, lambda _: spark_column(bad(Col(column))))

    def not_null(self, column: str) -> pa.Check:
        return self.tally.not_null(column)

    def rows(self, name: str, error: str, bad: Expr, columns: tuple[str, ...]) -> pa.Check:
        return self.tally.rows(name, error, spark_column(bad), columns)

    def unique(self, name: str, error: str, columns: list[str]) -> pa.Check:
        return self.tally.unique(name, error, columns)


class ArrowTally:
    """`Tally`'s counts of an Arrow table, in the driver: the checks of a pandera (pandas)
    model made here read them (the frame pandera is given is the table, as pandas).
    Each rule is the one the Spark model counts, built with `ARROW_FX`."""

    def __init__(self, table: arrow.Table) -> None:
        self.table = table
        self.findings: Findings = {}

    def column(
        self, column: str, name: str, error: str, bad: Callable[[Expr], Expr]
    ) -> pandas_pa.Check:
        """Fails on the rows where `bad(Col(column))` holds."""
        failing = count_where(self.table, bad(Col(column)))
        return self.counted(f"{column}: {name}", name, error, failing)

    def not_null(self, column: str) -> pandas_pa.Check:
        failing = self.table.column(column).null_count
        key = f"{column}: not_nullable"
        return self.counted(key, "not_nullable", "the column has no nulls", failing)

    def rows(self, name: str, error: str, bad: Expr, columns: tuple[str, ...]) -> pandas_pa.Check:
        """A frame check: fails on the rows where `bad` (of `columns`) holds."""
        return self.counted(name, name, error, count_where(self.table, bad))

    def unique(self, name: str, error: str, columns: list[str]) -> pandas_pa.Check:
        distinct = self.table.group_by(columns).aggregate([([], "count_all")]).num_rows
        return self.counted(name, name, error, self.table.num_rows - distinct)

    def count_rows(self) -> int:
        return self.table.num_rows

    def counted(self, key: str, name: str, error: str, failing: int) -> pandas_pa.Check:
        """A check of `failing` rows (the findings' `key`), however they were counted."""
        if failing:
            self.findings[key] = failing
        return pandas_pa.Check(
            lambda _data: failing == 0, name=name, error=f"{name}: {error}", element_wise=False
        )


def validate_in_driver(table: arrow.Table, model: pandas_pa.DataFrameSchema) -> dict:
    """pandera's findings of the table, with its pandas backend, in the form of
    `validate`'s (the `message` of pandera's `SchemaErrors`: reason -> findings)."""
    with config_context(validation_depth=ValidationDepth.SCHEMA_AND_DATA):
        try:
            model.validate(_as_pandas(table), lazy=True)
        except pandas_pa.errors.SchemaErrors as errors:
            return dict(errors.message)
    return {}


def _as_pandas(table: arrow.Table) -> pd.DataFrame:
    """The table's columns as objects: pandera reads no value (the tally counted them)."""
    return pd.DataFrame({name: table.column(name).to_pylist() for name in table.column_names})


Checks = SparkChecks | ArrowTally  # how a model written once counts its checks


def rows_where(predicate: Column) -> Column:
    return F.count(F.when(predicate, 1))


def validate(frame: DataFrame, model: pa.DataFrameSchema) -> dict:
    """pandera's findings (schema and data), as `df.pandera.errors` holds them."""
    with config_context(validation_depth=ValidationDepth.SCHEMA_AND_DATA):
        checked = model.validate(frame, lazy=True)
    return dict(checked.pandera.errors or {})


def summarize(errors: Mapping, names: Mapping[str, str] | None = None) -> list[str]:
    """One line per finding: `column: check`, with internal column names named back."""
    names = names or {}
    lines = []
    for by_reason in errors.values():
        for reason, found in by_reason.items():
            for item in found:
                column = item.get("column")
                label = names.get(column, column) if column else item.get("schema")
                lines.append(f"{label}: {item.get('check')} ({reason})")
    return sorted(set(lines))


def check_result(
    lines: list[str], findings: Findings, metadata: Mapping[str, Any]
) -> dg.AssetCheckResult:
    passed = not lines
    description = "ok" if passed else "; ".join(lines[:MAX_REPORTED])
    return dg.AssetCheckResult(
        passed=passed,
        description=description,
        metadata={
            **metadata,
            "failures": dg.MetadataValue.json(lines),
            "failing_rows": dg.MetadataValue.json(findings),
        },
    )
