"""The task ledger lets one attempt of a Spark task write: the first to commit its
claim. A later attempt gets the recorded result; one whose claim rolled back leaves the
task to the next; one that runs alongside waits for the first, then gets its result."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from p2panda_assets.store import task_ledger
from p2panda_assets.store.staging import Stage
from p2panda_assets.store.task_ledger import claim_task, create_ledger, drop_ledger, record_task

pytestmark = pytest.mark.postgres


def test_an_attempt_after_a_committed_one_gets_its_result(conn: psycopg.Connection) -> None:
    ledger = create_ledger(conn)
    with conn.transaction():
        assert claim_task(conn, ledger, 3) is None
        record_task(conn, ledger, 3, b"result of task 3")
    with conn.transaction():
        assert claim_task(conn, ledger, 3) == b"result of task 3"
        assert claim_task(conn, ledger, 4) is None  # another task is its own


def test_an_attempt_that_rolled_back_leaves_the_task_to_the_next(
    conn: psycopg.Connection,
) -> None:
    ledger = create_ledger(conn)
    with pytest.raises(RuntimeError), conn.transaction():
        assert claim_task(conn, ledger, 0) is None
        raise RuntimeError("the attempt failed as it wrote")
    with conn.transaction():
        assert claim_task(conn, ledger, 0) is None


def test_an_attempt_alongside_waits_for_the_first_and_gets_its_result(
    conn: psycopg.Connection, database_url: str
) -> None:
    ledger = create_ledger(conn)
    got: list[bytes | None] = []
    with (
        psycopg.connect(database_url, autocommit=True) as first,
        psycopg.connect(database_url, autocommit=True) as second,
    ):

        def attempt() -> None:
            with second.transaction():
                got.append(claim_task(second, ledger, 1))

        alongside = threading.Thread(target=attempt)
        with first.transaction():
            assert claim_task(first, ledger, 1) is None
            alongside.start()
            wait_until_blocked(conn, second.info.backend_pid)
            record_task(first, ledger, 1, b"first")
            assert not got
        alongside.join(timeout=30)
    assert got == [b"first"]


def test_the_driver_does_not_wait_on_an_attempt_that_still_holds_the_ledger(
    conn: psycopg.Connection, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt on a lost executor may hold its claim for as long as TCP takes to
    notice: the drop gives up after `DROP_WAIT` and leaves the ledger to the sweep."""
    monkeypatch.setattr(task_ledger, "DROP_WAIT", "200ms")
    ledger = create_ledger(conn)
    with psycopg.connect(database_url, autocommit=True) as straggler, straggler.transaction():
        claim_task(straggler, ledger, 0)
        drop_ledger(conn, ledger)
        assert exists(conn, ledger)
    drop_ledger(conn, ledger)
    assert not exists(conn, ledger)


def exists(conn: psycopg.Connection, ledger: Stage) -> bool:
    name = f"{ledger.schema}.{ledger.name}"
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone() == (True,)


def wait_until_blocked(conn: psycopg.Connection, pid: int) -> None:
    """Until backend `pid` waits for a lock."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.05)
    pytest.fail(f"backend {pid} never waited for the first attempt's claim")
