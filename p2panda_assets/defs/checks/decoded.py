"""`decoded_messages_match_their_model` (blocking): a pandera (pyspark) model of the
decoded Parquet; a bad decoded set stops before the plan and the table.

It reads the layers of its partition it has not passed yet (`store.checked_layers`):
layers never change once written, so a run checks what the runs since the last check
added, and the check's cost does not grow with the schema's messages. An entry repeated
across layers is what the index step rules out (appends continue each log after its
tip); within the layers read, the model checks it."""

import dagster as dg
import pandera.pyspark as pa
from dagster_pyspark import PySparkResource
from pandera.api.pyspark.types import PySparkDtypeInputTypes
from pyspark.sql import functions as F
from pyspark.sql import types as T

from p2panda_assets.defs.assets import decoded_messages, decoded_of
from p2panda_assets.defs.checks.tally import ROWS, Tally, check_result, summarize, validate
from p2panda_assets.defs.partitions import schemas
from p2panda_assets.defs.resources import PostgresResource
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
    `pipeline.columnar.layers.DECODED_SPARK` imposed: a file whose column cannot be read as that
    type fails the read): pandera checks the types and the column set; every value
    check is counted by `tally`."""
    author, log_id = parse_schema_id(schema_id)
    decimal = T.DecimalType(20, 0)
    own_log = (F.lower(F.hex("author")) == author.hex()) & (F.col("log_id") == log_id)

    def column(
        name: str, dtype: PySparkDtypeInputTypes, nullable: bool, *checks: pa.Check
    ) -> pa.Column:
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
                    f"author_is_{AUTHOR_SIZE}_bytes",
                    f"author keys have {AUTHOR_SIZE} bytes",
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
                    f"hash_is_{'_or_'.join(map(str, HASH_SIZES))}_bytes",
                    f"entry hashes have {' or '.join(map(str, HASH_SIZES))} bytes",
                    lambda c: ~F.length(c).isin(*HASH_SIZES),
                ),
            ),
            "batch": column("batch", T.LongType(), False, at_least("batch", 1)),
            "is_schema_log": column("is_schema_log", T.BooleanType(), False),
            "kind": column(
                "kind",
                T.StringType(),
                True,
                tally.column(
                    "kind",
                    f"isin({list(KINDS)})",
                    f"one of the {len(KINDS)} kinds",
                    lambda c: ~c.isin(*KINDS),
                ),
            ),
            "schema_version": column(
                "schema_version", decimal, True, at_least("schema_version", 1)
            ),
            "error": column("error", T.StringType(), True),
            "payload": column("payload", T.BinaryType(), True),
            "message": column("message", T.BinaryType(), True),
            "instance": column("instance", T.BinaryType(), True),
            "assignment": column(
                "assignment",
                T.StringType(),
                False,
                tally.column(
                    "assignment",
                    f"isin({list(ASSIGNMENTS)})",
                    "the log's own schema, assigned to it, pending, or a duplicate log",
                    lambda c: ~c.isin(*ASSIGNMENTS),
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
                "payload_or_message",
                "each message is kept as its payload, or decoded (`message`)",
                F.col("payload").isNull() & F.col("message").isNull(),
                ("payload", "message"),
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
    frame = decoded.frame(pyspark.spark_session)
    if frame is None:
        description = "no decoded messages" if not every.layers else "no layer new since"
        return dg.AssetCheckResult(passed=True, description=description, metadata=metadata)
    tally = Tally()
    with watched(pyspark.spark_session):  # its Spark jobs are bounded too
        lines = summarize(validate(frame, decoded_model(decoded.schema_id, tally)))
        metadata["rows"] = tally.count(frame, ROWS)
    if not lines:
        with postgres.connect() as conn:
            record_checked_layers(conn, every.schema_id, decoded.layers, every.layers)
    return check_result(lines, tally.findings, metadata)
