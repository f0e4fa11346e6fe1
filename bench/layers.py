"""Reading the columnar store's chained layers: one scan of every layer with the known
schema (`pipeline.index.read_layers`), against a read with Spark's partition discovery
per layer and a union of them (how layers were read before), in the same session.

A sensor's run appends a layer, and an index step keeps up to `MAX_LAYERS` of them
before it chains everything into one again; every run reads them several times (the
decoded asset and its check, the reduction, the tips of continued logs). Each layer is
written as the index step writes it: 20 schemas, a few rows each, as a one-entry run
leaves them.

    .venv/bin/python bench/layers.py [--layers 1 6 12] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from p2panda_assets.pipeline.index import DECODED_SPARK, MAX_LAYERS, read_layers
from p2panda_assets.pipeline.spark import build_session, warm_up

SCHEMAS = 20
# A layer as the index step writes it: the decoded columns and the `schema` partition.
WRITTEN = T.StructType([*DECODED_SPARK.fields, T.StructField("schema", T.StringType())])


def write_layer(spark: SparkSession, path: str, layer: int) -> None:
    rows = [
        (bytes([s]), Decimal(s), Decimal(layer), bytes([layer, s]), layer, False, "create", *rest)
        for s in range(SCHEMAS)
        for rest in [(Decimal(1), None, b"\xa0", None, "assigned", f"{s:066x}-1")]
    ]
    frame = spark.createDataFrame(rows, WRITTEN)
    frame.repartition("schema").write.partitionBy("schema").parquet(path)


def read_each_and_union(spark: SparkSession, layers: list[str]) -> DataFrame:
    """The read this bench compares against: each layer alone, then their union."""
    frames = [spark.read.parquet(path) for path in layers]
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


Read = Callable[[SparkSession, list[str]], DataFrame | None]


def seconds(read: Read, spark: SparkSession, layers: list[str], repeats: int) -> tuple[float, int]:
    """The median time to read and count the layers, and the count."""
    times, count = [], 0
    for _ in range(repeats):
        started = time.perf_counter()
        frame = read(spark, layers)
        assert frame is not None
        count = frame.count()
        times.append(time.perf_counter() - started)
    return statistics.median(times), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 6, MAX_LAYERS])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    spark = build_session()
    warm_up(spark)
    figures = []
    with tempfile.TemporaryDirectory(prefix="p2panda-layers-") as root:
        paths = [f"{root}/run{layer}" for layer in range(max(args.layers))]
        for layer, path in enumerate(paths):
            write_layer(spark, path, layer)
        for n in args.layers:
            layers = paths[:n]
            one, counted = seconds(read_layers, spark, layers, args.repeats)
            each, expected = seconds(read_each_and_union, spark, layers, args.repeats)
            assert counted == expected == n * SCHEMAS
            figure = {
                "layers": n,
                "one_scan_s": round(one, 3),
                "each_and_union_s": round(each, 3),
                "ratio": round(one / each, 3),
            }
            print(json.dumps(figure), flush=True)
            figures.append(figure)
    print(json.dumps({"repeats": args.repeats, "schemas": SCHEMAS, "reads": figures}))


if __name__ == "__main__":
    main()
