"""One run per change (issue 56 item 4): an entry, or a schema revert, starts exactly one
run for each partition it changes, whether the live listener or a sensor sees it first.

A real Dagster instance with the product's run coordinator and the real test database;
the daemon's part is played in process: each loop evaluates the three sensors in turn
and submits their requests to the run queue as the sensor daemon does (a run key a
sensor has a run of already is not submitted again), the listener ticks as a
notification wakes it, and the queue's runs are "executed" one at a time by the index
step's stand-in and the registry's record of a built table. The runs counted are the
instance's."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import dagster as dg
import psycopg
import pytest
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG

from p2panda_assets.defs.partitions import schema_id_of
from p2panda_assets.defs.sensors import (
    EntryCursor,
    schema_entries_sensor,
    schema_registration_sensor,
    schema_revert_sensor,
)
from p2panda_assets.defs.sensors.coverage import NOTIFY, TRIGGER_TAG
from p2panda_assets.defs.sensors.requests import FAMILY
from p2panda_assets.live.listener import Listener
from p2panda_assets.live.runs import RunSubmitter
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store.database import connect
from p2panda_assets.store.entry_claims import claimed_entries, entries_lock
from p2panda_assets.store.feed import writers
from p2panda_assets.testing.builder import create_field
from tests.automation.conftest import Tick
from tests.automation.corpora import Graph, relation_graph
from tests.automation.store import finish_runs, index_in_process, publish, register_schemas

pytestmark = pytest.mark.postgres

NAMES = ("profile", "mail", "digest", "tag")  # profile <- mail (cascade) <- digest; tag
ORDERS = {  # the daemon evaluates its sensors one after the other, in an order of its own
    "registration-first": [schema_registration_sensor, schema_entries_sensor, schema_revert_sensor],
    "revert-first": [schema_revert_sensor, schema_entries_sensor, schema_registration_sensor],
}


class Deployment:
    """The daemon's sensors and run queue, and the listener, on one instance."""

    def __init__(
        self,
        conn: psycopg.Connection,
        instance: dg.DagsterInstance,
        tick: Tick,
        submitter: RunSubmitter,
        order: list[dg.SensorDefinition],
    ) -> None:
        self.conn, self.instance, self.tick, self.submitter = conn, instance, tick, submitter
        self.order = order
        self.cursors: dict[str, str | None] = {sensor.name: None for sensor in order}
        self.listener = Listener(instance, "p2panda_assets")
        self.listener.cursor = None

    def sensors(self, before_submit: Callable[[], object] = lambda: None) -> None:
        """One loop of the sensor daemon: each sensor's tick, its runs submitted;
        `before_submit` runs between the entries sensor's tick and the submission of its
        runs (the daemon creates them after the tick returned)."""
        for sensor in self.order:
            result = self.tick(sensor, self.cursors[sensor.name])
            if sensor is schema_entries_sensor:
                before_submit()
            for request in result.run_requests or []:
                if not self._has_run(sensor.name, request.run_key):
                    self.submitter.submit(request, {SENSOR_NAME_TAG: sensor.name})
            self.cursors[sensor.name] = result.cursor

    def _has_run(self, sensor: str, run_key: str | None) -> bool:
        tags = {SENSOR_NAME_TAG: sensor, RUN_KEY_TAG: run_key or ""}
        return bool(self.instance.get_runs(filters=dg.RunsFilter(tags=tags)))

    def notified(self) -> list[dg.DagsterRun]:
        """The listener, woken by a commit."""
        if self.listener.cursor is None:
            self.listener.cursor = EntryCursor(seq=writers(self.conn).handed_out)
        return self.listener.tick(self.conn, self.submitter)

    def execute_queue(self, during: Callable[[], None] = lambda: None) -> None:
        """Run the queued runs, oldest first, one at a time; `during` runs while each is
        in progress, after its index step."""
        while queued := self.instance.get_runs(
            filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED]), ascending=True
        ):
            run = queued[0]
            self._event(run, dg.DagsterEventType.RUN_START)
            index_in_process(self.conn)
            during()
            sid = schema_id_of(run.tags["dagster/partition"])
            if run.asset_selection is None or FAMILY[-1] in run.asset_selection:
                self.conn.execute(
                    "UPDATE p2panda.schemas SET built_fingerprint = %s WHERE schema_id = %s",
                    (state_sql.verified_fingerprint(self.conn), sid),
                )
                finish_runs(self.conn, sid)
            self._event(run, dg.DagsterEventType.RUN_SUCCESS)

    def _event(self, run: dg.DagsterRun, kind: dg.DagsterEventType) -> None:
        self.instance.report_dagster_event(
            dg.DagsterEvent(kind.value, job_name=run.job_name), run_id=run.run_id
        )

    def settle(self) -> None:
        """Loops of the daemon until nothing is left to do, the listener woken too."""
        for _ in range(3):
            self.sensors()
            self.notified()
            self.execute_queue(during=self.sensors)

    def runs_of(self, graph: Graph) -> dict[str, int]:
        """Runs per schema, as the instance has them."""
        counts = {}
        for name in NAMES:
            tags = {"dagster/partition": graph.id(name)}
            counts[name] = len(self.instance.get_runs(filters=dg.RunsFilter(tags=tags)))
        return counts


@pytest.fixture
def submitter(instance: dg.DagsterInstance) -> Iterator[RunSubmitter]:
    submitter = RunSubmitter(instance, "p2panda_assets")
    yield submitter
    submitter.close()


@pytest.fixture
def graph(conn: psycopg.Connection, instance: dg.DagsterInstance) -> Graph:
    """The relation graph, profile at version 3 (a field `bio` added), every schema
    built from every entry: nothing for any sensor to do."""
    graph = relation_graph()
    graph.schemas["profile"].migrate(create_field("bio", "text"))
    publish(conn, graph.fresh())
    ids = [graph.id(name) for name in NAMES]
    register_schemas(conn, *ids)
    index_in_process(conn)
    finish_runs(conn, *ids)
    conn.execute(
        "UPDATE p2panda.schemas SET built_fingerprint = %s",
        (state_sql.verified_fingerprint(conn),),
    )
    instance.add_dynamic_partitions("schemas", ids)
    return graph


@pytest.fixture(params=sorted(ORDERS))
def deployment(request, conn, instance, tick: Tick, submitter, graph: Graph) -> Deployment:
    deployment = Deployment(conn, instance, tick, submitter, ORDERS[request.param])
    deployment.notified()  # listening from now on
    deployment.settle()
    assert deployment.runs_of(graph) == dict.fromkeys(NAMES, 0)  # nothing to do yet
    return deployment


@pytest.mark.parametrize("first", ["listener", "sensors"])
def test_one_entry_is_one_run(graph: Graph, deployment: Deployment, first: str) -> None:
    graph.logs["tag"].create(graph.schemas["tag"].ref(), label="one")
    publish(deployment.conn, graph.fresh())
    if first == "listener":
        [run] = deployment.notified()
        assert run.tags[TRIGGER_TAG] == NOTIFY
        deployment.sensors()
    else:  # the listener wakes while the daemon has not created the sensor's run yet
        woken: list[dg.DagsterRun] = []
        deployment.sensors(before_submit=lambda: woken.extend(deployment.notified()))
        assert woken == []  # the sensor's entry
    deployment.settle()
    assert deployment.runs_of(graph) == {"profile": 0, "mail": 0, "digest": 0, "tag": 1}


@pytest.mark.parametrize("first", ["listener", "sensors"])
def test_one_revert_is_one_run_per_schema_it_changes(
    graph: Graph, deployment: Deployment, first: str
) -> None:
    """A revert of profile changes profile, mail (its relation, cascading) and digest
    (mail's): one run each, none for tag. The schema's own run (its new schema log entry)
    is the listener's or the entries sensor's; mail's is the revert sensor's or the
    registration sensor's (its upstream was rebuilt), whichever ticks first."""
    graph.schemas["profile"].revert(2)
    publish(deployment.conn, graph.fresh())
    if first == "listener":
        [run] = deployment.notified()
        assert run.tags["dagster/partition"] == graph.id("profile")
    else:
        woken: list[dg.DagsterRun] = []
        deployment.sensors(before_submit=lambda: woken.extend(deployment.notified()))
        assert woken == []
    deployment.settle()
    assert deployment.runs_of(graph) == {"profile": 1, "mail": 1, "digest": 1, "tag": 0}
    deployment.settle()
    assert deployment.runs_of(graph) == {"profile": 1, "mail": 1, "digest": 1, "tag": 0}


def test_the_entries_sensor_decides_only_when_the_listener_has_created_its_runs(
    conn, database_url: str, tick: Tick
) -> None:
    """The listener holds the entries lock from its read of the store until its runs
    are created (`Listener.tick`): a tick of the entries sensor waits for it, so it reads
    those runs, never the entries without them."""
    results: list[dg.SensorResult] = []
    with connect(database_url, autocommit=True) as listener_conn, entries_lock(listener_conn):
        sensor = threading.Thread(target=lambda: results.append(tick(schema_entries_sensor, None)))
        sensor.start()
        sensor.join(1.0)
        assert sensor.is_alive() and results == []  # waiting for the lock
    sensor.join(30)
    [result] = results
    assert claimed_entries(conn) == result.cursor  # left for the listener
