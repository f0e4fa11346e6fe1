"""The data plane's SQL on the product's own tables: its progress row
(`p2panda.pipeline_state`, which only this module writes), the entries it has not
verified yet, and the transactions of one verification or index step, which write the
message index, accounts, logs and index state through their writers
(`message_index.py`, `accounts.py`, `logs.py`, `index_state.py`), and the sums of each
chained layer the build plan keeps (`layer_digests.py`). The pipeline asks these
functions; it writes no SQL on `p2panda.*` itself.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import psycopg
from psycopg import sql

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.store import accounts as accounts_sql
from p2panda_assets.store import index_state as index_state_sql
from p2panda_assets.store import layer_digests as layer_digests_sql
from p2panda_assets.store import logs as logs_sql
from p2panda_assets.store import message_index as message_index_sql
from p2panda_assets.store.ingest import INGEST_LOCK
from p2panda_assets.store.logs import LOG_COLUMNS
from p2panda_assets.store.pipeline_lock import record_holder, waiting_aloud
from p2panda_assets.tuning import ENVIRONMENT, tuning

PIPELINE_LOCK = 0x70326E64  # one verification / index step at a time, across processes


@dataclass(frozen=True, slots=True)
class Stage:
    """A staging table: `<schema>.stage_*`, created by one run for its own rows."""

    schema: str
    name: str

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)


@dataclass(frozen=True, slots=True)
class PipelineState:
    warehouse_token: str
    verified_through: int  # every entry with ingest_seq <= this has been verified
    batch: int  # the last batch appended to the columnar store
    chained_run: str | None  # the chained messages the reduction reads, written whole
    chained_deltas: tuple[str, ...] = ()  # ... and the layers appended on top of it since
    compacted_run: str | None = None  # the batches up to `compacted_through`, as one
    compacted_through: int = 0

    @property
    def layers(self) -> tuple[str, ...]:
        """Every chained run the reduction reads, oldest first."""
        return () if self.chained_run is None else (self.chained_run, *self.chained_deltas)


def pipeline_state(conn: psycopg.Connection) -> PipelineState:
    """The progress row, created (with a fresh warehouse token) on first use."""
    conn.execute(
        "INSERT INTO p2panda.pipeline_state (id, warehouse_token) VALUES (1, %s)"
        " ON CONFLICT (id) DO NOTHING",
        (secrets.token_hex(8),),
    )
    row = conn.execute(
        "SELECT warehouse_token, verified_through, batch, chained_run, chained_deltas,"
        " compacted_run, compacted_through FROM p2panda.pipeline_state WHERE id = 1"
    ).fetchone()
    assert row is not None
    return PipelineState(
        row[0], int(row[1]), int(row[2]), row[3], tuple(row[4]), row[5], int(row[6])
    )


def restart_verification(conn: psycopg.Connection) -> PipelineState:
    """The columnar store is gone (deleted, or a new root): verify everything again
    into a new directory. What verification derived is dropped with it."""
    with conn.transaction():
        message_index_sql.forget_message_index(conn)
        accounts_sql.forget_verification_rejections(conn)
        index_state_sql.forget_index_state(conn)
        conn.execute(
            "UPDATE p2panda.pipeline_state SET warehouse_token = %s, verified_through = 0,"
            " batch = 0, good_entries = 0, chained_run = NULL, chained_deltas = '{}',"
            " compacted_run = NULL, compacted_through = 0 WHERE id = 1",
            (secrets.token_hex(8),),
        )
    return pipeline_state(conn)


def committed_bound(conn: psycopg.Connection) -> int:
    """The highest ingest_seq below which every entry is committed: taken while no
    ingest transaction is open (they hold INGEST_LOCK shared until they commit)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (INGEST_LOCK,))
        row = conn.execute("SELECT coalesce(max(ingest_seq), 0) FROM p2panda.entries").fetchone()
    return int(row[0]) if row else 0


NEW_ENTRY_COLUMNS = (
    ("ingest_seq", "int8"),
    ("hash", "bytea"),
    ("entry", "bytea"),
    ("payload", "bytea"),
    ("verdict", "text"),
    ("verdict_message", "text"),
)
_NEW_ENTRIES = sql.SQL(
    "COPY (SELECT {} FROM p2panda.entries WHERE ingest_seq > {} AND ingest_seq <= {}"
    " ORDER BY ingest_seq) TO STDOUT (FORMAT BINARY)"
)


def read_new_entries(
    conn: psycopg.Connection, low: int, high: int, *, chunk: int = 5_000, chunk_bytes: int = 1 << 25
) -> Iterator[list[tuple[object, ...]]]:
    """The entries with `low < ingest_seq <= high` (columns `NEW_ENTRY_COLUMNS`), in
    lists of up to `chunk` rows or about `chunk_bytes` of entries and payloads (a
    payload may be 1 MiB). One binary COPY: bytea arrives as bytes, not as the hex text
    a query result (or Spark's JDBC reader) carries, which doubles its size and must be
    decoded again."""
    statement = _NEW_ENTRIES.format(
        sql.SQL(", ").join(sql.Identifier(c) for c, _ in NEW_ENTRY_COLUMNS),
        sql.Literal(int(low)),
        sql.Literal(int(high)),
    )
    rows: list[tuple[object, ...]] = []
    size = 0
    with conn.cursor().copy(statement) as copy:
        copy.set_types([t for _, t in NEW_ENTRY_COLUMNS])
        for row in copy.rows():
            rows.append(row)
            size += len(cast(bytes, row[2])) + len(cast(bytes | None, row[3]) or b"")
            if len(rows) == chunk or size >= chunk_bytes:
                yield rows
                rows, size = [], 0
    if rows:
        yield rows


def count_new_entries(conn: psycopg.Connection, low: int, high: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM p2panda.entries WHERE ingest_seq > %s AND ingest_seq <= %s",
        (low, high),
    ).fetchone()
    return int(row[0]) if row else 0


def stage_table(conn: psycopg.Connection, like: str, token: str) -> Stage:
    """An unlogged table shaped like `p2panda.<like>` for one run's rows, named so that a
    sweep finds exactly the staging tables (`p2panda.stage_*`)."""
    stage = Stage("p2panda", f"stage_{like}_{token}")
    conn.execute(
        sql.SQL("CREATE UNLOGGED TABLE {} (LIKE {} INCLUDING DEFAULTS)").format(
            stage.identifier, sql.Identifier("p2panda", like)
        )
    )
    return stage


def drop_tables(conn: psycopg.Connection, stages: Iterable[Stage | None]) -> None:
    """Drop a run's staging tables (those it got to create)."""
    for stage in stages:
        if stage is not None:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(stage.identifier))


def commit_verification(
    conn: psycopg.Connection,
    index: Stage,
    accounts: Stage,
    verified_through: int,
    batch: int,
    verified: int,
) -> None:
    """Append what one verification of `verified` entries found (the index of the
    schema messages, the accounts of the rejected entries) and move the progress row,
    in one transaction."""
    with conn.transaction():
        message_index_sql.add_staged_index(conn, index.identifier)
        accounts_sql.add_verification_rejections(conn, accounts.identifier)
        conn.execute(
            sql.SQL(
                "UPDATE p2panda.pipeline_state SET verified_through = %s, batch = %s,"
                " good_entries = good_entries + %s - (SELECT count(*) FROM {}) WHERE id = 1"
            ).format(accounts.identifier),
            (verified_through, batch, verified),
        )
        drop_tables(conn, [index, accounts])


def commit_compaction(conn: psycopg.Connection, run: str, through: int) -> None:
    """From now on the verified batches up to `through` are read from `run`."""
    conn.execute(
        "UPDATE p2panda.pipeline_state SET compacted_run = %s, compacted_through = %s WHERE id = 1",
        (run, through),
    )


def replace_logs(conn: psycopg.Connection, logs: Iterable[Sequence[object]]) -> None:
    """The logs table as the index step classified the logs (rows of `LOG_COLUMNS`)."""
    with conn.transaction():
        logs_sql.forget_all_logs(conn)
        logs_sql.copy_logs(conn, logs)


def stored_logs(conn: psycopg.Connection) -> list[tuple[object, ...]]:
    """Every logs row (`LOG_COLUMNS`)."""
    statement = sql.SQL("SELECT {} FROM p2panda.logs").format(
        sql.SQL(", ").join(map(sql.Identifier, LOG_COLUMNS))
    )
    return conn.execute(statement).fetchall()


LogPosition = tuple[bytes, int, int]  # author, log id, seq num


def stored_hashes_at(
    conn: psycopg.Connection, positions: Sequence[LogPosition]
) -> dict[LogPosition, list[bytes]]:
    """The hashes of the stored entries at each of `positions`, whatever their verdict:
    one probe of the log index each. Joined otherwise (a merge or hash join), PostgreSQL
    reads every entry: 0.23 s against 0.13 s for 15,000 positions in the bench's store
    of 100,000, and it grows with the store."""
    found: dict[LogPosition, list[bytes]] = {p: [] for p in positions}
    if not positions:
        return found
    authors, logs, seqs = zip(*positions, strict=True)
    with conn.transaction():
        conn.execute("SET LOCAL enable_hashjoin = off")
        conn.execute("SET LOCAL enable_mergejoin = off")
        rows = conn.execute(
            "SELECT w.author, w.log_id, w.seq, e.hash"
            " FROM unnest(%s::bytea[], %s::numeric[], %s::numeric[]) AS w(author, log_id, seq)"
            " JOIN p2panda.entries e"
            " ON e.author = w.author AND e.log_id = w.log_id AND e.seq_num = w.seq",
            (list(authors), list(logs), list(seqs)),
        ).fetchall()
    for author, log_id, seq, entry_hash in rows:
        found[(bytes(author), int(log_id), int(seq))].append(bytes(entry_hash))
    return found


def indexed_batch(conn: psycopg.Connection) -> int | None:
    """The newest verified batch the last index step saw (None: no index step since)."""
    row = conn.execute("SELECT batch FROM p2panda.index_state").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def commit_index(
    conn: psycopg.Connection,
    logs: Iterable[Sequence[object]],
    accounts: Stage,
    chained_run: str | None,
    fingerprint: str,
    batch: int,
) -> None:
    """Replace what the index step decides, in one transaction: the logs table, the
    accounts of the chain rules, the schema logs and the logs no schema build reduces;
    then attribute early rejections to the schema of their log, and point the reduction
    at this run's chained messages."""
    with conn.transaction():
        replace_logs(conn, logs)
        accounts_sql.forget_index_accounts(conn)
        _settle_accounts(conn, accounts)
        conn.execute(
            "UPDATE p2panda.pipeline_state SET chained_run = %s, chained_deltas = '{}'"
            " WHERE id = 1",
            (chained_run,),
        )
        index_state_sql.record_index_state(conn, fingerprint, batch)


def commit_appended(
    conn: psycopg.Connection,
    logs: Iterable[Sequence[object]],
    accounts: Stage,
    chained_deltas: Sequence[str],
    fingerprint: str,
    batch: int,
) -> None:
    """Add what an index step that continued the logs decides, in one transaction: the
    rows of the logs it touched, the accounts of the new entries, the schema logs'
    accounts (all again); then point the reduction at the layers, this one's on top."""
    with conn.transaction():
        rows = list(logs)
        logs_sql.forget_logs(conn, [(row[0], row[1]) for row in rows])
        logs_sql.copy_logs(conn, rows)
        accounts_sql.forget_schema_log_accounts(conn)
        _settle_accounts(conn, accounts)
        conn.execute(
            "UPDATE p2panda.pipeline_state SET chained_deltas = %s WHERE id = 1",
            (list(chained_deltas),),
        )
        index_state_sql.record_index_state(conn, fingerprint, batch)


def _settle_accounts(conn: psycopg.Connection, accounts: Stage) -> None:
    """The staged index accounts in; early rejections attributed to their log's schema."""
    accounts_sql.add_index_accounts(conn, accounts.identifier)
    accounts_sql.unattribute_verification_rejections(conn)
    accounts_sql.attribute_early_rejections(conn)
    drop_tables(conn, [accounts])


# The entries verified (every one up to `verified_through`: the store as verification
# read it, not as it is now, when an ingest may have committed more) and the schemas
# registered.
FINGERPRINT = """
SELECT 'through=' || s.verified_through
    || ';entries=' || (SELECT count(*) FROM p2panda.entries WHERE ingest_seq <= s.verified_through)
    || ';schemas=' || (SELECT md5(coalesce(string_agg(schema_id, ',' ORDER BY schema_id), ''))
        FROM p2panda.schemas)
FROM p2panda.pipeline_state s WHERE s.id = 1
"""


LayerSums = list[tuple[str | None, bool, int, int, int]]  # schema, assigned, batch, count, sum


def layer_digests(conn: psycopg.Connection, layers: Sequence[str]) -> dict[str, LayerSums]:
    """The kept sums of those of `layers` that have them."""
    rows = conn.execute(
        "SELECT layer, sums FROM p2panda.layer_digests WHERE layer = ANY(%s)", (list(layers),)
    )
    return {
        layer: [(s, bool(a), int(b), int(c), int(t)) for s, a, b, c, t in sums]
        for layer, sums in rows
    }


def keep_layer_digests(
    conn: psycopg.Connection, sums: dict[str, LayerSums], layers: Sequence[str]
) -> None:
    """Keep `sums` by layer; forget those of layers not in `layers` (the ones read now)."""
    with conn.transaction():
        layer_digests_sql.forget_layers_except(conn, layers)
        layer_digests_sql.add_layer_sums(conn, sums)


def verified_fingerprint(conn: psycopg.Connection) -> str:
    """What the index depends on: the entries verified and the schemas registered. An
    entry committed after verification read the store is not in it: an index marked
    with it would be taken as up to date by the run that verifies that entry, and the
    entry would never be chained."""
    row = conn.execute(FINGERPRINT).fetchone()
    assert row is not None
    return str(row[0])


def fingerprint_bound(fingerprint: str) -> int | None:
    """The `verified_through` a fingerprint names: every entry up to this ingest_seq was
    verified when it was taken (None: a fingerprint of an earlier release)."""
    head = fingerprint.split(";", 1)[0]
    name, _, value = head.partition("=")
    return int(value) if name == "through" and value.isdigit() else None


def indexed_fingerprint(conn: psycopg.Connection) -> str | None:
    row = conn.execute("SELECT fingerprint FROM p2panda.index_state").fetchone()
    return None if row is None else str(row[0])


def current_index(conn: psycopg.Connection) -> str | None:
    """The index's fingerprint if an index step would find nothing to do: no entry
    committed since the last verification, and the index made from what was verified
    and from the schemas registered now. None if there is something to do. The columnar
    store's files are not looked at: if they are gone, the next run that has something
    to do verifies everything again (`pipeline.index.verify.current_warehouse`)."""
    state = pipeline_state(conn)
    if count_new_entries(conn, state.verified_through, committed_bound(conn)):
        return None
    indexed = indexed_fingerprint(conn)
    return indexed if indexed == verified_fingerprint(conn) else None


# An entry `e` that verification found good: at or below the progress mark, not rejected
# at ingest, and without the account of a rejection by verification (which keeps its
# `verify` origin: no later stage sees a rejected entry). Re-ingesting an entry with its
# payload gives it a new `ingest_seq` and drops that account, so it waits to be verified.
VERIFIED_GOOD = """
e.ingest_seq <= (SELECT verified_through FROM p2panda.pipeline_state WHERE id = 1)
AND e.verdict IS NULL
AND NOT EXISTS (SELECT 1 FROM p2panda.accounts a WHERE a.hash = e.hash AND a.origin = 'verify')
"""


def count_good_entries(conn: psycopg.Connection) -> int:
    """Entries verified good: how large a store the pipeline's shuffles are sized for."""
    row = conn.execute("SELECT good_entries FROM p2panda.pipeline_state WHERE id = 1").fetchone()
    return int(row[0]) if row else 0


def entries_at_most(conn: psycopg.Connection) -> int:
    """An upper bound of the entries stored, read from an index's end: the last
    `ingest_seq` handed out (a failed ingest leaves gaps)."""
    row = conn.execute("SELECT coalesce(max(ingest_seq), 0) FROM p2panda.entries").fetchone()
    return int(row[0]) if row else 0


def count_logs(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT count(*) FROM p2panda.logs").fetchone()
    return int(row[0]) if row else 0


LOCK_WAIT_ENV = ENVIRONMENT["lock_wait_seconds"]
PRODUCT_SCHEMAS = ("p2panda", "p2panda_data", "p2panda_versions")


def hold_pipeline_lock(conn: psycopg.Connection) -> None:
    """Take the pipeline lock: one verification, index step or build at a time, across
    processes. Another run holding it is waited for, at most `P2PANDA_LOCK_WAIT_SECONDS`
    (default 600), then `busy`; while waiting, stderr says for whom, and how it goes
    (`pipeline_lock.waiting_aloud`). The holder says who it is (`record_holder`). With the
    lock held, staging tables left by runs that died are swept: no live run can own one."""
    seconds = tuning().lock_wait_seconds
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (PIPELINE_LOCK,)).fetchone()
    if not (row and row[0]):
        with waiting_aloud(conn, PIPELINE_LOCK, seconds):
            _wait_for_pipeline_lock(conn, seconds)
    record_holder(conn)
    sweep_stages(conn)


def _wait_for_pipeline_lock(conn: psycopg.Connection, seconds: float) -> None:
    conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{int(seconds * 1000)}ms")))
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (PIPELINE_LOCK,))
    except psycopg.errors.LockNotAvailable:
        raise P2pandaError(
            Reason.BUSY, f"another run has held the pipeline lock for over {seconds:.0f} s"
        ) from None
    finally:
        conn.execute("RESET lock_timeout")


def release_pipeline_lock(conn: psycopg.Connection) -> None:
    conn.execute("SELECT pg_advisory_unlock(%s)", (PIPELINE_LOCK,))


def sweep_stages(conn: psycopg.Connection) -> list[str]:
    """Drop every staging table (`stage_*` in the product's schemas); the caller holds
    the pipeline lock, so they are all a dead run's. Their names say what they are, and
    a swapped-in table never keeps one (its key is renamed too)."""
    rows = conn.execute(
        "SELECT schemaname, tablename FROM pg_tables"
        " WHERE schemaname = ANY(%s) AND tablename LIKE 'stage\\_%%'",
        (list(PRODUCT_SCHEMAS),),
    ).fetchall()
    for schema, table in rows:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, table)))
    return [f"{schema}.{table}" for schema, table in rows]
