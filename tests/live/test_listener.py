"""The listener's tick against the real test database and a real Dagster instance, without
Spark or a daemon: what it submits, how it is tagged, and that the entries sensor (its
safety net) requests none of the same work, with the run queued or started."""

from __future__ import annotations

import dagster as dg
import psycopg
import pytest

from p2panda_assets.defs.assets import QUEUE_TAG, THROUGH_TAG
from p2panda_assets.defs.sensors import EntryCursor, schema_entries_sensor
from p2panda_assets.defs.sensors.coverage import NOTIFY, TRIGGER_TAG, entries_covered
from p2panda_assets.live.listener import Listener
from p2panda_assets.live.runs import RunSubmitter
from p2panda_assets.store.feed import writers
from tests.automation.conftest import Tick
from tests.automation.corpora import Graph, relation_graph
from tests.automation.store import finish_runs, index_in_process, publish, register_schemas

pytestmark = pytest.mark.postgres


@pytest.fixture
def graph(conn: psycopg.Connection, instance: dg.DagsterInstance) -> Graph:
    """The relation graph published, indexed, registered, materialized, partitioned."""
    graph = relation_graph()
    publish(conn, graph.fresh())
    ids = [s.schema_id for s in graph.schemas.values()]
    register_schemas(conn, *ids)
    index_in_process(conn)
    finish_runs(conn, *ids)
    instance.add_dynamic_partitions("schemas", ids)
    return graph


@pytest.fixture
def listener(instance: dg.DagsterInstance, conn: psycopg.Connection) -> Listener:
    """A listener whose cursor is where the store is now (as at its start), not started:
    the test calls its tick."""
    listener = Listener(instance, "p2panda_assets")
    listener.cursor = EntryCursor(seq=writers(conn).handed_out)
    return listener


@pytest.fixture
def submitter(instance: dg.DagsterInstance) -> RunSubmitter:
    submitter = RunSubmitter(instance, "p2panda_assets")
    yield submitter
    submitter.close()


def start(instance: dg.DagsterInstance, run: dg.DagsterRun) -> None:
    """What the run worker reports when a run begins: it leaves the queue."""
    instance.report_dagster_event(
        dg.DagsterEvent(dg.DagsterEventType.RUN_START.value, job_name=run.job_name),
        run_id=run.run_id,
    )
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED


def test_a_burst_of_entries_is_one_queued_tagged_run_the_sensor_does_not_repeat(
    graph: Graph, conn, instance, listener, submitter, tick: Tick
) -> None:
    sensor_cursor = tick(schema_entries_sensor, None).cursor  # the sensor has seen the store
    for i in range(5):  # five commits before the listener wakes: one tick
        graph.logs["tag"].create(graph.schemas["tag"].ref(), label=f"burst {i}")
        publish(conn, graph.fresh())
    top = writers(conn).handed_out

    [run] = listener.tick(conn, submitter)
    assert run.status == dg.DagsterRunStatus.QUEUED  # in the queue, like every run
    assert run.tags["dagster/partition"] == graph.id("tag")
    assert run.tags[TRIGGER_TAG] == NOTIFY and int(run.tags[THROUGH_TAG]) == top
    assert run.tags["p2panda/queue"] == QUEUE_TAG["p2panda/queue"]
    assert run.tags["dagster/run_key"].startswith(f"entries-{graph.id('tag')}-")
    assert run.job_name == "materialize_schema" and run.asset_selection is None
    assert run.remote_job_origin.location_name == "p2panda_assets"
    assert listener.tick(conn, submitter) == []  # nothing new: nothing more

    queued = tick(schema_entries_sensor, sensor_cursor)
    assert queued.run_requests == []
    assert "a run submitted after these entries reads them" in queued.skip_reason.skip_message

    start(instance, run)  # it left the queue after the burst committed: it reads it
    assert entries_covered(instance) == {graph.id("tag"): top}
    started = tick(schema_entries_sensor, sensor_cursor)
    assert started.run_requests == []
    assert "a run submitted after these entries reads them" in started.skip_reason.skip_message

    graph.logs["tag"].create(graph.schemas["tag"].ref(), label="after the start")
    publish(conn, graph.fresh())  # not read by the started run: the sensor reads it first
    [sensor_request] = tick(schema_entries_sensor, sensor_cursor).run_requests
    assert sensor_request.partition_key == graph.id("tag")
    assert int(sensor_request.tags[THROUGH_TAG]) == writers(conn).handed_out
    assert listener.tick(conn, submitter) == []  # the sensor's entry: its run, not a second

    graph.logs["tag"].create(graph.schemas["tag"].ref(), label="the listener first")
    publish(conn, graph.fresh())
    [second] = listener.tick(conn, submitter)
    assert second.tags["dagster/partition"] == graph.id("tag")
    assert int(second.tags[THROUGH_TAG]) == writers(conn).handed_out


def test_a_run_still_queued_when_the_listener_reads_gets_its_bound(
    graph: Graph, conn, instance, listener, submitter, tick: Tick
) -> None:
    """A run the sensor queued (bound: what the sensor read) will read what the listener
    saw while it was queued: the listener says so on the run, and requests nothing."""
    sensor_cursor = tick(schema_entries_sensor, None).cursor
    graph.logs["mail"].create(graph.schemas["mail"].ref(), subject="one", to=None)
    publish(conn, graph.fresh())
    [request] = tick(schema_entries_sensor, sensor_cursor).run_requests
    queued = submitter.submit(request, {})  # as the sensor daemon would submit it
    assert int(queued.tags[THROUGH_TAG]) == writers(conn).handed_out

    graph.logs["mail"].create(graph.schemas["mail"].ref(), subject="two", to=None)
    publish(conn, graph.fresh())
    assert listener.tick(conn, submitter) == []  # the queued run reads it
    tagged = instance.get_run_by_id(queued.run_id)
    assert int(tagged.tags[THROUGH_TAG]) == writers(conn).handed_out
    start(instance, tagged)
    assert entries_covered(instance) == {graph.id("mail"): writers(conn).handed_out}


def test_nothing_while_the_entries_sensor_is_stopped(
    graph: Graph, conn, instance, listener, submitter
) -> None:
    """The listener is the entries sensor's fast path: stopped in the UI, both are."""
    sensor = submitter._repository.get_sensor(schema_entries_sensor.name)
    instance.stop_sensor(sensor.get_remote_origin_id(), sensor.selector_id, sensor)
    graph.logs["tag"].create(graph.schemas["tag"].ref(), label="while stopped")
    publish(conn, graph.fresh())
    assert listener.tick(conn, submitter) == []
    assert instance.get_runs() == []
    instance.start_sensor(sensor)
    assert listener.tick(conn, submitter) == []  # those entries are the sensor's now
    graph.logs["tag"].create(graph.schemas["tag"].ref(), label="running again")
    publish(conn, graph.fresh())
    [run] = listener.tick(conn, submitter)
    assert run.tags[TRIGGER_TAG] == NOTIFY
