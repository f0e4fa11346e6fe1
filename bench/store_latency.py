"""Live latency on a store of real size: single entries arriving at a deployment whose
store already holds the bench corpus (bench/pipeline.py: 20 schemas, 1,000 authors), with
nothing but the Dagster daemon running.

The corpus (`--entries`, the same cached file as bench/pipeline.py's) is split as its
`--incremental` does: the newest entry of `--samples` + 1 instance logs, taken round robin
over the logs so they spread over the schemas, arrive later; the rest is the store. The
store is ingested, its 20 schemas registered and built by `panda materialize` (in a
process of its own, as a user would), then the daemon starts. The first arriving entry
warms the resident worker up (its Spark session starts) and is reported apart; then each
sample is ingested alone on an idle deployment and timed until the pipeline accounted it
and, where it was applied as a create or an update, its instance's row carries it
(`_entry`). With every sample: the run's phases (bench/latency.py's `phases`) and the
chained layers the store holds after it, so a sample that crossed the layer limit
(`PipelineTuning.max_layers`) shows.

    .venv/bin/python bench/store_latency.py [--entries 1000000] [--samples 24] [--authors 1000]
    .venv/bin/python bench/store_latency.py --rate 20 --seconds 60
    .venv/bin/python bench/store_latency.py --rate 20 --seconds 60 --soak

`--rate N --seconds S` streams N entries a second for S seconds instead (as
bench/latency.py does into an empty store), each timed until it is carried; then the
stream's runs are summed up (`runs_since`: their queue wait, length, steps and end
states).

`--soak` also publishes, into the stream, a migration of the first schema (a field
created, with a default: every schema relating to it is built again) a third of the way
through, and a revert to the version before it two thirds of the way through. Once the
deployment has settled, every run since the stream began must have succeeded, and each
table, the accounts and the deleted sets must equal, row for row, what a whole build of
the same entries makes in a fresh store (`panda materialize`): the live path converges
on the whole build, which the parity tests hold to the engine.

The last line printed is JSON: `median_latency_s`, `p95_latency_s`, `max_latency_s`, the
samples with their phases and layers, and how the store was built.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any, cast

from latency import (  # bench/, beside this script
    ROOT,
    DaemonScenario,
    first_run_after,
    percentile,
    phases,
    scenario,
)
from pipeline import AUTHORS, generate, schema_corpus, split_for_increment
from psycopg import sql

from p2panda_assets.jsonlines import parse_line, read_entry_lines
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.protocol.message_index import indexed_message
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register, table_identifier, table_name_for
from p2panda_assets.testing.builder import create_field

LOG_ID_BASE = 100  # bench/pipeline.py: schema i's instances are in log 100 + i


Arriving = list[tuple[bytes, bytes, str]]  # (entry, payload, schema id of its log)


def arriving(path: Path) -> Arriving:
    """The held-back entries: (entry, payload, schema id of its log)."""
    schema_ids = [s.schema_id for s in schema_corpus()[1]]
    held = []
    for text in path.read_text().splitlines():
        entry, payload = parse_line(text)
        assert payload is not None
        held.append((entry, payload, schema_ids[decode_entry(entry).log_id - LOG_ID_BASE]))
    return held


def build_store(
    run: DaemonScenario, store: Path, later: list[tuple[bytes, bytes]] | None = None
) -> dict[str, float]:
    """Ingest the store (and the `later` entries after it), register the 20 schemas and
    build them with `panda materialize`; the seconds of each."""
    timings = {}
    started = time.perf_counter()
    with connect(run.url, autocommit=True) as conn, connect(run.url, autocommit=True) as spare:
        ensure_schema(conn)
        ingest(conn, read_entry_lines([store]), spare=spare)
        ingest(conn, later or [])
        timings["ingest_s"] = round(time.perf_counter() - started, 1)
        for schema in schema_corpus()[1]:
            author, log_id = schema.schema_id.rsplit("-", 1)
            register(conn, bytes.fromhex(author), int(log_id), None)
    started = time.perf_counter()
    subprocess.run(
        [str(Path(sys.executable).parent / "panda"), "materialize"],
        cwd=ROOT,
        check=True,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
    )
    timings["materialize_s"] = round(time.perf_counter() - started, 1)
    return timings


def carried(run: DaemonScenario, entry_hash: bytes, payload: bytes, schema_id: str) -> bool:
    """Whether the pipeline accounted the entry and its instance's row shows it: carries
    it (`_entry`) after a create or an update applied, is gone after a delete."""
    with connect(run.url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT state FROM p2panda.accounts WHERE hash = %s", (entry_hash,)
        ).fetchone()
        if row is None:
            return False
        if row[0] != "applied":
            return True
        kind, *_, instance = indexed_message(payload)[0]
        table = table_identifier(table_name_for(schema_id))
        if kind == "delete":
            query = sql.SQL("SELECT count(*) = 0 FROM {} WHERE _instance_id = %s").format(table)
            answer = conn.execute(query, (bytes(instance).hex(),)).fetchone()
        else:
            query = sql.SQL("SELECT count(*) > 0 FROM {} WHERE _entry = %s").format(table)
            answer = conn.execute(query, (entry_hash.hex(),)).fetchone()
        return bool(answer and answer[0])


def index_step(ingested_at: float, schema_id: str) -> dict[str, str]:
    """What the index step of the sample's run reported (the raw entries' materialization):
    its path, and why it chained every log again, if it did."""
    import dagster as dg

    wanted = ("index_path", "index_chained_all_because")
    with dg.DagsterInstance.get() as instance:
        record = first_run_after(instance, ingested_at, schema_id)
        if record is None:
            return {}
        run_id = record.dagster_run.run_id
        for event in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
            materialization = event.asset_materialization
            if materialization is not None and materialization.asset_key.path == ["raw_entries"]:
                metadata = materialization.metadata
                return {key: str(metadata[key].value) for key in wanted if key in metadata}
    return {}


def layers(run: DaemonScenario) -> int:
    with connect(run.url, autocommit=True) as conn:
        row = conn.execute("SELECT chained_deltas FROM p2panda.pipeline_state").fetchone()
    return 1 + len(row[0]) if row else 0


def one_sample(
    run: DaemonScenario, entry: bytes, payload: bytes, schema_id: str, timeout: float
) -> dict[str, object]:
    """Ingest one entry on an idle deployment; seconds until it is carried."""
    run.wait_until_idle(timeout)
    entry_hash = decode_entry(entry).hash
    with connect(run.url, autocommit=True) as conn:
        wall, started = time.time(), time.perf_counter()
        ingest(conn, [(entry, payload)])
    while not carried(run, entry_hash, payload, schema_id):
        if time.perf_counter() - started > timeout:
            raise TimeoutError(f"entry {entry_hash.hex()} not carried after {timeout} s")
        if run.daemon is not None and run.daemon.poll() is not None:
            raise RuntimeError(
                f"the daemon exited: {(run.home / 'daemon.log').read_text()[-2000:]}"
            )
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    run.wait_until_idle(timeout)
    return {
        "seconds": round(seconds, 2),
        "schema": schema_id[-3:],
        "layers": layers(run),
        "index": index_step(wall, schema_id),
        "phases": phases(wall, schema_id),
    }


@contextmanager
def deployed_store(
    entries: int, seed: int, workers: int, authors: int, later: int
) -> Iterator[tuple[DaemonScenario, dict[str, float], dict[str, object], Arriving]]:
    """The corpus but for `later` arriving entries built into a deployment, its daemon
    started and warmed up by the first of those: (the deployment, how the store was
    built, the warm-up sample, the other arriving entries)."""
    path, _, _ = generate(entries, seed, workers, authors)  # bench/pipeline.py's, cached
    store, arriving_part, _ = split_for_increment(path, later)
    held = arriving(arriving_part)
    with scenario() as run:
        built = build_store(run, store)
        print(f"store: {built}", flush=True)
        run.start_daemon()
        warm = one_sample(run, *held[0], timeout=900)
        print(f"warm-up: {warm}", flush=True)
        yield run, built, warm, held[1:]


def measure(entries: int, samples: int, seed: int, workers: int, authors: int) -> dict[str, object]:
    with deployed_store(entries, seed, workers, authors, samples + 1) as (run, built, warm, held):
        measured = []
        for i, item in enumerate(held):
            sample = one_sample(run, *item, timeout=900)
            print(f"sample {i}: {sample}", flush=True)
            measured.append(sample)
    # The store (~2.3 GB at 1M) goes once measured; a failed run keeps it, with its logs.
    shutil.rmtree(run.home, ignore_errors=True)
    ordered = sorted(float(s["seconds"]) for s in measured)  # type: ignore[arg-type]
    return {
        "entries": entries,
        "authors": authors,
        "store": built,
        "warm_up": warm,
        "samples": measured,
        "median_latency_s": round(ordered[len(ordered) // 2], 2),
        "p95_latency_s": round(percentile(ordered, 0.95), 2),
        "max_latency_s": round(ordered[-1], 2),
    }


def carried_all(run: DaemonScenario, pending: dict[bytes, tuple[bytes, str]]) -> set[bytes]:
    """Which of the `pending` entries (hash -> payload, schema id) are carried, as
    `carried` says of one: the accounts asked once, each schema's table once (a delete's
    instance one query each)."""
    done: set[bytes] = set()
    with connect(run.url, autocommit=True) as conn:
        states = conn.execute(
            "SELECT hash, state FROM p2panda.accounts WHERE hash = ANY(%s)", (list(pending),)
        ).fetchall()
        applied: dict[str, list[bytes]] = {}
        for entry_hash, state in states:
            if state != "applied":
                done.add(bytes(entry_hash))
            else:
                applied.setdefault(pending[bytes(entry_hash)][1], []).append(bytes(entry_hash))
        for schema_id, hashes in applied.items():
            table = table_identifier(table_name_for(schema_id))
            shown = sql.SQL("SELECT _entry FROM {} WHERE _entry = ANY(%s)").format(table)
            rows = conn.execute(shown, ([h.hex() for h in hashes],))
            done.update(bytes.fromhex(row[0]) for row in rows)
            gone = sql.SQL("SELECT count(*) = 0 FROM {} WHERE _instance_id = %s").format(table)
            for entry_hash in hashes:
                kind, *_, instance = indexed_message(pending[entry_hash][0])[0]
                if kind == "delete":
                    row = conn.execute(gone, (bytes(instance).hex(),)).fetchone()
                    if row and row[0]:
                        done.add(entry_hash)
    return done


class Watcher:
    """Sweeps the entries ingested so far (`carried_all`) every 0.2 s; when each was
    first seen carried."""

    def __init__(self, run: DaemonScenario, plan: Arriving) -> None:
        self.run = run
        self.plan = {decode_entry(e).hash: (p, schema_id) for e, p, schema_id in plan}
        self.ingested: set[bytes] = set()
        self.seen: dict[bytes, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sweep, daemon=True)

    def _sweep(self) -> None:
        while not self.stop.is_set():
            now = time.time()
            left = {h: self.plan[h] for h in list(self.ingested) if h not in self.seen}
            if left:
                self.seen.update((h, now) for h in carried_all(self.run, left))
            time.sleep(0.2)


def runs_since(begin: float) -> dict[str, object]:
    """The runs created since `begin` (a Unix timestamp): how many, their wait in the
    queue, their length, the gap between a run's end and the start of the next where
    that one was already queued, and each step's length, as median and max (steps: also
    how many ran), from Dagster's run records and step stats. What a stream's latency is
    made of."""
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        records = [
            r
            for r in instance.get_run_records(limit=100_000)
            if r.create_timestamp.timestamp() >= begin
        ]
        waits, lengths = [], []
        ended: dict[str, int] = {}  # end state -> runs
        steps: dict[str, list[float]] = {}
        tables: list[tuple[float, str]] = []  # the table step's seconds, and its run
        for record in records:
            created = record.create_timestamp.timestamp()
            status = record.dagster_run.status.value
            ended[status] = ended.get(status, 0) + 1
            if record.start_time is not None:
                waits.append(record.start_time - created)
                if record.end_time is not None:
                    lengths.append(record.end_time - record.start_time)
            for stat in instance.get_run_step_stats(record.dagster_run.run_id):
                if stat.start_time is not None and stat.end_time is not None:
                    seconds = stat.end_time - stat.start_time
                    steps.setdefault(stat.step_key, []).append(seconds)
                    if stat.step_key == "materialized_table":
                        tables.append((seconds, record.dagster_run.run_id))
        slowest = [built(instance, run_id, seconds) for seconds, run_id in sorted(tables)[-3:]]
        ran = sorted(  # (created, started, ended) of the runs that ran, as they started
            (
                (r.create_timestamp.timestamp(), r.start_time, r.end_time)
                for r in records
                if r.start_time is not None and r.end_time is not None
            ),
            key=lambda span: span[1],
        )
        gaps = [  # from a run's end to the next run's start, where that one waited for it
            after[1] - before[2] for before, after in pairwise(ran) if after[0] < before[2]
        ]

    def spread(values: list[float]) -> dict[str, float]:
        ordered = sorted(values) or [0.0]
        return {"median": round(ordered[len(ordered) // 2], 2), "max": round(ordered[-1], 2)}

    return {
        "runs": len(records),
        "ended": ended,
        "queue_s": spread(waits),
        "run_s": spread(lengths),
        "between_runs_s": spread(gaps),
        "steps_s": {key: {"ran": len(v), **spread(v)} for key, v in sorted(steps.items())},
        "slowest_tables": slowest,
    }


def built(instance: Any, run_id: str, seconds: float) -> dict[str, object]:
    """What a run's table step built (its materialization's metadata), for a slow one:
    the schemas of its batch, whether incremental, and on which path."""
    import dagster as dg

    events = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
    ).records
    shown: dict[str, object] = {"seconds": round(seconds, 2)}
    for event in events:
        materialization = event.event_log_entry.asset_materialization
        if materialization and materialization.asset_key == dg.AssetKey("materialized_table"):
            metadata = materialization.metadata
            for key in ("status", "incremental", "build_path"):
                if key in metadata:
                    shown[key] = metadata[key].value
    logs = instance.all_logs(run_id)
    shown["built_together"] = next(
        (e.user_message for e in logs if "built together" in (e.user_message or "")), ""
    )[:200]
    return shown


def soak_entries() -> list[tuple[bytes, bytes]]:
    """The first schema's next two entries: a migration (a field created, with a
    default; the same entry as bench/pipeline.py's lens change), then a revert to the
    version before it."""
    builder, schemas = schema_corpus()
    before = schemas[0].version
    schemas[0].migrate(create_field("note", "text", default=""))
    schemas[0].revert(before)
    return [(entry, payload) for entry, payload in builder.pairs[-2:] if payload is not None]


def settled(run: DaemonScenario, timeout: float = 900) -> None:
    """Until no run has been queued or in progress for three checks over 15 s: longer
    than a sensor's interval, so that a run a sensor still requests is waited for too."""
    quiet = 0
    while quiet < 3:
        run.wait_until_idle(timeout)
        time.sleep(5)
        quiet = quiet + 1 if run.idle() else 0


def store_digest(url: str) -> dict[str, object]:
    """What the pipeline made of a store, to compare two stores row for row: each
    table's rows, the accounts and the deleted sets, each as a count and an md5 of its
    rows in order; each schema's registry row (its version: a revert is one); the
    accounts counted by schema and state, to show where two differ."""
    digest: dict[str, object] = {}
    with connect(url, autocommit=True) as conn:
        for schema in schema_corpus()[1]:
            table = table_identifier(table_name_for(schema.schema_id))
            rows = sql.SQL(
                "SELECT count(*), md5(string_agg(t::text, E'\\n' ORDER BY t._instance_id))"
                " FROM {} t"
            ).format(table)
            digest[f"table {schema.schema_id[-3:]}"] = list(conn.execute(rows).fetchone() or ())
        digest["accounts"] = list(
            conn.execute(
                "SELECT count(*), md5(string_agg(concat_ws(' ', encode(hash, 'hex'), schema_id,"
                " state, reason, message), E'\\n' ORDER BY hash)) FROM p2panda.accounts"
            ).fetchone()
            or ()
        )
        digest["deleted"] = list(
            conn.execute(
                "SELECT count(*), md5(string_agg(schema_id || ' ' || encode(instance_id, 'hex'),"
                " E'\\n' ORDER BY schema_id, instance_id)) FROM p2panda.deleted_instances"
            ).fetchone()
            or ()
        )
        digest["registry"] = [
            [schema_id[-3:], status, version, version_hash, rows]
            for schema_id, status, version, version_hash, rows in conn.execute(
                "SELECT schema_id, status, version, version_hash, rows FROM p2panda.schemas"
                " ORDER BY schema_id"
            )
        ]
        digest["accounts_by_state"] = {
            f"{schema_id[-3:] if schema_id else '-'} {state}": n
            for schema_id, state, n in conn.execute(
                "SELECT schema_id, state, count(*) FROM p2panda.accounts"
                " GROUP BY 1, 2 ORDER BY 1, 2"
            )
        }
    return digest


def whole_build_digest(store: Path, later: list[tuple[bytes, bytes]]) -> dict[str, object]:
    """`store_digest` of the same entries built whole in a fresh deployment: the store,
    then every `later` entry, one `panda materialize`."""
    with scenario() as run:
        built = build_store(run, store, later)
        print(f"whole build: {built}", flush=True)
        digest = store_digest(run.url)
    shutil.rmtree(run.home, ignore_errors=True)
    return digest


def stream(
    entries: int,
    rate: float,
    seconds: float,
    seed: int,
    workers: int,
    authors: int,
    soak: bool = False,
) -> dict[str, object]:
    """`rate` entries a second for `seconds` into a deployment whose store holds the
    corpus: the newest entry of as many instance logs, spread over the schemas, each
    timed from its ingest until it is carried (`carried_all`, swept every 0.2 s). With
    `soak`, a migration and its revert arrive in the stream (the module's docstring)."""
    count = max(1, round(rate * seconds))
    moments = (count // 3, 2 * count // 3)
    schema_changes = dict(zip(moments, soak_entries(), strict=True)) if soak else {}
    later: list[tuple[bytes, bytes]] = []  # what arrived after the store, in order
    with deployed_store(entries, seed, workers, authors, count + 1) as (run, built, warm, plan):
        watcher = Watcher(run, plan)
        watcher.thread.start()
        ingested: list[float] = []
        with connect(run.url, autocommit=True) as conn:
            begin = time.time()
            for k, (entry, payload, _) in enumerate(plan):
                time.sleep(max(0.0, begin + k / rate - time.time()))
                if k in schema_changes:
                    ingest(conn, [schema_changes[k]])
                    later.append(schema_changes[k])
                ingest(conn, [(entry, payload)])
                later.append((entry, payload))
                ingested.append(time.time())
                watcher.ingested.add(decode_entry(entry).hash)
        behind = ingested[-1] - (begin + (count - 1) / rate)
        deadline = time.time() + 900
        while len(watcher.seen) < count and time.time() < deadline:
            time.sleep(0.2)
        watcher.stop.set()
        watcher.thread.join()
        if len(watcher.seen) < count:
            raise TimeoutError(f"{count - len(watcher.seen)} of {count} not carried after 900 s")
        time.sleep(5)  # the last runs' checks end after their tables are swapped
        if soak:
            settled(run)
            live = store_digest(run.url)
        ran = runs_since(begin)
        print(f"runs: {ran}", flush=True)
    shutil.rmtree(run.home, ignore_errors=True)
    converged: dict[str, object] = {}
    if soak:
        path, _, _ = generate(entries, seed, workers, authors)
        store, arriving_part, _ = split_for_increment(path, count + 1)
        warm_entry = [(entry, payload) for entry, payload, _ in arriving(arriving_part)[:1]]
        whole = whole_build_digest(store, warm_entry + later)
        differ = sorted(key for key in whole if whole[key] != live.get(key))
        converged = {
            "every_run_succeeded": set(cast(dict[str, int], ran["ended"])) == {"SUCCESS"},
            "equals_whole_build": not differ,
            "compared": {  # what was compared: counts of the live store's rows
                "table_rows": sum(cast(list[int], v)[0] for k, v in live.items() if "table" in k),
                "accounts": cast(list[int], live["accounts"])[0],
                "deleted": cast(list[int], live["deleted"])[0],
            },
            "differs_in": differ,
            "live": {key: live[key] for key in differ},
            "whole": {key: whole[key] for key in differ},
        }
        print(f"soak: {converged}", flush=True)
    hashes = [decode_entry(entry).hash for entry, _, _ in plan]
    latencies = [watcher.seen[h] - at for h, at in zip(hashes, ingested, strict=True)]
    ordered = sorted(latencies)
    return {
        "entries": entries,
        "authors": authors,
        "store": built,
        "warm_up": warm,
        "rate_per_s": rate,
        "seconds": seconds,
        "streamed": count,
        "ingest_behind_schedule_s": round(behind, 2),
        "last_latency_s": round(latencies[-1], 2),
        "median_latency_s": round(ordered[len(ordered) // 2], 2),
        "p95_latency_s": round(percentile(ordered, 0.95), 2),
        "max_latency_s": round(ordered[-1], 2),
        "runs": ran,
        **({"soak": converged} if soak else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=24)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--authors", type=int, default=AUTHORS, help="of the instance logs")
    parser.add_argument("--rate", type=float, help="entries a second, streamed (with --seconds)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long --rate streams")
    parser.add_argument(
        "--soak", action="store_true", help="with --rate: a migration and its revert mid-stream"
    )
    args = parser.parse_args()
    if args.rate:
        figures = stream(
            args.entries, args.rate, args.seconds, args.seed, args.workers, args.authors, args.soak
        )
    else:
        figures = measure(args.entries, args.samples, args.seed, args.workers, args.authors)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
