"""The sensors, evaluated with `build_sensor_context` against a real Dagster instance and
the real test database: what each tick requests, and that a tick with nothing new
requests nothing."""

from __future__ import annotations

import dagster as dg
import psycopg
import pytest

from p2panda_assets.definitions import defs
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.defs.sensors import (
    PLAN_AND_TABLE,
    EntryCursor,
    read_new_entries,
    schema_entries_sensor,
    schema_registration_sensor,
    schema_revert_sensor,
)
from p2panda_assets.protocol.ids import format_schema_id, parse_schema_id
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store.database import connect
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from p2panda_assets.testing.builder import create_field, instances, remove_field
from tests.automation.conftest import Tick
from tests.automation.corpora import Graph, cycle_graph, relation_graph
from tests.automation.store import finish_runs, index_in_process, publish, register_schemas

pytestmark = pytest.mark.postgres


def requested(result: dg.SensorResult) -> list[str]:
    return [r.partition_key for r in result.run_requests]


def partition_keys(result: dg.SensorResult, kind: type) -> list[str]:
    """The keys the tick's dynamic-partition requests of `kind` name."""
    return [
        key
        for r in result.dynamic_partitions_requests
        if isinstance(r, kind)
        for key in r.partition_keys
    ]


def added(result: dg.SensorResult) -> list[str]:
    return partition_keys(result, dg.AddDynamicPartitionsRequest)


def removed(result: dg.SensorResult) -> list[str]:
    return partition_keys(result, dg.DeleteDynamicPartitionsRequest)


@pytest.fixture
def graph(conn: psycopg.Connection) -> Graph:
    """The relation graph published, indexed, registered, and every schema materialized."""
    graph = relation_graph()
    publish(conn, graph.fresh())
    register_schemas(conn, *(s.schema_id for s in graph.schemas.values()))
    index_in_process(conn)
    finish_runs(conn, *(graph.id(n) for n in ("profile", "mail", "digest", "tag")))
    return graph


def add_partitions(instance: dg.DagsterInstance, result: dg.SensorResult) -> None:
    """What the daemon does with a tick's partition requests."""
    if added(result):
        instance.add_dynamic_partitions("schemas", added(result))
    for key in removed(result):
        instance.delete_dynamic_partition("schemas", key)


def register_named(conn: psycopg.Connection, schema_id: str, name: str) -> str:
    """`panda register ... --name NAME`; the schema's partition key."""
    register(conn, *parse_schema_id(schema_id), name)
    return f"{name}.{schema_id}"


# --- registration --------------------------------------------------------------------------


def test_new_schema_gets_its_partition_and_a_run(conn, tick: Tick) -> None:
    graph = relation_graph()
    publish(conn, graph.fresh())
    register_schemas(conn, graph.id("tag"))
    result = tick(schema_registration_sensor, None)
    assert added(result) == [graph.id("tag")]
    [run] = result.run_requests
    assert run.partition_key == graph.id("tag")
    assert run.asset_selection is None  # the whole family: the index learns the schema
    assert run.run_key.startswith(f"register-{graph.id('tag')}-")


def test_registration_tick_without_change_requests_nothing(conn, tick: Tick, instance) -> None:
    graph = relation_graph()
    publish(conn, graph.fresh())
    register_schemas(conn, graph.id("tag"))
    first = tick(schema_registration_sensor, None)
    add_partitions(instance, first)
    second = tick(schema_registration_sensor, first.cursor)
    assert second.run_requests == [] and added(second) == []
    third = tick(schema_registration_sensor, second.cursor)
    assert third.run_requests == [] and third.skip_reason.skip_message == "nothing changed"


def test_registration_waits_for_an_unregistered_upstream(conn, tick: Tick, instance) -> None:
    """mail relates to profile; with profile unregistered, mail gets a partition only."""
    graph = relation_graph()
    publish(conn, graph.fresh())
    register_schemas(conn, graph.id("mail"))
    index_in_process(conn)
    result = tick(schema_registration_sensor, None)
    assert added(result) == [graph.id("mail")]
    assert result.run_requests == []
    assert graph.id("profile") in result.skip_reason.skip_message
    assert "not registered" in result.skip_reason.skip_message


def test_dependent_is_requested_once_its_upstream_is_materialized(
    conn, tick: Tick, instance
) -> None:
    graph = relation_graph()
    publish(conn, graph.fresh())
    register_schemas(conn, graph.id("mail"))
    index_in_process(conn)
    waiting = tick(schema_registration_sensor, None)
    add_partitions(instance, waiting)
    register_schemas(conn, graph.id("profile"))
    index_in_process(conn)
    upstream = tick(schema_registration_sensor, waiting.cursor)
    assert requested(upstream) == [graph.id("profile")]  # mail waits: profile not built yet
    add_partitions(instance, upstream)
    finish_runs(conn, graph.id("profile"))
    ready = tick(schema_registration_sensor, upstream.cursor)
    assert requested(ready) == [graph.id("mail")]
    assert requested(tick(schema_registration_sensor, ready.cursor)) == []


def queue_run(instance, schema_id: str, status: dg.DagsterRunStatus) -> dg.DagsterRun:
    """A run of the schema's whole family: NOT_STARTED stands for QUEUED, which add_run
    refuses without an origin."""
    return instance.add_run(
        dg.DagsterRun(
            job_name="materialize_schema",
            status=status,
            tags={"dagster/partition": schema_id},
        )
    )


def test_a_dependent_waits_for_its_own_queued_run_not_for_its_upstreams(
    conn, tick: Tick, instance
) -> None:
    """profile is built and has a queued run (new entries, as at every tick under steady
    ingest): mail, ready, is requested all the same, queued behind it. (It waited for
    every queued run of its upstream, and under steady ingest for ever.) A queued run
    of mail itself will build its table: no second request."""
    graph = relation_graph()
    publish(conn, graph.fresh())
    register_schemas(conn, graph.id("profile"))
    index_in_process(conn)
    first = tick(schema_registration_sensor, None)
    add_partitions(instance, first)
    finish_runs(conn, graph.id("profile"))
    register_schemas(conn, graph.id("mail"))
    index_in_process(conn)
    queue_run(instance, graph.id("profile"), dg.DagsterRunStatus.NOT_STARTED)
    mine = queue_run(instance, graph.id("mail"), dg.DagsterRunStatus.NOT_STARTED)
    waiting = tick(schema_registration_sensor, first.cursor)
    assert requested(waiting) == []
    assert f"{graph.id('mail')} waits for a run in progress or queued" in (
        waiting.skip_reason.skip_message
    )
    instance.report_run_canceled(mine)
    assert requested(tick(schema_registration_sensor, waiting.cursor)) == [graph.id("mail")]


def test_relation_cycle_is_reported_on_its_schemas_and_never_requested(
    conn, tick: Tick, instance
) -> None:
    graph = cycle_graph()
    publish(conn, graph.fresh())
    egg, chicken = graph.id("egg"), graph.id("chicken")
    register_schemas(conn, egg, chicken)
    index_in_process(conn)
    instance.add_dynamic_partitions("schemas", [egg, chicken])
    result = tick(schema_registration_sensor, None)
    assert result.run_requests == []
    message = result.skip_reason.skip_message
    assert "relation cycle" in message and egg in message and chicken in message
    reported = {(e.asset_key.to_user_string(), e.partition) for e in result.asset_events}
    assert reported == {("migration_plan", egg), ("migration_plan", chicken)}
    again = tick(schema_registration_sensor, result.cursor)
    assert again.run_requests == [] and again.asset_events == []  # reported once


def test_cascade_dependent_is_rebuilt_after_its_upstream(graph: Graph, conn, tick: Tick) -> None:
    """mail's rows go when the profile they point at is deleted: a rebuild of profile
    asks for mail after it; digest (no cascade) and tag are left alone."""
    first = tick(schema_registration_sensor, None)
    assert first.run_requests == []
    finish_runs(conn, graph.id("profile"))
    result = tick(schema_registration_sensor, first.cursor)
    assert requested(result) == [graph.id("mail")]
    assert result.run_requests[0].run_key.startswith(f"relations-{graph.id('mail')}-")
    assert requested(tick(schema_registration_sensor, result.cursor)) == []


# --- new entries ---------------------------------------------------------------------------


def test_new_entries_rebuild_only_their_schema(graph: Graph, conn, tick: Tick) -> None:
    baseline = tick(schema_entries_sensor, None)
    assert len(baseline.run_requests) == 4  # the first tick reads the whole store
    graph.logs["tag"].create(graph.schemas["tag"].ref(), label="later")
    publish(conn, graph.fresh())
    result = tick(schema_entries_sensor, baseline.cursor)
    [run] = result.run_requests
    assert run.partition_key == graph.id("tag") and run.asset_selection is None
    assert run.run_key.startswith(f"entries-{graph.id('tag')}-")
    again = tick(schema_entries_sensor, result.cursor)
    assert again.run_requests == [] and again.skip_reason.skip_message == "no new entries"


def test_entries_a_table_was_built_from_request_nothing(graph: Graph, conn, tick: Tick) -> None:
    """A daemon started after `panda materialize`: its first tick reads the whole store,
    but every table was built after all of it was verified, so no run is requested.
    An entry verified after a table was built still rebuilds it."""
    built_from = state_sql.verified_fingerprint(conn)  # index_in_process verified everything
    conn.execute("UPDATE p2panda.schemas SET built_fingerprint = %s", (built_from,))
    first = tick(schema_entries_sensor, None)
    assert first.run_requests == []
    assert "its table was built from these entries already" in first.skip_reason.skip_message
    graph.logs["tag"].create(graph.schemas["tag"].ref(), label="later")
    publish(conn, graph.fresh())
    assert requested(tick(schema_entries_sensor, first.cursor)) == [graph.id("tag")]
    index_in_process(conn)  # verified now, but the table is still the one built before
    assert requested(tick(schema_entries_sensor, first.cursor)) == [graph.id("tag")]


def test_new_entries_of_a_schema_with_a_queued_run_request_nothing_more(
    graph: Graph, conn, tick: Tick, instance
) -> None:
    """A run still in the queue indexes the store when it starts: it will read the new
    entries, so a second run would only rebuild the same table. A queued run of fewer
    assets, or one already started, does not count."""
    baseline = tick(schema_entries_sensor, None)
    graph.logs["tag"].create(graph.schemas["tag"].ref(), label="later")
    publish(conn, graph.fresh())

    def queue(status: dg.DagsterRunStatus, selection: list[dg.AssetKey] | None) -> dg.DagsterRun:
        return instance.add_run(
            dg.DagsterRun(
                job_name="materialize_schema",
                status=status,
                asset_selection=frozenset(selection) if selection else None,
                tags={"dagster/partition": graph.id("tag")},
            )
        )

    # NOT_STARTED: a run not begun, as QUEUED is (which add_run refuses without an origin).
    partial = queue(dg.DagsterRunStatus.NOT_STARTED, PLAN_AND_TABLE)
    started = queue(dg.DagsterRunStatus.STARTED, None)
    assert requested(tick(schema_entries_sensor, baseline.cursor)) == [graph.id("tag")]
    instance.report_run_canceled(partial)
    instance.report_run_canceled(started)
    queue(dg.DagsterRunStatus.NOT_STARTED, None)
    result = tick(schema_entries_sensor, baseline.cursor)
    assert result.run_requests == []
    assert "a queued run will read its new entries" in result.skip_reason.skip_message


def test_a_new_log_goes_to_the_schema_its_first_message_names(
    graph: Graph, conn, tick: Tick
) -> None:
    """Not indexed yet, the log is routed by what its payloads name (never trusted)."""
    baseline = tick(schema_entries_sensor, None)
    newcomer = instances(graph.builder.author(9), 7)
    newcomer.create(graph.schemas["profile"].ref(), name="sloth")
    publish(conn, graph.fresh())
    result = tick(schema_entries_sensor, baseline.cursor)
    assert requested(result) == [graph.id("profile")]


def test_new_entries_of_a_waiting_schema_wait(conn, tick: Tick) -> None:
    graph = relation_graph()
    publish(conn, graph.fresh())
    register_schemas(conn, graph.id("mail"))  # profile unregistered: mail waits
    index_in_process(conn)
    baseline = tick(schema_entries_sensor, None)
    graph.logs["mail"].create(graph.schemas["mail"].ref(), subject="waits")
    publish(conn, graph.fresh())
    result = tick(schema_entries_sensor, baseline.cursor)
    assert result.run_requests == []
    assert "not registered" in result.skip_reason.skip_message


def test_schema_log_entries_of_a_waiting_schema_go_up_to_the_plan(conn, tick: Tick) -> None:
    """A new version may end the wait: the index must learn it, the table still waits."""
    graph = relation_graph()
    publish(conn, graph.fresh())
    register_schemas(conn, graph.id("mail"))
    index_in_process(conn)
    baseline = tick(schema_entries_sensor, None)
    graph.schemas["mail"].migrate(remove_field("to"))
    publish(conn, graph.fresh())
    result = tick(schema_entries_sensor, baseline.cursor)
    [run] = result.run_requests
    assert run.partition_key == graph.id("mail")
    assert [k.to_user_string() for k in run.asset_selection] == [
        "raw_entries",
        "decoded_messages",
        "migration_plan",
    ]


def test_entries_committed_out_of_order_are_not_missed(
    graph: Graph, conn, database_url: str
) -> None:
    """A slow ingest takes a lower ingest_seq, commits after a faster one: the cursor
    keeps the hole below its maximum until the slow one commits."""
    fresh, cursor = read_new_entries(conn, EntryCursor())
    slow_pair = _new_label(graph, "slow")
    fast_pair = _new_label(graph, "fast")
    with connect(database_url) as slow:  # not autocommit: ingest stays in its transaction
        slow.execute("SELECT 1")
        ingest(slow, slow_pair)
        ingest(conn, fast_pair)
        fresh, cursor = read_new_entries(conn, cursor)
        assert len(fresh) == 1 and cursor.holes  # the slow row's seq is a hole
        slow.commit()
    fresh, cursor = read_new_entries(conn, cursor)
    assert [log.schema_id for log in fresh] == [_log_of(graph, "tag")]
    assert fresh[0].first == fresh[0].last  # exactly the slow entry
    assert cursor.holes == ()  # no writer left: nothing can fill a hole any more


def _new_label(graph: Graph, label: str) -> list[tuple[bytes, bytes]]:
    graph.logs["tag"].create(graph.schemas["tag"].ref(), label=label)
    return graph.fresh()


def _log_of(graph: Graph, name: str) -> str:
    log = graph.logs[name]
    return f"{log.owner.key_pair.public_key.hex()}-{log.log_id}"


# --- reverts -------------------------------------------------------------------------------


def test_revert_fans_out_to_the_dependents_only(graph: Graph, conn, tick: Tick) -> None:
    """profile <- mail <- digest; tag is unrelated. A revert of profile asks for the plan
    and the table of profile, mail and digest, upstream first, and of nothing else."""
    baseline = tick(schema_revert_sensor, None)
    assert baseline.run_requests == []
    profile = graph.schemas["profile"]
    profile.migrate(create_field("bio", "text"))
    profile.revert(2)
    publish(conn, graph.fresh())
    assert tick(schema_revert_sensor, baseline.cursor).run_requests == []  # not verified yet
    index_in_process(conn)
    result = tick(schema_revert_sensor, baseline.cursor)
    assert requested(result) == [graph.id(n) for n in ("profile", "mail", "digest")]
    assert all(r.asset_selection == PLAN_AND_TABLE for r in result.run_requests)
    assert len({r.run_key for r in result.run_requests}) == 3
    assert tick(schema_revert_sensor, result.cursor).run_requests == []


def test_a_revert_leaves_out_the_tables_built_after_it(graph: Graph, conn, tick: Tick) -> None:
    """The entries sensor's run rebuilt profile from its new schema log entries, the
    revert among them; the revert asks for the schemas whose relations reach it only.
    A daemon started after all of them were built asks for nothing."""
    baseline = tick(schema_revert_sensor, None)
    profile = graph.schemas["profile"]
    profile.migrate(create_field("bio", "text"))
    profile.revert(2)
    publish(conn, graph.fresh())
    index_in_process(conn)
    built_from = state_sql.verified_fingerprint(conn)
    conn.execute(
        "UPDATE p2panda.schemas SET built_fingerprint = %s WHERE schema_id = %s",
        (built_from, graph.id("profile")),
    )
    result = tick(schema_revert_sensor, baseline.cursor)
    assert requested(result) == [graph.id(n) for n in ("mail", "digest")]
    conn.execute("UPDATE p2panda.schemas SET built_fingerprint = %s", (built_from,))
    fresh = tick(schema_revert_sensor, None)
    assert fresh.run_requests == []
    assert "its table was built after the revert" in fresh.skip_reason.skip_message


def test_revert_of_a_leaf_schema_requests_it_alone(graph: Graph, conn, tick: Tick) -> None:
    baseline = tick(schema_revert_sensor, None)
    graph.schemas["digest"].revert(1)
    publish(conn, graph.fresh())
    index_in_process(conn)
    result = tick(schema_revert_sensor, baseline.cursor)
    assert requested(result) == [graph.id("digest")]


def daemon_like_context(
    instance: dg.DagsterInstance, database_url: str
) -> dg.SensorEvaluationContext:
    """A sensor context as the daemon builds one: from the instance's ref, with the code
    location. Use it in `with`: it opens an instance of its own, which sets Dagster's
    current definitions-state storage until the context is closed; left open, that
    storage outlives its instance and a later `materialize` in this process fails
    ("undefined DagsterInstance weakref")."""
    return dg.build_sensor_context(
        instance_ref=instance.get_ref(),
        definitions=defs,
        resources={"postgres": PostgresResource(url=database_url)},
    )


def test_registration_result_passes_the_daemons_validation(
    conn, instance, database_url: str
) -> None:
    """Evaluated as the daemon does (`evaluate_tick`, with the code location), the run
    request for a partition added in the same tick resolves to the job's assets."""
    graph = relation_graph()
    publish(conn, graph.fresh())
    register_schemas(conn, graph.id("tag"))
    with daemon_like_context(instance, database_url) as context:
        data = schema_registration_sensor.evaluate_tick(context)
    [run] = data.run_requests
    assert run.partition_key == graph.id("tag")
    assert run.tags["dagster/partition"] == graph.id("tag")


def test_revert_waits_while_its_schema_is_being_rebuilt(
    graph: Graph, conn, tick: Tick, instance
) -> None:
    """The run that indexed the revert may still be writing the schema's decoded
    messages and table: the fan-out waits for it, then happens once."""
    baseline = tick(schema_revert_sensor, None)
    graph.schemas["tag"].revert(1)
    publish(conn, graph.fresh())
    index_in_process(conn)
    run = instance.add_run(
        dg.DagsterRun(
            job_name="materialize_schema",
            status=dg.DagsterRunStatus.STARTED,
            tags={"dagster/partition": graph.id("tag")},
        )
    )
    waiting = tick(schema_revert_sensor, baseline.cursor)
    assert waiting.run_requests == []
    assert "waits for its run in progress" in waiting.skip_reason.skip_message
    instance.report_run_canceled(run)
    result = tick(schema_revert_sensor, waiting.cursor)
    assert requested(result) == [graph.id("tag")]


def test_revert_does_not_wait_for_a_queued_run_of_its_schema(
    graph: Graph, conn, tick: Tick, instance
) -> None:
    """A queued run has not begun: it builds the table after the revert was verified, so
    it is the revert's run, and the revert is handled, not waiting. (It waited, and under
    steady ingest the entries sensor had queued a run for the schema at every tick: the
    dependents were never rebuilt. Requested again, it was a second run for one change.)"""
    baseline = tick(schema_revert_sensor, None)
    graph.schemas["profile"].revert(1)
    publish(conn, graph.fresh())
    index_in_process(conn)
    instance.add_run(
        dg.DagsterRun(
            job_name="materialize_schema",
            status=dg.DagsterRunStatus.NOT_STARTED,  # as QUEUED (add_run needs an origin)
            tags={"dagster/partition": graph.id("mail")},
        )
    )
    result = tick(schema_revert_sensor, baseline.cursor)
    assert requested(result) == [graph.id("profile"), graph.id("digest")]
    assert tick(schema_revert_sensor, result.cursor).run_requests == []  # handled


def test_revert_leaves_a_schema_to_its_queued_run(graph: Graph, conn, tick: Tick, instance) -> None:
    baseline = tick(schema_revert_sensor, None)
    graph.schemas["tag"].revert(1)
    publish(conn, graph.fresh())
    index_in_process(conn)
    queue_run(instance, graph.id("tag"), dg.DagsterRunStatus.NOT_STARTED)
    result = tick(schema_revert_sensor, baseline.cursor)
    assert result.run_requests == []
    assert "a queued run builds its table after the revert" in result.skip_reason.skip_message


# --- partition keys: `<name>.<schema id>` ---------------------------------------------------


def test_a_named_schema_gets_the_key_name_dot_id(conn, tick: Tick, instance) -> None:
    """The UI cuts keys in the middle: the name comes first. Run keys, batches and
    cursors keep the schema id."""
    graph = relation_graph()
    publish(conn, graph.fresh())
    key = register_named(conn, graph.id("tag"), "tag")
    result = tick(schema_registration_sensor, None)
    assert added(result) == [key] and removed(result) == []
    [run] = result.run_requests
    assert run.partition_key == key
    assert run.run_key.startswith(f"register-{graph.id('tag')}-")


def test_the_bare_id_partitions_of_an_older_instance_are_migrated(
    conn, tick: Tick, instance
) -> None:
    """An instance from before the names: a named schema's bare id gives way to its key,
    a schema registered without a name keeps its bare id, and the partition of a schema
    no longer registered goes too, once no run works on it."""
    graph = relation_graph()
    publish(conn, graph.fresh())
    tag, profile = graph.id("tag"), graph.id("profile")
    key = register_named(conn, tag, "tag")
    register_schemas(conn, profile)
    gone = format_schema_id(bytes(32), 99)  # unregistered, its run still in progress
    instance.add_dynamic_partitions("schemas", [tag, profile, gone])
    running = queue_run(instance, gone, dg.DagsterRunStatus.STARTED)
    result = tick(schema_registration_sensor, None)
    assert (added(result), removed(result)) == ([key], [tag])
    add_partitions(instance, result)
    assert sorted(instance.get_dynamic_partitions("schemas")) == sorted([key, profile, gone])
    instance.report_run_canceled(running)
    after = tick(schema_registration_sensor, result.cursor)
    assert (added(after), removed(after)) == ([], [gone])
    add_partitions(instance, after)
    assert sorted(instance.get_dynamic_partitions("schemas")) == sorted([key, profile])
    assert removed(tick(schema_registration_sensor, after.cursor)) == []


def test_a_renamed_schemas_new_key_takes_its_last_build_along(conn, tick: Tick, instance) -> None:
    """`panda register --name` for a named schema moves its key; the tick that moves it
    reports the old key's latest materializations under the new one (`carried_from`),
    so the UI does not show the renamed schema Missing while its table is there."""
    graph = relation_graph()
    publish(conn, graph.fresh())
    tag = graph.id("tag")
    old = register_named(conn, tag, "tag")
    instance.add_dynamic_partitions("schemas", [old])
    instance.report_runless_asset_event(
        dg.AssetMaterialization("materialized_table", partition=old, metadata={"rows": 3})
    )
    new = register_named(conn, tag, "label")
    result = tick(schema_registration_sensor, None)
    assert (added(result), removed(result)) == ([new], [old])
    [carried] = [e for e in result.asset_events if isinstance(e, dg.AssetMaterialization)]
    assert (carried.asset_key, carried.partition) == (dg.AssetKey("materialized_table"), new)
    metadata = {k: v.value for k, v in carried.metadata.items()}
    assert metadata == {"rows": 3, "schema_name": "label", "carried_from": old}


def test_a_migrating_tick_passes_the_daemons_validation(conn, instance, database_url: str) -> None:
    """Evaluated as the daemon does, a tick that removes a bare id and requests a run of
    the key it adds in the same tick resolves: the run is tagged with the new key."""
    graph = relation_graph()
    publish(conn, graph.fresh())
    key = register_named(conn, graph.id("tag"), "tag")
    instance.add_dynamic_partitions("schemas", [graph.id("tag")])
    with daemon_like_context(instance, database_url) as context:
        data = schema_registration_sensor.evaluate_tick(context)
    [run] = data.run_requests
    assert run.partition_key == key and run.tags["dagster/partition"] == key


def test_the_entries_sensor_adds_a_key_it_requests_before_the_registration_sensor(
    graph: Graph, conn, tick: Tick, instance
) -> None:
    """A schema named after the registration sensor's last tick (or an instance from
    before the names): the entries sensor's request carries the new key and adds it in
    the same tick, as Dagster refuses a request for a partition it does not have."""
    baseline = tick(schema_entries_sensor, None)
    key = register_named(conn, graph.id("tag"), "tag")
    graph.logs["tag"].create(graph.schemas["tag"].ref(), label="named")
    publish(conn, graph.fresh())
    result = tick(schema_entries_sensor, baseline.cursor)
    assert requested(result) == [key] and added(result) == [key]
    instance.add_dynamic_partitions("schemas", [key])
    graph.logs["tag"].create(graph.schemas["tag"].ref(), label="again")
    publish(conn, graph.fresh())
    again = tick(schema_entries_sensor, result.cursor)
    assert requested(again) == [key] and added(again) == []


def test_runs_tagged_with_a_named_key_count_for_their_schema(
    graph: Graph, conn, tick: Tick, instance
) -> None:
    """A run of `tag.<id>` in progress holds back the revert fan-out of that schema, as
    a run of the bare id did, and the fan-out's request carries the key."""
    key = register_named(conn, graph.id("tag"), "tag")
    baseline = tick(schema_revert_sensor, None)
    graph.schemas["tag"].revert(1)
    publish(conn, graph.fresh())
    index_in_process(conn)
    run = queue_run(instance, key, dg.DagsterRunStatus.STARTED)
    waiting = tick(schema_revert_sensor, baseline.cursor)
    assert "waits for its run in progress" in waiting.skip_reason.skip_message
    instance.report_run_canceled(run)
    assert requested(tick(schema_revert_sensor, waiting.cursor)) == [key]
