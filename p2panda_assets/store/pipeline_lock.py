"""The pipeline lock: taking it (`hold_pipeline_lock`), who holds it, and waiting for it
out loud.

The pipeline lock (`PIPELINE_LOCK`, a session advisory lock) lets one
index step, build or unregistration run at a time. A run behind another used to wait in
silence, up to `P2PANDA_LOCK_WAIT_SECONDS`, and then fail with `busy` (issue 51: 9 min
40 s without a line). Now the session that takes the lock writes who it is into
`p2panda.pipeline_lock_holder` (the Dagster run and schema its connection was labelled
with, `label_session`, and since when), and a session that finds the lock taken says on
stderr at once what it waits for, then every `P2PANDA_LOCK_PROGRESS_SECONDS` how long it
has waited and what the holder's Spark work is doing (`publish_progress`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg
from psycopg import sql

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.store.staging import sweep_stages
from p2panda_assets.tuning import ENVIRONMENT, tuning

RUN_SETTING = "p2panda.run_id"  # session settings a connection is labelled with
SCHEMA_SETTING = "p2panda.schema_id"
PIPELINE_LOCK = 0x70326E64  # one verification / index step at a time, across processes
LOCK_WAIT_ENV = ENVIRONMENT["lock_wait_seconds"]
# A waiting run says how it goes every `lock_progress_seconds` (15 s by default): a person
# waiting sees it move; a 600 s wait is 40 lines, not 600.
PROGRESS_ENV = ENVIRONMENT["lock_progress_seconds"]
CONNECT_TIMEOUT = 10  # seconds: a thread that reports must not hang on a database gone


def label_session(conn: psycopg.Connection, run_id: str | None, schema_id: str | None) -> None:
    """Name the run and schema this connection works for: written with the lock
    (`record_holder`), so that a run waiting for it can say whom it waits for."""
    conn.execute(
        "SELECT set_config(%s, %s, false), set_config(%s, %s, false)",
        (RUN_SETTING, run_id or "", SCHEMA_SETTING, schema_id or ""),
    )


def record_holder(conn: psycopg.Connection) -> None:
    """This session holds the lock now (autocommit: the row is seen at once)."""
    conn.execute(
        "INSERT INTO p2panda.pipeline_lock_holder (id, pid, run_id, schema_id, since)"
        " VALUES (1, pg_backend_pid(), nullif(current_setting(%s, true), ''),"
        " nullif(current_setting(%s, true), ''), clock_timestamp())"
        " ON CONFLICT (id) DO UPDATE SET pid = excluded.pid, run_id = excluded.run_id,"
        " schema_id = excluded.schema_id, since = excluded.since, progress = NULL,"
        " progress_at = NULL",
        (RUN_SETTING, SCHEMA_SETTING),
    )


def publish_progress(conn: psycopg.Connection, holder_pid: int, progress: str) -> None:
    """What the holder's work is doing, for those waiting; from a connection of its own
    (the holder's is busy with the work). Nothing if `holder_pid` holds it no longer."""
    conn.execute(
        "UPDATE p2panda.pipeline_lock_holder SET progress = %s, progress_at = clock_timestamp()"
        " WHERE id = 1 AND pid = %s",
        (progress, holder_pid),
    )


def another_connection(conn: psycopg.Connection) -> Callable[[], psycopg.Connection]:
    """What opens a second connection to `conn`'s database (autocommit), for a thread
    that must not wait for the work `conn` is busy with. Read here, in `conn`'s thread:
    libpq does not share a connection between threads."""
    dsn, password = conn.info.dsn, conn.info.password or None
    return lambda: psycopg.connect(
        dsn, password=password, autocommit=True, connect_timeout=CONNECT_TIMEOUT
    )


@dataclass(frozen=True, slots=True)
class Holder:
    """The session holding the pipeline lock, and what it said of itself."""

    pid: int
    application: str | None  # its application_name (psql, a JDBC client, ...)
    client: str | None  # its client address, if over TCP
    run_id: str | None  # None: the session did not say (not a labelled run)
    schema_id: str | None
    schema_name: str | None
    since: datetime | None  # when it took the lock; its session start if it did not say
    progress: str | None
    progress_age: float | None  # seconds since `progress` was written
    held_for: float | None  # seconds since `since`

    def line(self) -> str:
        """`run 3f2a… (schema slothmail, 9d1c…-3) since 2026-11-27 14:02:11 UTC (35 s)`,
        or `session 4242 ('psql' from 10.0.0.7) since ...` for one that did not say."""
        if self.run_id is not None or self.schema_id is not None:
            who = f"run {self.run_id or '(none: not a Dagster run)'}"
            if self.schema_id is not None:
                named = f"{self.schema_name}, " if self.schema_name else ""
                who += f" (schema {named}{self.schema_id})"
        else:
            who = f"session {self.pid}"
            if self.application:
                who += f" ({self.application!r}"
                who += f" from {self.client})" if self.client else ")"
            elif self.client:
                who += f" (from {self.client})"
        if self.since is not None:
            who += f" since {self.since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
            who += f" ({self.held_for:.0f} s)" if self.held_for is not None else ""
        return who


def lock_holder(conn: psycopg.Connection, key: int) -> Holder | None:
    """The session holding the advisory lock `key` in this database, None if none does."""
    row = conn.execute(
        "SELECT l.pid, a.application_name, a.client_addr::text, h.run_id, h.schema_id,"
        " coalesce(s.registered_name, s.name), coalesce(h.since, a.backend_start),"
        " h.progress, extract(epoch FROM clock_timestamp() - h.progress_at)::float8,"
        " extract(epoch FROM clock_timestamp() - coalesce(h.since, a.backend_start))::float8"
        " FROM pg_locks l"
        " LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
        " LEFT JOIN p2panda.pipeline_lock_holder h"
        "   ON h.pid = l.pid AND h.since >= coalesce(a.backend_start, '-infinity')"
        " LEFT JOIN p2panda.schemas s ON s.schema_id = h.schema_id"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
        "   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        "   AND l.classid = %s::oid AND l.objid = %s::oid"
        " LIMIT 1",
        (key >> 32, key & 0xFFFFFFFF),
    ).fetchone()
    if row is None:
        return None
    return Holder(int(row[0]), row[1] or None, row[2], *row[3:])


def progress_seconds() -> float:
    return tuning().lock_progress_seconds


def say(line: str) -> None:
    """A line of the product on stderr (the command line keeps the libraries' off it)."""
    print(line, file=sys.stderr, flush=True)


@contextmanager
def waiting_aloud(
    conn: psycopg.Connection,
    key: int,
    limit: float,
    *,
    every: float | None = None,
    report: Callable[[str], None] = say,
) -> Iterator[None]:
    """Around a wait for the lock `key` (at most `limit` seconds) on `conn`: say at once
    whom it waits for, then every `every` seconds how long it has waited and what the
    holder is doing (read on a connection of its own: `conn` is blocked)."""
    started = time.monotonic()
    holder = lock_holder(conn, key)
    connect_again = another_connection(conn)
    shown = holder.line() if holder is not None else "another session (gone already?)"
    report(f"waiting for the pipeline lock (at most {limit:.0f} s): held by {shown}")
    done = threading.Event()
    interval = progress_seconds() if every is None else every

    def tell() -> None:
        try:
            with connect_again() as other:
                while not done.wait(interval):
                    now = lock_holder(other, key)
                    if done.is_set():
                        return
                    waited = time.monotonic() - started
                    line = f"still waiting for the pipeline lock ({waited:.0f} s of {limit:.0f} s)"
                    if now is not None:
                        line += f": held by {now.line()}"
                        if now.progress:
                            ago = now.progress_age
                            age = f", {ago:.0f} s ago" if ago is not None else ""
                            line += f"; its Spark work: {now.progress}{age}"
                    report(line)
        except psycopg.Error:
            return  # the waiting goes on without its progress lines

    teller = threading.Thread(target=tell, name="lock-wait", daemon=True)
    teller.start()
    try:
        yield
    finally:
        done.set()
        teller.join()


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
