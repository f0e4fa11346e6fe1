"""Runs that died are marked failed. `panda materialize` executes its runs in its own
process: killed, it leaves them STARTED for ever, and the UI shows them running. Each
such run is tagged with the process that executes it; before a command starts runs of
its own, every STARTED or STARTING run tagged with a process of this host that is gone
is reported failed, with a message that says so."""

from __future__ import annotations

import os
import socket

import dagster as dg

PID_TAG = "p2panda/pid"
HOST_TAG = "p2panda/host"
LIVE = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]


def process_tags() -> dict[str, str]:
    """The tags that name the process executing a run in process."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def fail_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Report failed every live-looking run whose process on this host is gone; their
    run ids."""
    host = socket.gethostname()
    marked = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=LIVE, tags={HOST_TAG: host})):
        pid = run.tags.get(PID_TAG, "")
        if pid.isdigit() and not process_alive(int(pid)):
            instance.report_run_failed(
                run, message=f"the process that executed this run ({pid} on {host}) is gone"
            )
            marked.append(run.run_id)
    return marked
