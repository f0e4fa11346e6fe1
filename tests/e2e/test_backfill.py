"""A backfill of three registered schemas, launched through the webserver's GraphQL API
exactly as the UI's "Launch backfill" does: profile <- mail (a cascade), and note, which
relates to a schema that is not registered. It ends with profile's and mail's tables built
in relation order, in one Spark job, with the cascade applied; note waits, says why, no run
fails, and the backfill ends as succeeded.

Dagster knows nothing of relations (a partition cannot depend on another partition of the
same asset) and submits a backfill's runs sorted by partition key (`<name>.<schema id>`),
so the naive order is wrong: mail's key and then note's sort first, profile's last. Each
run names the backfill's partitions as its batch: the first run (mail's) builds every
schema of the batch that can be built, upstream first, in one Spark job; note waits (its
materialization of `materialized_table` says for what, and that no table was built); the
runs of note and profile find their tables built, or not buildable, from the same index
and report them.

The sensors are switched off through the same API before the daemon starts (as a UI user
would): otherwise the registration sensor's first tick would build the registered schemas
itself before the backfill ran. The registration sensor is switched back on as soon as the
backfill's runs exist, so it runs alongside them as in a deployment; the entries sensor
stays off (its first tick rebuilds every schema that has entries, which is not the
subject here).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from psycopg import sql

from bench.latency import ROOT, DaemonScenario, panda, scenario, stop_process_group
from p2panda_assets.defs.partitions import partition_key
from p2panda_assets.engine.corpus import Corpus, reduce_corpus
from p2panda_assets.engine.values import to_json
from p2panda_assets.store.database import connect
from p2panda_assets.store.registry import table_identifier, table_name_for
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.postgres]

LOCATION = "p2panda_assets"  # workspace.yaml
REPOSITORY = "__repository__"  # the repository of a `Definitions` object
FAMILY = ["raw_entries", "decoded_messages", "migration_plan", "materialized_table"]
REGISTRATION_SENSOR = "schema_registration_sensor"
BACKFILL_TAG = "dagster/backfill"
TIMEOUT = 600.0  # per wait; the whole test takes about 5 minutes on two shared cores

# What the UI sends from the asset partitions dialog ("Launch backfill").
LAUNCH_BACKFILL = """
mutation LaunchPartitionBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId launchedRunIds }
    ... on Error { message }
    ... on PythonError { stack }
  }
}
"""
SENSOR = """
query Sensor($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor { jobOriginId sensorState { selectorId status } }
    ... on Error { message }
  }
}
"""
STOP_SENSOR = """
mutation StopSensor($jobOriginId: String!, $jobSelectorId: String!) {
  stopSensor(jobOriginId: $jobOriginId, jobSelectorId: $jobSelectorId) {
    __typename
    ... on StopSensorMutationResult { instigationState { status } }
    ... on Error { message }
  }
}
"""
START_SENSOR = """
mutation StartSensor($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { status } }
    ... on Error { message }
  }
}
"""
BACKFILL = """
query Backfill($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { status isAssetBackfill partitionNames }
    ... on Error { message }
  }
}
"""
LOCATION_LOADED = """
query Location($selector: RepositorySelector!) {
  repositoryOrError(repositorySelector: $selector) {
    __typename
    ... on Repository { sensors { name } }
  }
}
"""


# --- the corpus: profile <- mail (cascade), the downstream's id sorting first -------------


@dataclass
class Story:
    pairs: list[tuple[bytes, bytes]]
    upstream: str  # profile
    downstream: str  # mail: `to` is a cascade relation to profile
    pending: str  # note: relates to tag, which is never registered

    @property
    def names(self) -> dict[str, str]:
        """The name each schema is registered with."""
        return {self.upstream: "profile", self.downstream: "mail", self.pending: "note"}

    def key(self, schema_id: str) -> str:
        """The schema's partition key, as the UI shows and selects it."""
        return partition_key(self.names[schema_id], schema_id)


def story() -> Story:
    builder = CorpusBuilder()
    owner = builder.author(11)
    note = owner.schema(19, "note")  # log 19 < 20 < 21: note's id sorts first, then mail's
    mail = owner.schema(20, "mail")
    profile = owner.schema(21, "profile")
    tag = owner.schema(30, "tag")
    tag.migrate(create_field("label", "varchar"))
    note.migrate(create_field("tag", "relation", schema=tag.log_ref))
    profile.migrate(create_field("name", "varchar"))
    mail.migrate(
        create_field("subject", "text"),
        create_field("to", "relation", schema=profile.log_ref, cascade=True),
    )
    people, letters = builder.author(12), builder.author(13)
    panda_ = instances(people, 1).create(profile.ref(), name="panda")
    sloth_log = instances(people, 2)
    sloth = sloth_log.create(profile.ref(), name="sloth")
    instances(letters, 1).create(mail.ref(), subject="hi panda", to=panda_)
    instances(letters, 2).create(mail.ref(), subject="hi sloth", to=sloth)
    sloth_log.delete(sloth)  # cascades: the mail to sloth is gone, if mail is built after
    tags = instances(letters, 3).create(tag.ref(), label="later")
    instances(letters, 4).create(note.ref(), tag=tags)
    return Story(builder.pairs, profile.schema_id, mail.schema_id, note.schema_id)


# --- the webserver and its GraphQL API -----------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Webserver:
    """`dagster-webserver` on the project's workspace, in its own process group."""

    def __init__(self, home: Path) -> None:
        self.port = free_port()
        self.log_path = home / "webserver.log"
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_MASTER="local[2]")
        log = open(self.log_path, "wb")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "dagster-webserver"),
                *("-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(self.port)),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def graphql(self, query: str, **variables: Any) -> dict:
        body = json.dumps({"query": query, "variables": variables}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        assert "errors" not in answer, answer["errors"]
        return answer["data"]

    def wait_until_loaded(self, timeout: float) -> list[str]:
        """Until the code location is loaded; the names of its sensors."""
        selector = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the webserver exited: {self.log()}")
            with contextlib.suppress(urllib.error.URLError, ConnectionError):
                found = self.graphql(LOCATION_LOADED, selector=selector)["repositoryOrError"]
                if found["__typename"] == "Repository":
                    return [s["name"] for s in found["sensors"]]
            time.sleep(1)
        raise TimeoutError(f"the webserver did not load {LOCATION}: {self.log()}")

    def sensor_selector(self, name: str) -> dict:
        return {
            "repositoryLocationName": LOCATION,
            "repositoryName": REPOSITORY,
            "sensorName": name,
        }

    def stop_sensor(self, name: str) -> None:
        found = self.graphql(SENSOR, selector=self.sensor_selector(name))["sensorOrError"]
        assert found["__typename"] == "Sensor", found
        stopped = self.graphql(
            STOP_SENSOR,
            jobOriginId=found["jobOriginId"],
            jobSelectorId=found["sensorState"]["selectorId"],
        )["stopSensor"]
        assert stopped["instigationState"]["status"] == "STOPPED", stopped

    def start_sensor(self, name: str) -> None:
        started = self.graphql(START_SENSOR, selector=self.sensor_selector(name))["startSensor"]
        assert started["sensorState"]["status"] == "RUNNING", started

    def launch_backfill(self, partitions: list[str], assets: list[str]) -> str:
        params = {
            "partitionNames": partitions,
            "assetSelection": [{"path": [name]} for name in assets],
            "fromFailure": False,
            "tags": [],
        }
        launched = self.graphql(LAUNCH_BACKFILL, backfillParams=params)["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched
        return launched["backfillId"]

    def backfill(self, backfill_id: str) -> dict:
        found = self.graphql(BACKFILL, id=backfill_id)["partitionBackfillOrError"]
        assert found["__typename"] == "PartitionBackfill", found
        return found

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        stop_process_group(self.process)


@contextlib.contextmanager
def webserver(home: Path) -> Iterator[Webserver]:
    server = Webserver(home)
    try:
        yield server
    finally:
        server.stop()


# --- what the store and the instance say ---------------------------------------------------


def registry(url: str) -> dict[str, tuple]:
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT schema_id, status, materialized_at, upstream FROM p2panda.schemas"
        ).fetchall()
    return {sid: (status, at, list(upstream or [])) for sid, status, at, upstream in rows}


def table_rows(url: str, schema_id: str, fields: list[str]) -> list[dict]:
    """The table's rows as the engine's JSON values, by column name, sorted by id."""
    columns = ["_instance_id", "_author", "_version", "_seq", *fields]
    query = sql.SQL("SELECT {} FROM {} ORDER BY _instance_id").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        table_identifier(table_name_for(schema_id)),
    )
    with connect(url) as conn:
        rows = conn.execute(query).fetchall()
    return [
        {c: (int(v) if c in ("_version", "_seq") else v) for c, v in zip(columns, row, strict=True)}
        for row in rows
    ]


def engine_rows(corpus: Corpus, schema_id: str) -> tuple[list[str], list[dict]]:
    table = corpus.tables[schema_id]
    lens = table.history.lens
    fields = list(lens)
    rows = [
        {
            "_instance_id": row.instance_id.hex(),
            "_author": row.author.hex(),
            "_version": row.version,
            "_seq": row.seq,
            **{name: to_json(row.values[name], lens[name].type) for name in fields},
        }
        for row in table.rows
    ]
    return fields, rows


@dataclass(frozen=True)
class Built:
    """A materialization of `materialized_table` for one partition, and the run's origin."""

    partition: str
    timestamp: float
    run_id: str
    origin: str  # backfill | sensor:<run key>


def origin(run: dg.DagsterRun, backfill_id: str) -> str:
    if run.tags.get(BACKFILL_TAG) == backfill_id:
        return "backfill"
    if run.tags.get("dagster/sensor_name") == REGISTRATION_SENSOR:
        return f"sensor:{run.tags.get('dagster/run_key', '')}"
    return f"other:{dict(run.tags)}"


def tables_built(instance: dg.DagsterInstance, partition: str, backfill_id: str) -> list[Built]:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(dg.AssetKey("materialized_table"), asset_partitions=[partition]),
        limit=100,
        ascending=True,
    ).records
    built = []
    for record in records:
        status = record.asset_materialization.metadata["status"].value
        if status == "pending":
            continue  # a materialization that says no table was built
        run = instance.get_run_by_id(record.run_id)
        assert run is not None
        built.append(Built(partition, record.timestamp, record.run_id, origin(run, backfill_id)))
    return built


def wait(what: str, done: Callable[[], bool], run: DaemonScenario, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        if run.daemon is not None and run.daemon.poll() is not None:
            raise RuntimeError(
                f"the daemon exited: {(run.home / 'daemon.log').read_text()[-3000:]}"
            )
        time.sleep(1)
    raise TimeoutError(
        f"{what} not within {timeout} s: {(run.home / 'daemon.log').read_text()[-3000:]}"
    )


# --- the test ------------------------------------------------------------------------------


def test_a_ui_backfill_of_related_schemas_builds_them_in_relation_order() -> None:
    corpus_story = story()
    up, down, note = corpus_story.upstream, corpus_story.downstream, corpus_story.pending
    keys = [corpus_story.key(s) for s in (up, down, note)]
    assert sorted(keys) == [keys[1], keys[2], keys[0]]  # naively, the wrong order
    expected = reduce_corpus(corpus_story.pairs, {up, down})
    assert expected.tables[down].upstream == (up,)
    assert [r.values["subject"] for r in expected.tables[down].rows] == ["hi panda"]  # cascade
    started = time.monotonic()
    with scenario() as run:
        home = run.home
        with webserver(home) as server:
            ingest_and_register(run, corpus_story)
            sensors = server.wait_until_loaded(TIMEOUT)
            assert REGISTRATION_SENSOR in sensors
            for name in sensors:  # all of them, before the daemon's first tick
                server.stop_sensor(name)
            backfill_id = server.launch_backfill(keys, FAMILY)
            assert server.backfill(backfill_id)["status"] == "REQUESTED"
            run.start_daemon()
            instance = dg.DagsterInstance.get()
            try:
                backfill_and_sensor(run, server, instance, backfill_id, corpus_story)
                elapsed = time.monotonic() - started
                check_end_state(run.url, expected, corpus_story)
                report = check_order(instance, backfill_id, corpus_story)
            finally:
                instance.dispose()
            status = server.backfill(backfill_id)["status"]
    print(f"\nbackfill {backfill_id} ({status}), {elapsed:.0f} s:\n{report}")
    shutil.rmtree(home, ignore_errors=True)  # kept, with its logs, when the test fails


def ingest_and_register(run: DaemonScenario, corpus_story: Story) -> None:
    """`panda ingest`, then `panda register` of the three schemas (which adds their
    partitions), the downstream first; nothing is materialized."""
    story_file = run.home / "story.jsonl"
    story_file.write_text(
        "".join(
            json.dumps({"entry": entry.hex(), "payload": payload.hex()}) + "\n"
            for entry, payload in corpus_story.pairs
        )
    )
    panda("ingest", str(story_file))
    for schema_id in (corpus_story.pending, corpus_story.downstream, corpus_story.upstream):
        name = corpus_story.names[schema_id]
        author, log_id = schema_id.rsplit("-", 1)
        panda("register", author, log_id, "--name", name)
    statuses = {sid: s[0] for sid, s in registry(run.url).items()}
    assert set(statuses.values()) == {"registered"} and len(statuses) == 3


def backfill_and_sensor(
    run: DaemonScenario,
    server: Webserver,
    instance: dg.DagsterInstance,
    backfill_id: str,
    corpus_story: Story,
) -> None:
    """Once the daemon has submitted the backfill's runs, the registration sensor is
    switched on; then until both schemas are materialized, no run is left, and the
    backfill is over."""
    up, down, note = corpus_story.upstream, corpus_story.downstream, corpus_story.pending

    def submitted() -> bool:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={BACKFILL_TAG: backfill_id}))
        keys = {corpus_story.key(s) for s in (up, down, note)}
        return {r.tags.get("dagster/partition") for r in runs} == keys

    wait("the backfill's runs", submitted, run, TIMEOUT)
    server.start_sensor(REGISTRATION_SENSOR)

    def finished() -> bool:
        statuses = {sid: s[0] for sid, s in registry(run.url).items()}
        return (
            statuses == {up: "materialized", down: "materialized", note: "pending"}
            and all(r.is_finished for r in instance.get_runs())
            and server.backfill(backfill_id)["status"] in ("COMPLETED_SUCCESS", "COMPLETED_FAILED")
        )

    wait("profile and mail materialized, note waiting", finished, run, TIMEOUT)
    # Every targeted partition has a materialization (note's says it waits): the backfill
    # that built what could be built is not reported as failed.
    assert server.backfill(backfill_id)["status"] == "COMPLETED_SUCCESS"


def check_end_state(url: str, expected: Corpus, corpus_story: Story) -> None:
    """The engine's rows in both tables (mail without the mail to the deleted profile: its
    cascade was read from profile's build), and the registry's word."""
    up, down = corpus_story.upstream, corpus_story.downstream
    for schema_id in (up, down):
        fields, rows = engine_rows(expected, schema_id)
        assert table_rows(url, schema_id, fields) == rows, schema_id
    state = registry(url)
    assert state[up][0] == "materialized" and state[down][0] == "materialized"
    assert state[down][2] == [up]  # its upstream schemas
    assert state[down][1] > state[up][1]  # materialized_at: mail's table after profile's
    assert state[corpus_story.pending][0] == "pending"


def check_order(instance: dg.DagsterInstance, backfill_id: str, corpus_story: Story) -> str:
    """From Dagster's run and event storage: the backfill ran one run per schema, in key
    order (mail, note, profile); none failed; the first run built profile's and mail's
    tables (one Spark job, upstream first: the registry's materialized_at says so,
    `check_end_state`); each of the two has one materialization, from its own backfill
    run; note's materializations say it waits and for what (no table), and its table
    check warns of the same. Returns what happened, for the output."""
    up, down, note = corpus_story.upstream, corpus_story.downstream, corpus_story.pending
    runs = list(instance.get_runs())
    origins = {r.run_id: origin(r, backfill_id) for r in runs}
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), [
        (origins[r.run_id], r.status) for r in runs
    ]
    by_backfill = sorted(
        (r for r in runs if origins[r.run_id] == "backfill"),
        key=lambda r: instance.get_run_record_by_id(r.run_id).create_timestamp,
    )
    key = corpus_story.key
    submitted = [r.tags["dagster/partition"] for r in by_backfill]
    assert submitted == [key(down), key(note), key(up)], (
        "the backfill no longer submits in key order"
    )
    # Each run says which schema it is about, by name too.
    assert [r.tags.get("p2panda/schema") for r in by_backfill] == ["mail", "note", "profile"]
    assert all(o == "backfill" or o.startswith("sensor:") for o in origins.values()), origins
    ups = tables_built(instance, key(up), backfill_id)
    downs = tables_built(instance, key(down), backfill_id)
    assert [b.origin for b in ups] == ["backfill"], ups
    assert [b.origin for b in downs] == ["backfill"], downs
    assert tables_built(instance, key(note), backfill_id) == []
    notes = instance.fetch_materializations(
        dg.AssetRecordsFilter(dg.AssetKey("materialized_table"), asset_partitions=[key(note)]),
        limit=10,
    ).records
    reasons = [r.asset_materialization.metadata["pending"].value for r in notes]
    assert reasons and all(r.startswith("awaiting-schema:") for r in reasons), reasons
    checked = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(dg.AssetKey("materialized_table"), "table_matches_the_current_lens"),
        limit=50,
    )
    warned = [c for c in checked if c.partition == key(note)]
    assert warned, "the table check of the waiting partition did not run"
    for execution in warned:
        evaluation = execution.evaluation
        assert evaluation is not None and not evaluation.passed
        assert evaluation.severity == dg.AssetCheckSeverity.WARN
        assert "is pending: awaiting-schema" in (evaluation.description or "")
    first = by_backfill[0].run_id
    logged = [
        e.message
        for e in instance.all_logs(first)
        if e.message and e.message.startswith("built together")
    ]
    assert logged and up in logged[0] and down in logged[0], logged
    assert logged[0].startswith("built together (whole/spark): "), logged
    return "\n".join(
        [
            f"  backfill runs submitted for {[p.partition('.')[0] for p in submitted]}",
            f"  mail's run {first[:8]}: {logged[0][:40]}...; note waits: {reasons[0][:60]}",
            f"  profile reported by {[(b.origin, b.run_id[:8]) for b in ups]}",
            f"  mail reported by {[(b.origin, b.run_id[:8]) for b in downs]}",
            f"  {len(runs)} runs in all",
        ]
    )
