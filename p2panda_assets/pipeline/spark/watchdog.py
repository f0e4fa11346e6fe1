"""A run's Spark work is bounded: a job that gets no executor, or makes no progress, fails.

On a cluster whose executors cannot reach the driver, Spark waits for ever: the job stays
submitted, the run stays STARTED, and the one-at-a-time run queue and the pipeline lock
stop every other run (issue 51: a sensor run held them for 10.8 min, `panda materialize`
behind it failed at its 600 s lock wait without saying why). `watched` runs a block with
a thread that looks at the Spark application every second (`StatusTracker`, and the
executors registered with the driver) and, when a job has had no executor for
`P2PANDA_SPARK_NO_EXECUTOR_TIMEOUT` seconds or no task of the active stages has finished
(or started, or failed) for `P2PANDA_SPARK_STALL_TIMEOUT` seconds, cancels the
application's jobs. The block's Spark call then raises, and `watched` raises
`no-executors` or `stalled` instead: the run fails with that reason, and the `finally`
clauses on the way out release the pipeline lock, so the next run proceeds.

It lives in the driver, so it bounds Dagster's runs (the resident worker's, `panda
materialize`'s in-process runs) and `run_pipeline` alike; Dagster's run monitoring only
sees whether a run's process lives, and this one does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
from pyspark import SparkContext
from pyspark.sql import SparkSession

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.pipeline.spark.driver_address import is_local
from p2panda_assets.store.pipeline_lock import another_connection, publish_progress
from p2panda_assets.tuning import ENVIRONMENT, tuning

NO_EXECUTOR_TIMEOUT_ENV = ENVIRONMENT["no_executor_timeout"]
STALL_TIMEOUT_ENV = ENVIRONMENT["stall_timeout"]
# `no_executor_timeout` (180 s): an executor of a standalone worker registers with the driver
# seconds after the application asks for one: 7.7 and 15.6 s from the session's start to its first
# executor (a master and a 1-core worker from the pyspark wheel, on this 2-core machine shared at
# a load average of 12-15, so slower than it would be alone); the compose stack launched
# one every 2.6 s, each failing to reach the driver. Three minutes is over ten times the slowest
# of those, or a worker restarting, or another application finishing its run with the cores; it is
# the bound Dagster's run monitoring puts on a run's start (`start_timeout_seconds`, 180), and
# well under the 600 s a run waits for the pipeline lock (`P2PANDA_LOCK_WAIT_SECONDS`), so a run
# behind a stuck one gets through.
# `stall_timeout` (900 s): no task starting or finishing for 15 minutes while executors are there.
# A task's time grows with the entries of its partition, and no shuffle partition or verification
# task holds more than `P2PANDA_ENTRIES_PER_PARTITION` (250,000) entries, whatever the store's
# size: at 5M entries on 2 cores such a task takes ~20 s (docs/scale.md). 900 s is forty times
# that: a slow task is waited for, a task that never ends is not.
POLL_SECONDS = 1.0
PUBLISH_SECONDS = 2.0  # the holder's progress row changes at most this often


@dataclass(frozen=True, slots=True)
class Stage:
    stage_id: int
    attempt: int
    tasks: int
    active: int
    completed: int
    failed: int


@dataclass(frozen=True, slots=True)
class Look:
    """The Spark application at one moment, as the watchdog sees it."""

    jobs: tuple[int, ...]  # active job ids
    stages: tuple[Stage, ...]  # active stages
    executors: int | None  # registered executors; None on a local master (the driver runs tasks)

    @property
    def progress(self) -> tuple[tuple[int, ...], ...]:
        """What changes when the work moves: a task started, finished or failed, or a
        stage or job began or ended."""
        stages = tuple(
            (s.stage_id, s.attempt, s.active, s.completed, s.failed) for s in self.stages
        )
        return (self.jobs, *stages)

    def line(self) -> str:
        """One line for people: `0 executors, job 3: stage 5 0/1 tasks`."""
        executors = f"{self.executors} executor{'' if self.executors == 1 else 's'}"
        parts = [] if self.executors is None else [executors]
        if not self.jobs:
            return ", ".join([*parts, "no Spark job"])
        stages = "; ".join(
            f"stage {s.stage_id} {s.completed}/{s.tasks} tasks"
            + (f" ({s.active} running)" if s.active else "")
            for s in self.stages
        )
        jobs = "job " + ", ".join(str(j) for j in self.jobs)
        return ", ".join([*parts, f"{jobs}: {stages}" if stages else jobs])


def look(sc: SparkContext) -> Look:
    tracker = sc.statusTracker()
    jobs = tuple(sorted(tracker.getActiveJobsIds()))
    stages = []
    for stage_id in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            stages.append(
                Stage(
                    stage_id,
                    info.currentAttemptId,
                    info.numTasks,
                    info.numActiveTasks,
                    info.numCompletedTasks,
                    info.numFailedTasks,
                )
            )
    executors = None if is_local(sc.master or "") else executor_count(sc)
    return Look(jobs, tuple(stages), executors)


def executor_count(sc: SparkContext) -> int:
    """Executors registered with the driver (the block managers but the driver's own)."""
    return max(0, int(sc._jsc.sc().getExecutorMemoryStatus().size()) - 1)


@dataclass(slots=True)
class Clock:
    """The two checks as a state machine over looks: fed a look and its time, it says
    why the work is to be stopped, if it is."""

    no_executor_timeout: float
    stall_timeout: float
    _without_executors: float | None = None  # since when a job has had no executor
    _progress: tuple[tuple[int, ...], ...] | None = None
    _progress_at: float = 0.0

    def verdict(self, seen: Look, now: float) -> P2pandaError | None:
        if not seen.jobs:
            self._without_executors, self._progress = None, None
            return None
        if seen.progress != self._progress:
            self._progress, self._progress_at = seen.progress, now
        if seen.executors == 0:
            if self._without_executors is None:
                self._without_executors = now
            waited = now - self._without_executors
            if 0 < self.no_executor_timeout <= waited:
                return P2pandaError(
                    Reason.NO_EXECUTORS,
                    f"Spark gave the run no executor for {waited:.0f} s ({seen.line()}); can the"
                    f" cluster's executors reach the driver? ({NO_EXECUTOR_TIMEOUT_ENV})",
                )
            self._progress_at = now  # waiting for executors is not a stall
            return None
        self._without_executors = None
        still = now - self._progress_at
        if 0 < self.stall_timeout <= still:
            return P2pandaError(
                Reason.STALLED,
                f"no Spark task of the run started or finished for {still:.0f} s"
                f" ({seen.line()}; {STALL_TIMEOUT_ENV})",
            )
        return None


@dataclass(slots=True)
class Watchdog:
    """The thread of one `watched` block."""

    sc: SparkContext
    clock: Clock
    poll: float
    # Where its progress goes: the session (pid) that holds or will hold the pipeline lock,
    # and what opens a connection to write it with.
    holder: tuple[int, Callable[[], psycopg.Connection]] | None = None
    verdict: P2pandaError | None = None
    _done: threading.Event = field(default_factory=threading.Event)
    _publisher: psycopg.Connection | None = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="spark-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        published, published_at = "", 0.0
        while not self._done.wait(self.poll):
            try:
                seen = look(self.sc)
                now = time.monotonic()
                if self.verdict is None:
                    self.verdict = self.clock.verdict(seen, now)
                if self.verdict is not None and seen.jobs:
                    # Again at every look: a job the block submits after the first was
                    # cancelled is cancelled too, until the block gives up.
                    self._cancel(seen.jobs, self.verdict)
            except Exception:  # the context stopped or the JVM went away: nothing to watch
                break
            line = seen.line() if self.verdict is None else str(self.verdict)
            if line != published and now - published_at > PUBLISH_SECONDS:
                self._publish(line)
                published, published_at = line, now
        if self._publisher is not None:
            self._publisher.close()

    def _publish(self, line: str) -> None:
        """Write the line for those waiting for the lock; without it if the database
        will not take it (the watching goes on)."""
        if self.holder is None:
            return
        pid, connect = self.holder
        try:
            if self._publisher is None:
                self._publisher = connect()
            publish_progress(self._publisher, pid, line)
        except psycopg.Error:
            self.holder = None

    def _cancel(self, jobs: tuple[int, ...], why: P2pandaError) -> None:
        jsc = self.sc._jsc.sc()
        for job in jobs:
            jsc.cancelJob(job, str(why))  # Spark's exception then says why


_watched: set[int] = set()  # the contexts (by id) a `watched` block is watching
_watched_lock = threading.Lock()


@contextmanager
def watched(
    spark: SparkSession,
    *,
    no_executor_timeout: float | None = None,
    stall_timeout: float | None = None,
    poll: float = POLL_SECONDS,
    holder: psycopg.Connection | None = None,
) -> Iterator[Watchdog | None]:
    """Run the block with its Spark work bounded (see the module docstring); an
    exception the block raises after the watchdog stopped its jobs becomes the
    watchdog's `no-executors` or `stalled`. With `holder`, the connection that holds (or
    will hold) the pipeline lock, what the work does is written for those who wait for
    the lock (`pipeline_lock.publish_progress`). Inside another `watched` block of the
    same context it adds nothing (yields None)."""
    sc = spark.sparkContext
    settings = tuning()
    clock = Clock(
        settings.no_executor_timeout if no_executor_timeout is None else no_executor_timeout,
        settings.stall_timeout if stall_timeout is None else stall_timeout,
    )
    with _watched_lock:
        nested = id(sc) in _watched
        _watched.add(id(sc))
    if nested:
        yield None
        return
    publish_to = None if holder is None else (holder.info.backend_pid, another_connection(holder))
    dog = Watchdog(sc, clock, min(poll, *(t / 4 for t in _positive(clock))), publish_to)
    dog.start()
    try:
        yield dog
    except Exception as error:
        if dog.verdict is not None:
            raise dog.verdict from error
        raise
    finally:
        dog.stop()
        with _watched_lock:
            _watched.discard(id(sc))


def _positive(clock: Clock) -> list[float]:
    return [t for t in (clock.no_executor_timeout, clock.stall_timeout) if t > 0] or [POLL_SECONDS]
