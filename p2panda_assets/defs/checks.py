"""Asset checks: what each partition's data must look like, whatever wrote it.

- `decoded_messages_match_their_model` (blocking): a pandera (pyspark) model of the decoded
  Parquet; a bad decoded set stops before the plan and the table.
- `table_matches_the_current_lens` (blocking): a pandera model derived from the migration
  plan's current lens, over the PostgreSQL table, plus the table's column types as
  PostgreSQL declares them (Spark reads varchar and text alike).
- `entries_are_accounted`: applied + superseded + pending + rejected = the stored entries
  of the schema's logs, each accounted exactly once (SPEC section 3, Accounting).

`pandera.pyspark` does not raise: its findings are read from `df.pandera.errors`. Field
columns are renamed `f0`, `f1`, ... in Spark (a field name is data: it may hold dots or
backticks) and named back in the reports.
"""

from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg
import pandas as pd
import pandera.pyspark as pa
import psycopg
from dagster_pyspark import PySparkResource
from pandera.config import ValidationDepth, config_context
from psycopg import sql
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from p2panda_assets.defs.assets import MigrationPlan, decoded_messages, materialized_table
from p2panda_assets.defs.partitions import schemas
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.engine.lens import FieldSpec
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.engine.validation import compile_validation, validates
from p2panda_assets.pipeline.columns import SPARK_TYPES, field_columns, pg_type
from p2panda_assets.pipeline.index import decoded_path
from p2panda_assets.pipeline.jdbc import read_query
from p2panda_assets.protocol.fieldtypes import BaseType, FieldType
from p2panda_assets.protocol.ids import checked_schema_id
from p2panda_assets.store.registry import shown_name_of, table_identifier, table_name_for

KINDS = ("schema-meta", "schema-migration", "schema-revert", "create", "update", "delete")
HASH_SIZES = (34, 66)  # YASMF: 2 + 32 bytes; YAMF: 2 + 64
AUTHOR_SIZE = 32
VARCHAR_LENGTH = 255
HEX_ID = r"^([0-9a-f]{68}|[0-9a-f]{132})$"  # an entry hash (instance id), as hex
HEX_AUTHOR = r"^[0-9a-f]{64}$"
MAX_REPORTED = 20

Findings = dict[str, int]  # check name -> failing rows, for the check's metadata


# --- pandera building blocks (column checks get the frame and the column name) ----------


def _quoted(name: str) -> Column:
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
        bad_rows = _rows_where(bad(_quoted(column)))
        return self._check(f"{column}: {name}", name, error, bad_rows, (column,))

    def not_null(self, column: str) -> pa.Check:
        return self.column(column, "not_nullable", "the column has no nulls", Column.isNull)

    def rows(self, name: str, error: str, bad: Column, columns: tuple[str, ...]) -> pa.Check:
        """A frame check: fails on the rows where `bad` (of `columns`) holds."""
        return self._check(name, name, error, _rows_where(bad), columns)

    def unique(self, name: str, error: str, columns: list[str]) -> pa.Check:
        """A frame check: fails when rows repeat the values of `columns`."""
        duplicates = F.count(F.lit(1)) - F.countDistinct(F.struct(*map(_quoted, columns)))
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


ROWS = "rows"  # Tally.count of every frame: its row count


def _rows_where(predicate: Column) -> Column:
    return F.count(F.when(predicate, 1))


def _elements(column: Column, is_array: bool, bad: Callable[[Column], Column]) -> Column:
    """`bad` of a scalar, or of any element of an array."""
    if not is_array:
        return column.isNotNull() & bad(column)
    return column.isNotNull() & F.exists(column, bad)


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


# --- decoded messages -----------------------------------------------------------------------


def decoded_model(schema_id: str, tally: Tally) -> pa.DataFrameSchema:
    """The decoded Parquet of one schema (`pipeline.decoded.DECODED_SPARK`): pandera
    checks the types and the column set; every value check is counted by `tally`."""
    author_hex, log_id = schema_id.rsplit("-", 1)
    decimal = T.DecimalType(20, 0)
    own_log = (F.lower(F.hex("author")) == author_hex) & (F.col("log_id") == int(log_id))

    def column(name: str, dtype: T.DataType, nullable: bool, *checks: pa.Check) -> pa.Column:
        # Nullability is a counted check too: pandera's own is one job per column.
        required = [] if nullable else [tally.not_null(name)]
        return pa.Column(dtype, nullable=True, checks=[*required, *checks])

    def at_least(name: str, low: int) -> pa.Check:
        return tally.column(
            name, f"greater_than_or_equal_to({low})", f">= {low}", lambda c: c < low
        )

    return pa.DataFrameSchema(
        {
            "author": column(
                "author",
                T.BinaryType(),
                False,
                tally.column(
                    "author",
                    "author_is_32_bytes",
                    "author keys have 32 bytes",
                    lambda c: F.length(c) != AUTHOR_SIZE,
                ),
            ),
            "log_id": column("log_id", decimal, False, at_least("log_id", 0)),
            "seq": column("seq", decimal, False, at_least("seq", 1)),
            "hash": column(
                "hash",
                T.BinaryType(),
                False,
                tally.column(
                    "hash",
                    "hash_is_34_or_66_bytes",
                    "entry hashes have 34 or 66 bytes",
                    lambda c: ~F.length(c).isin(*HASH_SIZES),
                ),
            ),
            "is_schema_log": column("is_schema_log", T.BooleanType(), False),
            "kind": column(
                "kind",
                T.StringType(),
                True,
                tally.column(
                    "kind",
                    f"isin({list(KINDS)})",
                    "one of the six kinds",
                    lambda c: ~c.isin(*KINDS),
                ),
            ),
            "schema_version": column(
                "schema_version", decimal, True, at_least("schema_version", 1)
            ),
            "error": column("error", T.StringType(), True),
            "payload": column("payload", T.BinaryType(), False),
            "instance": column("instance", T.BinaryType(), True),
            "assignment": column(
                "assignment",
                T.StringType(),
                False,
                tally.column(
                    "assignment",
                    "isin(['schema', 'assigned', 'duplicate', 'waiting'])",
                    "the log's own schema, assigned to it, or held back from it",
                    lambda c: ~c.isin("schema", "assigned", "duplicate", "waiting"),
                ),
            ),
        },
        checks=[
            tally.rows(
                "kind_xor_error",
                "a message has a kind, or an error when its payload does not decode",
                F.col("kind").isNull() == F.col("error").isNull(),
                ("kind", "error"),
            ),
            tally.rows(
                "schema_log_is_the_schemas",
                "is_schema_log exactly for the entries of the schema's own log",
                F.col("is_schema_log") != own_log,
                ("is_schema_log", "author", "log_id"),
            ),
            tally.unique("hash_unique", "each entry appears once", ["hash"]),
            tally.unique(
                "entry_unique", "one row per (author, log_id, seq)", ["author", "log_id", "seq"]
            ),
        ],
        strict=True,
        name=f"decoded_messages {schema_id}",
    )


@dg.asset_check(
    asset=decoded_messages,
    blocking=True,
    partitions_def=schemas,
    description="The decoded Parquet matches its pandera model: hashes of 34 or 66 bytes, "
    "seq >= 1, a kind of the six unless the payload did not decode (then an error), one "
    "row per entry.",
)
def decoded_messages_match_their_model(
    context: dg.AssetCheckExecutionContext, pyspark: PySparkResource, postgres: PostgresResource
) -> dg.AssetCheckResult:
    schema_id = checked_schema_id(context.partition_key)
    spark = pyspark.spark_session
    with postgres.connect() as conn:
        path = decoded_path(spark, conn, schema_id)
        name = shown_name_of(conn, schema_id) or schema_id
    if path is None:
        return dg.AssetCheckResult(
            passed=True, description="no decoded messages", metadata={"schema_name": name}
        )
    frame = spark.read.parquet(path)
    tally = Tally()
    lines = summarize(validate(frame, decoded_model(schema_id, tally)))
    metadata = {"schema_name": name, "rows": tally.count(frame, ROWS)}
    return check_result(lines, tally.findings, metadata)


# --- the materialized table -----------------------------------------------------------------


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
                "varchar_at_most_255",
                f"varchar values have at most {VARCHAR_LENGTH} characters",
                lambda c: _elements(c, is_array, lambda x: F.length(x) > VARCHAR_LENGTH),
            )
        )
    if spec.type.base is BaseType.RELATION:
        checks.append(
            tally.column(
                column,
                "relation_is_an_instance_id",
                "relation values are instance ids (entry hashes in hex)",
                lambda c: _elements(c, is_array, lambda x: ~x.rlike(HEX_ID)),
            )
        )
    if spec.validation is not None:
        checks.append(re2_check(spec, version, tally.findings))
    return checks


def re2_check(spec: FieldSpec, version: int, findings: Findings) -> pa.Check:
    """Values written at the current version pass the field's validation: RE2 search via
    the engine's `validates` (never Python's `re`: patterns are untrusted), per batch."""
    pattern, ftype = spec.validation, spec.type
    compile_validation(pattern)  # a bad pattern fails here, not in a worker

    @F.pandas_udf("boolean")
    def passes(values: pd.Series) -> pd.Series:
        validation = compile_validation(pattern)
        return values.map(lambda v: validates(_canonical(v, ftype), ftype, validation))

    def check(data: Any, label: str) -> bool:
        column = _quoted(data.column_name)
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


def _canonical(value: object, ftype: FieldType) -> object:
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
        "_version": pa.Column(T.LongType(), checks=[pa.Check.isin(alive)]),
        "_seq": pa.Column(T.DecimalType(20, 0), checks=[pa.Check.ge(1)]),
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
            jdbc_type(ftype), nullable=True, checks=_field_checks(column, spec, latest, tally)
        )
    model = pa.DataFrameSchema(
        columns, unique=["_instance_id"], strict=True, name=f"table {plan.schema_id}"
    )
    return model, names


def _hex_column(tally: Tally, column: str, name: str, description: str, pattern: str) -> pa.Column:
    """A text column whose every value must match `pattern` (hex of a fixed size)."""
    return pa.Column(
        T.StringType(),
        checks=[tally.column(column, name, description, lambda c: ~c.rlike(pattern))],
    )


def _history(plan: MigrationPlan) -> SchemaHistory:
    return plan.catalog.histories[plan.schema_id]


PG_TYPE_NAMES = {
    "varchar(255)": "character varying(255)",
    "double precision": "double precision",
    "timestamptz": "timestamp with time zone",
}
SYSTEM_TYPES = {
    "_instance_id": "text",
    "_author": "text",
    "_version": "bigint",
    "_seq": "numeric(20,0)",
    "_entry": "text",
}


def expected_pg_types(history: SchemaHistory) -> dict[str, str]:
    """Column -> type as PostgreSQL's `format_type` writes it (SPEC section 4, Registry)."""
    expected = dict(SYSTEM_TYPES)
    for _, name, ftype in field_columns(history.lens):
        base = pg_type(ftype.element)
        text = PG_TYPE_NAMES.get(base, base)
        expected[name] = text + "[]" if ftype.is_array else text
    return expected


COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_attribute a
WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def declared_columns(conn: psycopg.Connection, table: str) -> dict[str, tuple[str, bool]]:
    return {name: (ptype, notnull) for name, ptype, notnull in conn.execute(COLUMNS, (table,))}


def declaration_problems(
    declared: Mapping[str, tuple[str, bool]], expected: Mapping[str, str]
) -> list[str]:
    """Columns missing, extra, of another type, or nullable where SPEC says not."""
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
    spark, postgres: PostgresResource, table: str, names: list[str], aliases: list[str]
) -> DataFrame:
    """The table's rows through Spark's JDBC reader, each column `names[i]` read as
    `aliases[i]` (in SQL: Spark resolves names case-insensitively, so fields `a` and `A`
    must not reach it by name)."""
    with postgres.connect() as conn:
        selected = sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(sql.Identifier(name), sql.Identifier(alias))
            for name, alias in zip(names, aliases, strict=True)
        )
        query = (
            sql.SQL("SELECT {} FROM {}").format(selected, table_identifier(table)).as_string(conn)
        )
    return read_query(spark, postgres.jdbc(), query)


@dg.asset_check(
    asset=materialized_table,
    blocking=True,
    partitions_def=schemas,
    additional_ins={"migration_plan": dg.AssetIn("migration_plan")},
    description="The table matches the model derived from the current lens: column types "
    "per SPEC, system columns set, varchar at most 255 characters, relation values "
    "instance ids, and values written at the current version pass their RE2 validation.",
)
def table_matches_the_current_lens(
    context: dg.AssetCheckExecutionContext,
    migration_plan: MigrationPlan,
    pyspark: PySparkResource,
    postgres: PostgresResource,
) -> dg.AssetCheckResult:
    schema_id = checked_schema_id(context.partition_key)
    history = _history(migration_plan)
    table = table_name_for(schema_id)
    with postgres.connect() as conn:
        declared = declared_columns(conn, table)
        name = shown_name_of(conn, schema_id) or schema_id
    named_schema = {"schema_name": name}
    if not history.lens:
        return dg.AssetCheckResult(
            passed=True, description="no fields left: no table (dropped)", metadata=named_schema
        )
    order = migration_plan.order
    if schema_id not in order.order and not declared:
        why = migration_plan.catalog.not_built(schema_id, order)
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"no table yet: the schema waits: {why.reason}: {why.message}",
            metadata={**named_schema, "waiting": f"{why.reason}: {why.message}"},
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
    """`f0: check` as `<field name>: check`."""
    column, _, check = finding.partition(": ")
    return f"{names.get(column, column)}: {check}"


# --- accounting -----------------------------------------------------------------------------


ACCOUNTING = """
WITH logs AS (
    SELECT author, log_id FROM p2panda.logs WHERE schema_id = %(s)s
), stored AS (
    SELECT e.hash, e.ingest_seq <= coalesce(
        (SELECT verified_through FROM p2panda.pipeline_state), 0) AS verified
    FROM p2panda.entries e
    JOIN logs l ON l.author = e.author AND l.log_id = e.log_id
)
SELECT
    (SELECT count(*) FROM stored WHERE verified),
    (SELECT count(*) FROM stored WHERE NOT verified),
    (SELECT count(*) FROM stored s WHERE s.verified
        AND NOT EXISTS (SELECT 1 FROM p2panda.accounts a WHERE a.hash = s.hash)),
    (SELECT count(*) FROM stored s JOIN p2panda.accounts a ON a.hash = s.hash
        WHERE a.schema_id IS DISTINCT FROM %(s)s),
    (SELECT count(*) FROM p2panda.accounts a WHERE a.schema_id = %(s)s
        AND NOT EXISTS (SELECT 1 FROM stored s WHERE s.hash = a.hash))
"""
STATES = ("applied", "superseded", "pending", "rejected")


def accounting(conn: psycopg.Connection, schema_id: str) -> tuple[list[str], dict[str, Any]]:
    """Problems with the schema's accounts, and the counts behind them.

    Stored entries of the schema are those of its logs (its own, and the instance logs the
    index assigned to it). Entries not verified yet (no verdict: ingested after the last
    index step) are not expected to be accounted and are only counted.
    """
    stored, unverified, missing, elsewhere, foreign = conn.execute(
        ACCOUNTING, {"s": schema_id}
    ).fetchone()
    by_state = dict.fromkeys(STATES, 0)
    by_reason: dict[str, int] = {}
    rows = conn.execute(
        "SELECT state, reason, count(*) FROM p2panda.accounts WHERE schema_id = %s"
        " GROUP BY state, reason",
        (schema_id,),
    ).fetchall()
    for state, reason, count in rows:
        by_state[state] += count
        if state == "rejected":
            by_reason[reason or "unknown"] = by_reason.get(reason or "unknown", 0) + count
    lines = []
    if sum(by_state.values()) != stored:
        lines.append(
            f"applied + superseded + pending + rejected = {sum(by_state.values())}, "
            f"but {stored} verified entries are stored for the schema"
        )
    if missing:
        lines.append(f"{missing} stored entries of the schema's logs have no account")
    if elsewhere:
        lines.append(f"{elsewhere} entries of the schema's logs are accounted to another schema")
    if foreign:
        lines.append(f"{foreign} accounts of the schema are for entries not on its logs")
    counts = {
        "stored": stored,
        "unverified": unverified,
        **by_state,
        "rejected_by_reason": dg.MetadataValue.json(dict(sorted(by_reason.items()))),
    }
    return lines, counts


@dg.asset_check(
    asset=materialized_table,
    partitions_def=schemas,
    description="Every stored entry of the schema's logs is accounted exactly once: applied "
    "+ superseded + pending + rejected = stored entries (SPEC section 3, Accounting).",
)
def entries_are_accounted(
    context: dg.AssetCheckExecutionContext, postgres: PostgresResource
) -> dg.AssetCheckResult:
    schema_id = checked_schema_id(context.partition_key)
    with postgres.connect() as conn:
        lines, counts = accounting(conn, schema_id)
        name = shown_name_of(conn, schema_id) or schema_id
    return dg.AssetCheckResult(
        passed=not lines,
        description="ok" if not lines else "; ".join(lines),
        metadata={"schema_name": name, **counts},
    )


checks = [decoded_messages_match_their_model, table_matches_the_current_lens, entries_are_accounted]
