"""The ranges of new entries the verification tasks read: together, every ingest_seq of
(low, high] once, in order, in at most the number of parts asked for."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from p2panda_assets.pipeline.index.verify import split_range, verify_tasks


@given(st.integers(0, 10**12), st.integers(1, 10_000), st.integers(1, 64))
def test_ranges_cover_every_new_entry_once(low: int, width: int, parts: int) -> None:
    high = low + width
    ranges = split_range(low, high, parts)
    assert 1 <= len(ranges) <= parts
    assert ranges[0][0] == low and ranges[-1][1] == high
    for (_, end), (start, _) in pairwise(ranges):
        assert end == start
    assert all(a < b for a, b in ranges)


def test_verification_runs_in_whole_rounds_of_one_task_per_core() -> None:
    assert verify_tasks(10_000, 2) == 2  # not three tasks on two cores
    assert verify_tasks(10_001, 2) == 4
    assert verify_tasks(1_000_000, 2) == 4
    assert verify_tasks(2_001, 8) == 8
    assert verify_tasks(1_000_000, 8) == 16
    assert verify_tasks(5, 0) == 1
    assert verify_tasks(5_000_000, 2) == 20  # no task verifies more than 250,000
    assert verify_tasks(5_000_001, 2) == 22  # whole rounds
