"""The chained layers of the columnar store: each index step writes the messages of
the logs it chained as one run, in `schema=` partitions by the schema of their log
(`write_chained`), and every later step reads the store's messages from the runs the
index committed (`read_layers`). The sums kept of each run (`keep_layer_sums`) let an
increment find its new messages without reading the older runs."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import psycopg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from p2panda_assets.pipeline.columnar.warehouse import (
    SCHEMA_DIR,
    Warehouse,
    children,
    remove,
    warehouse_root,
)
from p2panda_assets.pipeline.kernels.declared import UNEXPLAINED
from p2panda_assets.pipeline.spark.expressions import column
from p2panda_assets.protocol.message_index import indexed_message
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.tuning import tuning

# The chained messages as the columnar store keeps them (and the decoded check reads),
# besides their `schema=` partition. Layers are read with this schema: Spark then reads
# no Parquet footer to learn it (a job per directory read, ~30 ms each).
DECODED_SPARK = T.StructType(
    [
        T.StructField("author", T.BinaryType()),
        T.StructField("log_id", T.DecimalType(20, 0)),
        T.StructField("seq", T.DecimalType(20, 0)),
        T.StructField("hash", T.BinaryType()),
        T.StructField("batch", T.LongType()),
        T.StructField("is_schema_log", T.BooleanType()),
        T.StructField("kind", T.StringType()),
        T.StructField("schema_version", T.DecimalType(20, 0)),
        T.StructField("error", T.StringType()),
        T.StructField("payload", T.BinaryType()),  # NULL where `message` keeps it decoded
        T.StructField("message", T.BinaryType()),  # as verification decoded it (`packed`)
        T.StructField("instance", T.BinaryType()),
        T.StructField("assignment", T.StringType()),
    ]
)
DECODED_COLUMNS = tuple(DECODED_SPARK.fieldNames())
# A chained layer as Spark reads it with partition discovery: the `schema=` partition too.
LAYER_SPARK = T.StructType([*DECODED_SPARK.fields, T.StructField("schema", T.StringType())])
# A chained file's schema, from its path (`<layer>/schema=<id>/part-...`). Schema ids
# are hex digits, digits and dashes, which neither Spark's partition directories nor
# file URIs escape.
SCHEMA_OF_FILE = r"/schema=([^/]+)/[^/]+$"


def read_layers(spark: SparkSession, layers: list[str]) -> DataFrame | None:
    """Every message of the chained `layers` (their root directories) with its `schema`
    (None for none), in two scans at most, neither of which reads a Parquet footer to
    learn the columns (`LAYER_SPARK` is imposed).

    The first layer, which holds most of a large store's messages, is read with Spark's
    partition discovery: its `schema` costs nothing per row. Spark will not discover the
    `schema=` partitions under several roots (their directory structures conflict), so
    the later layers, one run's new messages each, are read in one scan that takes each
    file's schema from its path, a string function per row. A filter on the schema prunes
    the files of both scans. On a store of 1M messages the per-row path cost ~0.5 s a
    read, and a scan per layer ~20 ms a layer (bench/store_reads.py)."""
    if not layers:
        return None
    first = spark.read.schema(LAYER_SPARK).parquet(layers[0])
    if len(layers) == 1:
        return first
    later = spark.read.schema(DECODED_SPARK).option("recursiveFileLookup", "true")
    schema = F.regexp_extract("_metadata.file_path", SCHEMA_OF_FILE, 1)
    return first.unionByName(later.parquet(*layers[1:]).withColumn("schema", schema))


def read_schema_layers(spark: SparkSession, paths: list[str]) -> DataFrame | None:
    """The messages in one schema's directories of some layers (`decoded_paths`), in
    one scan (None for none)."""
    return spark.read.schema(DECODED_SPARK).parquet(*paths) if paths else None


def decoded_paths(spark: SparkSession, conn: psycopg.Connection, schema_id: str) -> list[str]:
    """Where the index steps wrote the schema's decoded messages (one directory per
    layer that holds some), from the progress row alone, without folding the catalog."""
    return list(decoded_layers(spark, conn, schema_id).values())


def decoded_layers(spark: SparkSession, conn: psycopg.Connection, schema_id: str) -> dict[str, str]:
    """`decoded_paths` by the name of their layer, oldest first."""
    return decoded_layers_of(spark, conn, [schema_id])[schema_id]


def decoded_layers_of(
    spark: SparkSession, conn: psycopg.Connection, schema_ids: Sequence[str]
) -> dict[str, dict[str, str]]:
    """`decoded_layers` of each of `schema_ids`, from one read of the progress row."""
    state = state_sql.pipeline_state(conn)
    warehouse = Warehouse(warehouse_root(), state.warehouse_token)
    return {
        schema_id: {
            run: warehouse.chained_schema(run, schema_id)
            for run in state.layers
            if schema_id in schemas_in_layer(spark, warehouse.chained(run))
        }
        for schema_id in schema_ids
    }


_SCHEMAS_IN_LAYER: dict[str, frozenset[str]] = {}
_SCHEMAS_IN_LAYER_KEPT = 4096  # layers remembered; past that, forgotten all at once


def schemas_in_layer(spark: SparkSession, path: str) -> frozenset[str]:
    """The schemas a committed layer at `path` holds messages of (its `schema=`
    directories), listed once a process: a committed layer never changes. A live run
    asks it of every schema it builds, twice, for each of up to ~12 layers; asking the
    file system each time (a JVM call per path) cost ~1 ms a path."""
    found = _SCHEMAS_IN_LAYER.get(path)
    if found is None:
        names = children(spark, path)
        found = frozenset(n.removeprefix(SCHEMA_DIR) for n in names if n.startswith(SCHEMA_DIR))
        if len(_SCHEMAS_IN_LAYER) >= _SCHEMAS_IN_LAYER_KEPT:
            _SCHEMAS_IN_LAYER.clear()
        _SCHEMAS_IN_LAYER[path] = found
    return found


def keep_chained(spark: SparkSession, warehouse: Warehouse, keep: set[str]) -> None:
    """Remove older chained runs. The previous layers stay: a build that started from
    them (and holds the pipeline lock while it reads) must still find their files."""
    base = warehouse.chained_root
    for name in children(spark, base):
        if name not in keep:
            remove(spark, f"{base}/{name}")


def keep_layer_sums(
    conn: psycopg.Connection, run: str, layers: Sequence[str], sums: state_sql.LayerSums
) -> None:
    """Keep the sums of the layer `run` for `layer_sums`, as the index step summed its
    logs (`log_plan.PlanTotals`). After the commit: a layer that was not committed is
    never read. `layers`: those now committed."""
    state_sql.keep_layer_digests(conn, {run: sums}, layers)


def with_decode_errors(messages: DataFrame, unexplained: int) -> DataFrame:
    """`error`: the reason code of each payload that does not decode as a message, as
    verification kept it (`message_error`), NULL for the others.

    Batches verified before it was kept read NULL there. Where they hold such payloads
    (`unexplained` of them, counted by the chain step), those few are decoded again in
    Python; otherwise the plan has no Python step and no second scan (a small store's
    index step ~0.2-0.4 s faster, 100k entries ~0.8 s, in a warm session)."""
    known = messages.withColumn("error", F.col("message_error"))
    if not unexplained:
        return known
    unknown = column(UNEXPLAINED)
    # A lambda: given the annotated function, PySpark warns that it cannot infer a UDF
    # type from its hints. The reason is the one verification now keeps.
    reason = F.udf(lambda payload: indexed_message(payload)[1], "string")
    return known.filter(~unknown).unionByName(
        messages.filter(unknown).withColumn("error", reason("payload"))
    )


def write_chained(
    accepted: DataFrame,
    planned: DataFrame,
    warehouse: Warehouse,
    unexplained: int,
    few: bool,
    broadcast: bool,
) -> str:
    """Every accepted entry, decoded, by the schema of its log's plan in `planned`
    (`schema=` partitions), as a new chained run of `warehouse`; its name.

    Each task writes the schemas it holds, a file each: a shuffle by schema first would
    make one file per schema, at the cost of moving every payload once more (113 MB in
    the bench's store of 1M); the reads of a layer do not care how many files it has.
    `few` entries (those the driver chained) are written by one task: a file per schema,
    not one per schema and task. The plans are `broadcast` to the tasks when they are
    few; else both sides are shuffled by log (a broadcast of 500,000 logs' plans killed
    the driver's 512m JVM)."""
    if few:
        accepted = accepted.coalesce(1)
    plans = planned.select("author", "log_id", "schema", "assignment", "is_schema_log")
    planned = accepted.join(F.broadcast(plans) if broadcast else plans, ["author", "log_id"])
    batch = F.col("batch").cast("long")
    decoded = with_decode_errors(planned.withColumn("batch", batch), unexplained)
    decoded = decoded.select(*DECODED_COLUMNS, "schema")
    return _write_layer(decoded, warehouse)


def merge_chained(spark: SparkSession, layers: Sequence[str], warehouse: Warehouse) -> str:
    """The messages of the chained `layers` (their roots) as one new chained run of
    `warehouse`, in the same `schema=` partitions (`layer_merge`); its name."""
    merged = read_layers(spark, list(layers))
    assert merged is not None  # layers is not empty
    return _write_layer(merged, warehouse)


def _write_layer(messages: DataFrame, warehouse: Warehouse) -> str:
    """`messages` as a new chained run of `warehouse`, in `schema=` partitions; its name.
    Row groups of `PipelineTuning.layer_group_rows` messages, so that a key's messages
    are found without reading all of a schema's (`key_index`): against one row group a
    file, a scan of every message of the 1M store costs the same (0.18 s)."""
    run = secrets.token_hex(6)
    rows = str(tuning().layer_group_rows)
    writer = messages.write.mode("overwrite").option("parquet.block.row.count.limit", rows)
    writer.partitionBy("schema").parquet(warehouse.chained(run))
    return run
