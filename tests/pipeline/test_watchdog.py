"""Issue 51, item 3: a stuck run cannot hold everything.

A run whose Spark application gets no executor (a standalone master with no worker,
started from the pyspark wheel, as on a cluster whose executors cannot reach the
driver) fails with `no-executors` within the configured time, while its process lives
on; the pipeline lock is free, and the next `panda materialize` builds the tables. A
job whose tasks make no progress fails with `stalled` and frees the lock too. And a
`panda materialize` that finds the lock taken says at once on stderr whom it waits for
(the run, its schema, since when), then how the wait goes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

import psycopg
import pyspark
import pytest
from pyspark.sql import SparkSession

from p2panda_assets.cli.main import main
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.pipeline.columnar.arrow_io import DRIVER_PATH_ENVS
from p2panda_assets.pipeline.spark.watchdog import (
    NO_EXECUTOR_TIMEOUT_ENV,
    Clock,
    Look,
    Stage,
    watched,
)
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.pipeline_lock import (
    LOCK_WAIT_ENV,
    PIPELINE_LOCK,
    PROGRESS_ENV,
    hold_pipeline_lock,
    label_session,
    publish_progress,
    release_pipeline_lock,
)
from p2panda_assets.store.registry import register
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances

HOST = "127.0.0.1"
SPARK_HOME = Path(pyspark.__file__).parent
ROOT = Path(__file__).resolve().parents[2]
NO_EXECUTOR_TIMEOUT = 3  # seconds: what the stuck run is given
DRIVER_TIMEOUT = 120  # seconds for the stuck run's process to report (~20 s seen)


def story(conn: psycopg.Connection) -> list[str]:
    """Two related schemas and a few instances, ingested and registered."""
    corpus = CorpusBuilder()
    owner = corpus.author(1)
    profile = owner.schema(30, "profile")
    profile.migrate(create_field("name", "varchar"))
    mail = owner.schema(31, "mail")
    mail.migrate(
        create_field("subject", "text"),
        create_field("to", "relation", schema=profile.log_ref, cascade=True),
    )
    panda = instances(owner, 1).create(profile.ref(2), name="panda")
    instances(owner, 2).create(mail.ref(2), subject="hello", to=panda)
    ensure_schema(conn)
    ingest(conn, corpus.pairs)
    schema_ids = [profile.schema_id, mail.schema_id]
    for schema_id, name in zip(schema_ids, ("profile", "mail"), strict=True):
        register(conn, *parse_schema_id(schema_id), name)
    return schema_ids


def lock_sessions(conn: psycopg.Connection, granted: bool) -> list[int]:
    """The sessions holding (`granted`) or waiting for the pipeline lock."""
    rows = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = %s::oid"
        " AND classid = 0 AND objsubid = 1 AND granted = %s",
        (PIPELINE_LOCK, granted),
    ).fetchall()
    return [row[0] for row in rows]


# --- a master without a worker -------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def spark_env(scratch: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOCAL_DIRS": str(scratch),
    }


def master_alive(ui_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{ui_url}/json/", timeout=2) as response:
            if response.headers.get_content_subtype() != "json":
                return False
            return json.load(response)["status"] == "ALIVE"
    except (OSError, ValueError):
        return False


@pytest.fixture
def lonely_master(tmp_path: Path) -> Iterator[str]:
    """A standalone master on 127.0.0.1 that no worker ever joins: an application gets
    registered and never an executor."""
    port, ui_port = free_port(), free_port()
    properties = tmp_path / "spark-defaults.conf"
    properties.write_text("spark.master.rest.enabled false\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    log = tmp_path / "master.log"
    with log.open("wb") as out:
        master = subprocess.Popen(
            [
                str(SPARK_HOME / "bin" / "spark-class"),
                "org.apache.spark.deploy.master.Master",
                *("--host", HOST, "--port", str(port), "--webui-port", str(ui_port)),
                *("--properties-file", str(properties)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=spark_env(scratch),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while not master_alive(f"http://{HOST}:{ui_port}"):
            if time.monotonic() > deadline or master.poll() is not None:
                pytest.fail(f"no master within 30 s\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield f"spark://{HOST}:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(master.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            master.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(master.pid, signal.SIGKILL)
        master.wait(timeout=10)


# --- the stuck run fails, and the next one proceeds ----------------------------------


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.e2e
def test_a_run_without_executors_fails_with_no_executors_and_the_next_run_proceeds(
    spark: SparkSession,
    conn: psycopg.Connection,
    database_url: str,
    p2panda_home: Path,
    lonely_master: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    schema_ids = story(conn)
    scratch = tmp_path / "driver-scratch"
    scratch.mkdir()
    env = {
        **spark_env(scratch),
        "P2PANDA_HOME": str(p2panda_home),
        "P2PANDA_DATABASE_URL": database_url,
        "SPARK_MASTER": lonely_master,
        NO_EXECUTOR_TIMEOUT_ENV: str(NO_EXECUTOR_TIMEOUT),
        # The index step in Spark, as on a large store: its first job is the one that
        # finds no executor (a small store's would run in the driver: `pipeline.index.paths`).
        **dict.fromkeys(DRIVER_PATH_ENVS, "-1"),
    }
    env.pop("DAGSTER_HOME", None)
    stuck = subprocess.Popen(
        [sys.executable, "-m", "tests.pipeline.watchdog_check"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        report = read_report(stuck)
        # (a) The run failed with the reason, after the configured time (the message
        # says how long its job waited) and not much later.
        assert report["reason"] == Reason.NO_EXECUTORS, report
        assert report["run_status"] == "FAILURE", report
        waited = float(report["message"].split(" for ")[1].split(" s")[0])
        assert NO_EXECUTOR_TIMEOUT <= waited <= NO_EXECUTOR_TIMEOUT + 2, report
        assert "0 executors" in report["message"], report
        # While it held the lock, it said who it was (its Dagster run, labelled by the
        # resource) and what its Spark work did, for whoever waited.
        row = conn.execute(
            "SELECT run_id, schema_id, progress FROM p2panda.pipeline_lock_holder"
        ).fetchone()
        assert row is not None and row[0] == report["run_id"] and row[1] in schema_ids, row
        assert "0 executors, job " in row[2], row
        # Its process lives on, with its Spark application and its connections ...
        assert stuck.poll() is None
        # ... and holds the lock no longer: (b) the next run takes it and builds.
        assert lock_sessions(conn, granted=True) == []
        capsys.readouterr()
        assert main(["materialize"]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        for schema_id in schema_ids:
            assert f"{schema_id}  " in out and "  1 rows  " in out, out
        assert stuck.poll() is None
    finally:
        with contextlib.suppress(BrokenPipeError, ValueError):
            stuck.communicate(input="", timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(stuck.pid, signal.SIGKILL)


def read_report(process: subprocess.Popen[str]) -> dict:
    """The stuck run's JSON line; its stderr if it gives none in time."""
    stdout = process.stdout
    assert stdout is not None
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(DRIVER_TIMEOUT)
    line = box[0] if box else ""
    if not line.startswith("{"):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        _, err = process.communicate(timeout=30)
        pytest.fail(f"no report within {DRIVER_TIMEOUT} s: {line!r}\n{err[-5000:]}")
    return json.loads(line)


# --- a stalled job ---------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.postgres
def test_a_job_that_makes_no_progress_fails_stalled_and_frees_the_lock(
    spark: SparkSession, conn: psycopg.Connection, database_url: str, tmp_path: Path
) -> None:
    """The job's one task runs and never ends. The watchdog is started once the task
    runs (on a loaded machine a task may take seconds to start, which the watchdog would
    rightly count too): two seconds later the job is cancelled and the run fails
    `stalled`, its lock released on the way out. Meanwhile it wrote what the job did
    where a run waiting for the lock reads it."""
    running = tmp_path / "running"

    def stuck_task(rows: Iterable[int]) -> Iterator[int]:
        """Nested, so that it is pickled by value for the Python worker."""
        running.write_text("running")
        time.sleep(600)  # killed when its job is cancelled
        yield from rows

    failures: list[BaseException] = []

    def job() -> None:
        try:
            spark.sparkContext.parallelize([1], 1).mapPartitions(stuck_task).collect()
        except BaseException as error:
            failures.append(error)

    hold_pipeline_lock(conn)
    runner = threading.Thread(target=job, daemon=True)
    runner.start()
    deadline = time.monotonic() + 60
    while not running.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running.exists(), failures
    started = time.monotonic()
    with pytest.raises(P2pandaError) as raised, watched(spark, stall_timeout=2, holder=conn):
        try:
            runner.join(60)
            assert not runner.is_alive(), "the job is still stuck after 60 s"
            raise failures[0]
        finally:
            release_pipeline_lock(conn)
    elapsed = time.monotonic() - started
    assert raised.value.reason is Reason.STALLED
    assert "for 2 s (job " in raised.value.message, raised.value.message
    # " 0/1 tasks", not "(1 running)": Spark's status store records a task's start at most
    # every spark.ui.liveUpdate.period, and a job with no later event may not show it yet
    # (seen in a fresh-clone CI run: "stage 1600 0/1 tasks").
    assert " 0/1 tasks" in raised.value.message, raised.value.message
    assert 2 <= elapsed < 30
    assert lock_sessions(conn, granted=True) == []
    # What it did was written for those waiting for the lock, by the lock holder's pid.
    row = conn.execute("SELECT pid, progress FROM p2panda.pipeline_lock_holder").fetchone()
    assert row is not None and row[0] == conn.info.backend_pid, row
    assert " 0/1 tasks" in row[1], row  # the job as it ran, or the verdict
    # The session goes on: the next job runs (its core was given back).
    assert spark.sparkContext.parallelize(range(4), 2).sum() == 6


def test_waiting_for_executors_is_not_a_stall_and_no_job_is_neither() -> None:
    """The two clocks apart: a job without executors is `no-executors` only, its clock
    from when executors went missing; time without a job counts for neither."""
    clock = Clock(no_executor_timeout=10, stall_timeout=5)
    waiting = Look((1,), (Stage(1, 0, 1, 0, 0, 0),), executors=0)
    assert clock.verdict(waiting, 0) is None
    assert clock.verdict(waiting, 9) is None  # past the stall timeout: not a stall
    verdict = clock.verdict(waiting, 10)
    assert verdict is not None and verdict.reason is Reason.NO_EXECUTORS
    clock = Clock(no_executor_timeout=10, stall_timeout=5)
    assert clock.verdict(Look((), (), executors=0), 0) is None
    assert clock.verdict(Look((), (), executors=0), 100) is None
    running = Look((2,), (Stage(3, 0, 2, 1, 0, 0),), executors=1)
    assert clock.verdict(running, 100) is None
    moved = Look((2,), (Stage(3, 0, 2, 1, 1, 0),), executors=1)
    assert clock.verdict(moved, 104) is None  # a task finished: the clock starts again
    verdict = clock.verdict(moved, 109)
    assert verdict is not None and verdict.reason is Reason.STALLED


# --- waiting for the lock out loud -----------------------------------------------------


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.e2e
def test_materialize_behind_a_lock_holder_says_what_it_waits_for(
    spark: SparkSession,
    conn: psycopg.Connection,
    database_url: str,
    p2panda_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The holder is a session labelled as a run of `mail`, as the Dagster resource
    labels its connections, that never lets go: the waiter says whom it waits for at
    once, then how long it has waited and what the holder's Spark work does (as the
    holder's watchdog writes it), and gives up with `busy` at its lock wait."""
    schema_ids = story(conn)
    monkeypatch.setenv(PROGRESS_ENV, "0.5")
    monkeypatch.setenv(LOCK_WAIT_ENV, "2.6")
    run_id = "0c1f7e2a-5b7d-4f8e-9a51-3f2e6d1b9c40"
    progress = "1 executor, job 7: stage 9 3/8 tasks (1 running)"
    with connect(database_url, autocommit=True) as holder:
        label_session(holder, run_id, schema_ids[1])
        hold_pipeline_lock(holder)
        publish_progress(conn, holder.info.backend_pid, progress)
        capsys.readouterr()
        code = main(["materialize"])
        out, err = capsys.readouterr()
        assert lock_sessions(conn, granted=True) == [holder.info.backend_pid]
    assert (code, out) == (1, ""), err
    lines = err.splitlines()
    assert lines[0].startswith("waiting for the pipeline lock (at most 3 s): held by run "), err
    first, *still, last = lines
    assert f"run {run_id} (schema mail, {schema_ids[1]}) since 20" in first, err
    assert " UTC (" in first and first.endswith(" s)"), err
    assert len(still) >= 2, err
    for line in still:
        assert line.startswith("still waiting for the pipeline lock ("), err
        assert f"held by run {run_id} (schema mail, {schema_ids[1]}) since 20" in line, err
        assert f"; its Spark work: {progress}, " in line and line.endswith(" s ago"), err
    assert last.startswith("error: busy: "), err
