"""Three reads of the columnar store that sensor runs make, each against the way
it was read before, in the same session (median seconds to read and count).

Chained layers: the first layer with its known schema, the later ones in one more scan
(`pipeline.columnar.layers.read_layers`), against a read with Spark's partition discovery and
schema inference per layer and a union of them. A sensor's run appends a layer, and an
index step keeps up to `PipelineTuning.max_layers` of them before it chains everything into
one again; every run reads them several times (the decoded asset and its check, the reduction, the
tips of continued logs). Each layer is written as the index step writes it: 20 schemas, a few
rows each, as a one-entry run leaves them.

New verified batches: the newest batch's directory alone
(`pipeline.index.verify.read_new_verified`), against the entries' root filtered on the batch
number, which lists every batch ever verified. Each run that verifies something adds a
batch: a store the sensors kept up to date for a day holds thousands.

All verified batches, as an index step that chains everything reads them: compacted into
one directory (`pipeline.index.verify.write_compacted`, its time printed once as
`compaction_s`), against the entries' root with a directory per batch.

    .venv/bin/python bench/store_reads.py [--layers 1 6 12] [--batches 10 200 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from p2panda_assets.pipeline.columnar.layers import read_layers
from p2panda_assets.pipeline.columnar.warehouse import Warehouse, remove
from p2panda_assets.pipeline.index.verify import (
    VERIFIED_READ,
    read_new_verified,
    read_verified,
    write_compacted,
)
from p2panda_assets.pipeline.spark.session import build_session, warm_up
from p2panda_assets.store.pipeline_state import PipelineState
from p2panda_assets.testing.warehouse import write_layer, write_rejected_batch
from p2panda_assets.tuning import DEFAULTS

SCHEMAS = [f"{s:066x}-1" for s in range(20)]


def read_each_and_union(spark: SparkSession, layers: list[str]) -> DataFrame:
    """The read this bench compares against: each layer alone, then their union."""
    frames = [spark.read.parquet(path) for path in layers]
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def read_root(spark: SparkSession, warehouse: Warehouse) -> DataFrame:
    """The read this bench compares against: the entries' root, every batch directory."""
    return spark.read.schema(VERIFIED_READ).parquet(warehouse.entries)


def read_root_filtered(spark: SparkSession, warehouse: Warehouse, since: int) -> DataFrame:
    """The read this bench compares against: every batch, filtered on the number."""
    return read_root(spark, warehouse).filter(F.col("batch") > since)


def seconds(
    repeats: int, read: Callable[..., DataFrame | None], *args: object
) -> tuple[float, int]:
    """The median time to read (`read(*args)`) and count, and the count."""
    times, count = [], 0
    for _ in range(repeats):
        started = time.perf_counter()
        frame = read(*args)
        assert frame is not None
        count = frame.count()
        times.append(time.perf_counter() - started)
    return statistics.median(times), count


def figure(
    label: str, n: int, new: tuple[float, int], old: tuple[float, int], **more: object
) -> dict:
    assert new[1] == old[1], (label, n, new, old)
    line: dict[str, object] = {label: n, "new_s": round(new[0], 3), "old_s": round(old[0], 3)}
    line["ratio"] = round(new[0] / old[0], 3)
    line |= more
    print(json.dumps(line), flush=True)
    return line


def layer_reads(spark: SparkSession, root: str, counts: list[int], repeats: int) -> list[dict]:
    paths = [f"{root}/run{layer}" for layer in range(max(counts))]
    for layer, path in enumerate(paths):
        write_layer(spark, path, layer, SCHEMAS, (1,))
    lines = []
    for n in counts:
        layers = paths[:n]
        new = seconds(repeats, read_layers, spark, layers)
        old = seconds(repeats, read_each_and_union, spark, layers)
        lines.append(figure("layers", n, new, old))
    return lines


def batch_reads(spark: SparkSession, root: str, counts: list[int], repeats: int) -> list[dict]:
    warehouse = Warehouse(root, "bench")
    written = 0
    lines = []
    for n in sorted(counts):
        for number in range(written + 1, n + 1):
            write_rejected_batch(warehouse, number, 1)
        written = n
        new = seconds(repeats, read_new_verified, spark, warehouse, n - 1, n)
        old = seconds(repeats, read_root_filtered, spark, warehouse, n - 1)
        lines.append(figure("batches", n, new, old))
        state = PipelineState(warehouse.token, 0, n, None)
        started = time.perf_counter()
        run = write_compacted(spark, warehouse, state)
        compaction_s = time.perf_counter() - started
        compacted = replace(state, compacted_run=run, compacted_through=n)
        new = seconds(repeats, read_verified, spark, warehouse, compacted)
        old = seconds(repeats, read_root, spark, warehouse)
        line = figure("all_batches", n, new, old, compaction_s=round(compaction_s, 3))
        lines.append(line)
        remove(spark, warehouse.compacted(run))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 6, DEFAULTS.max_layers])
    parser.add_argument("--batches", type=int, nargs="+", default=[10, 200, 2000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    spark = build_session()
    warm_up(spark)
    with tempfile.TemporaryDirectory(prefix="p2panda-reads-") as root:
        layers = layer_reads(spark, f"{root}/chained", args.layers, args.repeats)
        batches = batch_reads(spark, f"{root}/warehouse", args.batches, args.repeats)
    print(
        json.dumps(
            {"repeats": args.repeats, "schemas": len(SCHEMAS), "layers": layers, "batches": batches}
        )
    )


if __name__ == "__main__":
    main()
