"""The resident run worker: executes Dagster runs one after another in one process.

A run launched the default way starts a new Python process, imports Dagster and the
definitions, and starts a Spark JVM, whose first queries are slow until its JIT has
warmed: most of the time from an ingested entry to its row. This worker pays that once.
It executes each run as `dagster api execute_run` would (the job reconstructed from the
run's code origin, events written to the instance), and keeps the Spark session for the
next run (`PySparkResource` finds it with `getOrCreate`).

    python -m p2panda_assets.resident.worker --report-fd N   (started by the launcher)

The worker keeps the code it imported: after changing the product's code, restart the
daemon (which ends the worker), not only the code location.

A run cancelled from the UI is interrupted here: a watcher thread sees its status turn
CANCELING and sends SIGINT, which Dagster's execution turns into a cancelled run.
"""

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import dagster as dg
from dagster._core.events import EngineEventData
from dagster._core.execution.api import execute_run_iterator
from dagster._core.instance import InstanceRef
from dagster._serdes import deserialize_value
from dagster._utils.hosted_user_process import recon_job_from_origin
from dagster._utils.interrupts import capture_interrupts, pop_captured_interrupt
from sqlalchemy.exc import DBAPIError

from p2panda_assets.resident.protocol import NO_WARM_UP_ARG, REPORT_FD_ARG, finished_line

CANCEL_POLL_SECONDS = 1.0
# Dagster's PostgreSQL storages open a connection for every statement (SQLAlchemy's
# NullPool): ~180 for a run of the schema family, ~1.7 ms each against a local server,
# ~0.3 s a run. This process executes run after run, so it keeps one open, as
# dagster-webserver does (no statement timeout: a run's queries are the product's own).
STORAGE_POOL = {"statement_timeout": 0, "pool_recycle": 3600, "max_overflow": 4}


def warm_up() -> None:
    """Import the definitions, start the Spark session and its Python workers before
    the first run needs them. A cluster that gives no executor (or a stuck warm-up) is
    said on stderr and the runs are served all the same: each then fails with the
    reason (`watchdog.watched`) instead of waiting behind a worker that never serves.
    Without Java or the JDBC driver, that is said too (`setup_checks.preflight`), not
    Spark's stack trace."""
    import p2panda_assets.definitions  # noqa: F401 - the import is the point
    from p2panda_assets.errors import P2pandaError
    from p2panda_assets.pipeline.spark import session as spark
    from p2panda_assets.pipeline.spark.watchdog import watched
    from p2panda_assets.setup_checks import preflight

    try:
        preflight()
        session = spark.build_session(spark.spark_config())
        with watched(session):
            spark.warm_up(session)
    except P2pandaError as error:
        print(f"resident worker: no warm-up: {error.reason}: {error.message}", file=sys.stderr)


@contextmanager
def interrupt_on_cancel(instance: dg.DagsterInstance, run_id: str) -> Iterator[None]:
    """While the block runs, SIGINT this process once the run's status turns CANCELING."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(CANCEL_POLL_SECONDS):
            run = instance.get_run_by_id(run_id)
            if run is not None and run.status == dg.DagsterRunStatus.CANCELING:
                os.kill(os.getpid(), signal.SIGINT)
                return

    watcher = threading.Thread(target=watch, name=f"cancel-{run_id[:8]}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def cancel_spark_jobs() -> None:
    """An interrupted step leaves its Spark jobs running in the JVM; stop them."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.sparkContext.cancelAllJobs()


def keep_storage_connections(instance: dg.DagsterInstance) -> None:
    """Pool the instance's storage connections (`STORAGE_POOL`); a no-op for storages
    that hold none (SQLite)."""
    instance.optimize_for_webserver(**STORAGE_POOL)


def read_run(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun | None:
    """The run, as stored. The first statement of a run may find the pooled connection
    closed (the server restarted since the last run): SQLAlchemy then drops the pool,
    and the second try connects again."""
    try:
        return instance.get_run_by_id(run_id)
    except DBAPIError as error:
        if not error.connection_invalidated:
            raise
        return instance.get_run_by_id(run_id)


def execute(instance: dg.DagsterInstance, run_id: str) -> None:
    """Execute one launched run to its end; every outcome is recorded on the run."""
    run = read_run(instance, run_id)
    if run is None:
        print(f"resident worker: no run {run_id}", file=sys.stderr)
        return
    if run.status == dg.DagsterRunStatus.CANCELING:
        instance.report_run_canceled(run, "Cancelled before the resident worker started it.")
        return
    if run.status != dg.DagsterRunStatus.STARTING:
        print(f"resident worker: run {run_id} is {run.status}, not started", file=sys.stderr)
        return
    if run.job_code_origin is None:
        instance.report_run_failed(run, "The run has no code origin to execute it from.")
        return
    instance.report_engine_event(
        f"Executing in the resident run worker (pid: {os.getpid()}).",
        run,
        EngineEventData.in_process(os.getpid()),
    )
    with capture_interrupts():
        try:
            with interrupt_on_cancel(instance, run_id):
                recon_job = recon_job_from_origin(run.job_code_origin)
                for _event in execute_run_iterator(recon_job, run, instance):
                    pass
        except Exception as error:
            # execute_run_iterator records failures it can see; this is what it could not.
            run = instance.get_run_by_id(run_id)
            if run is not None and not run.is_finished:
                instance.report_run_failed(run, f"The resident worker failed the run: {error!r}")
        if pop_captured_interrupt():
            cancel_spark_jobs()


def spark_is_usable() -> bool:
    """False once the worker's Spark context has stopped (its JVM died, or a run stopped
    it): every later run would fail, so the worker leaves and the next run gets a new one."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return True  # none started yet, or stopped cleanly: the next run starts one
    try:
        return not context._jsc.sc().isStopped()
    except Exception:  # the JVM is gone
        return False


def serve(instance: dg.DagsterInstance, runs: TextIO, report: TextIO) -> None:
    """Execute the run ids read from `runs` until it closes (the launcher has gone), or
    until Spark is no longer usable."""
    for line in runs:
        run_id = line.strip()
        if not run_id:
            continue
        try:
            execute(instance, run_id)
        finally:
            report.write(finished_line(run_id))
        if not spark_is_usable():
            print("resident worker: Spark is no longer usable; leaving", file=sys.stderr)
            return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(REPORT_FD_ARG, dest="report_fd", type=int, required=True)
    parser.add_argument(NO_WARM_UP_ARG, dest="warm_up", action="store_false")
    args = parser.parse_args(argv)
    ref = deserialize_value(sys.stdin.readline(), InstanceRef)
    report = os.fdopen(args.report_fd, "w", buffering=1)
    try:
        if args.warm_up:
            warm_up()
        with dg.DagsterInstance.from_ref(ref) as instance:
            keep_storage_connections(instance)
            serve(instance, sys.stdin, report)
    except KeyboardInterrupt:  # between runs: the daemon's process group is stopping
        sys.exit(130)


if __name__ == "__main__":
    main()
