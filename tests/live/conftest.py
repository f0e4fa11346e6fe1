"""Fixtures of the live path's tests: a real Dagster instance whose run coordinator is the
product's (`LiveRunCoordinator`: runs submitted wait in the queue), the sensors' tick."""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import pytest

from tests.automation.conftest import tick  # noqa: F401 - a fixture

LIVE_COORDINATOR = {
    "module": "p2panda_assets.live.coordinator",
    "class": "LiveRunCoordinator",
    "config": {"dequeue_interval_seconds": 1},
}


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test(overrides={"run_coordinator": LIVE_COORDINATOR}) as instance:
        yield instance
