"""`LiveRunCoordinator`: Dagster's queued run coordinator, which also keeps the listener
(`live.listener`) running in the daemon process.

    run_coordinator:
      module: p2panda_assets.live.coordinator
      class: LiveRunCoordinator
      config:
        dequeue_interval_seconds: 1

Why here. The listener must run where the daemon runs, started by what starts it
(`dagster dev`, `dagster-daemon run` in deploy/), with no command of its own. Dagster 1.13
has no plug-in for a daemon of one's own: `dagster._daemon.controller.create_daemon_of_type`
knows a fixed list, and `dagster dev` starts `python -m dagster._daemon run` as it is. The
product's code that the daemon process loads is the instance's configurable classes
(dagster.yaml). Of those, the run launcher is created only when a run is launched or
monitored (and deploy/ uses Dagster's own), while the run coordinator is created when the
daemon starts, and its queue loop (`QueuedRunCoordinatorDaemon`) reads
`dequeue_use_threads` in the daemon process only, at every dequeue interval: that read
starts the listener the first time, and starts it again if it died. The webserver, the
`panda` commands and the run worker load the same coordinator (to submit runs, or to show
the queue's settings) and never start a listener.

Everything else is Dagster's QueuedRunCoordinator: the listener's runs are submitted to
this queue and wait there like every other run, one at a time.

What changes is when the queue loop turns. Dagster's loop sleeps a fixed period between
its turns, in steps of 0.5 s, so a run waited ~0.5 s in the queue: a third of an entry's
way to its row on a store of 1M entries (docs/live-path.md). Here each turn begins by
waiting for the queue bell (`ring`), or `dequeue_every_seconds` (default 0.5) at most,
and the loop's own period is 0. The bell rings when a run is submitted in this process
(the listener, the sensors, the backfill daemon: all in the daemon's process) and when
the resident worker is done with a run (`ring_queue`, from its launcher), so a run
submitted to an idle deployment, or waiting behind the run that just ended, starts
within a turn's work. A run submitted elsewhere (the UI, `panda`) waits up to
`dequeue_every_seconds`, as before. Dagster has no hook at the start of a turn; its
`run_iteration` asks the coordinator for the queue's settings (`get_run_queue_config`)
first, and the wait happens in that call when the loop's turn makes it
(`_asked_by_the_queue_loop`). Should a Dagster release move that call, no turn waits:
the loop then sleeps `dequeue_every_seconds` between turns (`dequeue_use_threads`), as
Dagster's did, and says so once in the daemon's log.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any, Self

import dagster as dg
from dagster._core.run_coordinator import QueuedRunCoordinator, SubmitRunContext
from dagster._core.run_coordinator.queued_run_coordinator import RunQueueConfig
from dagster._serdes import ConfigurableClassData

if TYPE_CHECKING:  # imported by the daemon only: the webserver and `panda` need none of it
    from p2panda_assets.live.listener import Listener

log = logging.getLogger("dagster.daemon.P2pandaQueue")  # shown as the daemon's own

DEFAULT_LOCATION = "p2panda_assets"  # the location name of workspace.yaml and deploy/'s
DEFAULT_DEQUEUE_EVERY = 0.5  # the longest a turn of the queue loop waits for the bell
# Dagster's queue loop, loaded by the daemon only (importing it costs `panda` ~0.5 s).
QUEUE_LOOP_MODULE = "dagster._daemon.run_coordinator.queued_run_coordinator_daemon"


class LiveRunCoordinator(QueuedRunCoordinator):
    """QueuedRunCoordinator, plus the entry store's listener in the daemon and the queue
    bell that starts the loop's turns (see above)."""

    def __init__(
        self,
        location_name: str = DEFAULT_LOCATION,
        dequeue_every_seconds: float = DEFAULT_DEQUEUE_EVERY,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._location_name = location_name
        self._dequeue_every = dequeue_every_seconds
        self._listener: Listener | None = None
        self._listener_lock = threading.Lock()
        self._bell = threading.Event()
        self._turn_waited = False  # the queue loop's turn in progress began at the bell
        self._unpaced_said = False

    @classmethod
    def config_type(cls) -> dict:
        queued = QueuedRunCoordinator.config_type()
        assert isinstance(queued, dict)  # a config schema of named fields
        return {
            **queued,
            "location_name": dg.Field(
                str,
                default_value=DEFAULT_LOCATION,
                is_required=False,
                description="The workspace's name of the product's code location: the "
                "listener's runs are runs of its `materialize_schema` job.",
            ),
            "dequeue_every_seconds": dg.Field(
                float,
                default_value=DEFAULT_DEQUEUE_EVERY,
                is_required=False,
                description="The longest the daemon's run queue loop waits between its "
                "turns: it turns at once when a run is submitted in the daemon or the "
                "run in progress ends. Replaces dequeue_interval_seconds.",
            ),
        }

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> Self:
        coordinator = super().from_config_value(inst_data, config_value)  # calls cls(...)
        coordinator._location_name = config_value.get("location_name", DEFAULT_LOCATION)
        coordinator._dequeue_every = float(
            config_value.get("dequeue_every_seconds", DEFAULT_DEQUEUE_EVERY)
        )
        return coordinator

    @property
    def dequeue_every_seconds(self) -> float:
        """The longest a turn of the queue loop waits for the bell."""
        return self._dequeue_every

    @property
    def dequeue_interval_seconds(self) -> float:  # type: ignore[override]
        """The queue loop's own period, which the daemon reads when it starts its loop:
        none, since each turn begins by waiting for the bell (`get_run_queue_config`)."""
        return 0.0

    def submit_run(self, context: SubmitRunContext) -> dg.DagsterRun:
        """Dagster's (the run is QUEUED), then the bell: the loop's next turn starts now."""
        run = super().submit_run(context)
        self.ring()
        return run

    def ring(self) -> None:
        """Start the queue loop's next turn now (a run submitted, or one ended)."""
        self._bell.set()

    def get_run_queue_config(self) -> RunQueueConfig:
        """The queue's settings. Asked by the queue loop's turn first of all: the turn
        waits here for the bell, or `dequeue_every_seconds`. A ring is used up before the
        turn reads the queue, so one during the turn starts the next at once."""
        if _asked_by_the_queue_loop():
            self._wait_for_the_bell()
            self._turn_waited = True
        return super().get_run_queue_config()

    def _wait_for_the_bell(self) -> None:
        """Until rung, or `dequeue_every_seconds`; a ring is used up here."""
        self._bell.wait(self._dequeue_every)
        self._bell.clear()

    @property
    def dequeue_use_threads(self) -> bool:
        """Read by the daemon's run queue loop only, once a turn: the hook that keeps the
        listener running, and the loop's pace should its turns not have waited."""
        self.ensure_listener()
        if not self._turn_waited:  # Dagster no longer asks first (module docstring)
            if not self._unpaced_said:
                self._unpaced_said = True
                log.warning("p2panda: the run queue turns every %s s", self._dequeue_every)
            self._wait_for_the_bell()
        self._turn_waited = False
        return super().dequeue_use_threads

    @property
    def listener(self) -> Listener | None:
        return self._listener

    def ensure_listener(self) -> Listener:
        from p2panda_assets.live.listener import Listener

        with self._listener_lock:
            if self._listener is None or not self._listener.alive():
                self._listener = Listener(self._instance, self._location_name)
                self._listener.start()
            return self._listener

    def dispose(self) -> None:
        with self._listener_lock:
            if self._listener is not None:
                self._listener.stop()
        super().dispose()


def ring_queue(instance: dg.DagsterInstance) -> None:
    """The run in progress has ended: the queue loop's next turn starts now, where the
    instance's coordinator is this one."""
    coordinator = instance.run_coordinator
    if isinstance(coordinator, LiveRunCoordinator):
        coordinator.ring()


def _asked_by_the_queue_loop() -> bool:
    """Whether `get_run_queue_config` is asked by a turn of Dagster's queue loop: its
    `run_iteration` asks the instance's `get_concurrency_config()`, which asks this."""
    loop = sys.modules.get(QUEUE_LOOP_MODULE)
    if loop is None:  # no queue loop in this process
        return False
    turn = loop.QueuedRunCoordinatorDaemon.run_iteration.__code__
    frame: FrameType | None = sys._getframe(2)
    for _ in range(3):
        if frame is None:
            return False
        if frame.f_code is turn:
            return True
        frame = frame.f_back
    return False
