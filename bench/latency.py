"""Latency from `panda ingest` of one new entry to its row being visible in the table,
with nothing but the Dagster daemon and the sensors at their default interval.

A scenario in a temporary P2PANDA_HOME: the embedded PostgreSQL, `dagster-daemon run` on
the project's workspace, a schema authored, ingested and registered; the daemon's sensors
must materialize it without any `panda materialize`. Then, N times: publish one new
instance, ingest it, and time until its row is in the table.

An entry arrives at any moment of the daemon's fixed sensor loop (`MIN_INTERVAL_LOOP_TIME`,
5 s), and how long it waits for the next tick is most of the spread between samples. So
sample i is ingested (i + 1/2)/N of a loop after a tick of the entries sensor: the N
arrival phases are spread evenly over the loop, and the median is the latency of an entry
that arrives at the median phase. Publishing each sample as soon as the last one's row is
visible would not do that: the runs take about as long every time, so every sample would
arrive at about the same phase (each 1-3 s after a tick, measured), which is the bench's
rhythm, not the users'.

    .venv/bin/python bench/latency.py [--samples 3] [--baseline]
    .venv/bin/python bench/latency.py --rate 20 --seconds 60

`--baseline` measures the same scenario again with Dagster's DefaultRunLauncher (a new
process and Spark JVM per run) and prints the ratio of the medians.

`--rate N --seconds S` streams N entries a second for S seconds into the running daemon
(new instances, and every third an update of an earlier one; authored beforehand, then
each stored at its moment by the entry store's own ingest, as a node writes them) and
times each from its ingest to the row showing it (the instance, or its `_entry` at or
past the update). With the live path (p2panda_assets/live) a commit starts a run at once;
entries that arrive while a run is in progress are read by the next one.

The last line printed is JSON, and carries `median_latency_s`, `p95_latency_s` and
`max_latency_s` in every mode.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, DagsterRun
from dagster._daemon.sensor import MIN_INTERVAL_LOOP_TIME

from p2panda_assets.defs.sensors import MINIMUM_INTERVAL_SECONDS, schema_entries_sensor

ROOT = Path(__file__).resolve().parents[1]


def panda(*argv: str) -> str:
    from p2panda_assets.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    if code != 0:
        raise RuntimeError(f"panda {' '.join(argv)}: {err.getvalue()}")
    return out.getvalue().strip()


def stop_process_group(process: subprocess.Popen) -> None:
    """SIGTERM to the process group, then SIGKILL what is left: the daemon's and the
    webserver's code servers ignore SIGTERM and would outlive them."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


class DaemonScenario:
    """A home with a running daemon; `publish_and_wait` measures one entry's latency."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.story = home / "story.jsonl"
        os.environ["P2PANDA_HOME"] = str(home)
        os.environ.pop("P2PANDA_DATABASE_URL", None)
        os.environ.pop("DAGSTER_HOME", None)
        from p2panda_assets.defs.orchestration import prepare_environment

        self.url = prepare_environment()  # embedded server, DAGSTER_HOME, dagster.yaml
        self.daemon: subprocess.Popen[bytes] | None = None
        self.schema_id = ""

    def start_daemon(self) -> None:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_MASTER="local[2]")
        log = open(self.home / "daemon.log", "wb")  # noqa: SIM115 - closed with the process
        self.daemon = subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", "workspace.yaml"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop_daemon(self) -> None:
        """Stop the daemon gracefully, then kill what it started in its process group
        (its code server ignores SIGTERM and would outlive it)."""
        if self.daemon is not None:
            stop_process_group(self.daemon)

    def author_schema(self) -> None:
        panda("key", "new")
        out = ("--out", str(self.story))
        panda("schema", "note", "init", "--description", "latency probe", *out)
        panda("schema", "note", "migrate", str(ROOT / "resources" / "profile-001.yaml"), *out)
        state = json.loads((self.home / "authoring.json").read_text())
        author = next(iter(state["authors"]))
        self.schema_id = state["authors"][author]["schemas"]["note"]["schema_id"]
        panda("publish", "create", "--schema", "note", "--field", "name=first", *out)
        panda("ingest", str(self.story))
        author_hex, log_id = self.schema_id.rsplit("-", 1)
        panda("register", author_hex, log_id)

    def rows(self) -> set[str]:
        from psycopg import sql

        from p2panda_assets.store.database import connect
        from p2panda_assets.store.registry import table_identifier, table_name_for

        query = sql.SQL("SELECT _instance_id FROM {}").format(
            table_identifier(table_name_for(self.schema_id))
        )
        with connect(self.url) as conn:
            try:
                return {r[0] for r in conn.execute(query)}
            except Exception:  # the table does not exist yet
                return set()

    def wait_for(self, instance_id: str, started: float, timeout: float) -> float:
        """Seconds from `started` until the row is visible (raises after `timeout`)."""
        while time.perf_counter() - started < timeout:
            if instance_id in self.rows():
                return time.perf_counter() - started
            if self.daemon is not None and self.daemon.poll() is not None:
                raise RuntimeError(
                    f"the daemon exited: {(self.home / 'daemon.log').read_text()[-2000:]}"
                )
            time.sleep(0.2)
        raise TimeoutError(f"row {instance_id} not visible after {timeout} s")

    def idle(self) -> bool:
        """Whether no run is queued or in progress."""
        import dagster as dg

        from p2panda_assets.defs.sensors import UNFINISHED

        with dg.DagsterInstance.get() as instance:
            return not instance.get_runs(filters=dg.RunsFilter(statuses=UNFINISHED), limit=1)

    def wait_until_idle(self, timeout: float) -> None:
        """Until no run is queued or in progress: a sample starts on an idle deployment."""
        started = time.perf_counter()
        while not self.idle():
            if time.perf_counter() - started > timeout:
                raise TimeoutError(f"runs still unfinished after {timeout} s")
            time.sleep(0.5)

    def publish_and_wait(self, name: str, phase: float, timeout: float) -> Sample:
        """Publish one instance, ingest it `phase` seconds after a tick of the entries
        sensor, and time until its row is visible."""
        out = ("--out", str(self.story))
        instance_id = panda(
            "publish", "create", "--schema", "note", "--field", f"name={name}", *out
        )
        tick = wait_for_phase(phase, timeout)
        wall, started = time.time(), time.perf_counter()
        panda("ingest", str(self.story))
        seconds = self.wait_for(instance_id, started, timeout)
        arrival = {"arrival_phase": round(wall - tick, 2)}
        return Sample(seconds, arrival | phases(wall, self.schema_id))


def last_entries_tick(instance: DagsterInstance) -> float | None:
    """When the entries sensor's last tick started (a Unix timestamp), if it ticked."""
    for state in instance.all_instigator_state():
        if state.instigator_name == schema_entries_sensor.name:
            ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1)
            return ticks[0].timestamp if ticks else None
    return None


def wait_for_phase(phase: float, timeout: float) -> float:
    """Wait for the entries sensor's next tick, then until `phase` seconds after it;
    that tick's timestamp."""
    with DagsterInstance.get() as instance:
        started, last = time.perf_counter(), last_entries_tick(instance)
        while (tick := last_entries_tick(instance)) == last or tick is None:
            if time.perf_counter() - started > timeout:
                raise TimeoutError(f"no tick of {schema_entries_sensor.name} in {timeout} s")
            time.sleep(0.05)
    time.sleep(max(0.0, tick + phase - time.time()))
    return tick


def arrival_phases(samples: int, loop: float = MIN_INTERVAL_LOOP_TIME) -> list[float]:
    """`samples` moments of the sensor loop, evenly spread: (i + 1/2)/N of it."""
    return [round((i + 0.5) * loop / samples, 2) for i in range(samples)]


@dataclass(frozen=True)
class Sample:
    seconds: float
    phases: dict[str, float]  # where the time went, from the run's events


def first_run_after(instance: DagsterInstance, ingested_at: float, schema_id: str) -> Any:
    """The record of the partition's first run created at or after `ingested_at` (a Unix
    timestamp), None if there is none yet."""
    import dagster as dg

    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={"dagster/partition": schema_id}), limit=20
    )
    records = [r for r in records if r.create_timestamp.timestamp() >= ingested_at]
    return min(records, key=lambda r: r.create_timestamp) if records else None


def phases(ingested_at: float, schema_id: str) -> dict[str, float]:
    """The first run of the partition created after the ingest, cut at its events:
    until a sensor requested it, in Dagster's queue, until it began executing, and its
    steps up to the table swap."""
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        record = first_run_after(instance, ingested_at, schema_id)
        if record is None:
            return {}
        marks = {"requested": record.create_timestamp.timestamp()}
        started: dict[str, float] = {}
        steps: dict[str, float] = {}  # the steps up to the table, as far as they finished
        for event in instance.all_logs(record.dagster_run.run_id):
            kind = event.dagster_event_type
            if kind == dg.DagsterEventType.RUN_STARTING:
                marks["launched"] = event.timestamp
            elif kind == dg.DagsterEventType.RUN_START:
                marks["executing"] = event.timestamp
            elif kind == dg.DagsterEventType.STEP_START and "table_swapped" not in marks:
                started[event.step_key] = event.timestamp
            elif kind == dg.DagsterEventType.STEP_SUCCESS and event.step_key in started:
                steps[event.step_key] = round(event.timestamp - started[event.step_key], 2)
                if event.step_key == "materialized_table":
                    marks["table_swapped"] = event.timestamp
    points = [("ingested", ingested_at)] + [(k, marks[k]) for k in marks]
    phases = {f"{a}->{b}": round(tb - ta, 2) for (a, ta), (b, tb) in pairwise(points)}
    return phases | {f"step {key}": seconds for key, seconds in steps.items()}


@contextlib.contextmanager
def scenario() -> Iterator[DaemonScenario]:
    from p2panda_assets.store.embedded import stop_embedded

    before = dict(os.environ)
    home = Path(tempfile.mkdtemp(prefix="p2panda-latency-"))
    home.chmod(0o755)
    run = DaemonScenario(home)
    try:
        yield run
    finally:
        run.stop_daemon()
        stop_embedded(home)
        os.environ.clear()
        os.environ.update(before)


DEFAULT_LAUNCHER = {"module": "dagster", "class": "DefaultRunLauncher"}


def use_default_launcher() -> None:
    """The baseline: DAGSTER_HOME's dagster.yaml with Dagster's own run launcher (a new
    process, and a new Spark JVM, for every run) instead of the resident worker."""
    import yaml

    config_path = Path(os.environ["DAGSTER_HOME"]) / "dagster.yaml"
    config = yaml.safe_load(config_path.read_text())
    config_path.write_text(yaml.safe_dump(config | {"run_launcher": DEFAULT_LAUNCHER}))


def measure(samples: int, baseline: bool) -> dict[str, object]:
    """First build, then `samples` latencies, in a scenario of its own."""
    import dagster as dg

    label = "default launcher" if baseline else "resident launcher"
    with scenario() as run:
        if baseline:
            use_default_launcher()
        run.author_schema()
        run.start_daemon()
        started = time.perf_counter()
        print(f"{label}: schema {run.schema_id} registered; waiting for the first build")
        while not run.rows():
            time.sleep(0.5)
            if time.perf_counter() - started > 600:
                raise TimeoutError("no first materialization within 600 s")
        first_build = time.perf_counter() - started
        print(f"{label}: first build through the sensors: {first_build:.1f} s")
        with dg.DagsterInstance.get() as instance:
            dequeue_interval = instance.run_coordinator.dequeue_interval_seconds
        measured = []
        for i, phase in enumerate(arrival_phases(samples)):
            run.wait_until_idle(timeout=600)
            sample = run.publish_and_wait(f"probe {i}", phase, timeout=600)
            print(f"{label}: sample {i}: row visible in {sample.seconds:.1f} s {sample.phases}")
            measured.append(sample.seconds)
    ordered = sorted(measured)
    return {
        "sensor_minimum_interval_s": MINIMUM_INTERVAL_SECONDS,
        "daemon_sensor_loop_s": MIN_INTERVAL_LOOP_TIME,
        "dequeue_interval_s": dequeue_interval,
        "arrival_phases_s": arrival_phases(samples),
        "first_build_s": round(first_build, 1),
        "latency_s": [round(s, 1) for s in measured],
        "median_latency_s": round(ordered[len(ordered) // 2], 1),
        "p95_latency_s": round(percentile(ordered, 0.95), 1),
        "max_latency_s": round(ordered[-1], 1),
    }


def percentile(ordered: list[float], q: float) -> float:
    """The `q` quantile of sorted values (nearest rank)."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class Streamed:
    instance_id: str
    entry: bytes
    payload: bytes
    entry_hash: str  # hex, as the table's `_entry` says it
    position: int  # the how-manieth entry of its instance (0: its creation)


def author_stream(run: DaemonScenario, count: int) -> list[Streamed]:
    """`count` entries of the probe schema, in publishing order: new instances, and every
    third an update of an instance created before (round robin)."""
    from p2panda_assets.jsonlines import parse_line
    from p2panda_assets.protocol.entry import decode_entry

    out = run.home / "stream.jsonl"
    created: list[str] = []
    positions: dict[str, int] = {}
    plan = []
    for k in range(count):
        before = out.read_text().count("\n") if out.exists() else 0
        if k % 3 == 2 and created:
            instance_id = created[(k // 3) % len(created)]
            panda(
                "publish", "update", "--schema", "note", "--instance", instance_id,
                "--field", f"name=update {k}", "--out", str(out),
            )  # fmt: skip
        else:
            instance_id = panda(
                "publish", "create", "--schema", "note", "--field", f"name=stream {k}",
                "--out", str(out),
            )  # fmt: skip
            created.append(instance_id)
        [line] = out.read_text().splitlines()[before:]
        entry, payload = parse_line(line)
        assert payload is not None
        position = positions.get(instance_id, -1) + 1
        positions[instance_id] = position
        plan.append(Streamed(instance_id, entry, payload, decode_entry(entry).hash.hex(), position))
    return plan


class RowWatcher:
    """Polls the table; when each streamed entry first shows (its instance's row, with an
    `_entry` at or past it)."""

    def __init__(self, run: DaemonScenario, plan: list[Streamed]) -> None:
        self.run = run
        self.position = {item.entry_hash: item.position for item in plan}
        self.latest: dict[str, int] = {}  # instance -> the position its row shows
        self.seen: dict[int, float] = {}  # index in plan -> when first seen
        self.plan = plan
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        from psycopg import sql

        from p2panda_assets.store.database import connect
        from p2panda_assets.store.registry import table_identifier, table_name_for

        query = sql.SQL("SELECT _instance_id, _entry FROM {}").format(
            table_identifier(table_name_for(self.run.schema_id))
        )
        with connect(self.run.url, autocommit=True) as conn:
            while not self.stop.is_set():
                now = time.time()
                for instance_id, entry_hash in conn.execute(query):
                    self.latest[instance_id] = max(
                        self.latest.get(instance_id, -1), self.position.get(entry_hash, -1)
                    )
                for i, item in enumerate(self.plan):
                    if (
                        i not in self.seen
                        and self.latest.get(item.instance_id, -1) >= item.position
                    ):
                        self.seen[i] = now
                time.sleep(0.1)


def stream(rate: float, seconds: float) -> dict[str, object]:
    """`rate` entries a second for `seconds` into a running daemon: each one's latency."""
    from p2panda_assets.store.database import connect
    from p2panda_assets.store.ingest import ingest

    count = max(1, round(rate * seconds))
    with scenario() as run:
        run.author_schema()
        run.start_daemon()
        started = time.perf_counter()
        while not run.rows():
            time.sleep(0.5)
            if time.perf_counter() - started > 600:
                raise TimeoutError("no first materialization within 600 s")
        print(f"stream: first build through the sensors: {time.perf_counter() - started:.1f} s")
        run.wait_until_idle(timeout=600)
        plan = author_stream(run, count)
        print(f"stream: {count} entries authored; {rate}/s for {seconds} s")
        watcher = RowWatcher(run, plan)
        watcher.thread.start()
        ingested: list[float] = []
        with connect(run.url, autocommit=True) as conn:
            begin = time.time()
            for k, item in enumerate(plan):
                time.sleep(max(0.0, begin + k / rate - time.time()))
                ingest(conn, [(item.entry, item.payload)])
                ingested.append(time.time())
        behind = ingested[-1] - (begin + (count - 1) / rate)
        deadline = time.time() + 600
        while len(watcher.seen) < count and time.time() < deadline:
            if run.daemon is not None and run.daemon.poll() is not None:
                raise RuntimeError("the daemon exited")
            time.sleep(0.2)
        watcher.stop.set()
        watcher.thread.join()
        missing = count - len(watcher.seen)
        if missing:
            raise TimeoutError(f"{missing} of {count} entries not visible after 600 s")
        runs = runs_since(run.schema_id, begin)
    latencies = [watcher.seen[i] - ingested[i] for i in range(count)]
    ordered = sorted(latencies)
    return {
        "rate_per_s": rate,
        "seconds": seconds,
        "entries": count,
        "ingest_behind_schedule_s": round(behind, 2),
        "runs": len(runs),
        "runs_by_trigger": runs_by_trigger(runs),
        "last_latency_s": round(latencies[-1], 2),
        "median_latency_s": round(ordered[len(ordered) // 2], 2),
        "p95_latency_s": round(percentile(ordered, 0.95), 2),
        "max_latency_s": round(ordered[-1], 2),
    }


def runs_since(schema_id: str, since: float) -> list[DagsterRun]:
    """The runs of the partition created at or after `since` (a Unix timestamp)."""
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        records = instance.get_run_records(
            filters=dg.RunsFilter(tags={"dagster/partition": schema_id}), limit=100_000
        )
    return [r.dagster_run for r in records if r.create_timestamp.timestamp() >= since]


def runs_by_trigger(runs: list[DagsterRun]) -> dict[str, int]:
    """How many runs the listener (`notify`) and each sensor started."""
    counts: dict[str, int] = {}
    for r in runs:
        key = r.tags.get("p2panda/trigger") or r.tags.get("dagster/sensor_name") or "other"
        counts[key] = counts.get(key, 0) + 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--rate", type=float, help="entries a second, streamed (with --seconds)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long --rate streams")
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="also measure Dagster's DefaultRunLauncher in the same run, and the ratio",
    )
    args = parser.parse_args()
    if args.rate:
        print(json.dumps(stream(args.rate, args.seconds)))
        return
    figures = {"resident": measure(args.samples, baseline=False)}
    if args.baseline:
        figures["default"] = measure(args.samples, baseline=True)
        figures["median_ratio_resident_to_default"] = round(
            figures["resident"]["median_latency_s"] / figures["default"]["median_latency_s"], 2
        )
    resident = figures["resident"]
    keys = ("median_latency_s", "p95_latency_s", "max_latency_s")
    print(json.dumps(figures | {key: resident[key] for key in keys}))


if __name__ == "__main__":
    main()
