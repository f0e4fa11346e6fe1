"""The model of `table_matches_the_current_lens`, written once for pandera's two backends
(as the decoded check's): derived from the migration plan's current lens, each rule a
declared expression (`pipeline.kernels.declared`) that Spark builds as a Column and the
driver counts over an Arrow table; a field's RE2 validation one predicate (`_passes`)
for Spark's UDF and the driver."""

from collections.abc import Callable
from typing import Any

import pandas as pd
import pandera.pandas as pandas_pa
import pandera.pyspark as pa
import pyarrow as arrow
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from p2panda_assets.defs.assets import MigrationPlan
from p2panda_assets.defs.checks.tally import ArrowTally, Findings, SparkChecks, Tally, quoted
from p2panda_assets.engine.lens import FieldSpec
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.engine.validation import Validation, compile_validation, validates
from p2panda_assets.engine.values import Value
from p2panda_assets.pipeline.build.columns import SPARK_TYPES, field_columns
from p2panda_assets.pipeline.kernels.declared import (
    ELEMENT,
    And,
    AnyElement,
    Chars,
    Col,
    Expr,
    Gt,
    In,
    IsNull,
    Lit,
    Matches,
    Not,
)
from p2panda_assets.protocol.fieldtypes import VARCHAR_MAX_CHARS, BaseType, FieldType

HEX_ID = r"^([0-9a-f]{68}|[0-9a-f]{132})$"  # an entry hash (instance id), as hex
HEX_AUTHOR = r"^[0-9a-f]{64}$"


def jdbc_type(ftype: FieldType) -> T.DataType:
    """The Spark type a field column reads back as through JDBC (arrays may hold nulls,
    as far as JDBC can tell)."""
    base = SPARK_TYPES[ftype.base]
    return T.ArrayType(base, containsNull=True) if ftype.is_array else base


def arrow_type(dtype: T.DataType) -> arrow.DataType:
    """The Arrow type of a column Spark reads as `dtype` (`jdbc_type`, `SYSTEM_SPARK`): the
    driver reads the rows into it (`read_in_driver`)."""
    return to_arrow_type(dtype, timezone="UTC")


SYSTEM_SPARK: dict[str, T.DataType] = {
    "_instance_id": T.StringType(),
    "_author": T.StringType(),
    "_version": T.LongType(),
    "_seq": T.DecimalType(20, 0),
    "_entry": T.StringType(),
}
VALIDATION = "validation_at_current_version"


def _validation_error(version: int, pattern: str) -> str:
    return f"values written at version {version} pass validation {pattern!r}"


class _SparkTableChecks(SparkChecks):
    """The table model's checks in Spark; a field's validation as a UDF (`re2_check`)."""

    def validation(self, column: str, pattern: str, ftype: FieldType, version: int) -> pa.Check:
        return re2_check(pattern, ftype, version, self.findings)


class DriverTableChecks(ArrowTally):
    """The table model's checks over the rows the driver read (`read_in_driver`)."""

    def validation(
        self, column: str, pattern: str, ftype: FieldType, version: int
    ) -> pandas_pa.Check:
        validation = compile_validation(pattern)
        rows = zip(self.table["_version"].to_pylist(), self.table[column].to_pylist(), strict=True)
        failing = sum(at == version and not _passes(v, ftype, validation) for at, v in rows)
        error = _validation_error(version, pattern)
        return self.counted(f"{column}: {VALIDATION}", VALIDATION, error, failing)


TableChecks = _SparkTableChecks | DriverTableChecks


def _passes(value: Any, ftype: FieldType, validation: Validation) -> bool:
    """Rule C-VALIDATE of a value as the table holds it (null passes)."""
    return value is None or validates(_canonical(value, ftype), ftype, validation)


def _elements(is_array: bool, bad: Callable[[Expr], Expr]) -> Callable[[Expr], Expr]:
    """`bad` of a value, or of any element of an array value (a null is not bad)."""
    if is_array:
        return lambda c: AnyElement(c, bad(Col(ELEMENT)))
    return lambda c: And(Not(IsNull(c)), bad(c))


def _field_checks(column: str, spec: FieldSpec, version: int, checks: TableChecks) -> list[Any]:
    is_array = spec.type.is_array
    found = []
    if is_array:
        found.append(
            checks.column(
                column,
                "no_null_elements",
                "array elements are never null",
                lambda c: AnyElement(c, IsNull(Col(ELEMENT))),
            )
        )
    if spec.type.base is BaseType.VARCHAR:
        too_long = Lit(VARCHAR_MAX_CHARS, "long")
        found.append(
            checks.column(
                column,
                f"varchar_at_most_{VARCHAR_MAX_CHARS}",
                f"varchar values have at most {VARCHAR_MAX_CHARS} characters",
                _elements(is_array, lambda x: Gt(Chars(x), too_long)),
            )
        )
    if spec.type.base is BaseType.RELATION:
        found.append(
            checks.column(
                column,
                "relation_is_an_instance_id",
                "relation values are instance ids (entry hashes in hex)",
                _elements(is_array, lambda x: Not(Matches(x, HEX_ID))),
            )
        )
    if spec.validation is not None:
        found.append(checks.validation(column, spec.validation, spec.type, version))
    return found


def re2_check(pattern: str, ftype: FieldType, version: int, findings: Findings) -> pa.Check:
    """Values written at the current version pass the field's validation `pattern`: RE2
    search via the engine's `validates` (never Python's `re`: patterns are untrusted), per
    batch."""
    compile_validation(pattern)  # a bad pattern fails here, not in a worker

    # pyspark's stubs want a functionType; Spark 3 takes it from the type hints instead.
    @F.pandas_udf("boolean")  # type: ignore[call-overload]
    def passes(values: pd.Series) -> pd.Series:
        validation = compile_validation(pattern)
        return values.map(lambda v: _passes(v, ftype, validation))

    def check(data: Any, label: str) -> bool:
        column = quoted(data.column_name)
        at_version = data.dataframe.filter(F.col("_version") == version)
        bad = at_version.filter(column.isNotNull() & ~passes(column))
        count = bad.count()
        if count:
            findings[f"{data.column_name}: {label}"] = count
        return count == 0

    return pa.Check(
        check,
        name=VALIDATION,
        error=f"{VALIDATION}: {_validation_error(version, pattern)}",
        label=VALIDATION,
    )


def _canonical(value: Any, ftype: FieldType) -> Value:
    """A value as Arrow hands it to pandas, as the engine holds it (arrays as tuples)."""
    if value is None:
        return None
    return tuple(value) if ftype.is_array else value


def table_model(plan: MigrationPlan, tally: Tally) -> tuple[pa.DataFrameSchema, dict[str, str]]:
    """The table's pandera model, derived from the plan's current lens, for pandera's
    pyspark backend, its checks counted by `tally`; and the field column names (`f0`,
    ...) mapped to the field names."""
    return _model(plan, _SparkTableChecks(tally), pa, spark=True)


def table_model_in_driver(
    plan: MigrationPlan, checks: DriverTableChecks
) -> tuple[pandas_pa.DataFrameSchema, dict[str, str]]:
    """`table_model` for pandera's pandas backend, its counts made by `checks` over the
    rows the driver read (`read_in_driver`, types imposed there): the same checks, and
    the same findings, without a Spark job."""
    return _model(plan, checks, pandas_pa, spark=False)


def _model(
    plan: MigrationPlan, checks: TableChecks, backend: Any, *, spark: bool
) -> tuple[Any, dict[str, str]]:
    """The table model with pandera's `backend` (pyspark or pandas); `spark`: whether
    pandera checks the Spark types too (else the read imposed them)."""
    history = history_of(plan)
    latest = history.latest.seq if history.latest else 0
    alive = tuple(sorted(set(history.versions) - history.dead))

    def system(name: str, *more: Any) -> Any:
        # A NOT NULL column. Its nulls are counted with the other checks: pandera's own
        # nullability check is a Spark job per column, and every run ends with this check.
        dtype = SYSTEM_SPARK[name] if spark else None
        return backend.Column(dtype, nullable=True, checks=[checks.not_null(name), *more])

    def hex_column(name: str, check: str, description: str, pattern: str) -> Any:
        return system(name, checks.column(name, check, description, _not_matching(pattern)))

    columns: dict[str, Any] = {
        "_instance_id": hex_column(
            "_instance_id", "instance_id_is_hex", "instance ids are entry hashes in hex", HEX_ID
        ),
        "_author": hex_column(
            "_author", "author_is_hex", "authors are 32-byte keys in hex", HEX_AUTHOR
        ),
        "_version": system(
            "_version",
            checks.column(
                "_version",
                f"isin({list(alive)})",
                f"one of the versions alive: {list(alive)}",
                lambda c: And(Not(IsNull(c)), Not(In(c, alive))),
            ),
        ),
        "_seq": system(
            "_seq",
            checks.column(
                "_seq",
                "greater_than_or_equal_to(1)",
                ">= 1",
                lambda c: Gt(Lit(1, "decimal(20,0)"), c),
            ),
        ),
        "_entry": hex_column(
            "_entry",
            "entry_is_hex",
            "the entry that last wrote a row is named by its hash in hex",
            HEX_ID,
        ),
    }
    names = {}
    for column, name, ftype in field_columns(history.lens):
        spec = history.lens[name]
        names[column] = name
        columns[column] = backend.Column(
            jdbc_type(ftype) if spark else None,
            nullable=True,
            checks=_field_checks(column, spec, latest, checks),
        )
    unique = checks.unique("instance_id_unique", "one row per instance", ["_instance_id"])
    model = backend.DataFrameSchema(
        columns, checks=[unique], strict=True, name=f"table {plan.schema_id}"
    )
    return model, names


def _not_matching(pattern: str) -> Callable[[Expr], Expr]:
    return lambda c: Not(Matches(c, pattern))


def history_of(plan: MigrationPlan) -> SchemaHistory:
    return plan.catalog.histories[plan.schema_id]
