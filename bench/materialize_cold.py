"""What compiling with C1 alone saves a cold `panda materialize` of a small store: pairs of
the same command on the same store, the product's choice (C1 alone: `compiled_for_a_short_run`
in `p2panda_assets/pipeline/spark/session.py`) against both compilers (`-XX:TieredStopAtLevel=4`
in P2PANDA_SPARK_JAVA_OPTIONS, which comes after the product's options), in turn.

Each sample is a new P2PANDA_HOME (its embedded PostgreSQL) holding a small corpus (three
schemas, one relating to another with a cascade, forty authors' logs of creates, updates
and deletes), ingested and registered in this process; only the `panda materialize` is
timed, as a user on a fresh home runs it: a cold JVM, four runs of the asset family.

    .venv/bin/python bench/materialize_cold.py [--samples 3]

The last line is one JSON object: the median seconds of each and the ratio c1/both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from p2panda_assets.pipeline.spark.session import JAVA_OPTIONS_ENV
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.database import ensure_schema
from p2panda_assets.store.embedded import ensure_embedded, stop_embedded
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances

PANDA = Path(sys.executable).parent / "panda"
MODES = {"c1": "", "both": "-XX:TieredStopAtLevel=4"}


def small_corpus() -> tuple[list[tuple[bytes, bytes]], list[str]]:
    """Three schemas, mail relating to profile with a cascade, forty authors' logs with
    creates, updates and deletes (some deletes cascading), a migration after data: 123
    entries. `tests/faults/test_crash_safety.py` crashes runs on it."""
    builder = CorpusBuilder()
    owner = builder.author(1)
    profile, mail, note = owner.schema(1, "profile"), owner.schema(2, "mail"), owner.schema(3)
    profile.migrate(create_field("name", "varchar"))
    mail.migrate(
        create_field("subject", "text"),
        create_field("to", "relation", schema=profile.log_ref, cascade=True),
    )
    note.migrate(create_field("body", "text"), create_field("stars", "integer"))
    people = []
    for n in range(20):
        log = instances(builder.author(100 + n), 1)
        person = log.create(profile.ref(), name=f"person {n}")
        if n % 3 == 0:
            log.update(profile.ref(), person, name=f"person {n}, renamed")
        people.append((log, person))
    for n in range(20):
        letters = instances(builder.author(200 + n), 1)
        for k in range(3):
            letters.create(mail.ref(), subject=f"mail {n}.{k}", to=people[(n + k) % 20][1])
        notes = instances(builder.author(200 + n), 2)
        kept = notes.create(note.ref(), body=f"note {n}", stars=n)
        if n % 4 == 0:
            notes.delete(kept)
    for log, person in people[::5]:
        log.delete(person)  # cascades through mail
    note.migrate(create_field("tags", "text[]", default=["none"]))  # a migration after data
    return builder.pairs, [profile.schema_id, mail.schema_id, note.schema_id]


def cold_materialize(mode: str, pairs: list[tuple[bytes, bytes]], schema_ids: list[str]) -> float:
    with tempfile.TemporaryDirectory(prefix="p2panda-cold-materialize-") as directory:
        home = Path(directory)
        url = ensure_embedded(home)
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                ensure_schema(conn)
                ingest(conn, pairs)
                for schema_id in schema_ids:
                    register(conn, *parse_schema_id(schema_id), None)
            env = {
                k: v
                for k, v in os.environ.items()
                if k not in ("P2PANDA_DATABASE_URL", "DAGSTER_HOME")
            }
            env |= {"P2PANDA_HOME": str(home), JAVA_OPTIONS_ENV: MODES[mode]}
            start = time.monotonic()
            subprocess.run([str(PANDA), "materialize"], env=env, check=True, capture_output=True)
            return time.monotonic() - start
        finally:
            stop_embedded(home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    pairs, schema_ids = small_corpus()
    figures: dict[str, list[float]] = {mode: [] for mode in MODES}
    for sample in range(args.samples):
        order = ["both", "c1"] if sample % 2 == 0 else ["c1", "both"]
        for mode in order:
            seconds = cold_materialize(mode, pairs, schema_ids)
            figures[mode].append(seconds)
            print(f"sample {sample + 1}: {mode}: {seconds:.1f} s", flush=True)
    medians = {f"{mode}_seconds": round(statistics.median(v), 1) for mode, v in figures.items()}
    ratio = round(medians["c1_seconds"] / medians["both_seconds"], 2)
    print(json.dumps({"samples": args.samples, "entries": len(pairs), **medians, "ratio": ratio}))


if __name__ == "__main__":
    main()
