"""A small columnar store written with pyarrow alone, for the fast contract tests of the
driver path (`test_driver_path_contract.py`, `test_increment_driver_path.py`): verified
batches as verification writes them (`verify_rows`), and the catalog their schema logs
fold to, with neither Spark nor PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from p2panda_assets.engine.corpus import Catalog, LogKey, LogSummary, chain_log
from p2panda_assets.pipeline.columnar.arrow_io import write_batch
from p2panda_assets.pipeline.columnar.warehouse import Warehouse
from p2panda_assets.pipeline.index.verify import VERIFIED_ARROW, verify_rows
from p2panda_assets.pipeline.kernels.batches import Row, python_rows
from p2panda_assets.protocol.entry import Entry, decode_entry
from p2panda_assets.store.pipeline_state import PipelineState

Pairs = Sequence[tuple[bytes, bytes]]


def write_batches(
    warehouse: Warehouse, batches: Sequence[Pairs]
) -> tuple[PipelineState, list[Row]]:
    """Each of `batches` (entry, payload pairs) verified into its batch of `warehouse`;
    the progress that holds them, and their good entries as the later steps read them."""
    good: list[Row] = []
    seq = 0
    for number, pairs in enumerate(batches, 1):
        stored = []
        for raw, payload in pairs:
            seq += 1
            stored.append((seq, decode_entry(raw).hash, raw, payload, None, None))
        batch = verify_rows(stored)
        write_batch(pa.Table.from_batches([batch], VERIFIED_ARROW), warehouse.batch(number))
        good += [
            {**row, "entry": None, "batch": number}  # a batch written since links are kept
            for row in python_rows(batch)
            if row["verdict"] == "ok"
        ]
    return PipelineState(warehouse.token, seq, len(batches), None), good


def rows_in_order(rows: Sequence[Row]) -> list[Row]:
    """Rows in one order, whatever order they came in."""
    return sorted(rows, key=lambda row: repr(sorted(row.items())))


def catalog_of(pairs: Pairs, summaries: dict[LogKey, LogSummary], registered: set[str]) -> Catalog:
    """The catalog the schema logs among `summaries` fold to (`store.catalog.load_catalog`
    without the store)."""
    entries: dict[LogKey, list[tuple[Entry, bytes]]] = {}
    for raw, payload in pairs:
        entry = decode_entry(raw)
        entries.setdefault((entry.author, entry.log_id), []).append((entry, payload))
    logs = [
        chain_log(*key, entries[key]) for key, summary in summaries.items() if summary.is_schema
    ]
    return Catalog.build(logs, registered)
