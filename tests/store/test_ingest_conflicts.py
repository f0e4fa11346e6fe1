"""Issue 49: a copy of a stored entry with another payload is not a duplicate. It is
rejected as `payload-conflict`, the stored copy stays, and `panda ingest` says so on
stderr with the copy's file and line (rule L-DUPLICATE): the counts still add up to the lines
read, whatever the batch size."""

from __future__ import annotations

import psycopg
import pytest

from p2panda_assets.cli.main import main
from p2panda_assets.errors import Reason
from p2panda_assets.jsonlines import entry_line
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.store.database import ensure_schema
from p2panda_assets.store.ingest import Conflict, IngestCounts, ingest

pytestmark = pytest.mark.postgres

Pair = tuple[bytes, bytes | None]


def other(payload: bytes) -> bytes:
    """Another payload of the same size: its hash is not the one the entry names."""
    return bytes([payload[0] ^ 1]) + payload[1:]


def stored_payloads(conn: psycopg.Connection) -> dict[bytes, bytes | None]:
    rows = conn.execute("SELECT hash, payload FROM p2panda.entries").fetchall()
    return {bytes(h): None if p is None else bytes(p) for h, p in rows}


def test_a_copy_with_another_payload_is_rejected_and_not_stored(
    conn: psycopg.Connection, pairs: list[Pair]
) -> None:
    entry, payload = pairs[0]
    assert payload is not None
    ingest(conn, pairs)
    before = stored_payloads(conn)
    found: list[Conflict] = []
    counts = ingest(conn, [pairs[1], (entry, other(payload)), (entry, None)], conflict=found.append)
    assert counts == IngestCounts(accepted=0, duplicate=2, rejected=1)
    assert stored_payloads(conn) == before
    (conflict,) = found
    assert (conflict.position, conflict.hash) == (1, decode_entry(entry).hash)
    assert (conflict.verdict, conflict.stored_verdict) == (Reason.PAYLOAD_HASH_MISMATCH, None)
    assert conflict.message == (
        f"entry {conflict.hash.hex()} is stored with the payload it names; this copy's"
        " differs (payload-hash-mismatch): not stored"
    )


def test_a_second_wrong_payload_conflicts_with_the_first(
    conn: psycopg.Connection, pairs: list[Pair]
) -> None:
    """Stored without its payload, then a wrong one that does not replace it (a missing
    payload is the smaller verdict, as the engine keeps): a conflict too."""
    entry, payload = pairs[0]
    assert payload is not None
    found: list[Conflict] = []
    assert ingest(conn, [(entry, None), (entry, other(payload))], conflict=found.append) == (
        IngestCounts(accepted=0, duplicate=0, rejected=2)
    )
    assert [(c.position, c.stored_without_payload) for c in found] == [(1, True)]
    assert "is stored without a payload" in found[0].message
    assert ingest(conn, [(entry, payload)]) == IngestCounts(accepted=1, duplicate=0, rejected=0)


@pytest.mark.parametrize("two_connections", [False, True])
def test_conflicts_do_not_depend_on_batch_size(
    database_url: str, pairs: list[Pair], two_connections: bool
) -> None:
    """Copies of one entry in one batch merge in input order, as in batches of one."""
    (e0, p0), (e1, p1) = pairs[:2]
    assert p0 is not None and p1 is not None
    items: list[Pair] = [
        (e0, other(p0)),  # 0: rejected, stored
        *pairs,  # 1..5: e0's good copy replaces it, all accepted
        (e1, other(p1)),  # 6: conflict
        (e0, other(p0)),  # 7: conflict
        (e0, p0),  # 8: duplicate
        (e1, None),  # 9: duplicate
    ]
    results = set()
    for batch_size in (1, 2, 3, 10_000):
        found: list[Conflict] = []
        with (
            psycopg.connect(database_url, autocommit=True) as conn,
            psycopg.connect(database_url, autocommit=True) as spare,
        ):
            conn.execute("DROP SCHEMA IF EXISTS p2panda CASCADE")
            ensure_schema(conn)
            spare_conn = spare if two_connections else None
            counts = ingest(
                conn, items, batch_size=batch_size, spare=spare_conn, conflict=found.append
            )
            results.add(counts)
            assert stored_payloads(conn) == {decode_entry(e).hash: p for e, p in pairs}
        assert [c.position for c in found] == [6, 7], batch_size
    assert results == {IngestCounts(accepted=5, duplicate=2, rejected=3)}


def test_panda_ingest_warns_with_the_file_and_line_of_the_conflict(
    capsys: pytest.CaptureFixture[str], database_url: str, pairs: list[tuple[bytes, bytes]], jsonl
) -> None:
    entry, payload = pairs[0]
    first = jsonl("first.jsonl", [entry_line(*pair) for pair in pairs])
    again = jsonl("again.jsonl", [entry_line(*pairs[1]), entry_line(entry, other(payload))])
    assert main(["ingest", str(first)]) == 0
    capsys.readouterr()
    assert main(["ingest", str(again)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[:2] == [
        "accepted 0, duplicate 1, rejected 1",
        "rejected here: payload conflicts 1 (not stored)",
    ]
    assert err.startswith(f"warning: {Reason.PAYLOAD_CONFLICT}: ")
    assert err == (
        f"warning: payload-conflict: {again}:2: entry {decode_entry(entry).hash.hex()} is"
        " stored with the payload it names; this copy's differs (payload-hash-mismatch):"
        " not stored\n"
    )
