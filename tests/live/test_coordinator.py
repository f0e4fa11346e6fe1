"""The hook: the run coordinator of `dagster.yaml` is Dagster's queued one with the same
queue settings, and it starts the listener only from the daemon's run queue loop; that
loop's turns wait for the queue bell (a run submitted, the run in progress ended), not for
a period, and nothing else that asks the queue's settings waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import psycopg
import pytest
import yaml
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.run_coordinator import QueuedRunCoordinator
from dagster._core.storage.dagster_run import DagsterRunStatus
from dagster._core.test_utils import create_run_for_test, create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (
    QueuedRunCoordinatorDaemon,
)

from p2panda_assets.live.coordinator import LiveRunCoordinator, ring_queue

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
        assert coordinator.dequeue_every_seconds == 0.5  # a turn's longest wait (default)
        assert coordinator.dequeue_interval_seconds == 0.0  # the loop's own period: none
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


LONGEST = 60.0  # a turn's longest wait in these tests: far longer than any turn's work
PROMPT = 15.0  # what a turn that the bell starts takes at most, on a loaded machine
SYNC_LAUNCHER = {  # Dagster's: a launched run executes in the launching thread
    "module": "dagster._core.launcher.sync_in_memory_run_launcher",
    "class": "SyncInMemoryRunLauncher",
}


@dg.op
def nothing() -> None:
    """What a run of `a_job` does: it is queued and launched, that is all."""


@dg.job
def a_job() -> None:
    nothing()


defs = dg.Definitions(jobs=[a_job])  # this file's code location


@dataclass
class QueueLoop:
    """An instance with this coordinator, the daemon's workspace context, and the turns
    of Dagster's queue loop started on them (each in a thread, as in the daemon)."""

    instance: dg.DagsterInstance
    context: WorkspaceProcessContext
    turns: list[threading.Thread] = field(default_factory=list)

    def turn(self) -> threading.Thread:
        daemon = QueuedRunCoordinatorDaemon(interval_seconds=0)
        thread = threading.Thread(
            target=lambda: list(daemon.run_iteration(self.context)), daemon=True
        )
        thread.start()
        self.turns.append(thread)
        return thread

    def end_turns(self) -> None:
        """Ring each turn still waiting out of its wait, before the instance goes."""
        for thread in self.turns:
            while thread.is_alive():
                ring_queue(self.instance)
                thread.join(0.5)


@pytest.fixture
def queue_loop() -> Iterator[QueueLoop]:
    """An instance with this coordinator (its turns wait up to LONGEST) and Dagster's
    in-memory launcher, and the daemon's workspace context of this file's location."""
    config = instance_config(ROOT / "dagster.yaml") | {"run_launcher": SYNC_LAUNCHER}
    config["run_coordinator"]["config"]["dequeue_every_seconds"] = LONGEST
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(python_file=__file__, attribute="defs"), location_name="here"
    )
    with (
        dg.instance_for_test(overrides=config) as instance,
        create_test_daemon_workspace_context(
            InProcessWorkspaceLoadTarget([origin]), instance
        ) as context,
    ):
        loop = QueueLoop(instance, context)
        try:
            yield loop
        finally:
            loop.end_turns()


def queued_run(loop: QueueLoop) -> dg.DagsterRun:
    """A run of `a_job`, created as a sensor or the listener creates one (not submitted)."""
    location = loop.context.create_request_context().get_code_location("here")
    [repository] = location.get_repositories().values()
    job = repository.get_full_job(a_job.name)
    return loop.instance.create_run_for_job(
        job_def=a_job,
        remote_job_origin=job.get_remote_origin(),
        job_code_origin=job.get_python_origin(),
    )


def waits_for_the_bell(thread: threading.Thread) -> bool:
    thread.join(3.0)  # an empty turn's own work is milliseconds
    return thread.is_alive()


def status(instance: dg.DagsterInstance, run: dg.DagsterRun) -> DagsterRunStatus:
    found = instance.get_run_by_id(run.run_id)
    assert found is not None
    return found.status


@pytest.mark.postgres
def test_a_run_submitted_starts_in_the_turn_it_starts(
    conn: psycopg.Connection,
    queue_loop: QueueLoop,
) -> None:
    instance = queue_loop.instance
    waiting = queue_loop.turn()
    assert waits_for_the_bell(waiting)
    run = queued_run(queue_loop)
    instance.submit_run(run.run_id, workspace=None)  # type: ignore[arg-type]
    waiting.join(PROMPT)
    assert not waiting.is_alive(), "the turn still waits after a run was submitted"
    assert status(instance, run) == DagsterRunStatus.SUCCESS  # that turn read the queue
    assert waits_for_the_bell(queue_loop.turn())  # the ring was used up


@pytest.mark.postgres
def test_a_run_queued_behind_one_starts_when_that_one_ends(
    conn: psycopg.Connection,
    queue_loop: QueueLoop,
) -> None:
    instance = queue_loop.instance
    ahead = create_run_for_test(instance, status=DagsterRunStatus.STARTED)
    behind = queued_run(queue_loop)
    waiting = queue_loop.turn()
    assert waits_for_the_bell(waiting)
    instance.submit_run(behind.run_id, workspace=None)  # type: ignore[arg-type]
    waiting.join(PROMPT)
    assert not waiting.is_alive(), "the turn still waits after a run was submitted"
    assert status(instance, behind) == DagsterRunStatus.QUEUED  # one is in progress
    waiting = queue_loop.turn()
    assert waits_for_the_bell(waiting)
    instance.report_run_failed(ahead, "it ended")
    ring_queue(instance)  # what the resident launcher does when its worker ends a run
    waiting.join(PROMPT)
    assert not waiting.is_alive(), "the turn still waits after the run ahead ended"
    assert status(instance, behind) == DagsterRunStatus.SUCCESS


@pytest.mark.postgres
def test_a_ring_between_turns_starts_the_next_at_once(
    conn: psycopg.Connection,
    queue_loop: QueueLoop,
) -> None:
    instance = queue_loop.instance
    ring_queue(instance)
    next_turn = queue_loop.turn()
    next_turn.join(PROMPT)
    assert not next_turn.is_alive(), "a ring between turns was lost"
    assert waits_for_the_bell(queue_loop.turn())  # and only that one


@pytest.mark.postgres
def test_only_the_queue_loop_waits_for_the_bell(
    conn: psycopg.Connection,
    queue_loop: QueueLoop,
) -> None:
    """The webserver, the sensors and `panda` ask the queue's settings too."""
    instance = queue_loop.instance
    asked = threading.Thread(target=instance.get_concurrency_config, daemon=True)
    asked.start()
    asked.join(PROMPT)
    assert not asked.is_alive(), "asking the queue's settings waited for the bell"
