"""The ranges of new entries the verification tasks read: together, every ingest_seq of
(low, high] once, in order, in at most the number of parts asked for."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from p2panda_assets.pipeline.verify import split_range


@given(st.integers(0, 10**12), st.integers(1, 10_000), st.integers(1, 64))
def test_ranges_cover_every_new_entry_once(low: int, width: int, parts: int) -> None:
    high = low + width
    ranges = split_range(low, high, parts)
    assert 1 <= len(ranges) <= parts
    assert ranges[0][0] == low and ranges[-1][1] == high
    for (_, end), (start, _) in pairwise(ranges):
        assert end == start
    assert all(a < b for a, b in ranges)
