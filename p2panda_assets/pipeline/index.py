"""The index step: new entries verified (once, `verify`), every log chained by the
engine's chain rules (`chain_entries`), the schema logs folded (`Catalog`), the
instance logs assigned to schemas, and everything no schema build decides accounted for.

The chained messages of every log are written to the columnar store, by the schema
their log is assigned to: the reduction of any set of schemas reads its partitions from
there, and the decoded-messages check inspects them. Chaining itself never carries a
payload: it reads the entries and their message index, and the accepted entries go from
the verified batches to the chained layer directly (`_accepted`). Only small things
reach the driver: one summary per log; the schema logs are folded from the store
(`store.catalog.load_catalog`).

Most runs *append* (`_append_index`): only the new batches are read, each log they touch
is continued from its tip (`protocol.log.LogTip`), and the new messages are written as a
layer on top of the chained runs before. A run chains every log again, in one new run,
when appending would not give what chaining everything gives: a log that is not all
accepted (a gap, a fork) or whose schema is not settled gets a new entry, an entry lands
at or before its log's tip, or the decision on any log already indexed changes (a schema
arrived or was registered); and when that is cheaper: a small store, over half of it
new, or many layers.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, cast

import psycopg
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from p2panda_assets.engine.corpus import (
    Accounts,
    Catalog,
    ChainedLog,
    LogItem,
    LogKey,
    LogSummary,
    chain_entries,
    duplicate_log_accounts,
    log_summary,
    pending_accounts,
    schema_id_of,
)
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.errors import Pending, Reason
from p2panda_assets.failpoints import Failpoint, failpoint
from p2panda_assets.pipeline.copy import ACCOUNT_COLUMNS, Target, copy_frame
from p2panda_assets.pipeline.groups import (
    Row,
    arrow_schema,
    map_groups,
    map_groups_locally,
    python_rows,
)
from p2panda_assets.pipeline.increments import LogSums, entry_bits, sums_of_layer
from p2panda_assets.pipeline.local_frames import local_frame
from p2panda_assets.pipeline.packed import message_of
from p2panda_assets.pipeline.spark import sized_for_the_store
from p2panda_assets.pipeline.verify import (
    compact_verified,
    current_warehouse,
    read_new_verified,
    read_verified,
    verify_new_entries,
)
from p2panda_assets.pipeline.warehouse import (
    NO_SCHEMA,
    Warehouse,
    children,
    exists,
    remove,
    warehouse_root,
)
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.protocol.log import EntryLinks, LogTip, anchors_for
from p2panda_assets.protocol.message_index import indexed_message
from p2panda_assets.protocol.messages import (
    SchemaHashRef,
    SchemaVersionRef,
    VersionedSchema,
)
from p2panda_assets.statuses import Assignment as LogAssignment
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store.catalog import load_catalog, registered_schemas
from p2panda_assets.store.catalog import stored_catalog as stored_catalog  # re-exported

ACCOUNT_SPARK = "hash binary, schema_id string, state string, reason string, message string"
# What chaining reads of each verified entry: its links and what verification indexed of
# its message (`entry`: only in batches verified before the links were kept). Not the
# payload: the accepted entries' payloads go from the verified batches to the chained
# layer directly (`_accepted`), never through the chain step's shuffle and its Python
# workers.
CHAIN_INPUT = (
    "author",
    "log_id",
    "seq",
    "hash",
    "backlink",
    "lipmaa_link",
    "end_of_log",
    "entry",
    "kind",
    "schema_id",
    "schema_version",
    "schema_hash",
    "message_error",
    "batch",
)
# One row per log (`log`: its summary and where it now stands; `held`: how many of its
# entries the chain rules rejected or hold; `unexplained`: how many of its accepted ones
# do not decode and come from a batch that did not keep why; `batch_sums`: its accepted
# entries counted and summed by batch, `increments.LogSums` as JSON) and per entry
# rejected or held (`account`).
CHAIN_ARROW = arrow_schema(
    [
        ("row_type", pa.string()),
        ("author", pa.binary()),
        ("log_id", pa.decimal128(20, 0)),
        ("hash", pa.binary()),
        ("is_schema", pa.bool_()),
        ("ref_schema_id", pa.string()),
        ("ref_version", pa.decimal128(20, 0)),
        ("ref_hash", pa.binary()),
        ("tip_seq", pa.decimal128(20, 0)),
        ("tip_ended", pa.bool_()),
        ("held", pa.int64()),
        ("unexplained", pa.int64()),
        ("batch_sums", pa.string()),
        ("state", pa.string()),
        ("reason", pa.string()),
        ("message", pa.string()),
    ]
)
ACCOUNT_ARROW = arrow_schema(
    [
        ("hash", pa.binary()),
        ("schema_id", pa.string()),
        ("state", pa.string()),
        ("reason", pa.string()),
        ("message", pa.string()),
    ]
)
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


def ref_columns(ref: VersionedSchema | None) -> tuple[str | None, int | None, bytes | None]:
    """A schema reference as (schema id, version, hash) columns: one of the two forms."""
    if isinstance(ref, SchemaVersionRef):
        return ref.schema_id, ref.version, None
    if isinstance(ref, SchemaHashRef):
        return None, None, ref.hash
    return None, None, None


def ref_from_columns(
    schema_id: str | None, version: int | Decimal | None, schema_hash: bytes | None
) -> VersionedSchema | None:
    if schema_hash is not None:
        return SchemaHashRef(bytes(schema_hash))
    if schema_id is None or version is None:
        return None
    return SchemaVersionRef(*parse_schema_id(schema_id), int(version))


def account_rows(accounts: Accounts) -> list[dict[str, object]]:
    return [
        {
            "hash": h,
            "schema_id": a.schema_id,
            "state": str(a.state),
            "reason": None if a.reason is None else str(a.reason),
            "message": a.message,
        }
        for h, a in accounts.items()
    ]


def _chain_group(rows: list[Row]) -> list[Row]:
    """One log through the engine's chain rules (`chain_entries`, from its tip if the
    rows carry one): its summary and where it now stands, and the accounts of the
    entries the rules reject or hold. Every other entry of the group is accepted
    (`validate_log` gives each entry one verdict): `_accepted` takes them from the
    verified batches. The messages are not decoded again: verification indexed each one
    (kind and schema; no kind: it does not decode), which is all the summary needs."""
    # Column types from the verified frame: binary -> bytes, decimal(20,0) -> int.
    author, log_id = cast(bytes, rows[0]["author"]), cast(int, rows[0]["log_id"])
    tip = tip_of(rows[0])
    log = chain_entries(map(links_of, rows), tip)
    by_hash = {row["hash"]: row for row in rows}
    accepted = [by_hash[entry.hash] for entry in log.accepted]
    key = {"author": author, "log_id": log_id}
    summary = log_summary(
        (cast(str, row["kind"]), indexed_ref(row)) for row in accepted if row["kind"] is not None
    )
    ref_id, ref_version, ref_hash = ref_columns(summary.first_ref)
    out: list[Row] = [
        {
            "row_type": "log",
            **key,
            "is_schema": summary.is_schema,
            "ref_schema_id": ref_id,
            "ref_version": ref_version,
            "ref_hash": ref_hash,
            "tip_seq": log.accepted[-1].seq_num if log.accepted else tip.seq if tip else 0,
            "tip_ended": log.ended,
            "held": len(log.accounts),
            "unexplained": sum(
                row["kind"] is None and row["message_error"] is None for row in accepted
            ),
            "batch_sums": json.dumps(_batch_sums(accepted)),
        }
    ]
    out += [{"row_type": "account", **key, **row} for row in account_rows(log.accounts)]
    return out


def _batch_sums(accepted: list[Row]) -> list[tuple[int, int, int]]:
    """(batch, count, bits) of a log's accepted entries: its part of the sums of the
    layer they are written to (`increments.sums_of_layer`)."""
    sums: dict[int, tuple[int, int]] = {}
    for row in accepted:
        batch = cast(int, row["batch"])
        count, bits = sums.get(batch, (0, 0))
        sums[batch] = (count + 1, bits + entry_bits(cast(bytes, row["hash"])))
    return [(batch, count, bits) for batch, (count, bits) in sorted(sums.items())]


def links_of(row: Row) -> EntryLinks:
    """A verified entry's links, as verification kept them (or, in a batch verified
    before it kept them, decoded from the entry's bytes)."""
    if row["end_of_log"] is None:
        return EntryLinks.of(decode_entry(cast(bytes, row["entry"])))
    return EntryLinks(
        cast(int, row["seq"]),
        cast(bytes, row["hash"]),
        cast(bytes | None, row["backlink"]),
        cast(bytes | None, row["lipmaa_link"]),
        bool(row["end_of_log"]),
    )


def indexed_ref(row: Row) -> VersionedSchema | None:
    """The schema a message names, as verification indexed it."""
    return ref_from_columns(
        cast(str | None, row["schema_id"]),
        cast(int | None, row["schema_version"]),
        cast(bytes | None, row["schema_hash"]),
    )


def tip_of(row: Row) -> LogTip | None:
    """The tip a log is continued from, as `_tips_frame` joins it to its new entries."""
    if row.get("tip_seq") is None:
        return None
    hashes = json.loads(cast(str, row["tip_hashes"]))
    return LogTip(
        cast(int, row["tip_seq"]),
        bool(row["tip_ended"]),
        {int(seq): bytes.fromhex(h) for seq, h in hashes.items()},
    )


def items_log(rows: list[Row]) -> ChainedLog:
    """A log's chained rows back as the engine's `ChainedLog`, each message as
    verification decoded it (`packed.message_of`: a payload is decoded only where
    nothing was kept)."""
    # Column types as `map_groups` gives them: binary -> bytes, decimal(20,0) -> int.
    items: list[LogItem] = [
        (
            cast(int, row["seq"]),
            cast(bytes, row["hash"]),
            message_of(cast(bytes | None, row.get("message")), cast(bytes | None, row["payload"])),
        )
        for row in sorted(rows, key=lambda r: cast(int, r["seq"]))
    ]
    author, log_id = cast(bytes, rows[0]["author"]), cast(int, rows[0]["log_id"])
    return ChainedLog(author, log_id, items, {})


def summary_of(row: dict[str, Any]) -> tuple[LogKey, LogSummary]:
    """A collected `log` row back as (log key, summary)."""
    ref = ref_from_columns(row["ref_schema_id"], row["ref_version"], row["ref_hash"])
    return (bytes(row["author"]), int(row["log_id"])), LogSummary(bool(row["is_schema"]), ref)


@dataclass(frozen=True, slots=True)
class IndexResult:
    verified: int
    logs: int
    catalog: Catalog
    order: BuildOrder
    warehouse: Warehouse
    layers: tuple[str, ...]  # the chained runs holding the store's messages, oldest first
    fingerprint: str  # what the index was computed from
    up_to_date: bool = False  # nothing changed since the last index step
    batch: int = 0  # the newest verified batch the chained messages hold

    def decoded(self, spark: SparkSession) -> DataFrame | None:
        """Every chained message of the store (None before the first entry)."""
        return read_layers(spark, [self.warehouse.chained(run) for run in self.layers])


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
    state = state_sql.pipeline_state(conn)
    warehouse = Warehouse(warehouse_root(), state.warehouse_token)
    paths = [warehouse.chained_schema(run, schema_id) for run in state.layers]
    return [path for path in paths if exists(spark, path)]


def run_index(spark: SparkSession, conn: psycopg.Connection, url: str) -> IndexResult:
    """The whole index step, under an advisory lock (concurrent runs wait, then find
    nothing left to verify)."""
    state_sql.hold_pipeline_lock(conn)
    try:
        verified = verify_new_entries(spark, conn, url)
        good = state_sql.count_good_entries(conn)
        with sized_for_the_store(spark, good):
            return _run_index(spark, conn, url, verified, good)
    finally:
        state_sql.release_pipeline_lock(conn)


def last_index(spark: SparkSession, conn: psycopg.Connection) -> IndexResult:
    """The index as the last index step left it (no Spark job, nothing verified)."""
    state = state_sql.pipeline_state(conn)
    catalog = stored_catalog(conn)
    return IndexResult(
        0,
        state_sql.count_logs(conn),
        catalog,
        catalog.order(),
        current_warehouse(spark, conn),
        state.layers,
        state_sql.indexed_fingerprint(conn) or "",
        up_to_date=True,
        batch=state.batch,
    )


def _run_index(
    spark: SparkSession, conn: psycopg.Connection, url: str, verified: int, good: int
) -> IndexResult:
    warehouse = current_warehouse(spark, conn)
    fingerprint = state_sql.verified_fingerprint(conn)
    state = state_sql.pipeline_state(conn)
    if state_sql.indexed_fingerprint(conn) == fingerprint:
        return replace(last_index(spark, conn), verified=verified)
    if state.batch == 0:  # nothing verified yet: no log, no schema
        catalog = Catalog({}, {}, registered_schemas(conn))
        _commit(
            conn,
            url,
            spark,
            _empty_accounts(spark),
            warehouse,
            None,
            lambda stage: state_sql.commit_index(conn, [], stage, None, fingerprint, 0),
        )
        return IndexResult(verified, 0, catalog, catalog.order(), warehouse, (), fingerprint)
    appended = _append_index(spark, conn, url, warehouse, state, fingerprint, good)
    if appended is not None:
        _keep_chained(spark, warehouse, {*appended.layers, *state.layers})
        return replace(appended, verified=verified)
    state = compact_verified(spark, conn, warehouse, state)
    verified_ok = read_verified(spark, warehouse, state).filter(F.col("verdict") == "ok")
    held = _rows_to_chain(verified_ok) if good <= DRIVER_CHAIN_ENTRIES else None
    chained = _chain(verified_ok) if held is None else _chain_in_driver(spark, held, {})
    try:
        found = _chained_logs(chained)
        logs = found.logs
        summaries = {key: summary for key, (summary, _) in logs.items()}
        schema_keys = [key for key, summary in summaries.items() if summary.is_schema]
        catalog = load_catalog(conn, schema_keys, registered_schemas(conn))
        order = catalog.order()
        plan = _log_plan(summaries, catalog, order)
        accepted = _accepted(verified_ok, chained, found.held)
        run = _write_chained(spark, accepted, plan, warehouse, found.unexplained, held is not None)
        accounts = _index_accounts(spark, chained, accepted, catalog, plan)
        rows = _log_rows(logs, plan)
        _commit(
            conn,
            url,
            spark,
            accounts,
            warehouse,
            run,
            lambda stage: state_sql.commit_index(conn, rows, stage, run, fingerprint, state.batch),
        )
        _keep_layer_sums(conn, run, [run], plan, found.sums)
    finally:
        chained.unpersist()
    _keep_chained(spark, warehouse, {run, *state.layers})
    return IndexResult(
        verified, len(summaries), catalog, order, warehouse, (run,), fingerprint, batch=state.batch
    )


# Appending stops at this many layers: the next step chains everything into one run.
MAX_LAYERS = 12
# ... and when more than this share of the verified entries is new.
APPEND_SHARE = 0.5
# Below this many verified entries (`P2PANDA_APPEND_MIN_ENTRIES`) chaining everything is
# as fast as appending (bench/pipeline.py at 100k: 3.5 s either way), and every layer
# costs each later read of the chained messages a little (bench/latency.py on a small
# store: +1.3 s a run).
APPEND_MIN_ENV = "P2PANDA_APPEND_MIN_ENTRIES"
DEFAULT_APPEND_MIN_ENTRIES = 100_000


def append_min_entries() -> int:
    return int(os.environ.get(APPEND_MIN_ENV) or DEFAULT_APPEND_MIN_ENTRIES)


@dataclass(frozen=True, slots=True)
class StoredLog:
    """A logs row: what the last index step decided of the log, and where it stood."""

    summary: LogSummary
    decided: tuple[object, ...]  # schema, assignment, why_reason, why_message
    tip_seq: int | None  # None: indexed by a release that did not record it
    tip_ended: bool
    clean: bool


def _stored_logs(conn: psycopg.Connection) -> dict[LogKey, StoredLog]:
    logs: dict[LogKey, StoredLog] = {}
    for row in state_sql.stored_logs(conn):
        author, log_id, is_schema, ref_id, ref_version, ref_hash = row[:6]
        ref = ref_from_columns(
            cast(str | None, ref_id),
            cast(Decimal | None, ref_version),
            cast(bytes | None, ref_hash),
        )
        tip_seq, tip_ended, clean = row[10:13]
        logs[(bytes(cast(bytes, author)), int(cast(Decimal, log_id)))] = StoredLog(
            LogSummary(bool(is_schema), ref),
            tuple(row[6:10]),
            None if tip_seq is None else int(cast(Decimal, tip_seq)),
            bool(tip_ended),
            bool(clean),
        )
    return logs


def _append_index(
    spark: SparkSession,
    conn: psycopg.Connection,
    url: str,
    warehouse: Warehouse,
    state: state_sql.PipelineState,
    fingerprint: str,
    good: int,
) -> IndexResult | None:
    """Continue the logs the new batches touch, from their tips, and write their new
    messages as one more layer; None when only chaining every log again is exact (see
    the module's docstring), or cheaper. `good`: the verified entries of the store."""
    since = state_sql.indexed_batch(conn)
    if since is None or not state.layers or len(state.layers) >= MAX_LAYERS:
        return None
    if since < state.compacted_through:  # the new batches' own directories are gone
        return None
    if good < append_min_entries():
        return None
    new = read_new_verified(spark, warehouse, since, state.batch).filter(F.col("verdict") == "ok")
    held = _rows_to_chain(new)
    seqs: dict[LogKey, list[int]] = {}
    if held is not None:
        for entry in held:
            key = (cast(bytes, entry["author"]), cast(int, entry["log_id"]))
            seqs.setdefault(key, []).append(cast(int, entry["seq"]))
    else:
        by_log = new.groupBy("author", "log_id").agg(F.collect_list("seq").alias("seqs"))
        for row in by_log.collect():
            seqs[(bytes(row["author"]), int(row["log_id"]))] = [int(n) for n in row["seqs"]]
    new_entries = sum(map(len, seqs.values()))
    if new_entries > APPEND_SHARE * good:
        return None
    stored = _stored_logs(conn)
    tips = _tips(spark, conn, warehouse, state.layers, stored, seqs)
    if tips is None:
        return None
    if held is not None:
        chained = _chain_in_driver(spark, held, tips)
    else:
        tipped = new.join(F.broadcast(_tips_frame(spark, tips)), ["author", "log_id"], "left")
        chained = _chain(tipped, TIP_COLUMNS)
    try:
        found = _chained_logs(chained)
        logs: dict[LogKey, tuple[LogSummary, tuple[object, ...]]] = {}
        for key, (summary, tip) in found.logs.items():
            before = stored.get(key)
            logs[key] = (summary if before is None else before.summary, tip)
        summaries = {key: old.summary for key, old in stored.items()}
        summaries.update({key: summary for key, (summary, _) in logs.items()})
        schema_keys = [key for key, summary in summaries.items() if summary.is_schema]
        catalog = load_catalog(conn, schema_keys, registered_schemas(conn))
        order = catalog.order()
        plan = _log_plan(summaries, catalog, order)
        if any(_decided(plan[key]) != old.decided for key, old in stored.items()):
            return None
        run: str | None = None  # no layer without a message to hold (see `_grew`)
        layers = state.layers
        accepted = _accepted(new, chained, found.held)
        if _grew(logs, stored):
            run = _write_chained(
                spark, accepted, plan, warehouse, found.unexplained, held is not None
            )
            layers = (*layers, run)
        accounts = _index_accounts(spark, chained, accepted, catalog, plan)
        rows = _log_rows(logs, plan)
        _commit(
            conn,
            url,
            spark,
            accounts,
            warehouse,
            run,
            lambda stage: state_sql.commit_appended(
                conn, rows, stage, layers[1:], fingerprint, state.batch
            ),
        )
        if run is not None:
            _keep_layer_sums(conn, run, layers, plan, found.sums)
    finally:
        chained.unpersist()
    return IndexResult(
        0,
        len(summaries),
        catalog,
        order,
        warehouse,
        layers,
        fingerprint,
        batch=state.batch,
    )


def _grew(
    logs: dict[LogKey, tuple[LogSummary, tuple[object, ...]]], stored: dict[LogKey, StoredLog]
) -> bool:
    """Whether the chain accepted a new entry: some log's tip moved. A registration
    alone brings none, and so do new entries the chain rules all reject or hold: a
    layer of no message would have no file, and reading the layers would fail."""
    for key, (_, (tip_seq, _, _)) in logs.items():
        before = stored.get(key)
        if int(cast(Decimal, tip_seq)) > (before.tip_seq or 0 if before else 0):
            return True
    return False


def _tips(
    spark: SparkSession,
    conn: psycopg.Connection,
    warehouse: Warehouse,
    layers: tuple[str, ...],
    stored: dict[LogKey, StoredLog],
    seqs: dict[LogKey, list[int]],
) -> dict[LogKey, LogTip] | None:
    """The tip of every indexed log the new entries touch, with the hashes they may link
    to; None if one of them cannot be continued.

    Each of those hashes is an accepted entry's (the log is clean up to its tip), and
    the entry store keeps every entry: where it holds one entry at a position, that is
    the one (`store.pipeline_state.stored_hashes_at`, a probe of an index each). Only
    where it holds several (a forged or refused entry at the same seq) are the chained
    layers read for the accepted one: a scan of every message of the store, 1.2 s at
    1M entries."""
    needed: dict[LogKey, tuple[StoredLog, set[int]]] = {}
    for key, new_seqs in seqs.items():
        old = stored.get(key)
        if old is None:
            continue  # a new log: chained from its start
        if not (old.clean and old.tip_seq is not None and old.summary.settled):
            return None
        if min(new_seqs) <= old.tip_seq:
            return None
        needed[key] = (old, anchors_for(old.tip_seq, new_seqs))
    wanted = [(author, log_id, n) for (author, log_id), (_, ns) in needed.items() for n in ns]
    hashes: dict[LogKey, dict[int, bytes]] = {}
    unsure: list[state_sql.LogPosition] = []
    for (author, log_id, seq), found in state_sql.stored_hashes_at(conn, wanted).items():
        if len(found) == 1:
            hashes.setdefault((author, log_id), {})[seq] = found[0]
        else:
            unsure.append((author, log_id, seq))
    for (author, log_id, seq), entry_hash in _accepted_at(spark, warehouse, layers, unsure):
        hashes.setdefault((author, log_id), {})[seq] = entry_hash
    tips: dict[LogKey, LogTip] = {}
    for key, (old, anchored) in needed.items():
        found_hashes = hashes.get(key, {})
        if set(found_hashes) != anchored:
            return None  # the layers lack an accepted entry: chain everything again
        assert old.tip_seq is not None
        tips[key] = LogTip(old.tip_seq, old.tip_ended, found_hashes)
    return tips


def _accepted_at(
    spark: SparkSession,
    warehouse: Warehouse,
    layers: tuple[str, ...],
    positions: list[state_sql.LogPosition],
) -> list[tuple[state_sql.LogPosition, bytes]]:
    """The hash of the accepted entry at each of `positions` the chained layers hold."""
    if not positions:
        return []
    rows = [(author, Decimal(log_id), Decimal(seq)) for author, log_id, seq in positions]
    anchors = local_frame(spark, rows, "author binary, log_id decimal(20,0), seq decimal(20,0)")
    chained = read_layers(spark, [warehouse.chained(run) for run in layers])
    assert chained is not None  # layers is not empty
    found = chained.select("author", "log_id", "seq", "hash").join(
        F.broadcast(anchors), ["author", "log_id", "seq"], "left_semi"
    )
    return [
        ((bytes(row["author"]), int(row["log_id"]), int(row["seq"])), bytes(row["hash"]))
        for row in found.collect()
    ]


def _tips_frame(spark: SparkSession, tips: dict[LogKey, LogTip]) -> DataFrame:
    """One row per continued log: its tip, for `tip_of` in the chain step."""
    rows = []
    for (author, log_id), tip in tips.items():
        seq, ended, hashes = tip_columns(tip)
        rows.append((author, Decimal(log_id), Decimal(seq), ended, hashes))
    return local_frame(
        spark,
        rows,
        "author binary, log_id decimal(20,0), tip_seq decimal(20,0), tip_ended boolean,"
        " tip_hashes string",
    )


def log_of(row: Any) -> tuple[LogKey, LogSummary, tuple[object, ...]]:
    """A collected `log` row back as (log key, summary, (tip seq, ended, clean)): a log is
    clean when the chain rules held none of its entries."""
    key, summary = summary_of(row.asDict())
    return key, summary, (row["tip_seq"], row["tip_ended"], row["held"] == 0)


def _keep_chained(spark: SparkSession, warehouse: Warehouse, keep: set[str]) -> None:
    """Remove older chained runs. The previous layers stay: a build that started from
    them (and holds the pipeline lock while it reads) must still find their files."""
    base = warehouse.chained_root
    for name in children(spark, base):
        if name not in keep:
            remove(spark, f"{base}/{name}")


# The columns `_tips_frame` joins to a continued log's new entries.
TIP_COLUMNS = ("tip_seq", "tip_ended", "tip_hashes")


def tip_columns(tip: LogTip) -> tuple[int, bool, str]:
    """A tip as the `TIP_COLUMNS` give it to `tip_of`."""
    return tip.seq, tip.ended, json.dumps({str(seq): h.hex() for seq, h in tip.hashes.items()})


def _chain(verified: DataFrame, extra: tuple[str, ...] = ()) -> DataFrame:
    """Every log of these verified entries through the chain rules (`_chain_group`),
    persisted on disk, not in the JVM's heap: a row per log and per entry held, read
    three times."""
    narrow = verified.select(*CHAIN_INPUT, *extra)
    chained = map_groups(narrow, ("author", "log_id"), ("seq",), _chain_group, CHAIN_ARROW)
    return chained.persist(StorageLevel.DISK_ONLY)


# Up to this many entries to chain, the driver chains them (`_chain_in_driver`).
DRIVER_CHAIN_ENTRIES = 20_000


def _rows_to_chain(verified: DataFrame) -> list[Row] | None:
    """What `_chain` reads of `verified`, in the driver, if it is at most
    `DRIVER_CHAIN_ENTRIES` entries (one Spark job); None if more."""
    table = verified.select(*CHAIN_INPUT).limit(DRIVER_CHAIN_ENTRIES + 1).toArrow()
    if table.num_rows > DRIVER_CHAIN_ENTRIES:
        return None
    return [row for batch in table.to_batches() for row in python_rows(batch)]


def _chain_in_driver(spark: SparkSession, rows: list[Row], tips: dict[LogKey, LogTip]) -> DataFrame:
    """`_chain` of these entries (`_rows_to_chain`), each log continued from its tip in
    `tips`, by the same `_chain_group`, in the driver: the shuffle by log and the Python
    stage of `map_groups` cost more than the work for a few entries (the sensors' runs,
    an increment's index step). A frame of the rows it holds, as `_chain`'s."""
    for row in rows:
        tip = tips.get((cast(bytes, row["author"]), cast(int, row["log_id"])))
        if tip is not None:
            row.update(zip(TIP_COLUMNS, tip_columns(tip), strict=True))
    table = map_groups_locally(rows, ("author", "log_id"), ("seq",), _chain_group, CHAIN_ARROW)
    return spark.createDataFrame(table, from_arrow_schema(CHAIN_ARROW))


@dataclass(frozen=True, slots=True)
class ChainedLogs:
    """Every chained log's summary and where it stands (tip seq, ended, clean); how many
    entries the chain rules rejected or hold, and how many accepted ones do not decode
    and come from batches that did not keep why (`with_decode_errors`), in all; and each
    log's accepted entries summed by batch."""

    logs: dict[LogKey, tuple[LogSummary, tuple[object, ...]]]
    held: int
    unexplained: int
    sums: dict[LogKey, LogSums]


def _chained_logs(chained: DataFrame) -> ChainedLogs:
    logs: dict[LogKey, tuple[LogSummary, tuple[object, ...]]] = {}
    sums: dict[LogKey, LogSums] = {}
    held = unexplained = 0
    for row in chained.filter(F.col("row_type") == "log").collect():
        key, summary, tip = log_of(row)
        logs[key] = (summary, tip)
        held += int(row["held"])
        unexplained += int(row["unexplained"])
        sums[key] = {b: (count, bits) for b, count, bits in json.loads(row["batch_sums"])}
    return ChainedLogs(logs, held, unexplained, sums)


def _keep_layer_sums(
    conn: psycopg.Connection,
    run: str,
    layers: Sequence[str],
    plan: LogPlan,
    sums: dict[LogKey, LogSums],
) -> None:
    """Keep the sums of the layer `run` for `layer_sums`, from the chain step's sums of
    each log (its messages go to its plan's schema partition). After the commit: a
    layer that was not committed is never read. `layers`: those now committed."""
    rows = sums_of_layer(
        (plan[key][0], plan[key][1] is LogAssignment.ASSIGNED, by_batch)
        for key, by_batch in sums.items()
    )
    state_sql.keep_layer_digests(conn, {run: rows}, layers)


# Up to this many rejected or held entries, `_accepted` broadcasts their hashes (~40
# bytes each in the join); above, both sides are shuffled.
BROADCAST_HELD = 200_000


def _accepted(verified: DataFrame, chained: DataFrame, held: int) -> DataFrame:
    """The entries of `verified` that the chain rules accepted, payloads included: all
    but those `chained` accounts for (rejected or held). A store whose logs are sound
    has none of those: its verified batches are read as they are."""
    if held == 0:
        return verified
    hashes = chained.filter(F.col("row_type") == "account").select("hash")
    return verified.join(
        F.broadcast(hashes) if held <= BROADCAST_HELD else hashes, "hash", "left_anti"
    )


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
    unknown = F.col("kind").isNull() & F.col("message_error").isNull()
    # A lambda: given the annotated function, PySpark warns that it cannot infer a UDF
    # type from its hints. The reason is the one verification now keeps.
    reason = F.udf(lambda payload: indexed_message(payload)[1], "string")
    return known.filter(~unknown).unionByName(
        messages.filter(unknown).withColumn("error", reason("payload"))
    )


# (schema the log's messages go with, or NO_SCHEMA; its assignment; why its entries wait:
# a pending log, or one assigned to a schema that is not built)
LogPlan = dict[LogKey, tuple[str, LogAssignment, Pending | None]]


def _log_plan(summaries: dict[LogKey, LogSummary], catalog: Catalog, order: BuildOrder) -> LogPlan:
    assignment = catalog.assign(summaries)
    built = set(order.order)
    plan: LogPlan = {}
    for key, summary in summaries.items():
        if summary.is_schema:
            plan[key] = (schema_id_of(key), LogAssignment.SCHEMA, None)
        elif key in assignment.schema_of:
            schema = assignment.schema_of[key]
            why = None if schema in built else catalog.not_built(schema, order)
            plan[key] = (schema, LogAssignment.ASSIGNED, why)
        elif key in assignment.duplicate:
            plan[key] = (assignment.duplicate[key], LogAssignment.DUPLICATE, None)
        else:
            plan[key] = (NO_SCHEMA, LogAssignment.PENDING, assignment.pending.get(key))
    return plan


def _decided(fate: tuple[str, LogAssignment, Pending | None]) -> tuple[object, ...]:
    """A log's plan as its logs row keeps it (schema, assignment, why reason, why message)."""
    schema, kind, why = fate
    return (
        None if schema == NO_SCHEMA else schema,
        kind.value,
        None if why is None else str(why.reason),
        None if why is None else why.message,
    )


def _plan_frame(spark: SparkSession, plan: LogPlan) -> DataFrame:
    rows = [
        (
            author,
            Decimal(log_id),
            schema,
            assignment.value,  # Spark takes a plain str, not a subclass
            schema_id_of((author, log_id)) == schema,
        )
        for (author, log_id), (schema, assignment, _) in plan.items()
    ]
    return local_frame(
        spark,
        rows,
        "author binary, log_id decimal(20,0), schema string, assignment string, "
        "is_schema_log boolean",
    )


def _write_chained(
    spark: SparkSession,
    accepted: DataFrame,
    plan: LogPlan,
    warehouse: Warehouse,
    unexplained: int,
    few: bool,
) -> str:
    """Every accepted entry, decoded, by the schema of its log (`schema=` partitions),
    as a new chained run of `warehouse`; its name.

    Each task writes the schemas it holds, a file each: a shuffle by schema first would
    make one file per schema, at the cost of moving every payload once more (113 MB in
    the bench's store of 1M); the reads of a layer do not care how many files it has.
    `few` entries (those the driver chained) are written by one task: a file per schema,
    not one per schema and task."""
    if few:
        accepted = accepted.coalesce(1)
    planned = accepted.join(F.broadcast(_plan_frame(spark, plan)), ["author", "log_id"])
    batch = F.col("batch").cast("long")
    decoded = with_decode_errors(planned.withColumn("batch", batch), unexplained)
    decoded = decoded.select(*DECODED_COLUMNS, "schema")
    run = secrets.token_hex(6)
    decoded.write.mode("overwrite").partitionBy("schema").parquet(warehouse.chained(run))
    return run


def _index_accounts(
    spark: SparkSession, chained: DataFrame, accepted: DataFrame, catalog: Catalog, plan: LogPlan
) -> DataFrame:
    """The accounts the index decides: chain rules, schema log entries, and the logs no
    schema build will reduce (their schema cannot be determined, is not built, or the
    author has a lower log for it)."""
    chain = chained.filter(F.col("row_type") == "account").select(
        "hash",
        F.lit(None).cast("string").alias("schema_id"),
        "state",
        "reason",
        "message",
        F.lit("chain").alias("origin"),
    )
    schema_accounts: Accounts = {}
    for schema_id in catalog.histories:
        schema_accounts.update(catalog.schema_accounts(schema_id))
    schema_rows = [(*r.values(), "schema") for r in account_rows(schema_accounts)]
    frames = [chain]
    if schema_rows:
        frames.append(local_frame(spark, schema_rows, ACCOUNT_SPARK + ", origin string"))
    pending: dict[LogKey, tuple[str, str | None, str, str]] = {}
    for key, (schema, kind, why) in plan.items():
        if kind is LogAssignment.DUPLICATE:
            pending[key] = (LogAssignment.DUPLICATE.value, schema, "", "")
        elif why is not None:
            named = None if schema == NO_SCHEMA else schema
            pending[key] = (LogAssignment.PENDING.value, named, str(why.reason), why.message)
    if pending:
        wanted = local_frame(
            spark,
            [(a, Decimal(i), *v) for (a, i), v in pending.items()],
            "author binary, log_id decimal(20,0), plan string, plan_schema string, "
            "why_reason string, why_message string",
        )
        items = accepted.select("author", "log_id", "seq", "hash", "payload", "message")
        planned = items.join(F.broadcast(wanted), ["author", "log_id"])
        accounts = map_groups(
            planned, ("author", "log_id"), ("seq",), _pending_group, ACCOUNT_ARROW
        )
        frames.append(accounts.withColumn("origin", F.lit("pending")))
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def _pending_group(rows: list[Row]) -> list[Row]:
    log = items_log(rows)
    first = rows[0]
    schema_id = cast(str | None, first["plan_schema"])
    if first["plan"] == LogAssignment.DUPLICATE:
        assert schema_id is not None
        accounts = duplicate_log_accounts(log, schema_id)
    else:
        why = Pending(Reason(str(first["why_reason"])), str(first["why_message"]))
        accounts = pending_accounts(log, why, schema_id)
    return account_rows(accounts)


def _empty_accounts(spark: SparkSession) -> DataFrame:
    return local_frame(spark, [], ACCOUNT_SPARK + ", origin string")


def log_rows(summaries: dict[LogKey, LogSummary], catalog: Catalog) -> list[tuple[object, ...]]:
    """The rows of the logs table for these summaries (where the logs stand not known:
    the next index step chains them all)."""
    unknown: tuple[object, ...] = (None, None, None)
    logs = {key: (summary, unknown) for key, summary in summaries.items()}
    return _log_rows(logs, _log_plan(summaries, catalog, catalog.order()))


def _log_rows(
    logs: dict[LogKey, tuple[LogSummary, tuple[object, ...]]], plan: LogPlan
) -> list[tuple[object, ...]]:
    """Logs rows (`state_sql.LOG_COLUMNS`) for these logs: (summary, (tip seq, ended,
    all accepted))."""
    rows: list[tuple[object, ...]] = []
    for key, (summary, tip) in logs.items():
        rows.append(
            (
                key[0],
                key[1],
                summary.is_schema,
                *ref_columns(summary.first_ref),
                *_decided(plan[key]),
                *tip,
            )
        )
    return rows


def _commit(
    conn: psycopg.Connection,
    url: str,
    spark: SparkSession,
    accounts: DataFrame,
    warehouse: Warehouse,
    run: str | None,
    settle: Callable[[state_sql.Stage], None],
) -> None:
    """Stage the index accounts, then `settle` them with the rest of the step in one
    transaction; on any failure, drop the stage and the chained run this step wrote."""
    stage = state_sql.stage_table(conn, "accounts", secrets.token_hex(6))
    try:
        copy_frame(accounts, url, Target.into(stage, (*ACCOUNT_COLUMNS, ("origin", "text"))))
        failpoint(Failpoint.INDEXED)
        settle(stage)
    except BaseException:
        state_sql.drop_tables(conn, [stage])
        if run is not None:
            remove(spark, warehouse.chained(run))
        raise
