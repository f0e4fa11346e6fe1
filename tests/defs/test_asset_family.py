"""The asset family run by Dagster on a real instance and a real PostgreSQL: related
schemas built upstream first equal the engine, metadata describes the tables written,
a schema whose upstream is missing is materialized as waiting (no table), runs repeat without
change, and `panda materialize` / `panda status` drive it all from the command line.

Each run of the job costs seconds of Spark: the corpora are tiny and the runs few."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import psycopg
import pytest
from dagster_postgres import PostgresRunStorage
from psycopg import sql
from pyspark.sql import SparkSession

from p2panda_assets.cli.main import main
from p2panda_assets.definitions import defs
from p2panda_assets.defs.assets import SCHEMA_TAG, VERSION_TAG
from p2panda_assets.defs.orchestration import JOB, SCHEMAS, run_failure
from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.errors import Reason
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register, table_name_for
from p2panda_assets.testing.builder import CorpusBuilder, SchemaAuthor, create_field, instances
from tests.pipeline.compare import engine_accounts, engine_tables, pg_accounts, pg_tables

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

TABLE = dg.AssetKey("materialized_table")
SYSTEM_COLUMNS = [  # as PostgreSQL declares them (rule T-ROW)
    ("_instance_id", "text"),
    ("_author", "text"),
    ("_version", "bigint"),
    ("_seq", "numeric(20, 0)"),
    ("_entry", "text"),
]


@dataclass
class Relations:
    """`mail.to` relates to `profile` with cascade; one profile is deleted, so the mail to
    it goes too. Mail's schema id sorts first (log 20 < 21), so building upstream first is
    not what sorting by id would do anyway. `stored` counts the entries of each schema."""

    profile: SchemaAuthor
    mail: SchemaAuthor
    pairs: list[tuple[bytes, bytes]]
    stored: dict[str, int] = field(default_factory=dict)

    @property
    def schema_ids(self) -> list[str]:
        return [self.profile.schema_id, self.mail.schema_id]


def relations_corpus() -> Relations:
    corpus = CorpusBuilder()
    owner = corpus.author(1)
    profile = owner.schema(21, "profile")
    profile.migrate(create_field("name", "varchar"))
    mail = owner.schema(20, "mail")
    mail.migrate(
        create_field("subject", "text"),
        create_field("to", "relation", schema=profile.log_ref, cascade=True),
    )
    people = instances(corpus.author(2), 1)
    panda = people.create(profile.ref(), name="panda")
    sloth = people.create(profile.ref(), name="sloth")
    letters = instances(corpus.author(3), 1)
    letters.create(mail.ref(), subject="to panda", to=panda)
    to_sloth = letters.create(mail.ref(), subject="to sloth", to=sloth)
    letters.update(mail.ref(), to_sloth, subject="to sloth, again")
    people.delete(panda, profile.ref())
    # Schema log (2) + people (3) for profile; schema log (2) + letters (3) for mail.
    stored = {profile.schema_id: 5, mail.schema_id: 5}
    return Relations(profile, mail, corpus.pairs, stored)


def orphan_corpus() -> tuple[SchemaAuthor, SchemaAuthor, list[tuple[bytes, bytes]]]:
    """`note.tag` relates to `tag`; only `note` will be registered. (tag, note, pairs)"""
    corpus = CorpusBuilder()
    owner = corpus.author(4)
    tag = owner.schema(30, "tag")
    tag.migrate(create_field("label", "text"))
    note = owner.schema(31, "note")
    note.migrate(create_field("tag", "relation", schema=tag.log_ref))
    label = instances(corpus.author(5), 1).create(tag.ref(), label="urgent")
    instances(corpus.author(5), 2).create(note.ref(), tag=label)
    return tag, note, corpus.pairs


@pytest.fixture
def relations() -> Relations:
    return relations_corpus()


@pytest.fixture
def store(database_url: str, p2panda_home: Path) -> Iterator[psycopg.Connection]:
    """An empty store; decoded parquet goes under the test's own P2PANDA_HOME."""
    with connect(database_url, autocommit=True) as conn:
        ensure_schema(conn)
        yield conn


def register_all(conn: psycopg.Connection, schema_ids: list[str]) -> None:
    for schema_id in schema_ids:
        register(conn, *parse_schema_id(schema_id), None)


def run_partition(instance: dg.DagsterInstance, schema_id: str) -> dg.ExecuteInProcessResult:
    result = defs.resolve_job_def(JOB).execute_in_process(
        instance=instance, partition_key=schema_id, raise_on_error=False
    )
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    return result


def materializations(
    instance: dg.DagsterInstance, asset: str, schema_id: str
) -> list[dg.AssetMaterialization]:
    """Every materialization of one partition of `asset`, oldest first."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[schema_id]),
        limit=100,
        ascending=True,
    ).records
    return [record.asset_materialization for record in records]


def latest_metadata(instance: dg.DagsterInstance, asset: str, schema_id: str) -> dict:
    """The plain values of the latest materialization's metadata of one partition."""
    [*_, last] = materializations(instance, asset, schema_id)
    return {key: value.value for key, value in last.metadata.items()}


def table_ident(schema_id: str) -> sql.Identifier:
    return sql.Identifier(*table_name_for(schema_id).split("."))


def table_rows(conn: psycopg.Connection, schema_id: str) -> list[tuple]:
    rows = conn.execute(
        sql.SQL("SELECT * FROM {} ORDER BY _instance_id").format(table_ident(schema_id))
    )
    return rows.fetchall()


def table_columns(conn: psycopg.Connection, schema_id: str) -> list[str]:
    schema, name = table_name_for(schema_id).split(".")
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (schema, name),
    )
    return [row[0] for row in rows]


def registry_row(conn: psycopg.Connection, schema_id: str) -> tuple[str, str | None]:
    row = conn.execute(
        "SELECT status, status_message FROM p2panda.schemas WHERE schema_id = %s", (schema_id,)
    ).fetchone()
    assert row is not None
    return row


def test_related_schemas_materialize_upstream_first_as_the_engine_reduces_them(
    spark: SparkSession, store: psycopg.Connection, relations: Relations
) -> None:
    """profile, then mail (which cascades from profile): runs succeed, metadata describes
    what PostgreSQL holds, tables and accounts equal `reduce_corpus`, and a second run of
    the same partition finds the index up to date and leaves the table as it was."""
    profile, mail = relations.schema_ids
    ingest(store, relations.pairs)
    register_all(store, relations.schema_ids)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(SCHEMAS, relations.schema_ids)
        for schema_id in relations.schema_ids:
            run_partition(instance, schema_id)
        named = {
            run.tags["dagster/partition"]: (run.tags[SCHEMA_TAG], run.tags[VERSION_TAG])
            for run in instance.get_runs()
        }
        assert named == {
            profile: ("profile", str(relations.profile.version)),
            mail: ("mail", str(relations.mail.version)),
        }

        engine = reduce_corpus(relations.pairs, set(relations.schema_ids))
        expected = engine_tables(engine)
        assert pg_tables(store, relations.schema_ids) == expected
        assert pg_accounts(store) == engine_accounts(engine)
        assert [len(expected[profile]), len(expected[mail])] == [1, 1]  # the cascade ran

        latest = instance.get_latest_materialization_event(TABLE)
        assert latest is not None and latest.dagster_event.partition == mail
        for schema_id, upstream in ((profile, []), (mail, [profile])):
            [only] = materializations(instance, "materialized_table", schema_id)
            meta = {key: value.value for key, value in only.metadata.items()}
            assert meta["status"] == "materialized"
            assert meta["schema_name"] == ("profile" if schema_id == profile else "mail")
            assert meta["table"] == table_name_for(schema_id)
            assert meta["dagster/row_count"] == len(table_rows(store, schema_id))
            assert meta["upstream_schemas"] == upstream
            assert meta["build_path"] == "spark"  # a first build is whole: Spark's
            columns = meta["dagster/column_schema"].columns
            assert [c.name for c in columns] == table_columns(store, schema_id)
            assert [(c.name, c.type) for c in columns[:5]] == SYSTEM_COLUMNS
        for schema in (relations.profile, relations.mail):
            table = latest_metadata(instance, "materialized_table", schema.schema_id)
            assert table["version"] == schema.version

        plan = latest_metadata(instance, "migration_plan", mail)
        assert plan["version"] == relations.mail.version
        assert [(c.name, c.type) for c in plan["lens"].columns] == [
            ("subject", "text"),
            ("to", "text"),
        ]
        assert plan["upstream"] == [profile]

        before = table_rows(store, mail)
        run_partition(instance, mail)
        assert table_rows(store, mail) == before
        assert latest_metadata(instance, "raw_entries", mail)["index_up_to_date"] is True
        assert latest_metadata(instance, "raw_entries", mail)["index_path"] == "none"
        unchanged = latest_metadata(instance, "materialized_table", mail)
        assert unchanged["status"] == "materialized"  # what the table is, built before
        assert (unchanged["build_path"], unchanged["incremental"]) == ("none", False)
        paths = [
            m.metadata["index_path"].value
            for schema_id in relations.schema_ids
            for m in materializations(instance, "raw_entries", schema_id)
        ]
        assert paths[0] == "driver"  # few entries: indexed without a Spark job
        verified = [
            m.metadata["verified_now"].value
            for schema_id in relations.schema_ids
            for m in materializations(instance, "raw_entries", schema_id)
        ]
        assert verified == [len(relations.pairs), 0, 0]  # each entry verified once, ever


def test_a_schema_whose_upstream_is_not_registered_waits_without_a_table(
    spark: SparkSession, store: psycopg.Connection
) -> None:
    """Dagster cannot make a partition wait for another partition of the same asset, so
    the family itself records the wait: the run succeeds, `materialized_table`'s
    materialization says `waiting` with the reason and that no table was built, the table
    check warns of the same, and the registry says what the schema awaits."""
    tag, note, pairs = orphan_corpus()
    ingest(store, pairs)
    register_all(store, [note.schema_id])
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(SCHEMAS, [note.schema_id])
        result = run_partition(instance, note.schema_id)
        assert result.success
        (waits,) = materializations(instance, "materialized_table", note.schema_id)
        assert waits.metadata["status"].value == "pending"
        assert waits.metadata["table"].value == "none built"
        assert waits.metadata["pending"].value.startswith(str(Reason.AWAITING_SCHEMA))
        assert pending_warning(result).startswith("no table yet: the schema is pending")
        plan = latest_metadata(instance, "migration_plan", note.schema_id)
        assert plan["pending"].startswith(str(Reason.AWAITING_SCHEMA))
    status, message = registry_row(store, note.schema_id)
    assert status == "pending"
    assert message.startswith(str(Reason.AWAITING_SCHEMA)) and tag.schema_id in message


@pytest.mark.parametrize(
    ("name", "reason"), [("note", Reason.AWAITING_SCHEMA), (None, Reason.UNKNOWN_SCHEMA)]
)
def test_a_partition_of_no_registered_schema_fails_its_run_with_the_reason(
    spark: SparkSession, store: psycopg.Connection, name: str | None, reason: Reason
) -> None:
    """The UI's backfill dialog offers "Add a partition": a key that names a schema not
    registered (`note.<id>`), or no schema at all, fails its run at its first step,
    before any Spark work, with the reason as the message and as metadata: no
    traceback of the pipeline, no materialization, no table."""
    _, note, pairs = orphan_corpus()
    ingest(store, pairs)  # note's entries are stored; note is not registered
    key = f"{name}.{note.schema_id}" if name else "typo-of-a-schema"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(SCHEMAS, [key])
        result = defs.resolve_job_def(JOB).execute_in_process(
            instance=instance, partition_key=key, raise_on_error=False
        )
        assert not result.success
        [failed] = [e for e in result.all_events if e.is_step_failure]
        assert failed.step_key == "raw_entries"
        data = failed.step_failure_data
        assert data is not None and data.user_failure_data is not None
        assert data.user_failure_data.metadata["reason"].value == str(reason)
        failure = run_failure(result, key)
        assert failure.reason is reason and failure.message.startswith(f"{reason}: ")
        assert (note.schema_id if name else repr(key)) in failure.message
        for asset in ("raw_entries", "decoded_messages", "migration_plan", "materialized_table"):
            assert materializations(instance, asset, key) == []
    assert store.execute("SELECT count(*) FROM p2panda.schemas").fetchone() == (0,)
    assert not table_columns(store, note.schema_id)


def pending_warning(result: dg.ExecuteInProcessResult) -> str:
    """The table check's evaluation in `result`: a warning that the schema is pending
    (awaiting a schema); its description."""
    (check,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "table_matches_the_current_lens"
    ]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert "the schema is pending: awaiting-schema" in (check.description or "")
    return check.description or ""


def test_a_schema_registered_before_its_log_arrives_waits(
    spark: SparkSession, store: psycopg.Connection
) -> None:
    """Registering a schema whose log is not stored yet is allowed: its run succeeds,
    the schema pending as not known. (The table check raised KeyError: a failed run, and
    `panda materialize` exiting 1, for a schema that only waits.)"""
    _, note, _ = orphan_corpus()
    register_all(store, [note.schema_id])
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(SCHEMAS, [note.schema_id])
        result = run_partition(instance, note.schema_id)
        assert "is not known" in pending_warning(result)
    status, message = registry_row(store, note.schema_id)
    assert status == "pending" and "is not known" in message


@pytest.mark.parametrize("tag_registered", [False, True])
def test_a_built_schema_that_begins_to_wait_keeps_its_table_and_its_run_succeeds(
    spark: SparkSession, store: psycopg.Connection, tag_registered: bool
) -> None:
    """`note` is built at version 2; its version 3 relates to `tag`, not registered, or
    registered and not built (then `note` is in the build order, and waits all the
    same). The run builds nothing for `note` and succeeds: its table stays as built, and
    the table check warns that it is pending. (The check held the old table to the new
    lens and failed the run.)"""
    corpus = CorpusBuilder()
    tag, note = corpus.author(4).schema(30, "tag"), corpus.author(4).schema(31, "note")
    tag.migrate(create_field("label", "text"))
    note.migrate(create_field("title", "text"))
    instances(corpus.author(5), 1).create(note.ref(), title="kept")
    ingest(store, corpus.pairs)
    register_all(store, [note.schema_id, *([tag.schema_id] if tag_registered else [])])
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(SCHEMAS, [note.schema_id])
        run_partition(instance, note.schema_id)
        built = table_rows(store, note.schema_id)
        assert len(built) == 1
        note.migrate(create_field("tag", "relation", schema=tag.log_ref))
        ingest(store, corpus.pairs[-1:])
        result = run_partition(instance, note.schema_id)
        warning = pending_warning(result)
        assert warning.startswith("its table is the one built before, not checked")
        assert latest_metadata(instance, "materialized_table", note.schema_id)["status"] == (
            "pending"
        )
    assert table_rows(store, note.schema_id) == built
    assert registry_row(store, note.schema_id)[0] == "pending"


def test_a_run_of_the_table_alone_builds_and_checks_the_lens_the_index_holds(
    spark: SparkSession, store: psycopg.Connection
) -> None:
    """`note`'s family is run at version 2; its version 3 (a field more) is indexed by
    another schema's run; then only `materialized_table` of `note` runs, as from the UI.
    The table, its column metadata and the table check all follow version 3. (The check
    and the metadata read the plan stored at version 2: the check failed the run.)"""
    corpus = CorpusBuilder()
    note, other = corpus.author(4).schema(31, "note"), corpus.author(4).schema(32, "other")
    note.migrate(create_field("title", "text"))
    other.migrate(create_field("label", "text"))
    ingest(store, corpus.pairs)
    register_all(store, [note.schema_id, other.schema_id])
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(SCHEMAS, [note.schema_id, other.schema_id])
        run_partition(instance, note.schema_id)
        note.migrate(create_field("body", "text"))
        ingest(store, corpus.pairs[-1:])
        run_partition(instance, other.schema_id)  # its index step folds note's version 3
        result = defs.resolve_job_def(JOB).execute_in_process(
            instance=instance,
            partition_key=note.schema_id,
            asset_selection=[TABLE],
            raise_on_error=False,
        )
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        tags = result.dagster_run.tags  # found by the schema's name, as every run of it
        assert (tags[SCHEMA_TAG], tags[VERSION_TAG]) == ("note", "3")
        checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
        lens_check = checks["table_matches_the_current_lens"]
        assert lens_check.passed, lens_check.description
        metadata = latest_metadata(instance, "materialized_table", note.schema_id)
        assert metadata["version"] == 3
        columns = [c.name for c in metadata["dagster/column_schema"].columns]
        assert columns[-2:] == ["title", "body"]
    assert table_columns(store, note.schema_id)[-2:] == ["title", "body"]


def status_table(output: str) -> dict[str, dict[str, object]]:
    """`panda status --json`'s schemas by schema id."""
    return {row["schema_id"]: row for row in json.loads(output)["schemas"]}


def test_panda_materialize_runs_upstream_schemas_first_on_the_persistent_instance(
    spark: SparkSession,
    store: psycopg.Connection,
    relations: Relations,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`panda materialize` (orchestration.materialize): profile runs before mail though
    mail's id sorts first; the runs land in the Dagster instance under DAGSTER_HOME (its
    storage in the product's PostgreSQL); one line per schema with its rows; and
    `panda status` accounts for every stored entry of each schema."""
    profile, mail = relations.schema_ids
    assert sorted(relations.schema_ids) == [mail, profile]
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    ingest(store, relations.pairs)
    register_all(store, relations.schema_ids)
    started = datetime.now(UTC)

    assert main(["materialize"]) == 0
    lines = capsys.readouterr().out.splitlines()

    expected = engine_tables(reduce_corpus(relations.pairs, set(relations.schema_ids)))
    assert pg_tables(store, relations.schema_ids) == expected
    assert [line.split()[0] for line in lines] == [profile, mail]
    for line, schema_id in zip(lines, relations.schema_ids, strict=True):
        assert f"{len(expected[schema_id])} rows" in line
        assert table_name_for(schema_id) in line

    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        # Dagster's tables outlive the store's schemas in the session database: other
        # tests' runs and partitions may be there too.
        assert set(relations.schema_ids) <= set(instance.get_dynamic_partitions(SCHEMAS))
        records = instance.get_run_records(
            dg.RunsFilter(job_name=JOB, created_after=started),
            order_by="create_timestamp",
            ascending=True,
        )
        runs = [(r.dagster_run.tags["dagster/partition"], r.dagster_run.status) for r in records]
        # The index step alone (for the first target by id), then the family upstream first.
        success = dg.DagsterRunStatus.SUCCESS
        assert runs == [(mail, success), (profile, success), (mail, success)]
        assert records[0].dagster_run.asset_selection == {dg.AssetKey("raw_entries")}
        assert latest_metadata(instance, "materialized_table", mail)["upstream_schemas"] == [
            profile
        ]

    assert main(["status", "--json"]) == 0
    shown = status_table(capsys.readouterr().out)
    for schema_id in relations.schema_ids:
        row = shown[schema_id]
        assert row["status"] == "materialized"
        assert int(row["rows"]) == len(expected[schema_id])
        accounted = sum(int(row[c]) for c in ("applied", "superseded", "pending", "rejected"))
        assert accounted == relations.stored[schema_id]


def test_panda_materialize_with_nothing_new_launches_no_run(
    spark: SparkSession,
    store: psycopg.Connection,
    relations: Relations,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With nothing new since the last build, `panda materialize` prints the same lines,
    says it is up to date and launches no run (seconds of Python, not the runs' Spark).
    A new entry gets runs again, and so does a partition whose latest materialization is
    not the current build (reported by hand here, as the UI's "Report materialization"
    does; a run killed after its build, before it reported, leaves an older one)."""
    profile, mail = relations.schema_ids
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    *older, newest = relations.pairs  # the newest: profile "panda" deleted, cascading to mail
    ingest(store, older)
    register_all(store, relations.schema_ids)

    def materialize() -> tuple[list[str], list[tuple[str, dg.DagsterRunStatus]]]:
        """The command's lines, and the runs it launched (partition, status)."""
        started = datetime.now(UTC)
        assert main(["materialize"]) == 0
        with dg.DagsterInstance.get() as instance:
            records = instance.get_run_records(
                dg.RunsFilter(job_name=JOB, created_after=started),
                order_by="create_timestamp",
                ascending=True,
            )
        runs = [(r.dagster_run.tags["dagster/partition"], r.dagster_run.status) for r in records]
        return capsys.readouterr().out.splitlines(), runs

    up_to_date = "up to date: nothing new since these tables were built, no run launched"
    success = dg.DagsterRunStatus.SUCCESS
    built, runs = materialize()
    assert runs == [(mail, success), (profile, success), (mail, success)]
    assert up_to_date not in built

    assert materialize() == ([*built, up_to_date], [])

    ingest(store, [newest])
    lines, runs = materialize()
    assert runs == [(mail, success), (profile, success), (mail, success)]
    assert up_to_date not in lines and lines != built  # a row fewer in each table
    expected = engine_tables(reduce_corpus(relations.pairs, set(relations.schema_ids)))
    assert pg_tables(store, relations.schema_ids) == expected

    with dg.DagsterInstance.get() as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization(TABLE, partition=mail))
    again, runs = materialize()
    assert runs == [(mail, success), (profile, success), (mail, success)]
    assert again == lines
    with dg.DagsterInstance.get() as instance:
        assert latest_metadata(instance, "materialized_table", mail)["status"] == "materialized"

    assert materialize() == ([*lines, up_to_date], [])


def test_a_table_left_behind_by_single_partition_runs_is_not_up_to_date(
    spark: SparkSession,
    store: psycopg.Connection,
    relations: Relations,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Partitions materialized one at a time, as from the UI: the mails while the
    profiles' table is behind (a profile's delete ingested, not built), then the
    profiles. The mails' table still holds the mail to the deleted profile and no entry
    is new: `panda materialize` must not call it up to date, and its run brings the
    tables to the engine's."""
    profile, mail = relations.schema_ids
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    *older, newest = relations.pairs  # the newest: profile "panda" deleted, cascading to mail
    ingest(store, older)
    register_all(store, relations.schema_ids)
    assert main(["materialize"]) == 0
    ingest(store, [newest])
    with dg.DagsterInstance.get() as instance:
        run_partition(instance, mail)
        run_partition(instance, profile)
    capsys.readouterr()
    assert main(["materialize"]) == 0
    assert "up to date" not in capsys.readouterr().out
    expected = reduce_corpus(relations.pairs, set(relations.schema_ids))
    assert pg_tables(store, relations.schema_ids) == engine_tables(expected)


def test_named_schemas_partitions_are_migrated_from_bare_ids_with_their_history(
    spark: SparkSession,
    store: psycopg.Connection,
    relations: Relations,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An instance from before the names: tables built under bare-id partitions. Once the
    schemas are named, `panda materialize` moves their partitions to `<name>.<id>` and
    drops the bare ids; the build reported under the bare id still counts (nothing new:
    no run). `panda register --name` moves a key at once, with the build it showed (still
    nothing new: no run); the next runs carry the keys."""
    profile, mail = relations.schema_ids
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    *older, newest = relations.pairs
    ingest(store, older)
    register_all(store, relations.schema_ids)
    assert main(["materialize"]) == 0
    built = capsys.readouterr().out.splitlines()
    for schema_id, name in ((profile, "profile"), (mail, "mail")):
        register(store, *parse_schema_id(schema_id), name)

    assert main(["materialize"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("up to date: ")
    with dg.DagsterInstance.get() as instance:
        partitions = set(instance.get_dynamic_partitions(SCHEMAS))
    assert {f"profile.{profile}", f"mail.{mail}"} <= partitions
    assert not {profile, mail} & partitions

    author, log_id = mail.rsplit("-", 1)
    assert main(["register", author, log_id, "--name", "letters"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "renamed mail -> letters"
    with dg.DagsterInstance.get() as instance:
        partitions = set(instance.get_dynamic_partitions(SCHEMAS))
        carried = latest_metadata(instance, "materialized_table", f"letters.{mail}")
    assert f"letters.{mail}" in partitions and f"mail.{mail}" not in partitions
    # Not Missing: the build the old key showed, under the new one (issue 56).
    assert (carried["carried_from"], carried["schema_name"]) == (f"mail.{mail}", "letters")
    assert main(["materialize"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("up to date: ")

    ingest(store, [newest])
    started = datetime.now(UTC)
    capsys.readouterr()
    assert main(["materialize"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [profile, mail] and lines != built
    with dg.DagsterInstance.get() as instance:
        records = instance.get_run_records(
            dg.RunsFilter(job_name=JOB, created_after=started),
            order_by="create_timestamp",
            ascending=True,
        )
        runs = [r.dagster_run.tags["dagster/partition"] for r in records]
        assert runs == [f"letters.{mail}", f"profile.{profile}", f"letters.{mail}"]
        shown = latest_metadata(instance, "materialized_table", f"letters.{mail}")
        assert shown["schema_name"] == "letters" and shown["status"] == "materialized"
