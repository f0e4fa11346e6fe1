"""Crash safety, for real: `panda` commands in their own processes on their own embedded
PostgreSQL, killed with SIGKILL at the places a crash leaves the most behind, a
PostgreSQL restart under a running build, two builds at once, an ingest during a build.

After each fault, the next `panda materialize` must leave the database as a clean run
would: every table and every entry's account equal to the engine's reduction of the
same entries (`reduce_corpus`, which the hypothesis parity test holds a clean run equal
to), no staging table or index left, no Dagster run left STARTED, and in the columnar
store only what the committed progress row names.

The faults are injected with failpoints (`p2panda_assets/failpoints.py`): the process
kills itself with SIGKILL there, or pauses there until the test lets it go on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from bench.materialize_cold import small_corpus
from p2panda_assets.engine.corpus import Corpus, reduce_corpus
from p2panda_assets.failpoints import FAILPOINT_DIR_ENV, FAILPOINT_ENV, Failpoint
from p2panda_assets.pipeline.index.step import APPEND_MIN_ENV
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.database import ensure_schema
from p2panda_assets.store.embedded import ensure_embedded, stop_embedded
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from p2panda_assets.tuning import tuning
from tests.pipeline.compare import engine_accounts, engine_tables, pg_accounts, pg_tables
from tests.postgres import embedded_home

pytestmark = [pytest.mark.faults, pytest.mark.spark, pytest.mark.postgres, pytest.mark.e2e]

PANDA = Path(sys.executable).parent / "panda"
RUN_TIMEOUT = 600
KILLED = -signal.SIGKILL


# --- the corpus: profile <- mail (a cascade), note; updates and deletes -------------------


@dataclass(frozen=True)
class Story:
    pairs: list[tuple[bytes, bytes]]
    schema_ids: list[str]


def story() -> Story:
    """Three schemas, mail relating to profile with a cascade, forty authors' logs with
    creates, updates and deletes (some deletes cascading), a migration after data: the
    corpus `bench/materialize_cold.py` times a cold `panda materialize` of."""
    pairs, schema_ids = small_corpus()
    return Story(pairs, schema_ids)


@pytest.fixture(scope="module")
def corpus() -> Story:
    return story()


# --- one user's home: its embedded server and its `panda` processes -----------------------


class Home:
    """A `$P2PANDA_HOME` with its embedded PostgreSQL, as a user without
    P2PANDA_DATABASE_URL has; `panda` runs in its own process (group)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = ensure_embedded(path)
        self.failpoints = path / "failpoints"
        self.failpoints.mkdir()

    def env(self, failpoint: str | None = None) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("P2PANDA_DATABASE_URL", "DAGSTER_HOME", FAILPOINT_ENV)
        }
        env |= {
            "P2PANDA_HOME": str(self.path),
            "SPARK_MASTER": "local[2]",
            "PYSPARK_PYTHON": sys.executable,
            FAILPOINT_DIR_ENV: str(self.failpoints),
        }
        if failpoint:
            env[FAILPOINT_ENV] = failpoint
        return env

    def start(self, *args: str, failpoint: str | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(PANDA), *args],
            env=self.env(failpoint),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def finish(self, process: subprocess.Popen[str]) -> tuple[int, str, str]:
        try:
            out, err = process.communicate(timeout=RUN_TIMEOUT)
        finally:
            # Whatever the leader left (Spark's JVM ends with it; be sure of it).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        return process.returncode, out, err

    def panda(self, *args: str, failpoint: str | None = None) -> tuple[int, str, str]:
        return self.finish(self.start(*args, failpoint=failpoint))

    def ok(self, *args: str) -> str:
        code, out, err = self.panda(*args)
        assert code == 0, f"panda {' '.join(args)} exited {code}:\n{err[-3000:]}"
        return out

    # Storing and registering are not what these tests break: they run in this process,
    # with the functions `panda ingest` and `panda register` call (a `panda` process costs
    # seconds; `panda materialize` adds the registered schemas' partitions itself).

    def ingest(self, pairs: list[tuple[bytes, bytes]]) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            ensure_schema(conn)
            counts = ingest(conn, pairs)
        assert counts.accepted == len(pairs), counts

    def register(self, schema_ids: list[str]) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            ensure_schema(conn)
            for schema_id in schema_ids:
                register(conn, *parse_schema_id(schema_id), None)

    def wait_for(self, point: Failpoint, process: subprocess.Popen[str]) -> None:
        reached = self.failpoints / f"{point}.reached"
        deadline = time.monotonic() + RUN_TIMEOUT
        while not reached.exists():
            assert process.poll() is None, f"the run ended before {point}: {process.stderr}"
            assert time.monotonic() < deadline, f"the run did not reach {point}"
            time.sleep(0.5)

    def go_on(self, point: Failpoint) -> None:
        (self.failpoints / f"{point}.go").write_text("")


@pytest.fixture
def home() -> Iterator[Home]:
    for path in embedded_home():
        yield Home(path)
        stop_embedded(path)


# --- what a clean run leaves --------------------------------------------------------------


def assert_as_clean(home: Home, pairs: list[tuple[bytes, bytes]], schema_ids: list[str]) -> None:
    """Tables and accounts equal to the engine's, nothing left behind."""
    expected: Corpus = reduce_corpus(pairs, set(schema_ids))
    with psycopg.connect(home.url, autocommit=True) as conn:
        assert pg_tables(conn, schema_ids) == engine_tables(expected)
        assert pg_accounts(conn) == engine_accounts(expected)
        assert staging_left(conn) == []
        assert live_runs(conn) == []
        token, batch, chained, deltas = conn.execute(
            "SELECT warehouse_token, batch, chained_run, chained_deltas FROM p2panda.pipeline_state"
        ).fetchone()
    store = home.path / "warehouse" / token
    batches = sorted(p.name for p in (store / "entries").iterdir() if p.name.startswith("batch="))
    assert batches == [f"batch={n}" for n in range(1, batch + 1)]
    runs = [p.name for p in (store / "chained").iterdir() if not p.name.startswith(".")]
    layers = {chained, *deltas}
    # The current layers, and the ones before them (a reader may still be on them).
    assert layers <= set(runs) and len(set(runs) - layers) <= tuning().max_layers, runs


def staging_left(conn: psycopg.Connection) -> list[str]:
    """Staging tables and indexes, in any schema."""
    rows = conn.execute(
        "SELECT n.nspname || '.' || c.relname FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE c.relname LIKE 'stage\\_%' ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def live_runs(conn: psycopg.Connection) -> list[str]:
    """Dagster runs (its storage is in the same database) still STARTING or STARTED."""
    rows = conn.execute(
        "SELECT run_id FROM runs WHERE status IN ('STARTING', 'STARTED', 'NOT_STARTED')"
    ).fetchall()
    return [r[0] for r in rows]


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


# --- SIGKILL at each place a crash leaves something ---------------------------------------


def test_runs_killed_at_each_place_in_turn_leave_nothing_the_next_run_keeps(
    home: Home, corpus: Story, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One home through every crash, each run starting on what the one before it left.

    A run is killed at each place a crash leaves something, one place deeper each time.
    VERIFIED: a verified batch on disk, not committed (its entries are verified again);
    INDEXED: chained messages on disk, the index not committed; STAGED: every staging
    table loaded, none swapped; SWAPPING: inside a swap's transaction (PostgreSQL rolls
    it back). A killed run's Dagster run looks alive until the next `panda materialize`
    marks it failed. Then PostgreSQL is restarted under a build (`restart_under_a_build`),
    and one run leaves the database as a clean run would.

    Then the rest of the corpus arrives, and a run is killed while it appends its
    entries to the index as a layer: its layer is not read, and the next run appends
    it again. (One home for all of it: a home each cost a cold `panda materialize`
    more, ~45 s, of CI's 30 minutes.)"""
    monkeypatch.setenv(APPEND_MIN_ENV, "0")  # a small store is appended to; `panda` inherits it
    cut = len(corpus.pairs) * 9 // 10
    first, rest = corpus.pairs[:cut], corpus.pairs[cut:]
    home.ingest(first)
    home.register(corpus.schema_ids)
    killed: list[str] = []  # the Dagster runs of the killed processes
    for point in (Failpoint.VERIFIED, Failpoint.INDEXED, Failpoint.STAGED, Failpoint.SWAPPING):
        code, _, err = home.panda("materialize", failpoint=point)
        assert code == KILLED, f"{point}: {err[-3000:]}"
        with psycopg.connect(home.url, autocommit=True) as conn:
            alive = live_runs(conn)
            if point is Failpoint.STAGED:
                assert staging_left(conn), "staging tables were loaded before the kill"
        assert alive, f"{point}: the killed run should look alive until someone looks"
        assert not set(alive) & set(killed), f"{point}: an earlier killed run is not marked"
        killed += alive
    restart_under_a_build(home)

    out = home.ok("materialize")
    for schema_id in corpus.schema_ids:
        assert schema_id in out
    assert_as_clean(home, first, corpus.schema_ids)
    with psycopg.connect(home.url, autocommit=True) as conn:
        gone = {
            row[0]
            for row in conn.execute(
                "SELECT run_id FROM event_logs WHERE dagster_event_type = 'PIPELINE_FAILURE'"
                " AND event LIKE '%is gone%'"
            )
        }
    assert set(killed) <= gone, "a killed run was not reported failed because its process is gone"

    home.ingest(rest)
    code, _, err = home.panda("materialize", failpoint=Failpoint.INDEXED)
    assert code == KILLED, err[-3000:]
    home.ok("materialize")
    assert_as_clean(home, corpus.pairs, corpus.schema_ids)
    with psycopg.connect(home.url, autocommit=True) as conn:
        token, base, deltas = conn.execute(
            "SELECT warehouse_token, chained_run, chained_deltas FROM p2panda.pipeline_state"
        ).fetchone()
    runs = {p.name for p in (home.path / "warehouse" / token / "chained").iterdir()}
    assert len(deltas) == 1 and runs == {base, *deltas}  # the killed run's layer is gone


def restart_under_a_build(home: Home) -> None:
    """The build stops with its staging tables loaded; PostgreSQL is restarted (fast
    shutdown: every connection is cut); the build goes on with dead connections. It ends
    with exit 0 (Dagster retried) or 1 with `error: database-unavailable: ...` lines, no
    traceback."""
    run = home.start("materialize", failpoint=f"{Failpoint.STAGED}:pause")
    home.wait_for(Failpoint.STAGED, run)
    assert stop_embedded(home.path)
    assert ensure_embedded(home.path) == home.url
    home.go_on(Failpoint.STAGED)
    code, _, err = home.finish(run)
    print(f"the run under the restart: exit {code}, {error_lines(err)}")  # shown with -s
    assert "Traceback" not in err, err[-3000:]
    if code != 0:
        assert code == 1, err[-3000:]
        lines = error_lines(err)
        assert lines and all(line.startswith("error: database-unavailable: ") for line in lines), (
            err[-3000:]
        )


# --- two builds at once, and an ingest during a build -------------------------------------


def test_two_materializes_two_seconds_apart_both_succeed_or_one_is_busy(
    home: Home, corpus: Story
) -> None:
    home.ingest(corpus.pairs)
    home.register(corpus.schema_ids)
    first = home.start("materialize")
    time.sleep(2)
    second = home.start("materialize")
    results = [home.finish(first), home.finish(second)]
    for code, _, err in results:
        assert "Traceback" not in err, err[-3000:]
        if code != 0:
            assert code == 1 and [line.split(":")[1] for line in error_lines(err)] == [" busy"]
    assert sum(code == 0 for code, _, _ in results) >= 1
    assert_as_clean(home, corpus.pairs, corpus.schema_ids)


@pytest.mark.parametrize("point", [Failpoint.VERIFIED, Failpoint.STAGED])
def test_entries_ingested_under_a_run_are_built_by_the_next_run(
    home: Home, corpus: Story, point: Failpoint
) -> None:
    """The run stops at `point`; half the corpus is ingested under it; the run finishes
    (exit 0), and the next run leaves all of it built. STAGED: its tables staged.
    VERIFIED: its batch verified, not committed: what the index records it was computed
    from must be what was verified, not the store as it is after, else the next run finds
    the index up to date, verifies the second half and never chains it (its tables stay
    UNCHANGED)."""
    half = len(corpus.pairs) // 2
    home.ingest(corpus.pairs[:half])
    home.register(corpus.schema_ids)
    run = home.start("materialize", failpoint=f"{point}:pause")
    home.wait_for(point, run)
    home.ingest(corpus.pairs[half:])
    home.go_on(point)
    code, _, err = home.finish(run)
    assert code == 0, err[-3000:]  # its later runs may already index the second half

    home.ok("materialize")
    assert_as_clean(home, corpus.pairs, corpus.schema_ids)
