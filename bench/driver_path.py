"""Where the driver path stops being faster than Spark: runs of the pipeline after N new
entries, on a store of bench/pipeline.py's corpus of `--entries` entries (the cached one
of that size, less the entries held back for the increments; its full run not counted),
each size run once by each path in turn (`P2PANDA_DRIVER_PATH_ENTRIES` and `_MESSAGES` -1
for Spark, above N for the driver), the store growing by every increment.

The new entries are the newest of every instance log, held back from the corpus
(`pipeline.split_for_increment`; the store gets the migration it holds back too) and
given in the corpus's order, each log's in seq order, so that each increment continues
its logs (as peers in sync write); a warm-up increment of each path comes first, not
counted. Per size: the seconds of `run_pipeline` on each path (ingest not counted), and
the ratio driver / Spark. The last line printed is one JSON object.

    .venv/bin/python bench/driver_path.py [--entries 1010000] [--sizes 10,100,1000,20000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from pipeline import (  # bench/, beside this script
    bench_database,
    connect,
    count_lines,
    generate,
    read_entry_lines,
    register,
    schema_corpus,
    split_for_increment,
)

from p2panda_assets.pipeline.columnar.arrow_io import DRIVER_PATH_ENVS
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.pipeline.spark.session import build_session, spark_config, warm_up
from p2panda_assets.store.database import ensure_schema
from p2panda_assets.store.ingest import ingest

WARM_UP = 10  # entries of each path's first, uncounted increment
PATHS = {"spark": "-1", "driver": "100000000"}


def chunks(path: Path, sizes: list[int]) -> list[list[str]]:
    """The held-back lines (oldest first) cut into the increments: a warm-up of each
    path, then each size once for each path."""
    lines = path.read_text().splitlines()
    wanted = [WARM_UP, WARM_UP] + [size for size in sizes for _ in PATHS]
    out, start = [], 0
    for size in wanted:
        out.append(lines[start : start + size])
        start += size
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_010_000)
    parser.add_argument("--sizes", default="10,100,1000,20000")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    held = 2 * WARM_UP + 2 * sum(sizes)
    corpus, _, _ = generate(args.entries, args.seed, os.cpu_count() or 1)
    base, later, lens = split_for_increment(corpus, held)
    increments = chunks(later, sizes)
    home = Path(tempfile.mkdtemp(prefix="p2panda-bench-driver-"))
    os.environ["P2PANDA_HOME"] = str(home)
    results: dict[str, dict[str, float]] = {}
    try:
        with bench_database(home, False) as (url, _):
            spark = build_session(spark_config())
            warm_up(spark)
            try:
                with connect(url, autocommit=True) as conn:
                    ensure_schema(conn)
                    ingest(conn, read_entry_lines([base, lens]))
                    for schema in schema_corpus()[1]:
                        author, log_id = schema.schema_id.rsplit("-", 1)
                        register(conn, bytes.fromhex(author), int(log_id), None)
                    started = time.perf_counter()
                    run_pipeline(spark, conn, url)
                    print(
                        f"store: {count_lines(base):,} entries, built in "
                        f"{time.perf_counter() - started:.1f} s",
                        flush=True,
                    )
                    order = [(None, "spark"), (None, "driver")] + [
                        (size, way)
                        for n, size in enumerate(sizes)
                        for way in (("driver", "spark") if n % 2 == 0 else ("spark", "driver"))
                    ]
                    for (size, way), lines in zip(order, increments, strict=True):
                        os.environ.update(dict.fromkeys(DRIVER_PATH_ENVS, PATHS[way]))
                        ingest(conn, [_pair(line) for line in lines])
                        started = time.perf_counter()
                        outcomes = run_pipeline(spark, conn, url)
                        took = time.perf_counter() - started
                        paths = sorted({str(o.path) for o in outcomes if o.incremental})
                        label = "warm-up" if size is None else f"{size:,} entries"
                        print(f"{label}, {way}: {took:.2f} s (increments: {paths})", flush=True)
                        if size is not None:
                            results.setdefault(str(size), {})[way] = round(took, 2)
            finally:
                spark.stop()
    finally:
        for name in DRIVER_PATH_ENVS:
            os.environ.pop(name, None)
        shutil.rmtree(home, ignore_errors=True)
    for figures in results.values():
        figures["ratio_driver_to_spark"] = round(figures["driver"] / figures["spark"], 3)
    print(json.dumps({"entries": args.entries, "seconds_by_size": results}))


def _pair(line: str) -> tuple[bytes, bytes]:
    data = json.loads(line)
    return bytes.fromhex(data["entry"]), bytes.fromhex(data["payload"])


if __name__ == "__main__":
    main()
