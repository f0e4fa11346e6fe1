"""`table_matches_the_current_lens` (blocking): a pandera model derived from the migration
plan's current lens, over the PostgreSQL table, plus the table's column types as
PostgreSQL declares them (Spark reads varchar and text alike).

In a run that built the table, it reads the rows written since the table last passed,
if it is the same relation (`check_scope`, `store.checked_tables`); otherwise every row."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg
import psycopg
import pyarrow as arrow
from dagster_pyspark import PySparkResource
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from p2panda_assets.defs.assets import (
    MigrationPlan,
    current_plan,
    materialized_table,
    registered_partition,
)
from p2panda_assets.defs.checks.table_model import (
    SYSTEM_SPARK,
    DriverTableChecks,
    arrow_type,
    history_of,
    jdbc_type,
    table_model,
    table_model_in_driver,
)
from p2panda_assets.defs.checks.tally import (
    ROWS,
    Tally,
    check_result,
    summarize,
    validate,
    validate_in_driver,
)
from p2panda_assets.defs.partitions import schemas
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.errors import Pending
from p2panda_assets.pipeline.build.columns import field_columns, pg_type
from p2panda_assets.pipeline.build.planning import why_pending
from p2panda_assets.pipeline.columnar.arrow_io import driver_path_entries
from p2panda_assets.pipeline.postgres.jdbc import read_query
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

SYSTEM_TYPES = system_column_types()  # column -> type, as `format_type` writes it


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


def internal_columns(plan: MigrationPlan, present: list[str]) -> list[tuple[str, T.DataType]]:
    """The table's `present` columns as the check reads them: each one's internal name
    (`f0`, ... for a field; a system column's own) and its Spark type."""
    lens = history_of(plan).lens
    internal = {name: (column, jdbc_type(ftype)) for column, name, ftype in field_columns(lens)}
    return [internal.get(name) or (name, SYSTEM_SPARK[name]) for name in present]


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
    columns = internal_columns(plan, present)
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
    history = history_of(migration_plan)
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
        aliases = [column for column, _ in internal_columns(migration_plan, present)]
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
