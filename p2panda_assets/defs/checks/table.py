"""`table_matches_the_current_lens` (blocking): a pandera model derived from the migration
plan's current lens, over the PostgreSQL table, plus the table's column types as
PostgreSQL declares them (Spark reads varchar and text alike)."""

from collections.abc import Mapping
from typing import Any

import dagster as dg
import pandas as pd
import pandera.pyspark as pa
from dagster_pyspark import PySparkResource
from pandera.api.pyspark.types import PySparkDtypeInputTypes
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from p2panda_assets.defs.assets import (
    MigrationPlan,
    current_plan,
    materialized_table,
    registered_partition,
)
from p2panda_assets.defs.checks.tally import (
    ROWS,
    Findings,
    Tally,
    check_result,
    elements,
    quoted,
    summarize,
    validate,
)
from p2panda_assets.defs.partitions import schemas
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.engine.lens import FieldSpec
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.engine.validation import compile_validation, validates
from p2panda_assets.engine.values import Value
from p2panda_assets.errors import Pending
from p2panda_assets.pipeline.build.columns import SPARK_TYPES, field_columns, pg_type
from p2panda_assets.pipeline.build.planning import why_pending
from p2panda_assets.pipeline.postgres.jdbc import read_query
from p2panda_assets.protocol.fieldtypes import VARCHAR_MAX_CHARS, BaseType, FieldType
from p2panda_assets.store.columns import (
    declared_columns,
    format_type_spelling,
    select_renamed,
    system_column_types,
)
from p2panda_assets.store.registry import shown_name_of, table_name_for

HEX_ID = r"^([0-9a-f]{68}|[0-9a-f]{132})$"  # an entry hash (instance id), as hex
HEX_AUTHOR = r"^[0-9a-f]{64}$"
SYSTEM_TYPES = system_column_types()  # column -> type, as `format_type` writes it


def jdbc_type(ftype: FieldType) -> T.DataType:
    """The Spark type a field column reads back as through JDBC (arrays may hold nulls,
    as far as JDBC can tell)."""
    base = SPARK_TYPES[ftype.base]
    return T.ArrayType(base, containsNull=True) if ftype.is_array else base


def _field_checks(column: str, spec: FieldSpec, version: int, tally: Tally) -> list[pa.Check]:
    is_array = spec.type.is_array
    checks = []
    if is_array:
        checks.append(
            tally.column(
                column,
                "no_null_elements",
                "array elements are never null",
                lambda c: F.exists(c, lambda x: x.isNull()),
            )
        )
    if spec.type.base is BaseType.VARCHAR:
        checks.append(
            tally.column(
                column,
                f"varchar_at_most_{VARCHAR_MAX_CHARS}",
                f"varchar values have at most {VARCHAR_MAX_CHARS} characters",
                lambda c: elements(c, is_array, lambda x: F.length(x) > VARCHAR_MAX_CHARS),
            )
        )
    if spec.type.base is BaseType.RELATION:
        checks.append(
            tally.column(
                column,
                "relation_is_an_instance_id",
                "relation values are instance ids (entry hashes in hex)",
                lambda c: elements(c, is_array, lambda x: ~x.rlike(HEX_ID)),
            )
        )
    if spec.validation is not None:
        checks.append(re2_check(spec.validation, spec.type, version, tally.findings))
    return checks


def re2_check(pattern: str, ftype: FieldType, version: int, findings: Findings) -> pa.Check:
    """Values written at the current version pass the field's validation `pattern`: RE2
    search via the engine's `validates` (never Python's `re`: patterns are untrusted), per
    batch."""
    compile_validation(pattern)  # a bad pattern fails here, not in a worker

    # pyspark's stubs want a functionType; Spark 3 takes it from the type hints instead.
    @F.pandas_udf("boolean")  # type: ignore[call-overload]
    def passes(values: pd.Series) -> pd.Series:
        validation = compile_validation(pattern)
        return values.map(lambda v: validates(_canonical(v, ftype), ftype, validation))

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
        name="validation_at_current_version",
        error=f"validation_at_current_version: values written at version {version} pass"
        f" validation {pattern!r}",
        label="validation_at_current_version",
    )


def _canonical(value: Any, ftype: FieldType) -> Value:
    """A value as Arrow hands it to pandas, as the engine holds it (arrays as tuples)."""
    if value is None:
        return None
    return tuple(value) if ftype.is_array else value


def table_model(plan: MigrationPlan, tally: Tally) -> tuple[pa.DataFrameSchema, dict[str, str]]:
    """The table's pandera model, derived from the plan's current lens; and the field
    column names (`f0`, ...) mapped to the field names."""
    history = _history(plan)
    latest = history.latest.seq if history.latest else 0
    alive = sorted(set(history.versions) - history.dead)
    columns: dict[str, pa.Column] = {
        "_instance_id": _hex_column(
            tally,
            "_instance_id",
            "instance_id_is_hex",
            "instance ids are entry hashes in hex",
            HEX_ID,
        ),
        "_author": _hex_column(
            tally, "_author", "author_is_hex", "authors are 32-byte keys in hex", HEX_AUTHOR
        ),
        "_version": _system_column(
            tally,
            "_version",
            T.LongType(),
            tally.column(
                "_version",
                f"isin({alive})",
                f"one of the versions alive: {alive}",
                lambda c: ~c.isin(*alive),
            ),
        ),
        "_seq": _system_column(
            tally,
            "_seq",
            T.DecimalType(20, 0),
            tally.column("_seq", "greater_than_or_equal_to(1)", ">= 1", lambda c: c < 1),
        ),
        "_entry": _hex_column(
            tally,
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
        columns[column] = pa.Column(
            jdbc_type(ftype),  # type: ignore[arg-type]  # pandera's hint omits ArrayType
            nullable=True,
            checks=_field_checks(column, spec, latest, tally),
        )
    unique = tally.unique("instance_id_unique", "one row per instance", ["_instance_id"])
    model = pa.DataFrameSchema(
        columns, checks=[unique], strict=True, name=f"table {plan.schema_id}"
    )
    return model, names


def _hex_column(tally: Tally, column: str, name: str, description: str, pattern: str) -> pa.Column:
    """A text column whose every value must match `pattern` (hex of a fixed size)."""
    matches = tally.column(column, name, description, lambda c: ~c.rlike(pattern))
    return _system_column(tally, column, T.StringType(), matches)


def _system_column(
    tally: Tally, column: str, dtype: PySparkDtypeInputTypes, *checks: pa.Check
) -> pa.Column:
    """A NOT NULL column. Its nulls are counted by `tally` with the other checks: pandera's
    own nullability check is a Spark job per column, and every run ends with this check."""
    return pa.Column(dtype, nullable=True, checks=[tally.not_null(column), *checks])


def pending_result(why: Pending, has_table: bool, metadata: dict[str, Any]) -> dg.AssetCheckResult:
    """A pending schema (its log not in the store, or waiting for an upstream: the
    pipeline's `why_pending`) was not built: its partition is materialized as pending,
    and its table, if it has one, is the one an earlier run built, for an earlier lens.
    A warning that says so: a blocking failure would fail the run, and a schema that
    waits is not an error."""
    table = "its table is the one built before, not checked" if has_table else "no table yet"
    return dg.AssetCheckResult(
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"{table}: the schema is pending: {why.reason}: {why.message}",
        metadata={**metadata, "pending": f"{why.reason}: {why.message}"},
    )


def _history(plan: MigrationPlan) -> SchemaHistory:
    return plan.catalog.histories[plan.schema_id]


def expected_pg_types(history: SchemaHistory) -> dict[str, str]:
    """Column -> type as PostgreSQL's `format_type` writes it (rule T-TYPE, docs/semantics.md)."""
    expected = dict(SYSTEM_TYPES)
    for _, name, ftype in field_columns(history.lens):
        expected[name] = format_type_spelling(pg_type(ftype))
    return expected


def declaration_problems(
    declared: Mapping[str, tuple[str, bool]], expected: Mapping[str, str]
) -> list[str]:
    """Columns missing, extra, of another type, or nullable where rule T-ROW says not."""
    lines = []
    for name, ptype in expected.items():
        if name not in declared:
            lines.append(f"{name}: column missing (expected {ptype})")
        elif declared[name][0] != ptype:
            lines.append(f"{name}: declared {declared[name][0]}, expected {ptype}")
        elif name in SYSTEM_TYPES and not declared[name][1]:
            lines.append(f"{name}: declared nullable, expected NOT NULL")
    lines += [f"{name}: column not in the lens" for name in declared if name not in expected]
    return lines


def read_table(
    spark: SparkSession,
    postgres: PostgresResource,
    table: str,
    names: list[str],
    aliases: list[str],
) -> DataFrame:
    """The table's rows through Spark's JDBC reader, each column `names[i]` read as
    `aliases[i]` (in SQL: Spark resolves names case-insensitively, so fields `a` and `A`
    must not reach it by name)."""
    with postgres.connect() as conn:
        query = select_renamed(conn, table, names, aliases)
    return read_query(spark, postgres.jdbc(), query)


@dg.asset_check(
    asset=materialized_table,
    blocking=True,
    partitions_def=schemas,
    description="The table matches the model derived from the current lens: column types "
    "per rule T-TYPE, system columns set, varchar at most 255 characters, relation values "
    "instance ids, and values written at the current version pass their RE2 validation.",
)
def table_matches_the_current_lens(
    context: dg.AssetCheckExecutionContext,
    pyspark: PySparkResource,
    postgres: PostgresResource,
) -> dg.AssetCheckResult:
    """The current lens is the index's, as the table was built from it, not a plan
    stored by an earlier run: a run of the table alone (from the UI) stores no plan."""
    with postgres.connect() as conn:
        schema_id = registered_partition(conn, context.partition_key)
        table = table_name_for(schema_id)
        migration_plan = current_plan(conn, schema_id)
        declared = declared_columns(conn, table)
        name = shown_name_of(conn, schema_id) or schema_id
        why = why_pending(conn, migration_plan.catalog, migration_plan.order, schema_id, set())
    named_schema = {"schema_name": name}
    if why is not None:
        return pending_result(why, bool(declared), named_schema)
    history = _history(migration_plan)
    if not history.lens:
        return dg.AssetCheckResult(
            passed=True, description="no fields left: no table (dropped)", metadata=named_schema
        )
    if not declared:
        return dg.AssetCheckResult(
            passed=False, description=f"table {table} does not exist", metadata=named_schema
        )
    expected = expected_pg_types(history)
    lines = declaration_problems(declared, expected)
    tally = Tally()
    model, names = table_model(migration_plan, tally)
    present = [name for name in expected if name in declared]
    internal = {name: column for column, name in names.items()}
    aliases = [internal.get(name, name) for name in present]
    frame = read_table(pyspark.spark_session, postgres, table, present, aliases)
    lines += summarize(validate(frame, model), names)
    version = history.latest.seq if history.latest else None
    named = {_named(key, names): count for key, count in tally.findings.items()}
    metadata = {**named_schema, "rows": tally.count(frame, ROWS), "version": version}
    return check_result(lines, named, metadata)


def _named(finding: str, names: Mapping[str, str]) -> str:
    """`f0: check` as `<field name>: check`; a check of the whole frame as it is."""
    column, found, check = finding.partition(": ")
    return f"{names.get(column, column)}: {check}" if found else finding
