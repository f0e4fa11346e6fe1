"""The hook: the run coordinator of `dagster.yaml` is Dagster's queued one with the same
queue settings, and it starts the listener only from the daemon's run queue loop."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import psycopg
import pytest
import yaml
from dagster._core.run_coordinator import QueuedRunCoordinator

from p2panda_assets.live.coordinator import LiveRunCoordinator

ROOT = Path(__file__).resolve().parents[2]


def instance_config(path: Path) -> dict:
    """A dagster.yaml of the repository without its storage (the test's is temporary)."""
    config = yaml.safe_load(path.read_text())
    return {key: value for key, value in config.items() if key != "storage"}


@pytest.mark.parametrize("path", ["dagster.yaml", "p2panda_assets/dagster.yaml"])
def test_the_coordinator_is_the_queued_one_with_the_same_queue(path: str) -> None:
    with dg.instance_for_test(overrides=instance_config(ROOT / path)) as instance:
        coordinator = instance.run_coordinator
        assert isinstance(coordinator, LiveRunCoordinator)
        assert isinstance(coordinator, QueuedRunCoordinator)  # the daemon dequeues it
        assert "QUEUED_RUN_COORDINATOR" in instance.get_required_daemon_types()
        assert coordinator.dequeue_interval_seconds == 0.5  # the loop's period (default)
        queue = instance.get_concurrency_config().run_queue_config
        assert queue is not None and queue.max_concurrent_runs == 1
        assert [dict(limit) for limit in queue.tag_concurrency_limits] == [
            {"key": "p2panda/queue", "value": "pipeline", "limit": 1}
        ]
        assert coordinator.listener is None  # what the webserver and `panda` read


@pytest.mark.postgres
def test_the_queue_loop_starts_the_listener_and_restarts_it(
    conn: psycopg.Connection,
) -> None:
    """What the daemon's `QueuedRunCoordinatorDaemon` reads at each dequeue interval."""
    with dg.instance_for_test(overrides=instance_config(ROOT / "dagster.yaml")) as instance:
        coordinator = instance.run_coordinator
        assert isinstance(coordinator, LiveRunCoordinator)
        assert coordinator.dequeue_use_threads is False  # Dagster's setting, unchanged
        listener = coordinator.listener
        assert listener is not None and listener.ready.wait(120), "not listening"
        assert coordinator.dequeue_use_threads is False
        assert coordinator.listener is listener  # alive: the same one
        listener.stop()
        assert not listener.alive()
        coordinator.dequeue_use_threads  # noqa: B018 - the next loop
        restarted = coordinator.listener
        assert restarted is not None and restarted is not listener
        assert restarted.ready.wait(120)
        started = time.monotonic()
        instance.dispose()  # the daemon's instance, closed when the daemon ends
        assert not restarted.alive() and time.monotonic() - started < 15
