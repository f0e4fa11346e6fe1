"""Rows as JSON, the form `panda preview` prints (rule T-VALUE): system columns first,
then the fields of the current lens; values rendered by `values.to_json`."""

from __future__ import annotations

from typing import Any

from p2panda_assets.engine.corpus import Row, Table
from p2panda_assets.engine.values import to_json


def row_json(table: Table, row: Row, trace: bool = False) -> dict[str, Any]:
    """The table's columns (rule T-ROW); with `trace`, also `_entry` (the hash of the
    entry that last wrote the row), as the materialized table has it."""
    record: dict[str, Any] = {
        "_instance_id": row.instance_id.hex(),
        "_author": row.author.hex(),
        "_version": row.version,
        "_seq": row.seq,
    }
    if trace:
        record["_entry"] = row.entry.hex()
    for name, spec in table.history.lens.items():
        record[name] = to_json(row.values[name], spec.type)
    return record
