"""`table_matches_the_current_lens` (blocking): a pandera model derived from the migration
plan's current lens, over the PostgreSQL table, plus the table's column types as
PostgreSQL declares them (Spark reads varchar and text alike).

In a run that built the table, it reads the rows written since the table last passed,
if it is the same relation (`check_scope`, `store.checked_tables`); otherwise every row."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pandas as pd
import pandera.pandas as pandas_pa
import pandera.pyspark as pa
import psycopg
import pyarrow as arrow
from dagster_pyspark import PySparkResource
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from p2panda_assets.defs.assets import (
    MigrationPlan,
    current_plan,
    materialized_table,
    registered_partition,
)
from p2panda_assets.defs.checks.tally import (
    ROWS,
    ArrowTally,
    Findings,
    SparkChecks,
    Tally,
    check_result,
    quoted,
    summarize,
    validate,
    validate_in_driver,
)
from p2panda_assets.defs.partitions import schemas
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.engine.lens import FieldSpec
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.engine.validation import Validation, compile_validation, validates
from p2panda_assets.engine.values import Value
from p2panda_assets.errors import Pending
from p2panda_assets.pipeline.build.columns import SPARK_TYPES, field_columns, pg_type
from p2panda_assets.pipeline.build.planning import why_pending
from p2panda_assets.pipeline.columnar.arrow_io import driver_path_entries
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
from p2panda_assets.pipeline.postgres.jdbc import read_query
from p2panda_assets.protocol.fieldtypes import VARCHAR_MAX_CHARS, BaseType, FieldType
from p2panda_assets.store.checked_tables import (
    CheckedTable,
    checked_table,
    forget_checked_table,
    record_checked_table,
    table_relation,
    written_after,
)
from p2panda_assets.store.columns import (
    declared_columns,
    format_type_spelling,
    renamed_rows,
    select_renamed,
    system_column_types,
)
from p2panda_assets.store.feed import built_through
from p2panda_assets.store.registry import shown_name_of, table_name_for

HEX_ID = r"^([0-9a-f]{68}|[0-9a-f]{132})$"  # an entry hash (instance id), as hex
HEX_AUTHOR = r"^[0-9a-f]{64}$"
SYSTEM_TYPES = system_column_types()  # column -> type, as `format_type` writes it


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
    history = _history(plan)
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
    after: int | None = None,
) -> DataFrame:
    """The table's rows through Spark's JDBC reader, each column `names[i]` read as
    `aliases[i]` (in SQL: Spark resolves names case-insensitively, so fields `a` and `A`
    must not reach it by name); only those written by entries ingested `after` a bound,
    if one is given (`store.checked_tables.written_after`)."""
    where = None if after is None else written_after(after)
    with postgres.connect() as conn:
        query = select_renamed(conn, table, names, aliases, where)
    return read_query(spark, postgres.jdbc(), query)


@dataclass(frozen=True, slots=True)
class Scope:
    """What a check of a table reads: every row (`after` None), or those written by
    entries ingested after `after`; and the table as it reads it (`now`: None if it has
    no bound yet), what a pass records."""

    after: int | None
    now: CheckedTable | None

    @property
    def described(self) -> str:
        if self.after is None:
            return "the whole table"
        return f"the rows written since it last passed (entries after ingest_seq {self.after})"


def check_scope(conn: psycopg.Connection, schema_id: str, table: str, built_here: bool) -> Scope:
    """The rows the check reads. In a run that built the table (`built_here`), if it is
    the relation that last passed, only the rows written since (`store.checked_tables`):
    a live run's increment adds a few rows to a table of any size, and reading every row
    each run cost 0.6-4.9 s on the bench's store of 1M. A check run on its own, from the
    UI, reads the whole table, as does the first check after a whole build or a failure."""
    relation = table_relation(conn, table)
    through = built_through(conn, [schema_id]).get(schema_id)
    now = None if relation is None or through is None else CheckedTable(relation, through)
    before = checked_table(conn, schema_id)
    if built_here and now is not None and before is not None and before.relation == relation:
        return Scope(before.through, now)
    return Scope(None, now)


def _built_here(context: dg.AssetCheckExecutionContext) -> bool:
    """Whether the check's run materialized the table's partition (the check then follows
    that step): the partition's latest materialization is this run's. (A run's asset
    selection cannot tell: Dagster leaves it empty for a run of every asset, as for a
    run of checks alone.)"""
    wanted = dg.AssetRecordsFilter(materialized_table.key, [context.partition_key])
    latest = context.instance.fetch_materializations(wanted, limit=1).records
    return bool(latest) and latest[0].run_id == context.run.run_id


def read_in_driver(
    conn: psycopg.Connection, plan: MigrationPlan, table: str, present: list[str], scope: Scope
) -> arrow.Table | None:
    """The rows the check reads (`scope`), as an Arrow table of the internal column names
    with the types the lens declares, if they are at most `driver_path_entries()` (a
    live run's few, or a small table); None: the check runs in Spark. A Spark job costs
    ~0.1-0.3 s however small its data: 0.70 s for a check of 4 rows, against 0.98 s for
    all 27,840 of the table (bench's store of 1M, one warm session)."""
    limit = driver_path_entries()
    if limit < 0:
        return None
    lens = _history(plan).lens
    internal = {name: (column, jdbc_type(ftype)) for column, name, ftype in field_columns(lens)}
    columns = [internal.get(name) or (name, SYSTEM_SPARK[name]) for name in present]
    where = None if scope.after is None else written_after(scope.after)
    aliases = [column for column, _ in columns]
    rows = renamed_rows(conn, table, present, aliases, where, limit)
    if rows is None:
        return None
    types = arrow.schema([(column, arrow_type(dtype)) for column, dtype in columns])
    return arrow.Table.from_pylist([dict(zip(aliases, row, strict=True)) for row in rows], types)


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
    present = [name for name in expected if name in declared]
    with postgres.connect() as conn:
        scope = check_scope(conn, schema_id, table, _built_here(context))
        # Few rows, as declared, are checked in the driver; a table whose columns are not
        # as the lens declares them in Spark, whose types pandera checks.
        rows = None if lines else read_in_driver(conn, migration_plan, table, present, scope)
    if rows is not None:
        counts = DriverTableChecks(rows)
        driver_model, names = table_model_in_driver(migration_plan, counts)
        lines += summarize(validate_in_driver(rows, driver_model), names)
        findings, checked, checked_in = counts.findings, rows.num_rows, "driver"
    else:
        tally = Tally()
        model, names = table_model(migration_plan, tally)
        internal = {name: column for column, name in names.items()}
        aliases = [internal.get(name, name) for name in present]
        frame = read_table(pyspark.spark_session, postgres, table, present, aliases, scope.after)
        lines += summarize(validate(frame, model), names)
        findings, checked, checked_in = tally.findings, tally.count(frame, ROWS), "spark"
    version = history.latest.seq if history.latest else None
    named = {_named(key, names): count for key, count in findings.items()}
    metadata = {
        **named_schema,
        "rows_checked": checked,
        "checked": scope.described,
        "checked_in": checked_in,
        "version": version,
    }
    with postgres.connect() as conn:
        if lines or scope.now is None:
            forget_checked_table(conn, schema_id)
        else:
            record_checked_table(conn, schema_id, scope.now)
    return check_result(lines, named, metadata)


def _named(finding: str, names: Mapping[str, str]) -> str:
    """`f0: check` as `<field name>: check`; a check of the whole frame as it is."""
    column, found, check = finding.partition(": ")
    return f"{names.get(column, column)}: {check}" if found else finding
