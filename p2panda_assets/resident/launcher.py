"""`ResidentRunLauncher`: Dagster's run launcher for this deployment's local instance.

It hands every launched run to one long-lived worker process (`resident.worker`) with a
warm Spark session, started on the first launch and started again if it dies. Runs
execute one at a time in the order they were launched; `max_concurrent_runs: 1` in
dagster.yaml keeps the runs that wait in Dagster's queue (QUEUED), not in the worker's.

Nothing is lost with the worker: a run it was given and did not finish is marked failed
when it exits, with its exit code. Each run is tagged with the worker's process
(`p2panda/pid`, `p2panda/host`), so a run whose worker died with the daemon is marked
failed too: by the next daemon's run monitoring (`check_run_worker_health`, enabled in
dagster.yaml), or by the next `panda materialize`. Cancelling a run sets its status to
CANCELING, which the worker's watcher turns into an interrupt.

    run_launcher:
      module: p2panda_assets.resident.launcher
      class: ResidentRunLauncher
"""

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import IO, Any, Self

import dagster as dg
from dagster._core.events import EngineEventData
from dagster._core.launcher import (
    CheckRunHealthResult,
    LaunchRunContext,
    RunLauncher,
    WorkerStatus,
)
from dagster._serdes import ConfigurableClass, ConfigurableClassData, serialize_value

from p2panda_assets.defs.dead_runs import HOST_TAG, PID_TAG, process_alive
from p2panda_assets.live.coordinator import ring_queue
from p2panda_assets.resident.protocol import NO_WARM_UP_ARG, REPORT_FD_ARG, finished_run


class _Worker:
    """One worker process and the runs handed to it that it has not finished."""

    def __init__(self, instance: dg.DagsterInstance, warm_up: bool) -> None:
        read_fd, write_fd = os.pipe()
        argv = [
            sys.executable,
            "-m",
            "p2panda_assets.resident.worker",
            REPORT_FD_ARG,
            str(write_fd),
        ]
        self.process = subprocess.Popen(
            argv if warm_up else [*argv, NO_WARM_UP_ARG],
            stdin=subprocess.PIPE,
            pass_fds=(write_fd,),
            # In the daemon's process group, as the code server's run processes are: what
            # stops the daemon's group (Ctrl-C of `dagster dev`, a service manager) cancels
            # the run in progress and ends the worker. Else it ends when its stdin closes.
            text=True,
        )
        os.close(write_fd)
        self.unfinished: set[str] = set()
        self.lock = threading.Lock()
        assert self.process.stdin is not None  # stdin=PIPE
        self._stdin: IO[str] = self.process.stdin
        self._stdin.write(serialize_value(instance.get_ref()) + "\n")
        self._stdin.flush()
        self._reports = os.fdopen(read_fd, "r")
        self._instance = instance
        threading.Thread(target=self._follow, name="resident-worker", daemon=True).start()

    def alive(self) -> bool:
        return self.process.poll() is None

    def hand(self, run_id: str) -> None:
        with self.lock:
            self.unfinished.add(run_id)
            self._stdin.write(run_id + "\n")
            self._stdin.flush()

    def _follow(self) -> None:
        """Track finished runs; when the worker exits, fail the runs it left unfinished."""
        for line in self._reports:
            run_id = finished_run(line)
            if run_id is not None:
                with self.lock:
                    self.unfinished.discard(run_id)
                ring_queue(self._instance)  # the run queued behind it starts now
        code = self.process.wait()
        with self.lock:
            left, self.unfinished = sorted(self.unfinished), set()
        for run_id in left:
            run = self._instance.get_run_by_id(run_id)
            if run is not None and not run.is_finished:
                self._instance.report_run_failed(
                    run, f"The resident run worker (pid {self.process.pid}) exited with {code}."
                )
        if left:
            ring_queue(self._instance)  # the next run starts in a new worker

    def close(self) -> None:
        """Close its stdin: it exits after the run it is executing."""
        if self.alive():
            self._stdin.close()


class ResidentRunLauncher(RunLauncher, ConfigurableClass):
    """Launches runs into one resident worker process (see the module docstring)."""

    def __init__(
        self, inst_data: ConfigurableClassData | None = None, warm_up: bool = True
    ) -> None:
        self._inst_data = inst_data
        self._warm_up = warm_up
        self._worker: _Worker | None = None
        self._lock = threading.Lock()
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict:
        return {
            "warm_up": dg.Field(
                bool,
                default_value=True,
                description="Start Spark in the worker before its first run.",
            )
        }

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> Self:
        return cls(inst_data=inst_data, warm_up=config_value.get("warm_up", True))

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        with self._lock:
            if self._worker is None or not self._worker.alive():
                self._worker = _Worker(self._instance, self._warm_up)
            worker = self._worker
        self._instance.add_run_tags(
            run.run_id, {PID_TAG: str(worker.process.pid), HOST_TAG: socket.gethostname()}
        )
        worker.hand(run.run_id)
        self._instance.report_engine_event(
            f"Handed to the resident run worker (pid: {worker.process.pid}).",
            run,
            EngineEventData(),
        )

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        """Whether the worker process the run was handed to is still there. A run of
        another host, or one launched before runs were tagged, cannot be told: it counts
        as running (Dagster fails every other answer)."""
        pid, host = run.tags.get(PID_TAG, ""), run.tags.get(HOST_TAG)
        if not pid.isdigit() or host != socket.gethostname() or process_alive(int(pid)):
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        return CheckRunHealthResult(
            WorkerStatus.FAILED, f"the resident run worker ({pid} on {host}) is gone"
        )

    def terminate(self, run_id: str) -> bool:
        """Ask the worker to interrupt the run (it watches for CANCELING)."""
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        return True

    def dispose(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.close()
