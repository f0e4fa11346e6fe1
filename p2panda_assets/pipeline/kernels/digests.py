"""The sums that say which messages a layer holds, without reading it: each accepted
entry's 60 bits (`entry_bits`), summed by batch per log when it is chained and by schema
partition per layer (`sums_of_layer`); a build compares them with what its table was
built from."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from p2panda_assets.store.pipeline_state import LayerSums


def entry_bits(entry_hash: bytes) -> int:
    """What `layer_sums` adds up for an entry: 60 bits of the SHA-256 of its hash (the
    first 15 hex digits), as `F.conv(F.substring(F.sha2(hash, 256), 1, 15), 16, 10)`."""
    return int(hashlib.sha256(entry_hash).hexdigest()[:15], 16)


# A log's accepted entries of one chain step, summed by batch: batch -> (count, bits).
LogSums = dict[int, tuple[int, int]]


def sums_of_layer(logs: Iterable[tuple[str, bool, LogSums]]) -> LayerSums:
    """A layer's `layer_sums` from the sums of the logs it holds, each with the schema
    partition its messages go to and whether the log is assigned to it: what the index
    step that writes the layer keeps, so no build sums it again in Spark."""
    totals: dict[tuple[str | None, bool, int], tuple[int, int]] = {}
    for schema, assigned, by_batch in logs:
        for batch, (count, bits) in by_batch.items():
            before = totals.get((schema, assigned, batch), (0, 0))
            totals[(schema, assigned, batch)] = (before[0] + count, before[1] + bits)
    return _rows(totals)


def merged_sums(layers: Iterable[LayerSums]) -> LayerSums:
    """The `layer_sums` of one layer that holds the messages of `layers`: their rows
    added up by schema partition, assignment and batch (what merging them keeps)."""
    totals: dict[tuple[str | None, bool, int], tuple[int, int]] = {}
    for sums in layers:
        for schema, assigned, batch, count, bits in sums:
            before = totals.get((schema, assigned, batch), (0, 0))
            totals[(schema, assigned, batch)] = (before[0] + count, before[1] + bits)
    return _rows(totals)


def _rows(totals: dict[tuple[str | None, bool, int], tuple[int, int]]) -> LayerSums:
    """The totals as `LayerSums` rows, in the order of their keys."""
    ordered = sorted(totals.items(), key=lambda item: (item[0][0] or "", *item[0][1:]))
    return [(s, a, b, count, bits) for (s, a, b), (count, bits) in ordered]
