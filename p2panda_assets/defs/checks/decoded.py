"""`decoded_messages_match_their_model` (blocking): a pandera model of the decoded
Parquet; a bad decoded set stops before the plan and the table. The model is written
once (`_model`) and checked with pandera's pyspark backend, or, for the few messages a
live run adds (at most `driver_path_entries()`), with its pandas backend over the same
files read by pyarrow: the same checks and findings, without a Spark job.

It reads the layers of its partition it has not passed yet (`store.checked_layers`):
layers never change once written, so a run checks what the runs since the last check
added, and the check's cost does not grow with the schema's messages. An entry repeated
across layers is what the index step rules out (appends continue each log after its
tip); within the layers read, the model checks it."""

from typing import Any

import dagster as dg
import pandera.pandas as pandas_pa
import pandera.pyspark as pa
import pyarrow as arrow
from dagster_pyspark import PySparkResource
from pandera.api.pyspark.types import PySparkDtypeInputTypes
from pyspark.sql import types as T

from p2panda_assets.defs.assets import decoded_messages, decoded_of
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
)
from p2panda_assets.pipeline.spark.watchdog import watched
from p2panda_assets.protocol.hashing import HashAlgorithm
from p2panda_assets.protocol.ids import AUTHOR_SIZE, parse_schema_id
from p2panda_assets.protocol.messages import INSTANCE_MESSAGE_TYPES, SCHEMA_MESSAGE_TYPES
from p2panda_assets.statuses import Assignment
from p2panda_assets.store.checked_layers import checked_layers, record_checked_layers

KINDS = tuple(t.kind for t in (*SCHEMA_MESSAGE_TYPES, *INSTANCE_MESSAGE_TYPES))
HASH_SIZES = tuple(sorted(len(a.value) + a.digest_size for a in HashAlgorithm))  # header + digest
ASSIGNMENTS = tuple(a.value for a in Assignment)


def decoded_model(schema_id: str, tally: Tally) -> pa.DataFrameSchema:
    """The decoded Parquet of one schema, as the reduction reads it (with the types of
    `pipeline.columnar.layers.DECODED_SPARK` imposed: a file whose column cannot be read
    as that type fails the read): pandera checks the types and the column set; every
    value check is counted by `tally`."""
    return _model(schema_id, SparkChecks(tally), pa, _SPARK_TYPES)


def decoded_model_in_driver(schema_id: str, tally: ArrowTally) -> pandas_pa.DataFrameSchema:
    """`decoded_model` for pandera's pandas backend, its counts made by `tally` over the
    Arrow table (read with the same types imposed: `arrow_io.DECODED_ARROW`): the same
    checks, and the same findings, without a Spark job."""
    return _model(schema_id, tally, pandas_pa, None)


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


def _model(
    schema_id: str,
    checks: Checks,
    backend: Any,
    spark_types: dict[str, PySparkDtypeInputTypes] | None,
) -> Any:
    """The decoded model, with pandera's `backend` (pyspark or pandas); `spark_types`:
    the dtypes pandera checks (None: the types the read imposed, not checked again)."""
    author, log_id = parse_schema_id(schema_id)

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

    own_log = And(
        Eq(Col("author"), Lit(author, "binary")), Eq(Col("log_id"), Lit(log_id, "decimal(20,0)"))
    )

    return backend.DataFrameSchema(
        {
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
                Not(Eq(Col("is_schema_log"), own_log)),
                ("is_schema_log", "author", "log_id"),
            ),
            checks.unique("hash_unique", "each entry appears once", ["hash"]),
            checks.unique(
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
    "row per entry. Reads the layers written since it last passed.",
)
def decoded_messages_match_their_model(
    context: dg.AssetCheckExecutionContext, pyspark: PySparkResource, postgres: PostgresResource
) -> dg.AssetCheckResult:
    every = decoded_of(context.partition_key, pyspark, postgres)
    with postgres.connect() as conn:
        passed_before = checked_layers(conn, every.schema_id)
    decoded = every.without(passed_before)
    metadata: dict[str, str | int] = {
        "schema_name": every.name,
        "layers_read": len(decoded.layers),
        "layers_passed_before": len(every.layers) - len(decoded.layers),
    }
    if not decoded.paths:
        description = "no decoded messages" if not every.layers else "no layer new since"
        return dg.AssetCheckResult(passed=True, description=description, metadata=metadata)
    table = _small_enough(decoded.paths)
    if table is not None:  # what a live run adds: checked without a Spark job
        tally = ArrowTally(table)
        lines = summarize(
            validate_in_driver(table, decoded_model_in_driver(decoded.schema_id, tally))
        )
        findings, metadata["rows"], metadata["checked_in"] = (
            tally.findings,
            table.num_rows,
            "driver",
        )
    else:
        frame = decoded.frame(pyspark.spark_session)
        assert frame is not None  # it has paths
        spark_tally = Tally()
        with watched(pyspark.spark_session):  # its Spark jobs are bounded too
            lines = summarize(validate(frame, decoded_model(decoded.schema_id, spark_tally)))
            metadata["rows"] = spark_tally.count(frame, ROWS)
        findings, metadata["checked_in"] = spark_tally.findings, "spark"
    if not lines:
        with postgres.connect() as conn:
            record_checked_layers(conn, every.schema_id, decoded.layers, every.layers)
    return check_result(lines, findings, metadata)


def _small_enough(paths: list[str]) -> arrow.Table | None:
    """The messages of `paths` read by pyarrow, with the types Spark imposes, if they are
    at most `driver_path_entries()` (counted from the files' footers) and pyarrow can
    open the warehouse; None: the check runs in Spark. A Spark job costs ~0.1-0.3 s
    however small its data, and a live run adds a message or a few."""
    try:
        datasets = [parquet_dataset(path, DECODED_ARROW) for path in paths]
    except LocalReadUnavailable as unavailable:
        say_once(str(unavailable))
        return None
    if sum(dataset.count_rows() for dataset in datasets) > driver_path_entries():
        return None
    return arrow.concat_tables([dataset.to_table() for dataset in datasets])
