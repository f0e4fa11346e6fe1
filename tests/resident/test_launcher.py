"""`ResidentRunLauncher` against a real Dagster instance and real worker processes: runs
share one warm process, a worker that dies fails only the runs it held (and the next run
gets a new worker), and a cancelled run is interrupted."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
from collections.abc import Iterator

import dagster as dg
import pytest
from dagster._daemon.monitoring.run_monitoring import monitor_started_run

from p2panda_assets.defs.dead_runs import HOST_TAG, PID_TAG
from p2panda_assets.resident.launcher import ResidentRunLauncher
from tests.resident import jobs

RESIDENT = {
    "module": "p2panda_assets.resident.launcher",
    "class": "ResidentRunLauncher",
    "config": {"warm_up": False},  # these jobs need no Spark
}


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test(overrides={"run_launcher": RESIDENT}) as instance:
        assert isinstance(instance.run_launcher, ResidentRunLauncher)
        yield instance
        instance.run_launcher.dispose()


def launch(instance: dg.DagsterInstance, job: dg.JobDefinition) -> str:
    """As the run queue does: a run with its code origin, STARTING, then the launcher."""
    recon = dg.reconstructable(getattr(jobs, job.name))
    run = instance.create_run_for_job(
        job_def=job,
        job_code_origin=recon.get_python_origin(),
        status=dg.DagsterRunStatus.NOT_STARTED,
    )
    instance.launch_run(run.run_id, workspace=None)  # type: ignore[arg-type]
    return run.run_id


def wait_for(
    instance: dg.DagsterInstance, run_id: str, *statuses: dg.DagsterRunStatus
) -> dg.DagsterRun:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.status in statuses:
            return run
        time.sleep(0.2)
    raise TimeoutError(f"run {run_id} is {instance.get_run_by_id(run_id).status}")


def reported_pid(instance: dg.DagsterInstance, run_id: str) -> int:
    """The pid the op saw, from its output metadata."""
    events = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_OUTPUT)
    [output] = [e.dagster_event.step_output_data for e in events]
    return output.metadata["pid"].value


def test_runs_execute_one_after_another_in_one_process(instance: dg.DagsterInstance) -> None:
    first = launch(instance, jobs.which_process)
    second = launch(instance, jobs.which_process)
    for run_id in (first, second):
        wait_for(instance, run_id, dg.DagsterRunStatus.SUCCESS)
    worker = instance.run_launcher._worker
    assert worker is not None and worker.alive()
    assert reported_pid(instance, first) == reported_pid(instance, second) == worker.process.pid
    # The worker reports a run finished after the run's status is stored: wait for it.
    deadline = time.monotonic() + 30
    while worker.unfinished and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.unfinished == set()


def test_a_dead_worker_fails_its_run_and_the_next_run_gets_a_new_one(
    instance: dg.DagsterInstance,
) -> None:
    crashed = launch(instance, jobs.crashing)
    run = wait_for(instance, crashed, dg.DagsterRunStatus.FAILURE)
    events = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert any("exited with 3" in (e.message or "") for e in events)
    after = launch(instance, jobs.which_process)
    wait_for(instance, after, dg.DagsterRunStatus.SUCCESS)
    assert reported_pid(instance, after) == instance.run_launcher._worker.process.pid


def test_a_cancelled_run_is_interrupted_and_the_worker_goes_on(
    instance: dg.DagsterInstance,
) -> None:
    slow = launch(instance, jobs.slow)
    wait_for(instance, slow, dg.DagsterRunStatus.STARTED)
    time.sleep(1)  # inside the op
    assert instance.run_launcher.terminate(slow)
    wait_for(instance, slow, dg.DagsterRunStatus.CANCELED)
    after = launch(instance, jobs.which_process)
    wait_for(instance, after, dg.DagsterRunStatus.SUCCESS)
    assert reported_pid(instance, after) == instance.run_launcher._worker.process.pid


@pytest.mark.spark
def test_a_worker_whose_spark_stopped_leaves_and_the_next_run_gets_a_new_one(
    instance: dg.DagsterInstance,
) -> None:
    broken = launch(instance, jobs.breaks_spark)
    wait_for(instance, broken, dg.DagsterRunStatus.SUCCESS)
    first = instance.run_launcher._worker
    first.process.wait(timeout=60)  # it leaves on its own
    after = launch(instance, jobs.which_process)
    wait_for(instance, after, dg.DagsterRunStatus.SUCCESS)
    assert reported_pid(instance, after) != first.process.pid


def test_a_run_whose_worker_is_gone_is_failed_by_dagsters_run_monitoring(
    instance: dg.DagsterInstance,
) -> None:
    """When the daemon dies with its worker, nobody is left to fail the worker's runs;
    the next daemon's run monitoring asks the launcher, which finds the worker's process
    gone. A run of a live worker, or one the launcher cannot tell about, is running."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    here = socket.gethostname()
    job = jobs.which_process
    recon = dg.reconstructable(job)
    runs = {}
    for name, tags in {
        "dead": {PID_TAG: str(gone.pid), HOST_TAG: here},
        "alive": {PID_TAG: str(os.getpid()), HOST_TAG: here},
        "elsewhere": {PID_TAG: str(gone.pid), HOST_TAG: f"not-{here}"},
        "untagged": {},
    }.items():
        run = instance.create_run_for_job(
            job_def=job, job_code_origin=recon.get_python_origin(), tags=tags
        )
        instance.handle_new_event(
            dg.EventLogEntry(
                error_info=None,
                level="INFO",
                user_message="",
                run_id=run.run_id,
                timestamp=time.time(),
                dagster_event=dg.DagsterEvent(
                    dg.DagsterEventType.RUN_START.value, job_name=run.job_name
                ),
            )
        )
        runs[name] = run.run_id
    logger = logging.getLogger("test")
    for run_id in runs.values():
        record = instance.get_run_record_by_id(run_id)
        assert record is not None and record.dagster_run.status == dg.DagsterRunStatus.STARTED
        monitor_started_run(instance, None, record, logger)  # type: ignore[arg-type]
    statuses = {name: instance.get_run_by_id(run_id).status for name, run_id in runs.items()}
    assert statuses == {
        "dead": dg.DagsterRunStatus.FAILURE,
        "alive": dg.DagsterRunStatus.STARTED,
        "elsewhere": dg.DagsterRunStatus.STARTED,
        "untagged": dg.DagsterRunStatus.STARTED,
    }
    failures = instance.all_logs(runs["dead"], of_type=dg.DagsterEventType.RUN_FAILURE)
    assert any(f"({gone.pid} on {here}) is gone" in (e.message or "") for e in failures)
