"""Which chained layers merge (`layer_merge.layers_to_merge`), and the sums a merged layer
keeps (`digests.merged_sums`): no Spark, no store. That the merged layers hold the
same messages, on both paths, is in `tests/pipeline/test_appending_index.py` and
`tests/pipeline/test_index_step_contract.py`."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from p2panda_assets.pipeline.index.layer_merge import layers_to_merge
from p2panda_assets.pipeline.kernels.digests import merged_sums


def appended(sizes: list[int], most: int, first: int = 1_000_000) -> tuple[list[int], list[int]]:
    """The layers' sizes after appending a layer of each of `sizes` messages, merging as
    the index step does before each append; and the size of every merge."""
    layers, merges = [first], []
    for size in sizes:
        places = layers_to_merge(layers, most)
        if places is not None:
            merged = sum(layers[place] for place in places)
            merges.append(merged)
            layers = [n for place, n in enumerate(layers) if place not in places] + [merged]
        layers.append(size)
    return layers, merges


def test_nothing_merges_below_the_limit() -> None:
    assert layers_to_merge([100, 1, 1], 4) is None
    assert layers_to_merge([100], 1) is None


def test_a_first_run_and_one_layer_cannot_merge() -> None:
    """Only chaining every log again bounds those (what `max_layers` 2 does)."""
    assert layers_to_merge([100, 1], 2) is None


def test_the_two_smallest_merge_with_the_layers_of_their_size() -> None:
    assert layers_to_merge([1000, 9, 4, 2, 1, 1], 6) == [2, 3, 4, 5]
    assert layers_to_merge([1000, 8, 4, 2, 1, 1], 6) == [1, 2, 3, 4, 5]
    assert layers_to_merge([1000, 1, 500_000, 1, 1], 5) == [1, 3, 4]
    assert layers_to_merge([5, 1000, 1], 3) == [1, 2]  # the two smallest: no choice


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 100_000), min_size=1, max_size=300),
    most=st.integers(3, 14),
)
def test_the_layers_stay_within_the_limit_and_the_first_run_is_never_merged(
    sizes: list[int], most: int
) -> None:
    layers, merges = appended(sizes, most)
    assert len(layers) <= most
    assert layers[0] == 1_000_000
    assert sum(layers) == 1_000_000 + sum(sizes)  # no message lost or merged twice
    assert all(merge <= sum(sizes) for merge in merges)  # the first run takes no part


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 100_000), min_size=3, max_size=30),
    most=st.integers(3, 14),
)
def test_a_merge_folds_layers_of_about_one_size(sizes: list[int], most: int) -> None:
    """Beyond the two smallest, each layer chosen is no bigger than those chosen
    before it together: a merge is at most twice its smaller part."""
    counts = [10**9, *sizes]
    places = layers_to_merge(counts, most)
    if len(counts) < most:
        assert places is None
        return
    assert places is not None and 0 not in places
    chosen = sorted(counts[place] for place in places)
    smallest = sorted(sizes)
    assert chosen[:2] == smallest[:2]
    for k in range(2, len(chosen)):
        assert chosen[k] <= sum(chosen[:k])
    unchosen = sorted(n for place, n in enumerate(counts) if place and place not in places)
    assert not unchosen or unchosen[0] >= chosen[-1]  # the smallest are the ones chosen


def test_unit_appends_are_each_merged_about_log2_times() -> None:
    """100,000 runs of one entry each on a store of a million: each entry is rewritten
    by merges about log2(100,000) times, and no merge holds most of what was appended."""
    runs = 100_000
    _, merges = appended([1] * runs, 12)
    assert sum(merges) / runs < math.log2(runs)
    assert max(merges) < runs * 0.6


def test_a_merged_layer_keeps_the_sums_of_its_parts() -> None:
    one = [("a", True, 1, 2, 10), ("-", False, 1, 1, 3)]
    two = [("a", True, 1, 1, 5), ("a", True, 2, 4, 7), ("b", False, 2, 1, 1)]
    assert merged_sums([one, two]) == [
        ("-", False, 1, 1, 3),
        ("a", True, 1, 3, 15),
        ("a", True, 2, 4, 7),
        ("b", False, 2, 1, 1),
    ]
    assert merged_sums([]) == []
