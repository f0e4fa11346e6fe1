"""The pipeline's progress (`p2panda.pipeline_state`, which only this module writes):
where verification stands, the batches and layers of the columnar store, and the
transactions of one verification or index step, which write the message index,
accounts, logs and index state through their writers (`message_index.py`,
`accounts.py`, `logs.py`, `index_state.py`), the sums of each chained layer
(`layer_digests.py`), and the fingerprints that say whether the index is current. The
entries not verified yet are read by `new_entries.py`, staging tables made by
`staging.py`, and the lock taken by `pipeline_lock.py`.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from p2panda_assets.store import accounts as accounts_sql
from p2panda_assets.store import index_state as index_state_sql
from p2panda_assets.store import layer_digests as layer_digests_sql
from p2panda_assets.store import logs as logs_sql
from p2panda_assets.store import message_index as message_index_sql
from p2panda_assets.store.logs import LOG_COLUMNS
from p2panda_assets.store.new_entries import (
    committed_bound,
    count_new_entries,
)
from p2panda_assets.store.staging import (
    Stage,
    drop_tables,
)


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


def replace_logs(conn: psycopg.Connection, logs: Stage) -> None:
    """The logs table as the index step classified the logs (the rows it staged in
    `logs`), and how many there are (`count_logs`)."""
    with conn.transaction():
        logs_sql.forget_all_logs(conn)
        count = logs_sql.add_staged_logs(conn, logs)
        conn.execute("UPDATE p2panda.pipeline_state SET logs_count = %s WHERE id = 1", (count,))


def stored_logs(conn: psycopg.Connection, authors: Collection[bytes]) -> list[tuple[object, ...]]:
    """The logs rows (`LOG_COLUMNS`) of `authors`' logs (by the primary key)."""
    columns = sql.SQL(", ").join(map(sql.Identifier, LOG_COLUMNS))
    statement = sql.SQL("SELECT {} FROM p2panda.logs WHERE author = ANY(%s)").format(columns)
    return conn.execute(statement, (list(authors),)).fetchall()


def kept_plans(conn: psycopg.Connection) -> list[tuple[object, ...]]:
    """Each distinct (schema reference, decision) the logs table keeps of its instance
    logs: (ref schema id, ref version, ref hash, schema id, assignment, why reason, why
    message). As many as the store's distinct references and their fates, not its logs;
    one scan of the logs table (~0.1 s at 500,000 logs)."""
    return conn.execute(
        "SELECT DISTINCT ref_schema_id, ref_version, ref_hash, schema_id, assignment,"
        " why_reason, why_message FROM p2panda.logs WHERE NOT is_schema"
    ).fetchall()


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
    logs: Stage,
    accounts: Stage,
    chained_run: str | None,
    fingerprint: str,
    batch: int,
) -> None:
    """Replace what the index step decides, in one transaction: the logs table (the rows
    staged in `logs`), the accounts of the chain rules, the schema logs and the logs no
    schema build reduces; then attribute early rejections to the schema of their log,
    and point the reduction at this run's chained messages."""
    with conn.transaction():
        replace_logs(conn, logs)
        drop_tables(conn, [logs])
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
    logs: Stage,
    accounts: Stage,
    chained_deltas: Sequence[str],
    fingerprint: str,
    batch: int,
) -> None:
    """Add what an index step that continued the logs decides, in one transaction: the
    rows of the logs it touched (staged in `logs`), the accounts of the new entries, the
    schema logs' accounts (all again); then point the reduction at the layers, this
    one's on top."""
    with conn.transaction():
        forgotten = logs_sql.forget_staged_logs(conn, logs)
        added = logs_sql.add_staged_logs(conn, logs) - forgotten
        drop_tables(conn, [logs])
        conn.execute(  # counted once where a store of an older release kept no count
            "UPDATE p2panda.pipeline_state SET logs_count = CASE WHEN logs_count IS NULL"
            " THEN (SELECT count(*) FROM p2panda.logs) ELSE logs_count + %s END WHERE id = 1",
            (added,),
        )
        accounts_sql.forget_schema_log_accounts(conn)
        _settle_accounts(conn, accounts)
        conn.execute(
            "UPDATE p2panda.pipeline_state SET chained_deltas = %s WHERE id = 1",
            (list(chained_deltas),),
        )
        index_state_sql.record_index_state(conn, fingerprint, batch)


def commit_merged_layers(
    conn: psycopg.Connection, layers: Sequence[str], sums: dict[str, LayerSums]
) -> None:
    """Point the reduction at `layers` (the same first run, then the layers on top of it),
    where one of them holds the messages of several layers merged
    (`pipeline.index.layer_merge`): the same messages, so nothing else the index decided
    changes. The merged layer's `sums` are kept in the same transaction, and those of
    the layers it replaces forgotten."""
    with conn.transaction():
        conn.execute(
            "UPDATE p2panda.pipeline_state SET chained_deltas = %s WHERE id = 1",
            (list(layers[1:]),),
        )
        keep_layer_digests(conn, sums, layers)


def _settle_accounts(conn: psycopg.Connection, accounts: Stage) -> None:
    """The staged index accounts in; early rejections attributed to their log's schema."""
    accounts_sql.add_index_accounts(conn, accounts.identifier)
    accounts_sql.unattribute_verification_rejections(conn)
    accounts_sql.attribute_early_rejections(conn)
    drop_tables(conn, [accounts])


# The entries verified (every one up to `verified_through`: the store as verification
# read it, not as it is now, when an ingest may have committed more) and the schemas
# registered. The bound alone names the verified entries: an entry is never deleted, and
# the only one that leaves the bound, a copy with a payload verdict replaced by a later
# copy (`store.ingest`), was never in the index (`VERIFIED_GOOD`), and its new copy is
# new to verification. (Counting the entries up to the bound, as this did, read every
# verified entry's key at each index step: ~0.06 s at 1M entries.)
FINGERPRINT = """
SELECT 'through=' || s.verified_through
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


def registered_since_indexed(conn: psycopg.Connection, fingerprint: str) -> bool:
    """Whether the schemas registered when `fingerprint` was taken differ from those of
    the last index step (or there was none)."""
    indexed = indexed_fingerprint(conn)
    return indexed is None or _registered(indexed) != _registered(fingerprint)


def _registered(fingerprint: str) -> str:
    """The part of a fingerprint (`FINGERPRINT`) that sums up the schemas registered."""
    return fingerprint.rpartition(";schemas=")[2]


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


def count_entry_logs(conn: psycopg.Connection) -> int:
    """The logs the entry store holds entries of, indexed or not (the `entries_by_log`
    index's distinct prefixes)."""
    row = conn.execute(
        "SELECT count(*) FROM (SELECT DISTINCT author, log_id FROM p2panda.entries) logs"
    ).fetchone()
    return int(row[0]) if row else 0


def count_logs(conn: psycopg.Connection) -> int:
    """The logs of the store, as each index step's commit keeps their count: a live run
    reads one row, not a count over every log (on a store never indexed since the count
    was kept, the count itself)."""
    row = conn.execute(
        "SELECT coalesce(s.logs_count, (SELECT count(*) FROM p2panda.logs))"
        " FROM p2panda.pipeline_state s WHERE s.id = 1"
    ).fetchone()
    return int(row[0]) if row else 0
