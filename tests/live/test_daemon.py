"""The live path end to end: `dagster-daemon run` on the project's workspace (as `dagster
dev` and deploy/ start it), nothing else running. Entries written into the entry store by
another process than `panda` (psql, the SQL INSERT a p2panda node would do, README) reach
their table through a run the listener started, not a sensor tick; a burst of entries is
one run; with the listener down, the sensors bring the entries in; no work is requested
twice. The queue loop turns when a run is submitted in the daemon or the run in progress
ends, not on its timer."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.scheduler.instigation import TickStatus
from dagster._core.storage.tags import SENSOR_NAME_TAG

from bench.latency import DaemonScenario, panda, scenario, wait_for_phase
from p2panda_assets.defs.assets import THROUGH_TAG
from p2panda_assets.defs.sensors import schema_entries_sensor
from p2panda_assets.defs.sensors.coverage import NOTIFY, TRIGGER_TAG
from p2panda_assets.failpoints import FAILPOINT_DIR_ENV, FAILPOINT_ENV, Failpoint
from p2panda_assets.jsonlines import parse_line
from p2panda_assets.protocol.entry import decode_entry

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.postgres]

LOOP = 5.0  # the daemon's sensor loop (MIN_INTERVAL_LOOP_TIME)


def publish(run: DaemonScenario, *names: str) -> tuple[list[str], list[tuple[bytes, bytes]]]:
    """Author new instances (`panda publish`, not ingested): their ids and entry pairs."""
    before = run.story.read_text().count("\n")
    ids = [
        panda(
            "publish", "create", "--schema", "note", "--field", f"name={n}", "--out", str(run.story)
        )
        for n in names
    ]
    lines = run.story.read_text().splitlines()[before:]
    pairs = [parse_line(line) for line in lines]
    return ids, [(entry, payload) for entry, payload in pairs if payload is not None]


def outside_insert(url: str, pairs: list[tuple[bytes, bytes]]) -> float:
    """One INSERT statement of the pairs by psql, as a p2panda node writes the store
    (README); when it returned (a Unix timestamp)."""
    values = []
    for entry, payload in pairs:
        e = decode_entry(entry)
        values.append(
            f"('\\x{e.hash.hex()}', '\\x{entry.hex()}', '\\x{payload.hex()}',"
            f" '\\x{e.author.hex()}', {e.log_id}, {e.seq_num})"
        )
    statement = (
        "INSERT INTO p2panda.entries (hash, entry, payload, author, log_id, seq_num) VALUES "
        + ", ".join(values)
    )
    subprocess.run(
        ["psql", url, "-v", "ON_ERROR_STOP=1", "-q", "-c", statement],
        check=True,
        capture_output=True,
    )
    return time.time()


def runs_since(schema_id: str, since: float) -> list[dg.DagsterRun]:
    with dg.DagsterInstance.get() as instance:
        records = instance.get_run_records(
            filters=dg.RunsFilter(tags={"dagster/partition": schema_id}), limit=50
        )
    found = [r for r in records if r.create_timestamp.timestamp() >= since]
    return [r.dagster_run for r in sorted(found, key=lambda r: r.create_timestamp)]


def created_at(run: dg.DagsterRun) -> float:
    with dg.DagsterInstance.get() as instance:
        [record] = instance.get_run_records(filters=dg.RunsFilter(run_ids=[run.run_id]))
    return record.create_timestamp.timestamp()


def ticks_after(since: float, count: int, timeout: float = 120) -> list[float]:
    """Wait for `count` ticks of the entries sensor that start after `since`."""
    deadline = time.time() + timeout
    with dg.DagsterInstance.get() as instance:
        while True:
            ticks = []
            for state in instance.all_instigator_state():
                if state.instigator_name == schema_entries_sensor.name:
                    found = instance.get_ticks(
                        state.instigator_origin_id, state.selector_id, limit=20
                    )
                    ticks = sorted(t.timestamp for t in found if t.timestamp > since)
            if len(ticks) >= count:
                return ticks[:count]
            assert time.time() < deadline, f"fewer than {count} sensor ticks after {since}"
            time.sleep(0.5)


def tick_done(timeout: float = 60) -> None:
    """Wait until the entries sensor's latest tick has finished (read the store)."""
    deadline = time.time() + timeout
    with dg.DagsterInstance.get() as instance:
        while True:
            for state in instance.all_instigator_state():
                if state.instigator_name == schema_entries_sensor.name:
                    [latest] = instance.get_ticks(
                        state.instigator_origin_id, state.selector_id, limit=1
                    )
                    if latest.status != TickStatus.STARTED:
                        return
            assert time.time() < deadline, "the sensor's tick did not finish"
            time.sleep(0.05)


def wait_rows(run: DaemonScenario, ids: list[str], started: float, timeout: float = 300) -> float:
    """Seconds from `started` until every row of `ids` is in the table."""
    while not set(ids) <= run.rows():
        assert time.time() - started < timeout, f"rows {ids} not visible after {timeout} s"
        assert run.daemon is not None and run.daemon.poll() is None, "the daemon exited"
        time.sleep(0.1)
    return time.time() - started


def listener_backends(url: str) -> list[str]:
    out = subprocess.run(
        [
            "psql",
            url,
            "-At",
            "-c",
            "SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN p2panda_entries'",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split()


def start_and_build(run: DaemonScenario) -> None:
    """A schema authored and registered, the daemon started, and its first build done
    (through the sensors)."""
    run.author_schema()
    run.start_daemon()
    started = time.time()
    while not run.rows():
        assert time.time() - started < 600, "no first build"
        time.sleep(0.5)


def test_outside_writes_reach_their_table_through_the_listener() -> None:
    with scenario() as run:
        start_and_build(run)
        deadline = time.time() + 60
        while not listener_backends(run.url):  # the daemon's queue loop started it
            assert time.time() < deadline, "no listener in the daemon"
            time.sleep(0.5)
        run.wait_until_idle(timeout=600)

        # One entry by psql, just after a tick of the entries sensor has read the store:
        # the next tick starts up to a loop later.
        ids, pairs = publish(run, "outside")
        wait_for_phase(0.0, timeout=60)
        tick_done()
        inserted = outside_insert(run.url, pairs)
        seconds = wait_rows(run, ids, inserted)
        [first, *others] = runs_since(run.schema_id, inserted - 0.5)
        assert first.tags[TRIGGER_TAG] == NOTIFY, first.tags
        assert SENSOR_NAME_TAG not in first.tags
        assert first.tags["p2panda/queue"] == "pipeline"
        assert first.tags["p2panda/schema"] == "note"  # the run named itself, as every run
        assert int(first.tags[THROUGH_TAG]) >= 1
        submitted = created_at(first)
        [next_tick] = ticks_after(inserted, 1)
        assert submitted < next_tick, "not submitted before the sensor's next tick"
        print(
            f"outside insert: run submitted after {submitted - inserted:.2f} s,"
            f" row visible after {seconds:.2f} s"
        )
        # The sensor saw the same entry at its next ticks, and requested nothing.
        run.wait_until_idle(timeout=600)
        ticks_after(time.time(), 2)
        assert others == []
        later = runs_since(run.schema_id, inserted - 0.5)
        assert [r.run_id for r in later] == [first.run_id], [r.tags for r in later]

        # A burst: 20 entries in one statement, one run.
        ids, pairs = publish(run, *(f"burst {i}" for i in range(20)))
        inserted = outside_insert(run.url, pairs)
        wait_rows(run, ids, inserted)
        run.wait_until_idle(timeout=600)
        ticks_after(time.time(), 2)
        [burst] = runs_since(run.schema_id, inserted - 0.5)
        assert burst.tags[TRIGGER_TAG] == NOTIFY

        # The listener down (its connection killed): the sensors bring the entry in.
        for pid in listener_backends(run.url):
            subprocess.run(
                ["psql", run.url, "-Atq", "-c", f"SELECT pg_terminate_backend({pid})"],
                check=True,
                capture_output=True,
            )
        ids, pairs = publish(run, "while down")
        inserted = outside_insert(run.url, pairs)
        seconds = wait_rows(run, ids, inserted)
        assert seconds < 2 * LOOP + 60, seconds
        run.wait_until_idle(timeout=600)
        ticks_after(time.time(), 2)
        [caught] = runs_since(run.schema_id, inserted - 0.5)
        assert caught.tags.get(SENSOR_NAME_TAG) == schema_entries_sensor.name
        assert TRIGGER_TAG not in caught.tags
        assert listener_backends(run.url), "the listener did not reconnect"


LONGEST = 300.0  # the queue loop's longest wait in the test below: a turn on its timer
PROMPT = 15.0  # what a run started by the bell waits in the queue at most, loaded machine


def event_time(run: dg.DagsterRun, kind: dg.DagsterEventType) -> float:
    with dg.DagsterInstance.get() as instance:
        [event] = [e for e in instance.all_logs(run.run_id) if e.dagster_event_type == kind]
    return event.timestamp


def wait_for_status(
    schema_id: str, since: float, status: dg.DagsterRunStatus, timeout: float = 120
) -> dg.DagsterRun:
    """The first run of the partition created after `since`, once it has `status`."""
    deadline = time.time() + timeout
    while True:
        runs = runs_since(schema_id, since)
        if runs and runs[-1].status == status:
            return runs[-1]
        assert time.time() < deadline, f"no run {status} after {timeout} s: {runs}"
        time.sleep(0.05)


def test_the_queue_turns_when_a_run_is_submitted_or_ends(tmp_path: Path) -> None:
    """With the queue loop's timer at five minutes, a run submitted to an idle deployment
    starts at once, and so does a run queued behind one, as soon as that one ends (held
    at a failpoint meanwhile, so it is queued behind it for sure)."""
    with scenario() as run:
        config_path = Path(os.environ["DAGSTER_HOME"]) / "dagster.yaml"
        config = yaml.safe_load(config_path.read_text())
        config["run_coordinator"]["config"]["dequeue_every_seconds"] = LONGEST
        config_path.write_text(yaml.safe_dump(config))
        go = tmp_path / f"{Failpoint.INDEXED}.go"
        go.touch()  # runs pass the failpoint until the test removes this
        os.environ[FAILPOINT_ENV] = f"{Failpoint.INDEXED}:pause"
        os.environ[FAILPOINT_DIR_ENV] = str(tmp_path)
        start_and_build(run)
        run.wait_until_idle(timeout=600)

        ids, pairs = publish(run, "alone")
        inserted = outside_insert(run.url, pairs)
        wait_rows(run, ids, inserted)
        [alone] = runs_since(run.schema_id, inserted - 0.5)
        idle_wait = event_time(alone, dg.DagsterEventType.RUN_STARTING) - created_at(alone)
        assert idle_wait < PROMPT, idle_wait

        go.unlink()
        ids_ahead, pairs_ahead = publish(run, "ahead")
        ids_behind, pairs_behind = publish(run, "behind")
        inserted = outside_insert(run.url, pairs_ahead)
        ahead = wait_for_status(run.schema_id, inserted - 0.5, dg.DagsterRunStatus.STARTED)
        reached = tmp_path / f"{Failpoint.INDEXED}.reached"
        while not reached.exists():
            assert time.time() - inserted < 120, "the run ahead did not reach its failpoint"
            time.sleep(0.05)
        outside_insert(run.url, pairs_behind)
        behind = wait_for_status(run.schema_id, inserted - 0.5, dg.DagsterRunStatus.QUEUED)
        assert behind.run_id != ahead.run_id
        go.touch()  # the run ahead goes on, and ends
        wait_rows(run, ids_ahead + ids_behind, inserted)
        run.wait_until_idle(timeout=600)
        ended = event_time(ahead, dg.DagsterEventType.RUN_SUCCESS)
        behind_wait = event_time(behind, dg.DagsterEventType.RUN_STARTING) - ended
        assert behind_wait < PROMPT, behind_wait
        print(f"queue: {idle_wait:.2f} s idle, {behind_wait:.2f} s behind a run that ended")
