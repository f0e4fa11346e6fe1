"""Verification: each entry read from the entry store once and verified once, ever.

One Spark pass over the entries ingested since the last one (`ingest_seq` above the
progress row's mark): each task reads its range of them from PostgreSQL by binary COPY,
checks what ingest left to check (the signature: the engine's `check_ingested`) and
indexes the message of every entry that passes
(or keeps why its payload does not decode: chaining then decodes no payload again),
and keeps each instance message as decoded, instead of its payload (`pipeline.kernels.packed`:
the reduction decodes no payload again either).
The result is appended to the columnar store as one batch, where the later steps read
it. PostgreSQL gets only what is read there without Spark: the accounts of the rejected
entries, and the index rows of the schema messages (the sensors find reverts in them).
The index of every other message stays in the columnar store: at a million entries,
copying it into PostgreSQL too made the time from the end of verification to the start
of chaining 9.5 s instead of 2.3 s (bench/pipeline.py --spark-events). Nothing updates
`p2panda.entries`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import cast

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from p2panda_assets.engine.corpus import SCHEMA_KINDS, check_ingested
from p2panda_assets.failpoints import Failpoint, failpoint
from p2panda_assets.pipeline.columnar.arrow_io import LocalReadUnavailable, say_once, write_batch
from p2panda_assets.pipeline.columnar.warehouse import (
    Warehouse,
    children,
    exists,
    remove,
    warehouse_root,
)
from p2panda_assets.pipeline.kernels.batches import arrow_schema, record_batch
from p2panda_assets.pipeline.kernels.packed import pack_message
from p2panda_assets.pipeline.postgres.copy import ACCOUNT_COLUMNS
from p2panda_assets.pipeline.postgres.once_per_task import job_ledger, task_transaction
from p2panda_assets.pipeline.spark.frames import local_frame
from p2panda_assets.pipeline.spark.session import entries_per_partition
from p2panda_assets.protocol.message_index import decoded_and_indexed
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store.copying import Target, copy_rows
from p2panda_assets.store.new_entries import committed_bound, count_new_entries, read_new_entries
from p2panda_assets.store.staging import Stage, drop_tables, stage_table
from p2panda_assets.tuning import tuning

VERIFIED_ARROW = arrow_schema(
    [
        ("ingest_seq", pa.int64()),
        ("hash", pa.binary()),
        ("verdict", pa.string()),  # "ok" or a reason code
        ("verdict_message", pa.string()),
        ("author", pa.binary()),
        ("log_id", pa.decimal128(20, 0)),
        ("seq", pa.decimal128(20, 0)),
        ("backlink", pa.binary()),  # good entries only, from here on
        ("lipmaa_link", pa.binary()),
        ("end_of_log", pa.bool_()),
        ("payload", pa.binary()),  # NULL where `message` keeps it decoded
        ("kind", pa.string()),  # the message index: NULL where the payload does not decode
        ("schema_id", pa.string()),
        ("schema_version", pa.decimal128(20, 0)),
        ("schema_hash", pa.binary()),
        ("instance", pa.binary()),
        # Why the payload does not decode as a message (a reason code): NULL where it
        # does, and in batches verified before it was kept (`pipeline.index.step`).
        ("message_error", pa.string()),
        # The instance message as decoded here (`pipeline.kernels.packed`), instead of its
        # payload: NULL for the others, and in batches verified before it was kept.
        ("message", pa.binary()),
    ]
)
# The columns only good entries have (NULL for the others).
GOOD_COLUMNS = VERIFIED_ARROW.names[4:]
VERIFIED_SPARK = (
    "ingest_seq long, hash binary, verdict string, verdict_message string, author binary, "
    "log_id decimal(20,0), seq decimal(20,0), backlink binary, lipmaa_link binary, "
    "end_of_log boolean, payload binary, kind string, schema_id string, "
    "schema_version decimal(20,0), schema_hash binary, instance binary, message_error string, "
    "message binary"
)
# The verified batches as every later step reads them. Batches verified by earlier
# releases kept each good entry's bytes (`entry`) instead of its links: they read NULL
# links here, and chaining decodes those entries' links from their bytes. Batches
# written since read NULL `entry`: the links are at most 68 bytes of the entry's ~170.
VERIFIED_READ = VERIFIED_SPARK + ", entry binary, batch int"
INDEX_COLUMNS = (
    ("hash", "bytea"),
    ("kind", "text"),
    ("schema_id", "text"),
    ("schema_version", "numeric"),
    ("schema_hash", "bytea"),
    ("instance", "bytea"),
)


def verify_rows(rows: Iterable[Sequence[object]]) -> pa.RecordBatch:
    """Stored entries (columns `store.new_entries.NEW_ENTRY_COLUMNS`) as one batch of
    the columnar store: entries rejected at ingest keep their verdict; ingest decoded
    the others and matched their payloads, so their signatures are checked here (the
    engine's `check_ingested`); of each good one, the links the chain rules read are
    kept and its message is indexed."""
    verified = [_verified_row(*row) for row in rows]  # a tuple per row, then columns:
    columns = zip(*verified, strict=True) if verified else ([] for _ in VERIFIED_ARROW.names)
    return record_batch(
        dict(zip(VERIFIED_ARROW.names, map(list, columns), strict=True)), VERIFIED_ARROW
    )


_BLANK: tuple[object, ...] = (None,) * len(GOOD_COLUMNS)


def _verified_row(
    ingest_seq: object,
    stored_hash: object,
    raw: object,
    payload: object,
    verdict: object,
    verdict_message: object,
) -> tuple[object, ...]:
    """One stored entry as a row of `VERIFIED_ARROW` (`verify_rows`)."""
    if verdict is not None:
        return (ingest_seq, stored_hash, str(verdict), verdict_message, *_BLANK)
    checked = check_ingested(cast(bytes, raw), cast(bytes, stored_hash))
    if checked.rejection is not None:
        rejection = checked.rejection
        return (ingest_seq, stored_hash, str(rejection.reason), rejection.message, *_BLANK)
    entry = checked.entry
    assert entry is not None
    index, error, message = decoded_and_indexed(cast(bytes, payload))
    packed = None if message is None else pack_message(message)
    return (
        ingest_seq,
        stored_hash,
        "ok",
        None,
        entry.author,
        entry.log_id,
        entry.seq_num,
        entry.backlink,
        entry.lipmaa_link,
        entry.end_of_log,
        payload if packed is None else None,  # each message kept once
        *index,
        error,
        packed,
    )


def read_verified(
    spark: SparkSession, warehouse: Warehouse, state: state_sql.PipelineState
) -> DataFrame:
    """Every verified batch of the columnar store (`VERIFIED_READ`): those compacted
    (`compact_verified`) from their one directory, the later ones from theirs."""
    later = read_new_verified(spark, warehouse, state.compacted_through, state.batch)
    if state.compacted_run is None:
        return later
    compacted = spark.read.schema(VERIFIED_READ).parquet(warehouse.compacted(state.compacted_run))
    return compacted.unionByName(later)


def read_new_verified(
    spark: SparkSession, warehouse: Warehouse, since: int, through: int
) -> DataFrame:
    """The verified batches numbered in (since, through] (`VERIFIED_READ`): a batch is
    numbered one above the last committed one. Only their directories are read: a read
    of the entries' root lists every batch ever verified, one more for each run that
    verified something (a read and count of the newest of 2,000 batches took 3.7 s
    against 0.07 s from its directory alone; bench/store_reads.py)."""
    paths = [warehouse.batch(number) for number in range(since + 1, through + 1)]
    if not paths:
        return local_frame(spark, [], VERIFIED_READ)
    return spark.read.schema(VERIFIED_READ).option("basePath", warehouse.entries).parquet(*paths)


def current_warehouse(spark: SparkSession, conn: psycopg.Connection) -> Warehouse:
    """This database's columnar store; verification starts over if any of its verified
    batches is gone (the entry store still holds every entry; the steps that read the
    batches would fail on a missing directory)."""
    state = state_sql.pipeline_state(conn)
    warehouse = Warehouse(warehouse_root(), state.warehouse_token)
    if _batches_missing(spark, warehouse, state):
        state = state_sql.restart_verification(conn)
        warehouse = Warehouse(warehouse_root(), state.warehouse_token)
    return warehouse


def _batches_missing(
    spark: SparkSession, warehouse: Warehouse, state: state_sql.PipelineState
) -> bool:
    """Whether a directory the state names is not there: the compacted one, or one of
    the batches after it. One listing of the entries' directory, not one call per batch
    (a call per path costs a request each on object stores)."""
    if state.compacted_run is not None and not exists(
        spark, warehouse.compacted(state.compacted_run)
    ):
        return True
    if state.batch <= state.compacted_through:
        return False
    needed = range(state.compacted_through + 1, state.batch + 1)
    names = {warehouse.batch(number).rsplit("/", 1)[1] for number in needed}
    return not names <= set(children(spark, warehouse.entries))


def write_compacted(
    spark: SparkSession, warehouse: Warehouse, state: state_sql.PipelineState
) -> str:
    """Every verified batch `state` names, written as one new compacted directory (a
    file per core); its run name."""
    run = secrets.token_hex(6)
    verified = read_verified(spark, warehouse, state)
    verified.coalesce(spark.sparkContext.defaultParallelism).write.parquet(warehouse.compacted(run))
    return run


# A store with more verified batches than `compact_batches` (64) outside the compacted
# directory has them compacted by the next index step that reads every verified entry.
# Each directory costs such a read ~2 ms to list (bench/store_reads.py: 2,000 batches
# 3.7 s), and a sensor's run that verifies something adds one.


def compact_verified(
    spark: SparkSession,
    conn: psycopg.Connection,
    warehouse: Warehouse,
    state: state_sql.PipelineState,
) -> state_sql.PipelineState:
    """Rewrite the verified batches as one directory, each row with its batch number,
    once more than `PipelineTuning.compact_batches` are outside it; the state to read them by. The
    caller holds `PIPELINE_LOCK` (no other step reads or writes the batches).

    The new directory is written under a name of its own and only then committed; the
    directories it replaces are removed after the commit, and what a run that died
    between the two left is removed by the next compaction."""
    if state.batch - state.compacted_through <= tuning().compact_batches:
        return state
    for name in children(spark, warehouse.compacted_root):
        if name != state.compacted_run:  # left by a run that died before its commit
            remove(spark, warehouse.compacted(name))
    run = write_compacted(spark, warehouse, state)
    state_sql.commit_compaction(conn, run, state.batch)
    _remove_batches(spark, warehouse, lambda number: number <= state.batch)
    if state.compacted_run is not None:
        remove(spark, warehouse.compacted(state.compacted_run))
    return replace(state, compacted_run=run, compacted_through=state.batch)


ENTRIES_PER_TASK = 5_000  # more than this many new entries a core: two rounds of tasks


def verify_tasks(new: int, cores: int) -> int:
    """How many tasks verify `new` entries: a task per core, and a second round of them
    when there are more than `ENTRIES_PER_TASK` a core; more rounds only where a task
    would verify more than `entries_per_partition()` entries. Always whole rounds: a last
    round of fewer tasks than cores leaves a core idle while one task verifies alone (an
    increment's 10,000 entries were three tasks on two cores).

    A task streams its range, so its memory does not grow with it; its time does. Two
    tasks a core at any size made one task of a 100M-entry store run for half an hour:
    longer than the watchdog's stall timeout, and a lost executor's retry redid all of it."""
    cores = max(1, cores)
    rounds = min(2, -(-new // (ENTRIES_PER_TASK * cores)))
    bounded = -(-new // (entries_per_partition() * cores))
    return max(1, rounds, bounded) * cores


def verify_new_entries(spark: SparkSession, conn: psycopg.Connection, url: str) -> int:
    """Verify the entries stored since the last verification; how many there were.
    The caller holds `PIPELINE_LOCK`.

    A few new entries (the sensors' usual case) are verified in the driver: the same
    `verify_rows`, without the five Spark jobs a distributed pass costs, and the batch
    is written by pyarrow (`arrow_io.write_batch`), or by Spark where pyarrow cannot
    open the warehouse.
    """
    warehouse = current_warehouse(spark, conn)
    state = state_sql.pipeline_state(conn)
    _forget_unfinished_batches(spark, warehouse, state.batch)
    high = committed_bound(conn)
    new = count_new_entries(conn, state.verified_through, high)
    if not new:
        return 0
    batch = state.batch + 1
    path = warehouse.batch(batch)
    token = secrets.token_hex(6)
    index = stage_table(conn, "message_index", token)
    accounts = stage_table(conn, "accounts", token)
    try:
        bounds = (state.verified_through, high)
        if new <= tuning().verify_in_driver:
            _verify_in_driver(spark, conn, bounds, path, index, accounts)
        else:
            _verify_in_spark(spark, url, new, bounds, path, index, accounts)
        failpoint(Failpoint.VERIFIED)
        state_sql.commit_verification(conn, index, accounts, high, batch, new)
    except BaseException:
        drop_tables(conn, [index, accounts])
        remove(spark, path)
        raise
    return new


def split_range(low: int, high: int, parts: int) -> list[tuple[int, int]]:
    """(low, high] in `parts` consecutive (low, high] ranges of about equal width."""
    step = -(-(high - low) // parts)
    return [(a, min(a + step, high)) for a in range(low, high, step)]


def _verify_in_spark(
    spark: SparkSession,
    url: str,
    new: int,
    bounds: tuple[int, int],
    path: str,
    index: Stage,
    accounts: Stage,
) -> None:
    """Each Spark task reads its range of new entries by binary COPY and verifies them:
    they go from the entry store to the columnar store once, through one process. The
    task also writes what PostgreSQL gets of them (`copy_side_rows`), over a second
    connection: no later job reads the batch again for it."""
    ranges = split_range(*bounds, verify_tasks(new, spark.sparkContext.defaultParallelism))

    def read_and_verify(
        batches: Iterator[pa.RecordBatch], ledger: Stage
    ) -> Iterator[pa.RecordBatch]:
        with (
            psycopg.connect(url, autocommit=True) as conn,
            psycopg.connect(url, autocommit=True) as out,
            task_transaction(out, ledger) as attempt,  # the side rows once, whatever retries
        ):
            for batch in batches:
                for task in cast(list[int], batch.column("id").to_pylist()):
                    for rows in read_new_entries(conn, *ranges[task]):
                        verified = verify_rows(rows)
                        if attempt.recorded is None:
                            copy_side_rows(out, verified, index, accounts)
                        yield verified  # each attempt's: Spark keeps one attempt's files

    tasks = spark.range(0, len(ranges), numPartitions=len(ranges))
    with job_ledger(url) as ledger:
        verified = tasks.mapInArrow(partial(read_and_verify, ledger=ledger), VERIFIED_SPARK)
        verified.write.mode("overwrite").parquet(path)


def _verify_in_driver(
    spark: SparkSession,
    conn: psycopg.Connection,
    bounds: tuple[int, int],
    path: str,
    index: Stage,
    accounts: Stage,
) -> None:
    batches = [verify_rows(rows) for rows in read_new_entries(conn, *bounds)]
    for batch in batches:
        copy_side_rows(conn, batch, index, accounts)
    table = pa.Table.from_batches(batches, schema=VERIFIED_ARROW)
    try:  # by pyarrow, without a Spark job (the driver path); by Spark where it cannot
        write_batch(table, path)
    except LocalReadUnavailable as unavailable:
        say_once(str(unavailable))
        spark.createDataFrame(table).write.mode("overwrite").parquet(path)


SCHEMA_KINDS_ARROW = pa.array(sorted(SCHEMA_KINDS), pa.string())


def side_rows(batch: pa.RecordBatch) -> tuple[list[list[object]], list[list[object]]]:
    """What PostgreSQL gets of a verified batch: the index rows of its schema messages
    (`INDEX_COLUMNS`; the sensors find reverts in them) and the accounts of its
    rejected entries (`ACCOUNT_COLUMNS`)."""
    schema_messages = batch.filter(pc.is_in(batch.column("kind"), value_set=SCHEMA_KINDS_ARROW))
    index_rows = [[r[c] for c, _ in INDEX_COLUMNS] for r in schema_messages.to_pylist()]
    rejected = batch.filter(pc.not_equal(batch.column("verdict"), pa.scalar("ok")))
    account_rows: list[list[object]] = [
        [r["hash"], None, "rejected", r["verdict"], r["verdict_message"]]
        for r in rejected.to_pylist()
    ]
    return index_rows, account_rows


def copy_side_rows(
    conn: psycopg.Connection,
    batch: pa.RecordBatch,
    index: Stage,
    accounts: Stage,
) -> None:
    """COPY a verified batch's `side_rows` into the run's stages."""
    index_rows, account_rows = side_rows(batch)
    if index_rows:
        copy_rows(conn, Target.into(index, INDEX_COLUMNS), index_rows)
    if account_rows:
        copy_rows(conn, Target.into(accounts, ACCOUNT_COLUMNS), account_rows)


def _forget_unfinished_batches(spark: SparkSession, warehouse: Warehouse, batch: int) -> None:
    """Batches above the committed one were written by a run that died before its
    commit: their entries will be verified again, so their files must go."""
    _remove_batches(spark, warehouse, lambda number: number > batch)


def _remove_batches(
    spark: SparkSession, warehouse: Warehouse, which: Callable[[int], bool]
) -> None:
    """Remove the directories of the batches whose number is `which`."""
    for name in children(spark, warehouse.entries):
        number = name.removeprefix("batch=")
        if number.isdigit() and which(int(number)):
            remove(spark, f"{warehouse.entries}/{name}")
