"""`decoded_messages_match_their_model` (blocking): a pandera model of the decoded
Parquet; a bad decoded set stops before the plan and the table. The model is written
once (`_model`) and checked with pandera's pyspark backend, or, for the few messages a
live run adds (at most `driver_path_entries()`), with its pandas backend over the same
files read by pyarrow: the same checks and findings, without a Spark job.

It reads the layers of its partition it has not passed yet (`store.checked_layers`):
layers never change once written, so a run checks what the runs since the last check
added, and the check's cost does not grow with the schema's messages. An entry repeated
across layers is what the index step rules out (appends continue each log after its
tip); within the layers read, the model checks it.

A run's table step may build other schemas beside its own (`assets.companions`: its
batch, and in a live run the tables that only grew). Their checks run in their own runs,
later; so this check also reads their new layers and records those that pass, and the
table step builds a schema only once all its layers have (`assets.layers_passed`). The
companions' new layers are read and validated together, one validation for all of them
(`passed_together`); only when they do not all pass is each checked alone, to tell which
failed."""

from collections.abc import Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any

import dagster as dg
import pandera.pandas as pandas_pa
import pandera.pyspark as pa
import psycopg
import pyarrow as arrow
from dagster_pyspark import PySparkResource
from pandera.api.pyspark.types import PySparkDtypeInputTypes
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from p2panda_assets.defs.assets import (
    Decoded,
    companions,
    current_plan,
    decoded_messages,
    decoded_of,
    decoded_sets,
)
from p2panda_assets.defs.checks.tally import (
    ROWS,
    ArrowTally,
    Checks,
    SparkChecks,
    Tally,
    check_result,
    summarize,
    validate,
    validate_in_driver,
)
from p2panda_assets.defs.partitions import schemas
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.pipeline.columnar.arrow_io import (
    DECODED_ARROW,
    LocalReadUnavailable,
    driver_path_entries,
    parquet_dataset,
    say_once,
)
from p2panda_assets.pipeline.kernels.declared import (
    And,
    Col,
    Eq,
    Expr,
    Gt,
    In,
    IsNull,
    Length,
    Lit,
    Not,
    Or,
)
from p2panda_assets.pipeline.spark.watchdog import watched
from p2panda_assets.protocol.hashing import HashAlgorithm
from p2panda_assets.protocol.ids import AUTHOR_SIZE, parse_schema_id
from p2panda_assets.protocol.messages import INSTANCE_MESSAGE_TYPES, SCHEMA_MESSAGE_TYPES
from p2panda_assets.statuses import Assignment
from p2panda_assets.store.checked_layers import (
    checked_layers,
    checked_layers_of,
    record_checked_layers,
    record_checked_layers_of,
)
from p2panda_assets.store.pipeline_state import pipeline_state

KINDS = tuple(t.kind for t in (*SCHEMA_MESSAGE_TYPES, *INSTANCE_MESSAGE_TYPES))
HASH_SIZES = tuple(sorted(len(a.value) + a.digest_size for a in HashAlgorithm))  # header + digest
ASSIGNMENTS = tuple(a.value for a in Assignment)


def decoded_model(schema_id: str, tally: Tally) -> pa.DataFrameSchema:
    """The decoded Parquet of one schema, as the reduction reads it (with the types of
    `pipeline.columnar.layers.DECODED_SPARK` imposed: a file whose column cannot be read
    as that type fails the read): pandera checks the types and the column set; every
    value check is counted by `tally`."""
    return _model([schema_id], SparkChecks(tally), pa, _SPARK_TYPES)


def decoded_model_in_driver(schema_id: str, tally: ArrowTally) -> pandas_pa.DataFrameSchema:
    """`decoded_model` for pandera's pandas backend, its counts made by `tally` over the
    Arrow table (read with the same types imposed: `arrow_io.DECODED_ARROW`): the same
    checks, and the same findings, without a Spark job."""
    return _model([schema_id], tally, pandas_pa, None)


def decoded_model_together(schema_ids: list[str], tally: ArrowTally) -> pandas_pa.DataFrameSchema:
    """`decoded_model_in_driver` of several schemas' messages read together, each row
    with its `schema` (`TOGETHER`): a row is held to its own schema's model, and each
    entry is unique within its schema, so the table passes exactly when every schema's
    messages pass their own model. One pandera validation in place of one a schema
    (a live run's companions: ~20 schemas, 6 ms each)."""
    return _model(schema_ids, tally, pandas_pa, None)


TOGETHER = "schema"  # the column of each row's schema, in a table of several schemas' messages


_DECIMAL = T.DecimalType(20, 0)
_SPARK_TYPES: dict[str, PySparkDtypeInputTypes] = {
    "binary": T.BinaryType(),
    "decimal": _DECIMAL,
    "long": T.LongType(),
    "boolean": T.BooleanType(),
    "string": T.StringType(),
}


def _outside(value: Expr, among: tuple[object, ...]) -> Expr:
    """A value, not null, that is none of `among` (a null is the not-null check's)."""
    return And(Not(IsNull(value)), Not(In(value, among)))


def _own_log(schema_id: str) -> Expr:
    """A row of the schema's own log (the schema log)."""
    author, log_id = parse_schema_id(schema_id)
    return And(
        Eq(Col("author"), Lit(author, "binary")), Eq(Col("log_id"), Lit(log_id, "decimal(20,0)"))
    )


def _own_logs(schema_ids: list[str]) -> Expr:
    """A row of its schema's own log: of the one schema, or (several, read together)
    of the schema its `TOGETHER` column names."""
    if len(schema_ids) == 1:
        return _own_log(schema_ids[0])
    each: list[Expr] = [And(Eq(Col(TOGETHER), Lit(s)), _own_log(s)) for s in schema_ids]
    return reduce(Or, each)


def _model(
    schema_ids: list[str],
    checks: Checks,
    backend: Any,
    spark_types: dict[str, PySparkDtypeInputTypes] | None,
) -> Any:
    """The decoded model, with pandera's `backend` (pyspark or pandas); `spark_types`:
    the dtypes pandera checks (None: the types the read imposed, not checked again).
    Of one schema's messages, or of several read together (`decoded_model_together`)."""
    together = len(schema_ids) > 1
    within = [TOGETHER] if together else []  # what uniqueness holds within

    def column(name: str, kind: str, nullable: bool, *more: Any) -> Any:
        # Nullability is a counted check too: pandera's own is one job per column.
        required = [] if nullable else [checks.not_null(name)]
        dtype = None if spark_types is None else spark_types[kind]
        return backend.Column(dtype, nullable=True, checks=[*required, *more])

    def at_least(name: str, low: int, decimal: bool) -> Any:
        below = Lit(low, "decimal(20,0)" if decimal else "long")
        return checks.column(
            name, f"greater_than_or_equal_to({low})", f">= {low}", lambda c: Gt(below, c)
        )

    schema_column = {TOGETHER: column(TOGETHER, "string", False)} if together else {}
    return backend.DataFrameSchema(
        {
            **schema_column,
            "author": column(
                "author",
                "binary",
                False,
                checks.column(
                    "author",
                    f"author_is_{AUTHOR_SIZE}_bytes",
                    f"author keys have {AUTHOR_SIZE} bytes",
                    lambda c: Not(Eq(Length(c), Lit(AUTHOR_SIZE, "long"))),
                ),
            ),
            "log_id": column("log_id", "decimal", False, at_least("log_id", 0, True)),
            "seq": column("seq", "decimal", False, at_least("seq", 1, True)),
            "hash": column(
                "hash",
                "binary",
                False,
                checks.column(
                    "hash",
                    f"hash_is_{'_or_'.join(map(str, HASH_SIZES))}_bytes",
                    f"entry hashes have {' or '.join(map(str, HASH_SIZES))} bytes",
                    lambda c: _outside(Length(c), HASH_SIZES),
                ),
            ),
            "batch": column("batch", "long", False, at_least("batch", 1, False)),
            "is_schema_log": column("is_schema_log", "boolean", False),
            "kind": column(
                "kind",
                "string",
                True,
                checks.column(
                    "kind",
                    f"isin({list(KINDS)})",
                    f"one of the {len(KINDS)} kinds",
                    lambda c: _outside(c, KINDS),
                ),
            ),
            "schema_version": column(
                "schema_version", "decimal", True, at_least("schema_version", 1, True)
            ),
            "error": column("error", "string", True),
            "payload": column("payload", "binary", True),
            "message": column("message", "binary", True),
            "instance": column("instance", "binary", True),
            "assignment": column(
                "assignment",
                "string",
                False,
                checks.column(
                    "assignment",
                    f"isin({list(ASSIGNMENTS)})",
                    "the log's own schema, assigned to it, pending, or a duplicate log",
                    lambda c: _outside(c, ASSIGNMENTS),
                ),
            ),
        },
        checks=[
            checks.rows(
                "kind_xor_error",
                "a message has a kind, or an error when its payload does not decode",
                Eq(IsNull(Col("kind")), IsNull(Col("error"))),
                ("kind", "error"),
            ),
            checks.rows(
                "payload_or_message",
                "each message is kept as its payload, or decoded (`message`)",
                And(IsNull(Col("payload")), IsNull(Col("message"))),
                ("payload", "message"),
            ),
            checks.rows(
                "schema_log_is_the_schemas",
                "is_schema_log exactly for the entries of the schema's own log",
                Not(Eq(Col("is_schema_log"), _own_logs(schema_ids))),
                ("is_schema_log", "author", "log_id", *within),
            ),
            checks.unique("hash_unique", "each entry appears once", [*within, "hash"]),
            checks.unique(
                "entry_unique",
                "one row per (author, log_id, seq)",
                [*within, "author", "log_id", "seq"],
            ),
        ],
        strict=True,
        name=f"decoded_messages {', '.join(schema_ids)}",
    )


@dg.asset_check(
    asset=decoded_messages,
    blocking=True,
    partitions_def=schemas,
    description="The decoded Parquet matches its pandera model: hashes of 34 or 66 bytes, "
    "seq >= 1, a kind of the six unless the payload did not decode (then an error), one "
    "row per entry. Reads the layers written since it last passed; also those of the "
    "schemas the run's table step builds beside this one.",
)
def decoded_messages_match_their_model(
    context: dg.AssetCheckExecutionContext, pyspark: PySparkResource, postgres: PostgresResource
) -> dg.AssetCheckResult:
    spark = pyspark.spark_session
    every = decoded_of(context.partition_key, pyspark, postgres)
    with postgres.connect() as conn:
        verdict = check_new_layers(spark, conn, every)
        assert verdict is not None  # Spark takes what the driver does not
        if verdict.lines:
            return check_result(verdict.lines, verdict.findings, verdict.metadata(every))
        ahead = check_companions(context, spark, conn, every.schema_id)
    metadata = verdict.metadata(every)
    if ahead:
        # Their own runs report their own checks; these say what this run's table step
        # may build beside its own table.
        metadata["companions"] = dg.MetadataValue.json(ahead)
    if verdict.description is not None:
        return dg.AssetCheckResult(passed=True, description=verdict.description, metadata=metadata)
    return check_result([], verdict.findings, metadata)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the check found in the layers of a schema it had not passed yet."""

    lines: list[str]  # the findings, as lines; none: passed
    findings: dict[str, Any]
    facts: dict[str, str | int]  # layers read, rows, where it ran
    description: str | None = None  # when no layer was read: why

    def metadata(self, decoded: Decoded) -> dict[str, Any]:
        return {"schema_name": decoded.name, **self.facts}


def check_new_layers(
    spark: SparkSession, conn: psycopg.Connection, every: Decoded, driver_only: bool = False
) -> Verdict | None:
    """The layers of `every` the check has not passed, checked against the model; if
    they pass, they are recorded as passed (`store.checked_layers`). None: `driver_only`
    and more messages than the driver checks, left unchecked."""
    decoded = every.without(checked_layers(conn, every.schema_id))
    facts: dict[str, str | int] = {
        "layers_read": len(decoded.layers),
        "layers_passed_before": len(every.layers) - len(decoded.layers),
    }
    if not decoded.paths:
        why = "no decoded messages" if not every.layers else "no layer new since"
        return Verdict([], {}, facts, why)
    table = _small_enough({decoded.schema_id: decoded.paths})
    if table is not None:  # what a live run adds: checked without a Spark job
        tally = ArrowTally(table)
        lines = summarize(
            validate_in_driver(table, decoded_model_in_driver(decoded.schema_id, tally))
        )
        findings, facts["rows"], facts["checked_in"] = tally.findings, table.num_rows, "driver"
    elif driver_only:
        return None
    else:
        frame = decoded.frame(spark)
        assert frame is not None  # it has paths
        spark_tally = Tally()
        with watched(spark):  # its Spark jobs are bounded too
            lines = summarize(validate(frame, decoded_model(decoded.schema_id, spark_tally)))
            facts["rows"] = spark_tally.count(frame, ROWS)
        findings, facts["checked_in"] = spark_tally.findings, "spark"
    if not lines:
        record_checked_layers(conn, every.schema_id, decoded.layers, every.layers)
    return Verdict(lines, findings, facts)


def check_companions(
    context: dg.AssetCheckExecutionContext,
    spark: SparkSession,
    conn: psycopg.Connection,
    schema_id: str,
) -> dict[str, str]:
    """Check the new layers of the schemas this run's table step builds beside its own
    (`assets.companions`), so that it builds each only from messages that passed
    (`assets.layers_passed`): its batch, whatever their size, and in a live run the
    tables that only grew, as far as the driver checks them (more is left to their own
    runs). Schema name -> what came of it. A failure is theirs: their own run's check
    reports it, and their table waits for it."""
    plan = current_plan(conn, schema_id)
    layers = pipeline_state(conn).layers
    others = companions(context.instance, context.run.tags, conn, plan, layers)
    sets = decoded_sets(spark, conn, [*others.batch, *others.grown])
    together = passed_together(conn, sets)
    outcomes = {sets[other].name: "passed" for other in together}
    for other, every in sets.items():
        if other in together:
            continue
        verdict = check_new_layers(spark, conn, every, driver_only=other in others.grown)
        if verdict is None:
            outcomes[every.name] = "left to its own run: more messages than the driver checks"
        elif verdict.lines:
            outcomes[every.name] = "failed: its own run's check says how"
            context.log.warning(f"{every.name}: its new decoded messages fail the model")
        else:
            outcomes[every.name] = verdict.description or "passed"
    return outcomes


def passed_together(conn: psycopg.Connection, sets: Mapping[str, Decoded]) -> list[str]:
    """The schemas of `sets` whose new layers passed, read and checked together in the
    driver (`decoded_model_together`), and are recorded as passed: all of those with
    new layers, or none if they do not all pass, or are more messages than the driver
    checks (then each is checked alone, and a failure is told apart)."""
    checked = checked_layers_of(conn, list(sets))
    new = {s: every.without(checked[s]) for s, every in sets.items()}
    new = {s: decoded for s, decoded in new.items() if decoded.paths}
    table = _small_enough({s: decoded.paths for s, decoded in new.items()}) if new else None
    if table is None:
        return []
    tally = ArrowTally(table)
    if summarize(validate_in_driver(table, decoded_model_together(list(new), tally))):
        return []
    record_checked_layers_of(conn, {s: (new[s].layers, sets[s].layers) for s in new})
    return list(new)


def _small_enough(paths: Mapping[str, list[str]]) -> arrow.Table | None:
    """The messages of `paths` (by schema) read by pyarrow, with the types Spark imposes
    (and, for several schemas, each row's `TOGETHER`), if they are at most
    `driver_path_entries()` (counted from the files' footers) and pyarrow can open the
    warehouse; None: the check runs in Spark. A Spark job costs ~0.1-0.3 s however
    small its data, and a live run adds a message or a few."""
    try:
        datasets = {
            schema_id: [parquet_dataset(path, DECODED_ARROW) for path in schema_paths]
            for schema_id, schema_paths in paths.items()
        }
    except LocalReadUnavailable as unavailable:
        say_once(str(unavailable))
        return None
    if sum(d.count_rows() for each in datasets.values() for d in each) > driver_path_entries():
        return None
    tables = []
    for schema_id, each in datasets.items():
        table = arrow.concat_tables([dataset.to_table() for dataset in each])
        if len(paths) > 1:
            table = table.append_column(TOGETHER, arrow.repeat(schema_id, table.num_rows))
        tables.append(table)
    return arrow.concat_tables(tables) if tables else None
