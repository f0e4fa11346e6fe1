"""The entry store's trigger (`store/notify.sql`): every statement that adds entries,
whoever runs it, notifies `p2panda_entries` once, at commit."""

from __future__ import annotations

import subprocess

import psycopg
import pytest

from p2panda_assets.store.database import connect
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.notify import CHANNEL, listen
from tests.automation.corpora import relation_graph

pytestmark = pytest.mark.postgres


def notifications(listening: psycopg.Connection, wait: float = 0.5) -> list[str]:
    return [n.channel for n in listening.notifies(timeout=wait)]


@pytest.fixture
def listening(conn: psycopg.Connection, database_url: str) -> psycopg.Connection:
    with connect(database_url, autocommit=True) as listening:
        listen(listening)
        yield listening


def rows(count: int, start: int = 0) -> list[tuple[bytes, bytes, bytes]]:
    """Entry rows as an outside writer would send them (bytes the store does not check)."""
    return [
        (i.to_bytes(34, "big"), b"entry %d" % i, b"payload") for i in range(start, start + count)
    ]


def test_a_copy_of_10000_entries_is_one_notification(conn, listening) -> None:
    with (
        conn.cursor() as cursor,
        cursor.copy("COPY p2panda.entries (hash, entry, payload) FROM STDIN") as copy,
    ):
        for row in rows(10_000):
            copy.write_row(row)
    assert notifications(listening) == [CHANNEL]


def test_each_committed_insert_notifies_and_a_transaction_once(conn, listening) -> None:
    insert = "INSERT INTO p2panda.entries (hash, entry, payload) VALUES (%s, %s, %s)"
    conn.execute(insert, rows(1)[0])
    conn.execute(insert, rows(1, start=1)[0])
    assert notifications(listening) == [CHANNEL, CHANNEL]
    with conn.transaction():  # three statements, one commit: folded by PostgreSQL
        for row in rows(3, start=2):
            conn.execute(insert, row)
        assert notifications(listening, wait=0.2) == []  # nothing before the commit
    assert notifications(listening) == [CHANNEL]
    with conn.transaction():
        conn.execute(insert, rows(1, start=9)[0])
        raise psycopg.Rollback()
    assert notifications(listening) == []  # a rolled back insert wakes nobody


def test_panda_ingest_and_a_psql_insert_notify(conn, listening, database_url) -> None:
    ingest(conn, relation_graph().fresh())
    assert notifications(listening) == [CHANNEL]  # one per committed batch: one batch
    subprocess.run(
        [
            "psql",
            database_url,
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            "INSERT INTO p2panda.entries (hash, entry, payload) VALUES ('\\x01', '\\x02', '\\x03')",
        ],
        check=True,
        capture_output=True,
    )
    assert notifications(listening) == [CHANNEL]
