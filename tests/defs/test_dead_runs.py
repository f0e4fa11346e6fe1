"""A run whose process is gone is marked failed before new runs start (a killed `panda
materialize` left its in-process runs STARTED for ever); runs of live processes, and
runs of other hosts, are left alone."""

from __future__ import annotations

import socket
import subprocess
import sys

import dagster as dg

from p2panda_assets.defs.dead_runs import HOST_TAG, PID_TAG, fail_dead_runs, process_tags


@dg.op
def nothing() -> None:
    return None


@dg.job
def a_job() -> None:
    nothing()


def started_run(instance: dg.DagsterInstance, tags: dict[str, str]) -> dg.DagsterRun:
    run = instance.create_run_for_job(a_job, tags=tags)
    instance.handle_run_event(
        run.run_id,
        dg.DagsterEvent(
            event_type_value=dg.DagsterEventType.RUN_START.value, job_name=run.job_name
        ),
    )
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
    return run


def gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_started_run_whose_process_is_gone_is_marked_failed_with_a_message() -> None:
    host = socket.gethostname()
    with dg.instance_for_test() as instance:
        dead = started_run(instance, {PID_TAG: str(gone_pid()), HOST_TAG: host})
        alive = started_run(instance, process_tags())
        elsewhere = started_run(instance, {PID_TAG: str(gone_pid()), HOST_TAG: host + "-other"})
        untagged = started_run(instance, {})
        assert fail_dead_runs(instance) == [dead.run_id]
        status = {r.run_id: instance.get_run_by_id(r.run_id).status for r in (dead, alive)}
        assert status == {
            dead.run_id: dg.DagsterRunStatus.FAILURE,
            alive.run_id: dg.DagsterRunStatus.STARTED,
        }
        for run in (elsewhere, untagged):
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
        failure = [
            e.message
            for e in instance.all_logs(dead.run_id)
            if e.dagster_event and e.dagster_event.event_type == dg.DagsterEventType.RUN_FAILURE
        ]
        assert failure and "is gone" in failure[0]
        assert fail_dead_runs(instance) == []  # once
