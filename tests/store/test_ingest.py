"""Ingest: every distinct entry is stored once; what ingest can already reject is stored
with its reason; a good copy of an entry wins over a copy with a wrong payload, in
either order; and the counts do not depend on how the input is batched or on how many
connections merge it."""

from __future__ import annotations

import secrets

import psycopg
import pytest

from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.jsonlines import BadLine
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.protocol.hashing import DEFAULT_ALGORITHM
from p2panda_assets.store.database import ensure_schema
from p2panda_assets.store.ingest import IngestCounts, ingest
from p2panda_assets.store.new_entries import read_new_entries

pytestmark = pytest.mark.postgres

Pair = tuple[bytes, bytes | None]


def stored(conn: psycopg.Connection, entry: bytes) -> tuple:
    hash_ = decode_entry(entry).hash
    row = conn.execute(
        "SELECT payload, verdict, verdict_message, ingest_seq FROM p2panda.entries WHERE hash = %s",
        (hash_,),
    ).fetchone()
    assert row is not None
    return row


def count_entries(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM p2panda.entries").fetchone()[0]


def bad_line() -> BadLine:
    return BadLine("in.jsonl", 3, P2pandaError(Reason.BAD_INPUT, "not a JSON object"))


def test_new_entries_are_accepted_with_their_log_position(conn, pairs: list[Pair]) -> None:
    assert ingest(conn, pairs) == IngestCounts(accepted=5, duplicate=0, rejected=0)
    row = conn.execute(
        "SELECT author, log_id, seq_num, verdict FROM p2panda.entries WHERE hash = %s",
        (decode_entry(pairs[-1][0]).hash,),
    ).fetchone()
    entry = decode_entry(pairs[-1][0])
    assert (bytes(row[0]), int(row[1]), int(row[2]), row[3]) == (entry.author, 1, 3, None)


def test_entries_seen_before_are_duplicates(conn, pairs: list[Pair]) -> None:
    ingest(conn, pairs[:3])
    counts = ingest(conn, [*pairs, pairs[4]])
    assert counts == IngestCounts(accepted=2, duplicate=4, rejected=0)
    assert count_entries(conn) == 5


def test_bad_lines_count_as_rejected_and_are_not_stored(conn, pairs: list[Pair]) -> None:
    assert ingest(conn, [bad_line(), *pairs[:2]]) == IngestCounts(2, 0, 1)
    assert count_entries(conn) == 2


def test_payload_problems_are_stored_with_their_reason(conn, pairs: list[Pair]) -> None:
    (e1, p1), (e2, _), (e3, p3) = pairs[:3]
    counts = ingest(conn, [(e1, p1 + b"x"), (e2, None), (e3, bytes(len(p3)))])
    assert counts == IngestCounts(accepted=0, duplicate=0, rejected=3)
    assert stored(conn, e1)[1] == Reason.PAYLOAD_SIZE_MISMATCH
    assert stored(conn, e2)[:2] == (None, Reason.MISSING_PAYLOAD)
    assert stored(conn, e3)[1] == Reason.PAYLOAD_HASH_MISMATCH


def test_undecodable_bytes_are_stored_under_their_default_hash(conn) -> None:
    garbage = b"\x07not an entry"
    truncated = b"\x00" + bytes(20)
    assert ingest(conn, [(garbage, b"p"), (truncated, None)]) == IngestCounts(0, 0, 2)
    rows = dict(
        conn.execute(
            "SELECT hash, verdict FROM p2panda.entries WHERE author IS NULL AND log_id IS NULL"
        ).fetchall()
    )
    assert rows == {
        DEFAULT_ALGORITHM.hash(garbage): Reason.UNKNOWN_TAG,
        DEFAULT_ALGORITHM.hash(truncated): Reason.TRUNCATED,
    }


def test_a_good_copy_replaces_a_stored_bad_payload(conn, pairs: list[Pair]) -> None:
    entry, payload = pairs[0]
    assert ingest(conn, [(entry, b"wrong")]) == IngestCounts(0, 0, 1)
    before = stored(conn, entry)[3]
    conn.execute(
        "INSERT INTO p2panda.accounts (hash, state, reason) VALUES (%s, 'rejected', %s)",
        (decode_entry(entry).hash, Reason.PAYLOAD_SIZE_MISMATCH.value),
    )
    assert ingest(conn, [(entry, payload)]) == IngestCounts(1, 0, 0)
    payload_now, verdict, message, after = stored(conn, entry)
    assert (bytes(payload_now), verdict, message) == (payload, None, None)
    assert after > before  # news for whoever follows ingest_seq
    assert conn.execute("SELECT count(*) FROM p2panda.accounts").fetchone() == (0,)


def test_a_bad_copy_never_replaces_a_good_one(conn, pairs: list[Pair]) -> None:
    entry, payload = pairs[0]
    assert ingest(conn, [(entry, payload)]) == IngestCounts(1, 0, 0)
    # The wrong payload is a payload-conflict (rejected, not stored); no payload: duplicate.
    assert ingest(conn, [(entry, b"wrong"), (entry, None)]) == IngestCounts(0, 1, 1)
    assert stored(conn, entry)[:2] == (payload, None)


@pytest.mark.parametrize("bad_first", [True, False])
def test_the_good_copy_wins_within_one_batch(conn, pairs: list[Pair], bad_first: bool) -> None:
    entry, payload = pairs[0]
    copies = [(entry, None), (entry, payload)]
    if not bad_first:
        copies.reverse()
    counts = ingest(conn, [*copies, (entry, payload)])
    expected = IngestCounts(1, 1, 1) if bad_first else IngestCounts(1, 2, 0)
    assert counts == expected
    assert stored(conn, entry)[:2] == (payload, None)


def test_a_bad_copy_stays_until_a_good_one_comes(conn, pairs: list[Pair]) -> None:
    entry, _ = pairs[0]
    assert ingest(conn, [(entry, None)]) == IngestCounts(0, 0, 1)
    assert ingest(conn, [(entry, b"also wrong")]) == IngestCounts(0, 0, 1)  # payload-conflict
    assert stored(conn, entry)[1] == Reason.MISSING_PAYLOAD


@pytest.mark.parametrize("one_batch", [True, False])
@pytest.mark.parametrize("missing_first", [True, False])
def test_of_two_wrong_payloads_the_store_keeps_the_engines_verdict(
    conn, pairs: list[Pair], one_batch: bool, missing_first: bool
) -> None:
    """A copy with no payload and one with a wrong payload of the right size: the engine
    keeps the smaller rejection, so the store must too, in either order, in one batch
    or two. (It kept the first copy: `payload-hash-mismatch` where the engine said
    `missing-payload`.)"""
    entry, payload = pairs[0]
    wrong = bytes([payload[0] ^ 1]) + payload[1:]
    copies = [(entry, None), (entry, wrong)]
    if not missing_first:
        copies.reverse()
    batches = [copies] if one_batch else [[copy] for copy in copies]
    for batch in batches:
        ingest(conn, batch)
    engine = reduce_corpus(copies).accounts[decode_entry(entry).hash]
    assert engine.reason == Reason.MISSING_PAYLOAD
    _, verdict, message, _ = stored(conn, entry)
    assert (verdict, message) == (engine.reason, engine.message)


@pytest.mark.parametrize("two_connections", [False, True])
def test_counts_do_not_depend_on_batch_size(
    database_url: str, pairs: list[Pair], two_connections: bool
) -> None:
    (e0, p0), (e1, p1) = pairs[:2]
    items = [(e0, None), bad_line(), *pairs, (e1, b"x"), (e0, p0), (e1, p1), bad_line()]
    results = set()
    for batch_size in (1, 2, 3, 10_000):
        with (
            psycopg.connect(database_url, autocommit=True) as conn,
            psycopg.connect(database_url, autocommit=True) as spare,
        ):
            conn.execute("DROP SCHEMA IF EXISTS p2panda CASCADE")
            ensure_schema(conn)
            results.add(
                ingest(conn, items, batch_size=batch_size, spare=spare if two_connections else None)
            )
            assert count_entries(conn) == 5
            assert {bytes(stored(conn, e)[0]) for e, _ in pairs} == {p for _, p in pairs}
    # (e1, b"x") after the good e1: a payload-conflict, rejected
    assert results == {IngestCounts(accepted=5, duplicate=2, rejected=4)}


def junk_before(hash_: bytes, count: int) -> list[Pair]:
    """`count` undecodable entries whose hashes sort before `hash_`: a merge stores
    them, in hash order, before it."""
    junk: list[Pair] = []
    while len(junk) < count:
        raw = secrets.token_bytes(40)
        if DEFAULT_ALGORITHM.hash(raw) < hash_:
            junk.append((raw, None))
    return junk


def test_two_connections_merge_copies_of_an_entry_in_input_order(
    database_url: str, pairs: list[Pair]
) -> None:
    """A bad copy in a long batch, the good copy in a short one after it: on two
    connections the short batch would merge while the long one still writes what sorts
    before the entry, and the good copy land first (accepted, the bad one then a
    duplicate). A batch waits for one still merging that holds the same entry."""
    entry, payload = pairs[0]
    junk = junk_before(decode_entry(entry).hash, 3_000)
    items = [(entry, None), *junk, (entry, payload)]
    with (
        psycopg.connect(database_url, autocommit=True) as conn,
        psycopg.connect(database_url, autocommit=True) as spare,
    ):
        ensure_schema(conn)
        counts = ingest(conn, items, batch_size=len(items) - 1, spare=spare)
        assert stored(conn, entry)[:2] == (payload, None)
    assert counts == IngestCounts(accepted=1, duplicate=0, rejected=3_001)


def test_progress_reports_running_totals(conn, pairs: list[Pair]) -> None:
    seen: list[IngestCounts] = []
    ingest(conn, pairs, batch_size=2, progress=seen.append)
    assert [c.total for c in seen] == [2, 4, 5]


def test_ingest_commits_on_a_connection_without_autocommit(database_url: str, pairs) -> None:
    with psycopg.connect(database_url) as conn:
        ensure_schema(conn)
        ingest(conn, pairs)
    with psycopg.connect(database_url) as other:
        assert count_entries(other) == 5


def test_verification_reads_a_range_of_new_entries_as_bytes_in_order(
    conn, pairs: list[Pair]
) -> None:
    (e1, p1), (e2, _), *rest = pairs
    ingest(conn, [(e1, p1), (e2, None), *rest])
    seqs = [r[0] for r in conn.execute("SELECT ingest_seq FROM p2panda.entries ORDER BY 1")]
    chunks = list(read_new_entries(conn, seqs[0], seqs[-1], chunk=2))
    read = len(seqs) - 1  # (low, high]: the first is below the range
    assert [len(c) for c in chunks] == [2] * (read // 2) + [1] * (read % 2)
    rows = [row for chunk in chunks for row in chunk]
    assert [r[0] for r in rows] == seqs[1:]
    by_size = list(read_new_entries(conn, seqs[0], seqs[-1], chunk=100, chunk_bytes=1))
    assert [len(c) for c in by_size] == [1] * read  # each row alone reaches the byte bound
    by_hash = {decode_entry(e).hash: (e, p) for e, p in pairs}
    for _, entry_hash, entry, payload, verdict, _ in rows:
        assert isinstance(entry_hash, bytes) and isinstance(entry, bytes)
        expected_entry, expected_payload = by_hash[entry_hash]
        assert entry == expected_entry
        if entry == e2:
            assert (payload, verdict) == (None, Reason.MISSING_PAYLOAD)
        else:
            assert (payload, verdict) == (expected_payload, None)
