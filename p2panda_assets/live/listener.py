"""The listener: a thread in the Dagster daemon that wakes at each commit of new entries
(`LISTEN p2panda_entries`, `store/notify.sql`) and submits their runs at once.

What to request is the entries sensor's own decision (`entries_tick`: the new entries by
`ingest_seq`, the schemas they concern, the scope of each rebuild, nothing where a run
still in the queue reads them, nothing where a run that left the queue reads them
already), on a cursor of the listener's own, kept in memory: the listener never moves
the sensor's cursor or anything else the sensor decides by, so the sensor still sees
every entry and requests what no run reads (`defs.sensors.coverage`). Each run is a normal run of
the `materialize_schema` job, with the sensor's tags (partition, `p2panda/queue`,
`p2panda/batch`; the run tags itself with the schema's name and version) plus
`p2panda/trigger=notify`, submitted to the run queue: it waits there for the run in
progress, and the pipeline's lock excludes concurrent builds as for every run.

Coalescing: the notifications that arrive while a tick runs are handled by one tick
after it, and the sensor's logic requests nothing for a schema whose run still waits in
the queue (it reads the new entries when it starts). So a burst of entries is one run,
and at most one more waits behind the run in progress.

Started with the listener down (the daemon's first dequeue loop, a lost connection), the
cursor starts at the last `ingest_seq` handed out: entries committed while no listener
ran are the sensors', which find them within their interval.

One run per entry: the listener and the entries sensor decide under one lock, and the
listener reads on from the sensor's last read (`store.entry_claims`): an entry the
sensor saw is the sensor's, a run the listener created is seen by the sensor's next read.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

import dagster as dg
import psycopg
from dagster._core.scheduler.instigation import InstigatorStatus

from p2panda_assets.defs.assets import THROUGH_TAG
from p2panda_assets.defs.sensors import (
    EntryCursor,
    entries_tick,
    queued_selections,
    schema_entries_sensor,
)
from p2panda_assets.defs.sensors.coverage import (
    NOTIFY,
    TRIGGER_TAG,
    entries_covered,
    prefix_bound,
    raise_queued_bounds,
)
from p2panda_assets.defs.sensors.requests import requested_schema
from p2panda_assets.store.database import connect, database_url, ensure_schema
from p2panda_assets.store.entry_claims import claimed_entries, entries_lock
from p2panda_assets.store.feed import writers
from p2panda_assets.store.notify import listen

if TYPE_CHECKING:
    from p2panda_assets.live.runs import RunSubmitter

log = logging.getLogger("dagster.daemon.P2pandaListener")  # shown as the daemon's own

RECONNECT_SECONDS = 2.0  # after a lost connection or a failed tick
WAKE_SECONDS = 1.0  # how often the loop looks up from waiting (to stop, or be seen alive)
GATHER_SECONDS = 0.05  # after a notification, how long more are gathered into one tick


class Listener:
    """One thread: listen, and on each notification run one tick (`tick`)."""

    def __init__(self, instance: dg.DagsterInstance, location_name: str) -> None:
        self._instance = instance
        self._location_name = location_name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="p2panda-live", daemon=True)
        self.cursor: EntryCursor | None = None
        self.ready = threading.Event()  # listening (set again after each reconnect)

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        from p2panda_assets.live.runs import RunSubmitter

        submitter: RunSubmitter | None = None
        while not self._stop.is_set():
            try:
                if submitter is None:
                    submitter = RunSubmitter(self._instance, self._location_name)
                self._listen(submitter)
            except Exception:
                log.exception("p2panda live listener: restarting in %s s", RECONNECT_SECONDS)
                self.ready.clear()
                self._stop.wait(RECONNECT_SECONDS)
        if submitter is not None:
            submitter.close()

    def _listen(self, submitter: RunSubmitter) -> None:
        url = database_url()
        with connect(url, autocommit=True) as listening, connect(url, autocommit=True) as conn:
            ensure_schema(conn)  # the trigger, on a store no command has opened yet
            listen(listening)
            self.cursor = EntryCursor(seq=writers(conn).handed_out)
            self.ready.set()
            log.info("p2panda live listener: listening from ingest_seq %s", self.cursor.seq)
            while not self._stop.is_set():
                if not _notified(listening, WAKE_SECONDS):
                    continue
                _drain(listening, GATHER_SECONDS)  # the rest of a burst, into this tick
                self.tick(conn, submitter)

    def tick(self, conn: psycopg.Connection, submitter: RunSubmitter) -> list[dg.DagsterRun]:
        """The entries sensor's decision on the listener's cursor; its runs submitted.
        Nothing while the entries sensor is stopped (in the UI): the listener is its fast
        path, and the sensor reads these entries from its own cursor once it runs again."""
        with entries_lock(conn):
            return self._tick(conn, submitter)

    def _tick(self, conn: psycopg.Connection, submitter: RunSubmitter) -> list[dg.DagsterRun]:
        """`tick`, under the entries lock: past what the entries sensor read already (its
        runs are its own: `store.entry_claims`), and the runs created before the lock is
        let go, so the sensor's next read finds them."""
        assert self.cursor is not None
        if entries_sensor_stopped(self._instance):
            self.cursor = EntryCursor(seq=writers(conn).handed_out)
            return []
        claimed = claimed_entries(conn)
        if claimed is not None:
            self.cursor = self.cursor.union(EntryCursor.parse(claimed))
        queued = queued_selections(self._instance)
        covered = entries_covered(self._instance)
        result = entries_tick(conn, self.cursor, time.time(), queued=queued, covered=covered)
        moved = EntryCursor.parse(result.cursor)
        bound = prefix_bound(moved.seq, moved.holes)  # every entry up to it seen
        runs = []
        for request in result.run_requests or []:
            try:
                run = submitter.submit(request, {TRIGGER_TAG: NOTIFY, THROUGH_TAG: str(bound)})
            except Exception:  # the sensor's cursor has not moved: it requests this later
                log.exception("p2panda live listener: no run for %s", requested_schema(request))
                continue
            runs.append(run)
            log.info("p2panda live listener: run %s for %s", run.run_id, requested_schema(request))
        raise_queued_bounds(self._instance, bound)
        self.cursor = moved
        return runs


def entries_sensor_stopped(instance: dg.DagsterInstance) -> bool:
    """Whether the entries sensor was stopped (it runs by default, with no state stored)."""
    return any(
        state.instigator_name == schema_entries_sensor.name
        and state.status == InstigatorStatus.STOPPED
        for state in instance.all_instigator_state()
    )


def _notified(conn: psycopg.Connection, timeout: float) -> bool:
    """Wait up to `timeout` for a notification (consumed). Did one come?"""
    return any(True for _ in conn.notifies(timeout=timeout, stop_after=1))


def _drain(conn: psycopg.Connection, seconds: float) -> None:
    """Consume the notifications pending and those arriving within `seconds`: the
    commits they announce are read by the tick that follows."""
    for _ in conn.notifies(timeout=seconds):
        pass
