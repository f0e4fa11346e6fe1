"""What an incremental build's reduction costs against a whole build's, per instance log.

`pipeline.kernels.reduce.reduce_rows` is the Python a Spark task runs for each instance log.
A whole build reduces the log once; an incremental one also reads off what the part of
it the table was built from made of each instance (`before` rows), to tell what changed:
since 1c0c756 in the same pass (1.03x a whole build's time, against 1.26x when that part
was reduced apart). Here every instance log of
the generated corpus of bench/engine.py is reduced both ways, its first half in batch 1
and the rest in batch 2 (the table built up to batch 1). Printed: logs per second each
way and their ratio, measured in the same run (1.0: the increment's extra costs nothing).

    .venv/bin/python bench/reduce_rows.py [--messages 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Callable

from engine import make_corpus  # bench/engine.py, beside this script

from p2panda_assets.engine.corpus import Catalog, ChainedLog, chain_log
from p2panda_assets.pipeline.kernels.batches import Row
from p2panda_assets.pipeline.kernels.reduce import reduce_rows
from p2panda_assets.protocol.entry import Entry, decode_entry
from p2panda_assets.protocol.messages import Create


def logs_as_rows(messages: int) -> tuple[Catalog, list[list[Row]]]:
    """The corpus's catalog (every schema registered), and each instance log as the
    rows `reduce_logs` groups for it: its accepted entries, half in batch 1 and half in
    batch 2, and an owner row for each instance it names (the log of its create)."""
    by_log: dict[tuple[bytes, int], list[tuple[Entry, bytes]]] = defaultdict(list)
    payloads: dict[bytes, bytes] = {}
    for data, payload in make_corpus(messages).pairs:
        assert payload is not None
        entry = decode_entry(data)
        by_log[(entry.author, entry.log_id)].append((entry, payload))
        payloads[entry.hash] = payload
    logs = {key: chain_log(*key, entries) for key, entries in by_log.items()}
    summaries = {key: log.summary for key, log in logs.items()}
    schema_logs = [logs[key] for key, summary in summaries.items() if summary.is_schema]
    catalog = Catalog.build(schema_logs, None)  # None: every schema registered
    owners = {h: log.key for log in logs.values() for _, h, m in log.items if isinstance(m, Create)}
    groups = [
        _rows(logs[key], schema_id, payloads, owners)
        for key, schema_id in catalog.assign(summaries).schema_of.items()
    ]
    return catalog, groups


def _rows(
    log: ChainedLog,
    schema_id: str,
    payloads: dict[bytes, bytes],
    owners: dict[bytes, tuple[bytes, int]],
) -> list[Row]:
    rows: list[Row] = []
    named: set[bytes] = set()
    for n, (seq, entry_hash, message) in enumerate(log.items):
        instance = getattr(message, "instance", None)
        if instance is not None:
            named.add(instance)
        rows.append(
            {
                "author": log.author,
                "log_id": log.log_id,
                "seq": seq,
                "hash": entry_hash,
                "batch": 1 if n < len(log.items) // 2 else 2,
                "payload": payloads[entry_hash],
                "instance": instance,
                "schema": schema_id,
                "owner_author": None,
                "owner_log": None,
            }
        )
    for instance in sorted(named & owners.keys()):
        author, log_id = owners[instance]
        rows.append({"instance": instance, "owner_author": author, "owner_log": log_id})
    return rows


def best_rates(
    groups: list[list[Row]], ways: dict[str, Callable[[list[Row]], object]], repeat: int
) -> dict[str, float]:
    """Logs per second each way, the best of `repeat` passes, the ways taking turns (the
    machine's drift then touches both alike)."""
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(repeat):
        for name, reduce in ways.items():
            started = time.perf_counter()
            for rows in groups:
                reduce(rows)
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: len(groups) / seconds for name, seconds in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    catalog, groups = logs_as_rows(args.messages)
    for rows in groups:  # a log that fails to reduce would time its error path
        reduced = reduce_rows(catalog, rows, 1)
        assert all(row["row_type"] != "error" for row in reduced), reduced
    rates = best_rates(
        groups,
        {
            "whole": lambda rows: reduce_rows(catalog, rows),
            "incremental": lambda rows: reduce_rows(catalog, rows, 1),
        },
        args.repeat,
    )
    whole, increment = rates["whole"], rates["incremental"]
    entries = sum(1 for rows in groups for row in rows if row["owner_author"] is None)
    print(
        json.dumps(
            {
                "logs": len(groups),
                "entries": entries,
                "whole_logs_per_s": round(whole),
                "incremental_logs_per_s": round(increment),
                "incremental_over_whole_time": round(whole / increment, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
