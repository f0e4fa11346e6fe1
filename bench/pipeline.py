"""Entries per second of the whole pipeline (ingest, index, materialize) against the
signature-verification ceiling measured in the same run.

The corpus: 20 schemas of four or five versions each (fields created, a type change with
a default, a validation with a default, and on every odd schema a relation to the schema
before it, half of them cascading), 1,000 authors (`--authors N`: more authors, smaller
logs) each writing instance logs for five schemas: ~60% creates, ~30% updates, ~10%
deletes, each naming a random existing version, so most messages migrate forward.
Signing takes longer than the pipeline, so the corpus is generated once in parallel into
a JSON-lines cache file (the format `panda ingest` reads) and reused by later runs with
the same size and seed; generation is not part of the measured `seconds`.

`seconds` is ingest (the cache file through `store.ingest`) + registration +
`run_pipeline`, on a fresh database: a new one on the server `P2PANDA_DATABASE_URL`
names, else on an embedded server in a temporary `$P2PANDA_HOME`, stopped at the end.
The Spark session is started and warmed up (`pipeline.spark.session.warm_up`) before, as the
resident worker does before its first run: `session_s`, not counted.
`SPARK_MASTER`, `P2PANDA_SHUFFLE_PARTITIONS`, `P2PANDA_ENTRIES_PER_PARTITION` and
`P2PANDA_DRIVER_MEMORY` apply as usual.
The last line printed is one JSON object.

With `--incremental N`, N more entries are generated with the corpus and held back: the
newest entries of every instance log (new instances, updates, deletes over all schemas).
After the measured run they are ingested and the pipeline runs again (ingest included):
`incremental_seconds` and `incremental_fraction` = incremental_seconds / seconds, no lens
change. Then one more migration of the first schema (a new entry of its log, which no
message names) is ingested and the pipeline runs again: `lens_change_seconds` and
`lens_change_fraction`; it re-reduces that schema by design.

After the run, a price per stage: wall seconds and CPU core-µs per entry for ingest,
verification, chaining, reduction and writing, summed over every process of the run (this
one, Spark's JVM, its Python workers, the embedded PostgreSQL server and its backends) and
shown by kind, with the signature's share of the whole (`CpuMeter`, `price_table`).

`--spark-events DIR` also writes Spark's event log into DIR and prints the time of
Spark's actions by the line of the package that started them (`bench/spark_events.py`).

    .venv/bin/python bench/pipeline.py [--entries 1000000] [--incremental 10000] [--seed 7]
        [--authors 1000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nacl.bindings
import psutil
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from spark_events import event_log_config, report  # bench/, beside this script

from p2panda_assets.jsonlines import entry_line, read_entry_lines
from p2panda_assets.pipeline import run as run_module
from p2panda_assets.pipeline.build import building as building_module
from p2panda_assets.pipeline.index import step as index_module
from p2panda_assets.pipeline.spark.session import build_session, spark_config, spark_master, warm_up
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.store.database import DATABASE_URL_ENV, connect, ensure_schema
from p2panda_assets.store.embedded import ensure_embedded, layout, stop_embedded
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from p2panda_assets.testing.builder import (
    CorpusBuilder,
    SchemaAuthor,
    create_field,
    instances,
    update_field,
)

CORPUS_FORMAT = 1  # bump when the generator changes: cache files are named after it
SCHEMAS = 20
AUTHORS = 1_000
SCHEMAS_PER_AUTHOR = 5
AUTHOR_CHUNK = 25  # authors per generation task: small enough to balance the workers
SCHEMA_OWNER_SEED = 1
AUTHOR_SEED_BASE = 10_000
TITLE_RULE = r"^[^#\r\n].*$"
TITLES = ["hello", "two\nlines", "# heading", "ok", "a longer title for a message"]
COUNTS = ["1", "42", "n/a", "7"]  # "n/a" cannot become an integer: it falls back
VERIFY_SAMPLE = 20_000
SAMPLE_EVERY_S = 0.5


# --- the corpus ---------------------------------------------------------------------------


def relation_target(index: int) -> int | None:
    """Odd schemas relate to the schema before them (version 5); the rest do not."""
    return index - 1 if index % 2 == 1 else None


def schema_corpus() -> tuple[CorpusBuilder, list[SchemaAuthor]]:
    """The 20 schema logs. Cheap and deterministic: every generation worker rebuilds it
    for the version refs and the relation targets, only the parent writes its entries."""
    corpus = CorpusBuilder()
    owner = corpus.author(SCHEMA_OWNER_SEED)
    schemas: list[SchemaAuthor] = []
    for index in range(SCHEMAS):
        schema = owner.schema(100 + index, f"bench{index}")
        schema.migrate(create_field("title", "text"), create_field("count", "text"))  # 2
        schema.migrate(create_field("tags", "varchar[]", default=()))  # 3
        schema.migrate(
            update_field("count", "integer", 0),  # a type change, with a default
            update_field("title", "text", "<untitled>", validation=TITLE_RULE),
        )  # 4
        target = relation_target(index)
        if target is not None:
            cascade = index % 4 == 1
            ref = schemas[target].log_ref
            schema.migrate(create_field("link", "relation", schema=ref, cascade=cascade))  # 5
        schemas.append(schema)
    return corpus, schemas


def fields_for(rnd: random.Random, version: int, related: list[bytes]) -> dict[str, object]:
    """A create's fields as written at `version` (old types, old or new titles)."""
    title = rnd.choice(TITLES)
    if version >= 4 and (title[0] == "#" or "\n" in title):
        title = "fine"  # valid at its own version, or the message is rejected
    fields: dict[str, object] = {"title": title}
    count = rnd.choice(COUNTS)
    fields["count"] = count if version < 4 else int(count) if count.isdigit() else 0
    if version >= 3:
        fields["tags"] = tuple(rnd.sample(["a", "b", "c"], rnd.randrange(3)))
    if version >= 5 and related:
        fields["link"] = rnd.choice(related)
    return fields


def update_for(rnd: random.Random, version: int) -> dict[str, object]:
    """One or two fields of an update, as written at `version`."""
    choice = rnd.randrange(3 if version >= 3 else 2)
    if choice == 0:
        return {"title": f"updated {rnd.randrange(1000)}"}
    if choice == 1:
        return {"count": str(rnd.randrange(100)) if version < 4 else rnd.randrange(100)}
    return {"tags": ("x",), "title": "retagged"}


def author_entries(author_index: int, quota: int, seed: int) -> list[tuple[bytes, bytes]]:
    """One author's instance logs: `quota` entries over five schemas, in log order."""
    rnd = random.Random(f"{seed}-{author_index}")
    _, schemas = schema_corpus()
    corpus = CorpusBuilder()
    author = corpus.author(AUTHOR_SEED_BASE + author_index)
    mine = rnd.sample(range(SCHEMAS), SCHEMAS_PER_AUTHOR)
    live: dict[int, list[bytes]] = {s: [] for s in mine}
    for _ in range(quota):
        s = rnd.choice(mine)
        schema, log = schemas[s], instances(author, 100 + s)
        version = rnd.randint(2, schema.version)
        roll = rnd.random()
        if not live[s] or roll < 0.6:
            target = relation_target(s)
            related = live.get(target, []) if target is not None else []
            live[s].append(log.create(schema.ref(version), **fields_for(rnd, version, related)))
        elif roll < 0.9:
            log.update(schema.ref(version), rnd.choice(live[s]), **update_for(rnd, version))
        else:
            log.delete(live[s].pop(rnd.randrange(len(live[s]))), schema.ref(version))
    return corpus.pairs


def _generate_chunk(job: tuple[int, int, int, str, int]) -> int:
    """Write the entries of authors [first, first + AUTHOR_CHUNK) of `authors` to `path`
    (a worker)."""
    first, instance_entries, seed, path, authors = job
    written = 0
    with open(path, "w") as out:
        for author_index in range(first, min(first + AUTHOR_CHUNK, authors)):
            quota = instance_entries // authors + (author_index < instance_entries % authors)
            for entry, payload in author_entries(author_index, quota, seed):
                out.write(entry_line(entry, payload) + "\n")
                written += 1
    return written


def corpus_path(entries: int, seed: int, authors: int = AUTHORS) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or tempfile.gettempdir())
    written_by = "" if authors == AUTHORS else f"-a{authors}"
    return cache / f"p2panda-bench-{entries}-{seed}{written_by}-v{CORPUS_FORMAT}.jsonl"


def generate(
    entries: int, seed: int, workers: int, authors: int = AUTHORS
) -> tuple[Path, float, bool]:
    """The corpus file (generated unless cached), the seconds it took, and whether it
    came from the cache. Written aside and renamed, so a cached file is always whole.
    `authors`: how many write the instance logs (five schemas each, so a store of many
    authors has many small logs)."""
    path = corpus_path(entries, seed, authors)
    if path.exists():
        return path, 0.0, True
    started = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    schema_pairs = schema_corpus()[0].pairs
    instance_entries = max(entries - len(schema_pairs), 0)
    parts = Path(tempfile.mkdtemp(prefix="p2panda-bench-parts-", dir=path.parent))
    try:
        jobs = [
            (first, instance_entries, seed, str(parts / f"{first:07d}.jsonl"), authors)
            for first in range(0, authors, AUTHOR_CHUNK)
        ]
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for _ in pool.imap_unordered(_generate_chunk, jobs):
                pass
        partial = path.with_suffix(".partial")
        with partial.open("w") as out:
            for entry, payload in schema_pairs:
                out.write(entry_line(entry, payload) + "\n")
            for _, _, _, part, _ in jobs:
                with open(part) as source:
                    shutil.copyfileobj(source, out, 1 << 20)
        partial.rename(path)
    finally:
        shutil.rmtree(parts, ignore_errors=True)
    return path, time.perf_counter() - started, False


def split_for_increment(path: Path, new: int) -> tuple[Path, Path, Path]:
    """The corpus as the store first gets it, the `new` instance entries that arrive
    later (the newest entries of every instance log, taken round robin over the logs, so
    they spread over all schemas: creates, updates and deletes), and a lens change: one
    more migration of the first schema (a field created, with a default), which no
    message names yet. Cached beside the corpus."""
    base, later, lens = (
        path.with_suffix(f".{part}-{new}.jsonl") for part in ("store", "arriving", "migration")
    )
    if base.exists() and later.exists() and lens.exists():
        return base, later, lens
    builder, schemas = schema_corpus()
    schema_owner = schemas[0].owner.key_pair.public_key
    by_log: dict[tuple[bytes, int], list[tuple[int, int]]] = {}
    with path.open() as source:
        for number, text in enumerate(source):
            entry = decode_entry(bytes.fromhex(json.loads(text)["entry"]))
            by_log.setdefault((entry.author, entry.log_id), []).append((entry.seq_num, number))
    newest = [sorted(v, reverse=True) for k, v in by_log.items() if k[0] != schema_owner]
    chosen: set[int] = set()
    depth = 0
    while len(chosen) < new and any(depth < len(log) for log in newest):
        for log in newest:
            if depth < len(log) and len(chosen) < new:
                chosen.add(log[depth][1])
        depth += 1
    schemas[0].migrate(create_field("note", "text", default=""))  # the corpus's next entry
    partial = [p.with_suffix(".partial") for p in (base, later, lens)]
    with path.open() as source, partial[0].open("w") as out, partial[1].open("w") as out_new:
        for number, text in enumerate(source):
            (out_new if number in chosen else out).write(text)
    partial[2].write_text(entry_line(*builder.pairs[-1]) + "\n")
    for written, final in zip(partial, (base, later, lens), strict=True):
        written.rename(final)
    return base, later, lens


# --- the ceiling --------------------------------------------------------------------------


def verify_sample(path: Path, total: int, size: int = VERIFY_SAMPLE) -> list[tuple[bytes, bytes]]:
    """(signed message, public key) for `size` entries spread over the whole file, in
    the form `crypto_sign_open` takes: signature first, then the signed bytes."""
    stride = max(total // size, 1)
    sample = []
    for number, item in enumerate(read_entry_lines([path])):
        if number % stride == 0 and isinstance(item, tuple):
            raw = item[0]
            sample.append((raw[-64:] + raw[:-64], raw[1:33]))
            if len(sample) == size:
                break
    return sample


def verify_rate(sample: list[tuple[bytes, bytes]], repeat: int = 3) -> float:
    """Raw PyNaCl verifications per second in this process (best of `repeat`)."""
    sign_open = nacl.bindings.crypto_sign_open
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for signed, key in sample:
            sign_open(signed, key)
        best = min(best, time.perf_counter() - started)
    return len(sample) / best


# --- memory -------------------------------------------------------------------------------


def process_kind(process: psutil.Process) -> str:
    """driver (this Python), jvm (Spark's driver, with local executors), python-worker
    (pyspark daemons and workers), postgres, or other.

    A child of the JVM that runs java is the JVM spawning a helper (Hadoop runs chmod
    and rm while writing Parquet): until it execs, it shares the JVM's memory, RSS and
    command line (named after the spawning thread, "Executor task l"). Measured here: 34
    such clones over 500 MiB in 40 small Parquet writes. It is `other`, not a second JVM
    and not a Python worker (the JVM's class path names pyspark)."""
    if process.pid == os.getpid():
        return "driver"
    try:
        cmdline = process.cmdline()
        parent = process.parent()
        parent_cmdline = parent.cmdline() if parent is not None else []
    except psutil.Error:
        return "other"
    program = os.path.basename(cmdline[0]) if cmdline else ""
    if program == "java":
        parent_program = os.path.basename(parent_cmdline[0]) if parent_cmdline else ""
        return "other" if parent_program == "java" else "jvm"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "python-worker"
    if program.startswith("postgres") or (cmdline and cmdline[0].startswith("postgres:")):
        return "postgres"
    return "other"  # short-lived helpers (Hadoop's chmod and rm, pg_ctl)


def run_processes(postmaster: int | None) -> Iterator[psutil.Process]:
    """This process and its descendants (Spark's JVM and its Python workers), and the
    embedded PostgreSQL server `postmaster` with its backends (not our child: pg_ctl
    detaches it), if there is one."""
    me = psutil.Process()
    yield me
    yield from me.children(recursive=True)
    if postmaster is not None:
        try:
            server = psutil.Process(postmaster)
            yield server
            yield from server.children(recursive=True)
        except psutil.Error:
            pass


# What the run is doing now ("ingest", "verify", "materialize 105"...): the sampler
# records it with each peak, so a peak can be traced to the stage that caused it.
_stages: list[str] = ["setup"]


@contextmanager
def stage(name: str) -> Iterator[None]:
    _stages.append(name)
    try:
        yield
    finally:
        _stages.pop()


@dataclass
class RssSampler:
    """Samples, every 0.5 s, the RSS of this process and its descendants (Spark's JVM and
    its Python workers), and of the embedded PostgreSQL server if there is one (it is
    not our child: pg_ctl detaches it). Peaks are per process, with the stage running
    when each was reached; kinds keep the largest. A process is known by pid and start
    time: pids wrap around quickly on a busy machine (pid_max is 32768 here), and a
    reused pid must not inherit an earlier process's kind. `other` (short-lived helpers)
    counts in neither the largest process nor the sum."""

    postmaster: int | None = None
    peak_by_pid: dict[tuple[int, float], tuple[str, int, str]] = field(default_factory=dict)
    peak_total: int = 0
    peak_total_by_stage: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        total = 0
        for process in run_processes(self.postmaster):
            try:
                rss = process.memory_info().rss
                key = (process.pid, process.create_time())
            except psutil.Error:
                continue
            kind, peak, _ = self.peak_by_pid.get(key, ("", -1, ""))
            if kind in ("", "other"):  # Spark's JVM starts as the shell script that execs it
                kind = process_kind(process)
            if kind not in ("postgres", "other"):
                total += rss
            if rss > peak:
                self.peak_by_pid[key] = (kind, rss, _stages[-1])
            elif kind != self.peak_by_pid[key][0]:
                self.peak_by_pid[key] = (kind, *self.peak_by_pid[key][1:])
        self.peak_total = max(self.peak_total, total)
        now = _stages[-1].split()[0]  # the stage, without the schema its label names
        self.peak_total_by_stage[now] = max(self.peak_total_by_stage.get(now, 0), total)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            self.sample()

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def peak_mb(self, *, include_postgres: bool = False) -> float:
        """The largest single process (of this process and its children, by default)."""
        peaks = [
            rss
            for kind, rss, _ in self.peak_by_pid.values()
            if kind != "other" and (include_postgres or kind != "postgres")
        ]
        return round(max(peaks, default=0) / 2**20, 1)

    def by_kind(self) -> dict[str, tuple[float, str]]:
        """Per kind of process: the largest one's peak (MiB) and the stage it was in."""
        kinds: dict[str, tuple[int, str]] = {}
        for kind, rss, when in self.peak_by_pid.values():
            if rss > kinds.get(kind, (-1, ""))[0]:
                kinds[kind] = (rss, when)
        return {k: (round(rss / 2**20, 1), when) for k, (rss, when) in sorted(kinds.items())}


# --- CPU --------------------------------------------------------------------------------------


@dataclass
class CpuMeter:
    """CPU seconds used so far by every process of the run, by kind (`process_kind`):
    this process, Spark's JVM and its Python workers (children of this process), and the
    embedded PostgreSQL server with its backends (`postmaster`: not our child). A live
    process counts its own user and system time; one that has ended counts in its
    parent's children times once the parent has reaped it (the pyspark daemon reaps its
    workers, the postmaster its backends, the JVM its helpers). So a difference of two
    readings is the CPU the run used between them, ended processes included. With an
    external server (`P2PANDA_DATABASE_URL`), its backends are not counted."""

    postmaster: int | None = None
    kinds: dict[tuple[int, float], str] = field(default_factory=dict)

    def read(self) -> dict[str, float]:
        seconds: dict[str, float] = {}
        for process in run_processes(self.postmaster):
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    key = (process.pid, process.create_time())
                    kind = self.kinds.get(key)
                    if kind in (None, "other"):  # the JVM starts as the script that execs it
                        kind = self.kinds[key] = process_kind(process)
            except psutil.Error:
                continue
            used = times.user + times.system + times.children_user + times.children_system
            seconds[kind] = seconds.get(kind, 0.0) + used
        return seconds


@dataclass
class StagePrices:
    """Wall seconds and CPU seconds by kind of process, per stage of the run."""

    meter: CpuMeter
    wall: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)

    @contextmanager
    def priced(self, name: str) -> Iterator[None]:
        before, started = self.meter.read(), time.perf_counter()
        try:
            yield
        finally:
            elapsed, after = time.perf_counter() - started, self.meter.read()
            self.wall[name] = self.wall.get(name, 0.0) + elapsed
            used = self.cpu.setdefault(name, {})
            for kind in after.keys() | before.keys():
                used[kind] = used.get(kind, 0.0) + after.get(kind, 0.0) - before.get(kind, 0.0)

    def less(self, outer: str, inner: str, name: str) -> None:
        """Make `name` what `outer` took beyond the `inner` stage it contains."""
        self.wall[name] = self.wall.get(outer, 0.0) - self.wall.get(inner, 0.0)
        outer_cpu, inner_cpu = self.cpu.get(outer, {}), self.cpu.get(inner, {})
        self.cpu[name] = {
            kind: outer_cpu.get(kind, 0.0) - inner_cpu.get(kind, 0.0)
            for kind in outer_cpu.keys() | inner_cpu.keys()
        }


# The stages of the price table, in the run's order, and how each is found: ingest and
# the stages timed by wrapping the pipeline's functions (`timed_stages`); chaining is
# the index step less verification, writing the materialization less the reduction
# (staging the rows, the cascades' deleted sets, indexes and swaps).
PRICED_STAGES = ("ingest", "verify", "chaining", "reduction", "writing")
PRICED_KINDS = ("driver", "jvm", "python-worker", "postgres")


def price_table(prices: StagePrices, entries: int, signature_us: float) -> list[str]:
    """The stages' wall seconds and core-µs per entry, by kind of process and in all,
    and the signature's share of the whole (`signature_us`: one PyNaCl verification,
    measured in this run); `chaining` and `writing` as `StagePrices.less` derived them."""
    header = f"  {'stage':<13}{'wall s':>8}" + "".join(f"{k:>15}" for k in PRICED_KINDS)
    lines = [header + f"{'all':>9}  (core-µs per entry)"]
    total_us = 0.0
    for name in PRICED_STAGES:
        used = prices.cpu.get(name, {})
        per_kind = [used.get(kind, 0.0) * 1e6 / entries for kind in PRICED_KINDS]
        every = sum(used.values()) * 1e6 / entries
        total_us += every
        lines.append(
            f"  {name:<13}{prices.wall.get(name, 0.0):>8.1f}"
            + "".join(f"{us:>15.1f}" for us in per_kind)
            + f"{every:>9.1f}"
        )
    share = signature_us / total_us if total_us else 0.0
    lines.append(
        f"  {'all':<13}{sum(prices.wall.get(n, 0.0) for n in PRICED_STAGES):>8.1f}"
        + " " * 15 * len(PRICED_KINDS)
        + f"{total_us:>9.1f}"
    )
    lines.append(f"  the signature: {signature_us:.1f} core-µs per entry, {share:.0%} of all")
    return lines


# --- the database ---------------------------------------------------------------------------


def with_database(url: str, dbname: str) -> str:
    """`url` pointing at another database (URL or key=value form)."""
    if url.startswith(("postgresql://", "postgres://")):
        return urlsplit(url)._replace(path=f"/{dbname}").geturl()
    return make_conninfo(url, dbname=dbname)


@contextmanager
def bench_database(home: Path, keep: bool) -> Iterator[tuple[str, int | None]]:
    """A fresh database (URL, embedded postmaster pid or None), dropped afterwards: on
    the server P2PANDA_DATABASE_URL names (its data is never touched), else on an
    embedded server under `home`, which is stopped at the end."""
    external = os.environ.get(DATABASE_URL_ENV, "").strip()
    server = external or ensure_embedded(home)
    postmaster = None
    if not external:
        postmaster = int((layout(home).data / "postmaster.pid").read_text().split()[0])
    name = f"p2panda_bench_{secrets.token_hex(4)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(server, name), postmaster
    finally:
        if keep:
            print(f"kept database {name} on {server}", file=sys.stderr)
        else:
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        if not external and not keep:
            stop_embedded(home)


# --- timing the pipeline's stages ------------------------------------------------------------


@dataclass
class StageTimes:
    """Seconds per stage of `run_pipeline`, taken by wrapping the functions it calls (so
    the benchmark runs `run_pipeline` itself, not a copy of it); each call is also
    reported on stderr as it ends, so a long run shows where it is. With `prices`, each
    stage's CPU is read too."""

    seconds: dict[str, float] = field(default_factory=dict)
    prices: StagePrices | None = None

    def wrap(self, module: Any, name: str, name_of_stage: str) -> Callable[[], None]:
        original = getattr(module, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            schema = next((a for a in args if isinstance(a, str)), "")
            label = f"{name_of_stage} {schema[-3:]}".strip()
            started = time.perf_counter()
            priced = nullcontext() if self.prices is None else self.prices.priced(name_of_stage)
            try:
                with stage(label), priced:
                    return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                self.seconds[name_of_stage] = self.seconds.get(name_of_stage, 0.0) + elapsed
                print(f"  {label}: {elapsed:.1f} s", file=sys.stderr, flush=True)

        setattr(module, name, timed)
        return lambda: setattr(module, name, original)


@contextmanager
def timed_stages(prices: StagePrices | None = None) -> Iterator[StageTimes]:
    times = StageTimes(prices=prices)
    restore = [
        times.wrap(run_module, "run_index", "index"),
        times.wrap(index_module, "verify_new_entries", "verify"),
        times.wrap(run_module, "materialize_schemas", "materialize"),
        times.wrap(building_module, "build_whole", "whole_builds"),
        times.wrap(building_module, "build_increments", "incremental_builds"),
        times.wrap(building_module, "reduce_instance_logs", "reduction"),
    ]
    try:
        yield times
    finally:
        for undo in restore:
            undo()


# --- the run -------------------------------------------------------------------------------


def count_lines(path: Path) -> int:
    with path.open("rb") as file:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 24), b""))


def commit() -> str:
    """The checkout measured (the pipeline changes; numbers belong to a commit)."""
    try:
        result = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return ""
    return result.stdout.strip()


def line(label: str, value: str) -> None:
    print(f"{label + ':':<28} {value}", flush=True)


def run(args: argparse.Namespace) -> dict[str, object]:
    path, generation_s, cached = generate(
        args.entries + args.incremental, args.seed, args.workers, args.authors
    )
    later: tuple[Path, Path] | None = None
    if args.incremental:
        path, instances, lens = split_for_increment(path, args.incremental)
        later = (instances, lens)
    total = count_lines(path)
    how = "cached" if cached else f"{args.workers} processes"
    line("corpus", f"{path} ({total:,} entries, {path.stat().st_size / 2**20:,.0f} MiB)")
    line("generation", f"{generation_s:.1f} s ({how}; not counted)")
    load_before = os.getloadavg()[0]
    sample = verify_sample(path, total)
    ceiling_before = verify_rate(sample)
    schema_ids = [s.schema_id for s in schema_corpus()[1]]

    home = Path(tempfile.mkdtemp(prefix="p2panda-bench-home-"))
    os.environ["P2PANDA_HOME"] = str(home)  # the decoded messages' Parquet goes here
    sampler = RssSampler()
    try:
        with bench_database(home, args.keep_database) as (url, postmaster):
            sampler.postmaster = postmaster
            prices = StagePrices(CpuMeter(postmaster))
            sampler.start()
            started = time.perf_counter()
            events = {} if args.spark_events is None else event_log_config(args.spark_events)
            spark = build_session(spark_config() | events)
            warm_up(spark)  # as the resident worker does before its first run
            session_s = time.perf_counter() - started
            cores = spark.sparkContext.defaultParallelism
            line(
                "spark session",
                f"{session_s:.1f} s ({spark_master()}, {cores} cores; Python workers started)",
            )
            try:
                with connect(url, autocommit=True) as conn, connect(url, autocommit=True) as spare:
                    ensure_schema(conn)
                    started = time.perf_counter()
                    with stage("ingest"), prices.priced("ingest"):
                        counts = ingest(conn, read_entry_lines([path]), spare=spare)
                    ingest_s = time.perf_counter() - started
                    line(
                        "ingest",
                        f"{ingest_s:.1f} s ({total / ingest_s:,.0f} entries/s; "
                        f"{counts.accepted:,} accepted, {counts.duplicate:,} duplicate, "
                        f"{counts.rejected:,} rejected)",
                    )
                    started = time.perf_counter()
                    for schema_id in schema_ids:
                        author, log_id = schema_id.rsplit("-", 1)
                        register(conn, bytes.fromhex(author), int(log_id), None)
                    register_s = time.perf_counter() - started
                    line("registration", f"{register_s:.2f} s ({len(schema_ids)} schemas)")
                    started = time.perf_counter()
                    with timed_stages(prices) as stages:
                        outcomes = run_module.run_pipeline(spark, conn, url)
                    pipeline_s = time.perf_counter() - started
                    increment = measure_increment(spark, conn, url, later)
            finally:
                spark.stop()
            sampler.stop()
    finally:
        if args.keep_database and not os.environ.get(DATABASE_URL_ENV):
            print(f"kept the embedded server's home {home}", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)

    if args.spark_events is not None:  # written out once the session stopped
        line("spark time by call site", f"(from the event log in {args.spark_events})")
        print("\n".join(report(args.spark_events)), flush=True)
    ceiling_after = verify_rate(sample)
    took = stages.seconds
    index_s, verify_s = took.get("index", 0.0), took.get("verify", 0.0)
    line(
        "index",
        f"{index_s:.1f} s (verification {verify_s:.1f} s, chaining and the rest "
        f"{index_s - verify_s:.1f} s)",
    )
    line("materialize", f"{took.get('materialize', 0.0):.1f} s")
    line("run_pipeline", f"{pipeline_s:.1f} s")
    rows = {o.schema_id: o.rows for o in outcomes}
    statuses = sorted({o.status for o in outcomes})
    line("rows", f"{sum(rows.values()):,} in {len(rows)} schemas ({', '.join(statuses)})")
    for outcome in outcomes:
        line(f"  {outcome.schema_id[-3:]}", f"{outcome.rows:,} rows, {outcome.status}")

    seconds = ingest_s + register_s + pipeline_s
    per_core = max(ceiling_before, ceiling_after)
    ceiling = per_core * cores
    line(
        "verify ceiling",
        f"{per_core:,.0f}/s per core x {cores} = {ceiling:,.0f}/s "
        f"(before {ceiling_before:,.0f}, after {ceiling_after:,.0f})",
    )
    prices.less("index", "verify", "chaining")
    prices.less("materialize", "reduction", "writing")
    line("price per stage", f"(CPU summed over every process of the run; {total:,} entries)")
    print("\n".join(price_table(prices, total, 1e6 / per_core)), flush=True)
    peaks = sampler.by_kind()
    line(
        "peak RSS by kind",
        ", ".join(f"{kind} {mb:,.0f} MiB ({when})" for kind, (mb, when) in peaks.items()),
    )
    load = (round(load_before, 1), round(os.getloadavg()[0], 1))
    line("load average", f"{load[0]} before, {load[1]} after (other work shares the cores)")
    return {
        "entries": total,
        "seconds": round(seconds, 1),
        "entries_per_s": round(total / seconds),
        "verify_ceiling_per_s": round(ceiling),
        "ratio": round(total / seconds / ceiling, 4),
        "peak_rss_mb": sampler.peak_mb(),
        "generation_s": round(generation_s, 1),
        "ingest_s": round(ingest_s, 1),
        "register_s": round(register_s, 2),
        "index_s": round(index_s, 1),
        "verify_s": round(verify_s, 1),
        "materialize_s": round(took.get("materialize", 0.0), 1),
        "pipeline_s": round(pipeline_s, 1),
        "session_s": round(session_s, 1),
        "cores": cores,
        "rows": sum(rows.values()),
        "peak_rss_mb_by_kind": {kind: mb for kind, (mb, _) in peaks.items()},
        "peak_rss_stage_by_kind": {kind: when for kind, (_, when) in peaks.items()},
        "peak_rss_mb_sum": round(sampler.peak_total / 2**20, 1),
        "peak_rss_mb_sum_by_stage": {
            name: round(rss / 2**20, 1) for name, rss in sampler.peak_total_by_stage.items()
        },
        "load_average": load,
        "price_wall_s": {name: round(prices.wall.get(name, 0.0), 1) for name in PRICED_STAGES},
        "price_core_us_per_entry": {
            name: round(sum(prices.cpu.get(name, {}).values()) * 1e6 / total, 1)
            for name in PRICED_STAGES
        },
        "signature_core_us": round(1e6 / per_core, 1),
        "commit": commit(),
        **increment,
    }


def measure_increment(
    spark: Any, conn: psycopg.Connection, url: str, later: tuple[Path, Path] | None
) -> dict[str, object]:
    """The two increments after the full run: the instance entries (`incremental_*`),
    then the migration alone (`lens_change_*`)."""
    if later is None:
        return {}
    instances, lens = later
    return {
        **measure_step(spark, conn, url, instances, "incremental"),
        **measure_step(spark, conn, url, lens, "lens_change"),
    }


def measure_step(
    spark: Any, conn: psycopg.Connection, url: str, path: Path, name: str
) -> dict[str, object]:
    """Ingest the entries of `path` and run the pipeline again; its figures, each key
    starting with `name`."""
    started = time.perf_counter()
    with stage(f"{name} ingest"), connect(url, autocommit=True) as spare:
        counts = ingest(conn, read_entry_lines([path]), spare=spare)
    ingested = time.perf_counter() - started
    with stage(f"{name} pipeline"), timed_stages() as stages:
        outcomes = run_module.run_pipeline(spark, conn, url)
    seconds = time.perf_counter() - started
    took = {step: round(took, 1) for step, took in stages.seconds.items()}
    built = sum(o.status in ("materialized", "dropped") for o in outcomes)
    added = sum(o.incremental for o in outcomes)
    line(
        name.replace("_", " "),
        f"{seconds:.1f} s for {counts.accepted:,} new entries (ingest {ingested:.1f} s; "
        f"{built} schemas built, {added} of them by adding what is new)",
    )
    return {
        f"{name}_entries": counts.accepted,
        f"{name}_seconds": round(seconds, 1),
        f"{name}_ingest_s": round(ingested, 1),
        **{f"{name}_{step}_s": took for step, took in sorted(took.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--incremental",
        type=int,
        default=0,
        metavar="N",
        help="then ingest N more entries (newest of every log) and run again; then one migration",
    )
    parser.add_argument(
        "--authors", type=int, default=AUTHORS, help="authors of the instance logs (5 logs each)"
    )
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="generation processes"
    )
    parser.add_argument(
        "--keep-database", action="store_true", help="keep the database (and server) to inspect"
    )
    parser.add_argument(
        "--spark-events",
        type=Path,
        metavar="DIR",
        help="write Spark's event log into DIR and print the time by call site (spark_events.py)",
    )
    result = run(parser.parse_args())
    for name in ("incremental", "lens_change"):
        if f"{name}_seconds" in result:
            result[f"{name}_fraction"] = round(
                float(result[f"{name}_seconds"]) / float(result["seconds"]), 4
            )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
