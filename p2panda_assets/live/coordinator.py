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
this queue and wait there like every other run. One more setting, `dequeue_every_seconds`
(default 0.5): the period of the daemon's queue loop, which Dagster's
`dequeue_interval_seconds` gives in whole seconds only; a run waits for the loop's next
turn, half a period on average (bench/latency.py: 0.4-1.0 s from the run's request to its
launch at 1 s). The loop waits in steps of 0.5 s, so less than that is 0.5 s.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self

import dagster as dg
from dagster._core.run_coordinator import QueuedRunCoordinator
from dagster._serdes import ConfigurableClassData

if TYPE_CHECKING:  # imported by the daemon only: the webserver and `panda` need none of it
    from p2panda_assets.live.listener import Listener

DEFAULT_LOCATION = "p2panda_assets"  # the location name of workspace.yaml and deploy/'s
DEFAULT_DEQUEUE_EVERY = 0.5  # seconds between the queue loop's turns


class LiveRunCoordinator(QueuedRunCoordinator):
    """QueuedRunCoordinator, plus the entry store's listener in the daemon (see above)."""

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
                description="Seconds between the daemon's looks at the run queue (in "
                "steps of 0.5 s); replaces dequeue_interval_seconds, whole seconds only.",
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
    def dequeue_interval_seconds(self) -> float:  # type: ignore[override]
        """The queue loop's period, which the daemon reads when it starts its loop: a
        float (`IntervalDaemon` takes any number), so a run the listener submits waits
        0.25 s for it on average instead of 0.5 s."""
        return self._dequeue_every

    @property
    def dequeue_use_threads(self) -> bool:
        """Read by the daemon's run queue loop only, at each dequeue interval: the hook
        that keeps the listener running."""
        self.ensure_listener()
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
