"""What adaptive query execution costs a small store's pipeline runs: `run_pipeline`
after each of `--steps` ingests of a growing store (the corpus of
bench/materialize_cold.py, 123 entries in three schemas), in one warm session, as the
sensors' runs in the resident worker are; the product's step settings (AQE off on a
small store, `pipeline/spark/session.py` `step_settings`) against the same with AQE left on. The
two ways take turns, each on the store emptied again, after one pass that warms the JVM.

    .venv/bin/python bench/small_runs.py [--pairs 2] [--steps 12]

The last line is one JSON object: per pair, the seconds of each way's runs (their sum,
and the median of the runs after the first), and the ratio of the median sums.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import psycopg
from materialize_cold import small_corpus  # bench/materialize_cold.py, beside this script
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.pipeline.spark import session as spark_settings
from p2panda_assets.pipeline.spark.session import build_session, spark_config, warm_up
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.database import ensure_schema
from p2panda_assets.store.embedded import ensure_embedded, stop_embedded
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register


def growing_runs(spark: SparkSession, url: str, steps: int) -> list[float]:
    """Seconds of each run, the store growing by one step of the corpus before each."""
    pairs, schema_ids = small_corpus()
    chunks = [pairs[i * len(pairs) // steps : (i + 1) * len(pairs) // steps] for i in range(steps)]
    seconds = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS p2panda CASCADE")
        conn.execute("DROP SCHEMA IF EXISTS p2panda_data CASCADE")
        ensure_schema(conn)
        for n, chunk in enumerate(chunks):
            ingest(conn, chunk)
            if n == 0:
                for schema_id in schema_ids:
                    register(conn, *parse_schema_id(schema_id), None)
            start = time.perf_counter()
            run_pipeline(spark, conn, url)
            seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    product_settings = spark_settings.step_settings

    def adaptive_on(entries: int) -> dict[str, str]:
        settings = product_settings(entries)
        settings.pop("spark.sql.adaptive.enabled", None)
        return settings

    with tempfile.TemporaryDirectory(prefix="p2panda-small-runs-") as directory:
        home = Path(directory)
        os.environ["P2PANDA_HOME"] = directory  # the columnar store goes there too
        url = ensure_embedded(home)
        spark = build_session(spark_config("local[2]"))
        warm_up(spark)
        ways = {"product": product_settings, "adaptive": adaptive_on}
        figures: dict[str, list[list[float]]] = {way: [] for way in ways}
        try:
            # A new JVM's first runs are slower until its JIT has compiled Spark's hot
            # paths (the first of twelve ~17 s, later ones ~5 s): one pass first, not
            # counted, so neither way pays it.
            print(f"warm-up: {sum(growing_runs(spark, url, args.steps)):.1f} s", flush=True)
            for pair in range(args.pairs):
                for way in ("product", "adaptive") if pair % 2 == 0 else ("adaptive", "product"):
                    spark_settings.step_settings = ways[way]  # sized_for_the_store calls it
                    runs = growing_runs(spark, url, args.steps)
                    figures[way].append(runs)
                    print(f"pair {pair + 1}, {way}: {sum(runs):.1f} s", flush=True)
        finally:
            spark_settings.step_settings = product_settings
            spark.stop()
            stop_embedded(home)
    sums = {way: [round(sum(runs), 1) for runs in all_runs] for way, all_runs in figures.items()}
    medians = {
        way: [round(statistics.median(runs[1:]), 2) for runs in all_runs]
        for way, all_runs in figures.items()
    }
    ratio = statistics.median(sums["product"]) / statistics.median(sums["adaptive"])
    print(
        json.dumps(
            {
                "steps": args.steps,
                "product_sum_seconds": sums["product"],
                "adaptive_sum_seconds": sums["adaptive"],
                "product_median_run_seconds": medians["product"],
                "adaptive_median_run_seconds": medians["adaptive"],
                "ratio_product_to_adaptive": round(ratio, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
