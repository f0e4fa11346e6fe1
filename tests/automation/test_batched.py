"""The requests of one sensor tick name each other as their batch, so that the first run
builds every table of the tick in one Spark job; a run that builds no table is left out."""

from __future__ import annotations

import dagster as dg

from p2panda_assets.defs.assets import BATCH_TAG, QUEUE_TAG
from p2panda_assets.defs.sensors import UP_TO_PLAN, batched, request


def test_a_ticks_table_requests_name_each_other_as_their_batch() -> None:
    requests = batched(
        [request("a-1", "k1"), request("b-2", "k2", UP_TO_PLAN), request("c-3", "k3")]
    )
    assert [r.partition_key for r in requests] == ["a-1", "b-2", "c-3"]
    assert [r.run_key for r in requests] == ["k1", "k2", "k3"]
    assert all(r.tags[BATCH_TAG] == "a-1,c-3" for r in requests)
    assert all(r.tags.items() >= QUEUE_TAG.items() for r in requests)
    assert requests[1].asset_selection == UP_TO_PLAN


def test_a_single_request_needs_no_batch() -> None:
    [only] = batched([request("a-1", "k1")])
    assert BATCH_TAG not in only.tags
    assert isinstance(only, dg.RunRequest)
