"""An increment's read of the messages it reduces again (`driver_path.touched_locally`),
by the layers' key index against the scan of every message of the touched schemas, on a
first run of N messages (median seconds, the same rows found both ways).

The layer is written twice with the same messages, as a whole index step writes the
first run: once as it is now (row groups of `PipelineTuning.layer_group_rows`, then
`key_index.index_layer`, timed as `index_s`), and once as before (a row group a file, no
index). Its messages are synthetic but shaped like the bench corpus's (20 schemas, 40
files, instance logs of a create and a few updates, binary messages of ~70 bytes); each
read asks for K instances spread over every schema, as a live run's increments of K new
messages do (a stream into the 1M store touches 20-40 a run), and none of the messages
is newer than the tables (the new ones are in small layers, read whole either way).

    .venv/bin/python bench/touched_reads.py [--messages 1000000 5000000] [--keys 20 100 400]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from p2panda_assets.pipeline.build.driver_path import touched_locally
from p2panda_assets.pipeline.columnar.arrow_io import LAYER_ARROW
from p2panda_assets.pipeline.columnar.key_index import index_layer
from p2panda_assets.testing.warehouse import write_layer_locally
from p2panda_assets.tuning import tuning

SCHEMAS = [f"{s:064x}-{100 + s}" for s in range(20)]
FILES = 40  # as Spark's tasks write the bench corpus's first run of 1M
UPDATES = 4  # per instance log, after its create
BATCH = 1


def messages(count: int, seed: int) -> pa.Table:
    """`count` messages (rounded down to whole logs): instance logs of a create and
    `UPDATES` updates, each log's schema one of `SCHEMAS`, ordered by schema, then log,
    as Spark's tasks leave the first run's files."""
    rng = np.random.default_rng(seed)
    logs = count // (UPDATES + 1)
    n = logs * (UPDATES + 1)
    log = np.repeat(np.arange(logs), UPDATES + 1)
    seq = np.tile(np.arange(1, UPDATES + 2), logs)
    hashes = _binary(np.concatenate([np.tile([0, 0x20], (n, 1)), rng.integers(0, 256, (n, 32))], 1))
    creates = pa.array(np.flatnonzero(seq == 1)[log])
    schema = log % len(SCHEMAS)
    order = pa.array(np.argsort(schema, kind="stable"))
    is_create = pa.array(seq == 1)
    columns = {
        "author": pa.array([b"author-%d" % a for a in range(1000)]).take(pa.array(log % 1000)),
        "log_id": pa.array(log // 1000).cast(pa.decimal128(20, 0)),
        "seq": pa.array(seq).cast(pa.decimal128(20, 0)),
        "hash": hashes,
        "batch": pa.array(np.full(n, BATCH)),
        "is_schema_log": pa.array(np.zeros(n, bool)),
        "kind": pc.if_else(is_create, "create", "update"),
        "schema_version": pa.array(np.ones(n, np.int64)).cast(pa.decimal128(20, 0)),
        "error": pa.nulls(n, pa.string()),
        "payload": pa.nulls(n, pa.binary()),
        "message": _binary(
            np.concatenate([np.zeros((n, 40), np.uint8), rng.integers(0, 256, (n, 30))], 1)
        ),
        "instance": pc.if_else(is_create, pa.nulls(n, pa.binary()), hashes.take(creates)),
        "assignment": pa.array(np.full(n, "assigned")),
        "schema": pa.array(SCHEMAS).take(pa.array(schema)),
    }
    return pa.table(columns).take(order).select(LAYER_ARROW.names).cast(LAYER_ARROW)


def _binary(rows: np.ndarray) -> pa.Array:
    """Each row of a 2-D array of bytes as a binary value."""
    flat = np.ascontiguousarray(rows, dtype=np.uint8)
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(flat.shape[1]), flat.shape[0], [None, pa.py_buffer(flat.tobytes())]
    )
    return fixed.cast(pa.binary())


def seconds(
    repeats: int, layer: Path, increments: dict[str, int], wanted: set[bytes]
) -> tuple[float, pa.Table]:
    """The median time of the increment's read of `layer`, and what it read."""
    times = []
    table = pa.table({})
    for _ in range(repeats):
        started = time.perf_counter()
        table = touched_locally([str(layer)], increments, wanted)
        times.append(time.perf_counter() - started)
    return statistics.median(times), table


def run(count: int, keys: list[int], repeats: int, seed: int, home: Path) -> list[dict]:
    table = messages(count, seed)
    now, before = home / f"now-{count}", home / f"before-{count}"
    write_layer_locally(table, now, FILES, tuning().layer_group_rows)
    started = time.perf_counter()
    assert index_layer(str(now))
    index_s = time.perf_counter() - started
    write_layer_locally(table, before, FILES, table.num_rows)
    creates = table.filter(ds.field("kind") == "create").select(["hash", "schema"])
    lines = []
    for k in keys:
        picked = creates.take(np.linspace(0, creates.num_rows - 1, k).astype(np.int64))
        wanted = set(picked["hash"].to_pylist())
        increments = {schema: BATCH for schema in picked["schema"].to_pylist()}
        new_s, new = seconds(repeats, now, increments, wanted)
        old_s, old = seconds(repeats, before, increments, wanted)
        assert new.num_rows == old.num_rows == k * (UPDATES + 1)
        assert sorted(new["hash"].to_pylist()) == sorted(old["hash"].to_pylist())
        line = {
            "messages": count,
            "keys": k,
            "indexed_s": round(new_s, 4),
            "scanned_s": round(old_s, 4),
            "ratio": round(new_s / old_s, 3),
            "index_s": round(index_s, 2),
        }
        print(json.dumps(line), flush=True)
        lines.append(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--keys", type=int, nargs="+", default=[20, 100, 400])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="p2panda-touched-") as home:
        lines = [
            line
            for count in args.messages
            for line in run(count, args.keys, args.repeats, args.seed, Path(home))
        ]
    print(json.dumps({"touched_reads": lines}))


if __name__ == "__main__":
    main()
