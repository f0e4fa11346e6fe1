"""Ingest throughput with one connection against two (`store.ingest.ingest(spare=)`),
measured in turn in the same run, each into a fresh database.

Ingest checks each entry in Python while PostgreSQL merges the batch before it; the
merge (an INSERT ... ON CONFLICT into a table with three b-trees) costs more than the
check, so with one connection the Python side waits for it. The corpus is the one
bench/pipeline.py generates (and caches); the embedded server runs under a temporary
`$P2PANDA_HOME`, or the server `P2PANDA_DATABASE_URL` names is used (its data is never
touched). The last line printed is one JSON object.

    .venv/bin/python bench/ingest.py [--entries 1000000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from pipeline import generate, with_database  # bench/, beside this script
from psycopg import sql

from p2panda_assets.jsonlines import read_entry_lines
from p2panda_assets.store.database import DATABASE_URL_ENV, connect, ensure_schema
from p2panda_assets.store.embedded import ensure_embedded, stop_embedded
from p2panda_assets.store.ingest import IngestCounts, ingest


@contextmanager
def server() -> Iterator[str]:
    """The server's URL: `P2PANDA_DATABASE_URL`'s, else an embedded one, stopped and
    removed after."""
    external = os.environ.get(DATABASE_URL_ENV, "").strip()
    if external:
        yield external
        return
    home = Path(tempfile.mkdtemp(prefix="p2panda-bench-ingest-"))
    try:
        yield ensure_embedded(home)
    finally:
        stop_embedded(home)
        shutil.rmtree(home, ignore_errors=True)  # the server's data directory and its WAL


def timed_ingest(url: str, path: Path, *, two: bool) -> tuple[float, IngestCounts]:
    """Seconds to ingest `path` into a new database on the server at `url` (then dropped)."""
    name = f"p2panda_bench_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        database = with_database(url, name)
        with (
            connect(database, autocommit=True) as conn,
            connect(database, autocommit=True) as spare,
        ):
            ensure_schema(conn)
            started = time.perf_counter()
            counts = ingest(conn, read_entry_lines([path]), spare=spare if two else None)
            return time.perf_counter() - started, counts
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    path, _, _ = generate(args.entries, args.seed, os.cpu_count() or 1)
    seconds: dict[str, list[float]] = {"one": [], "two": []}
    with server() as url:
        for _ in range(args.rounds):
            for key in seconds:
                took, counts = timed_ingest(url, path, two=key == "two")
                seconds[key].append(round(took, 2))
                rate = f"{args.entries / took:,.0f}/s"
                print(f"{key} connection(s): {took:.2f} s ({rate}), {counts}")
    best = {key: min(values) for key, values in seconds.items()}
    print(
        json.dumps(
            {
                "entries": args.entries,
                "seconds_one": seconds["one"],
                "seconds_two": seconds["two"],
                "speedup": round(best["one"] / best["two"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
