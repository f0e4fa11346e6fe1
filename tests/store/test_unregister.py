"""`panda unregister` (`store/unregister.py`, `partitions_admin.py`): a registered schema's
table, version tables, registry row, deleted set, instance accounts, views and Dagster
partition go (the database's part in one transaction, then the partition); its entries
stay, the other schemas' tables are untouched (their next build is whole), and
registering it again and materializing brings the same rows back. A schema other
registered schemas relate to needs `--force`.

The Spark-free tests build tables as the pipeline's swap does (`store/tables.py`), with
the rows, accounts and deleted set the engine computes; the Spark tests materialize with
the pipeline itself. Dagster's instance lives under a temporary `DAGSTER_HOME`, its
storage in the tests' database (whose Dagster tables outlive each test's store)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import psycopg
import pytest
from psycopg import sql

from p2panda_assets.cli.main import main
from p2panda_assets.defs.orchestration import SCHEMAS, add_partition
from p2panda_assets.engine.corpus import Row, reduce_corpus
from p2panda_assets.errors import Reason
from p2panda_assets.pipeline.build.columns import pg_type
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.statuses import BuildStatus
from p2panda_assets.store import tables
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import (
    RegistryRow,
    register,
    registered_schemas,
    status_rows,
    store_totals,
    table_identifier,
    table_name_for,
    version_table_name_for,
)
from p2panda_assets.store.staging import drop_tables
from p2panda_assets.store.unregister import unregister
from p2panda_assets.testing.builder import CorpusBuilder, SchemaAuthor, create_field, instances

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

UNKNOWN_ID = "ab" * 32 + "-987654"  # registered nowhere, a partition of no test


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def has_partition(schema_id: str) -> bool:
    with dg.DagsterInstance.get() as instance:
        return instance.has_dynamic_partition(SCHEMAS, schema_id)


def registry_row(conn: psycopg.Connection, schema_id: str) -> RegistryRow | None:
    rows = [row for row in registered_schemas(conn) if row.schema_id == schema_id]
    return rows[0] if rows else None


def table_rows(conn: psycopg.Connection, table_name: str) -> list[tuple] | None:
    """The table's rows by instance id; None if there is no such table."""
    if conn.execute("SELECT to_regclass(%s)", (table_name,)).fetchone()[0] is None:
        return None
    query = sql.SQL("SELECT * FROM {} ORDER BY _instance_id")
    return conn.execute(query.format(table_identifier(table_name))).fetchall()


def views(conn: psycopg.Connection) -> list[str]:
    rows = conn.execute("SELECT viewname FROM pg_views WHERE schemaname = 'p2panda_api'")
    return sorted(row[0] for row in rows)


@dataclass(frozen=True)
class Derived:
    """Everything the product derived for one schema."""

    registry: RegistryRow | None
    rows: list[tuple] | None
    versions: list[tuple]  # (version, table name, its rows)
    instance_accounts: list[tuple]  # (hash, state, reason, message)
    other_accounts: list[tuple]  # (hash, state, origin): verification, index steps
    deleted: list[bytes]


def derived(conn: psycopg.Connection, schema_id: str) -> Derived:
    versions = conn.execute(
        "SELECT version, table_name FROM p2panda.schema_versions WHERE schema_id = %s"
        " ORDER BY version",
        (schema_id,),
    ).fetchall()
    accounts = conn.execute(
        "SELECT hash, state, reason, message FROM p2panda.accounts"
        " WHERE schema_id = %s AND origin = 'instance' ORDER BY hash",
        (schema_id,),
    ).fetchall()
    others = conn.execute(
        "SELECT hash, state, origin FROM p2panda.accounts"
        " WHERE schema_id = %s AND origin <> 'instance' ORDER BY hash",
        (schema_id,),
    ).fetchall()
    deleted = conn.execute(
        "SELECT instance_id FROM p2panda.deleted_instances WHERE schema_id = %s"
        " ORDER BY instance_id",
        (schema_id,),
    ).fetchall()
    return Derived(
        registry_row(conn, schema_id),
        table_rows(conn, table_name_for(schema_id)),
        [(v, t, table_rows(conn, t)) for v, t in versions],
        accounts,
        others,
        [bytes(row[0]) for row in deleted],
    )


def assert_gone(conn: psycopg.Connection, schema_id: str, tables_before: list[str]) -> None:
    """No table, version table, registry row, version row, deleted set, instance account
    or partition of the schema is left."""
    gone = derived(conn, schema_id)
    assert gone.registry is None and gone.rows is None
    assert gone.versions == [] and gone.instance_accounts == [] and gone.deleted == []
    assert [table for table in tables_before if table_rows(conn, table) is not None] == []
    assert not has_partition(schema_id)


def stored_entries(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM p2panda.entries").fetchone()[0]


def register_by_cli(capsys: pytest.CaptureFixture[str], schema: SchemaAuthor) -> None:
    author = schema.owner.key_pair.public_key.hex()
    code, out, err = run(capsys, "register", author, str(schema.log_id))
    assert (code, err) == (0, "") and schema.schema_id in out


# --- a schema built by hand, as the pipeline's swap leaves it (no Spark) -----------------


@dataclass(frozen=True)
class Notes:
    """Two unrelated schemas, `note` and `memo`, with an instance log each: one instance
    lives, one is deleted."""

    pairs: list[tuple[bytes, bytes]]
    schemas: dict[str, SchemaAuthor]  # by name
    kept: dict[str, bytes]
    gone: dict[str, bytes]

    def schema_id(self, name: str) -> str:
        return self.schemas[name].schema_id


def notes_corpus() -> Notes:
    corpus = CorpusBuilder()
    owner, writer = corpus.author(44), corpus.author(45)
    notes = Notes(corpus.pairs, {}, {}, {})
    for log_id, name in ((7, "note"), (8, "memo")):
        schema = notes.schemas[name] = owner.schema(log_id, name)
        schema.migrate(create_field("title", "text"))
        log = instances(writer, log_id)
        kept = notes.kept[name] = log.create(schema.ref(), title="hello")
        gone = notes.gone[name] = log.create(schema.ref(), title="bye")
        log.update(schema.ref(), kept, title="hello again")
        log.delete(gone)
    return notes


def staged_rows(
    conn: psycopg.Connection,
    schema: str,
    name: str,
    columns: list[tuple[str, str]],
    rows: list[Row],
) -> tables.Stage:
    """A staging table holding the engine's rows, with its key, ready to be swapped in."""
    stage = tables.create_stage(conn, schema, name, columns)
    for row in rows:
        values = (row.instance_id.hex(), row.author.hex(), row.version, row.seq)
        values += (row.entry.hex(), *row.values.values())
        marks = sql.SQL(", ").join(sql.Placeholder() * len(values))
        query = sql.SQL("INSERT INTO {} VALUES ({})").format(stage.identifier, marks)
        conn.execute(query, values)
    tables.index_stage(conn, stage)
    return stage


def build_by_hand(conn: psycopg.Connection, notes: Notes) -> None:
    """Both schemas registered, with partitions, tables, version-2 tables and views, by
    the staging and swap calls a whole build makes (`pipeline/build/writing.py`
    `stage_tables`, `swap_in`), with the rows, accounts and deleted sets the engine
    computes."""
    engine = reduce_corpus(notes.pairs, {s.schema_id for s in notes.schemas.values()})
    for i, (name, schema) in enumerate(notes.schemas.items()):
        schema_id = schema.schema_id
        register(conn, schema.owner.key_pair.public_key, schema.log_id, None)
        add_partition(schema_id)
        table = engine.tables[schema_id]
        latest = table.history.latest
        columns = [(field, pg_type(spec.type)) for field, spec in table.history.lens.items()]
        schema_log = set(schema.owner.log(schema.log_id).hashes.values())

        stage = staged_rows(conn, "p2panda_data", f"stage_hand_{i}", columns, table.rows)
        accounts = tables.create_shared_stage(conn, f"stage_hand_{i}_accounts", "accounts")
        for entry, account in engine.accounts.items():
            if account.schema_id == schema_id and entry not in schema_log:
                reason = None if account.reason is None else str(account.reason)
                conn.execute(
                    sql.SQL("INSERT INTO {} (hash, schema_id, state, reason, message)"
                            " VALUES (%s, %s, %s, %s, %s)").format(accounts.identifier),
                    (entry, schema_id, str(account.state), reason, account.message),
                )  # fmt: skip
        deleted = tables.create_shared_stage(conn, f"stage_hand_{i}_deleted", "deleted_instances")
        conn.execute(
            sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(deleted.identifier),
            (schema_id, notes.gone[name]),
        )
        outcome = tables.Outcome(
            schema_id,
            BuildStatus.MATERIALIZED,
            rows=len(table.rows),
            version=latest.seq,
            version_hash=latest.hash.hex(),
            table_name=table_name_for(schema_id),
            name=name,
        )
        assert not tables.swap_schemas(
            conn, [tables.Swap(outcome, stage)], accounts, deleted, "by hand"
        )
        drop_tables(conn, [accounts, deleted])
        as_of = tables.Outcome(
            schema_id,
            BuildStatus.MATERIALIZED,
            rows=len(table.rows),
            version=2,
            version_hash=table.history.versions[2].hash.hex(),
            table_name=version_table_name_for(schema_id, 2),
        )
        tables.swap_version(
            conn,
            as_of,
            staged_rows(conn, "p2panda_versions", f"stage_hand_{i}_v", columns, table.rows),
        )


def before_tables(before: Derived) -> list[str]:
    assert before.registry is not None
    return [before.registry.table_name, *(table for _, table, _ in before.versions)]


@pytest.mark.postgres
def test_a_table_built_by_the_swap_goes_with_everything_derived_from_it(
    conn: psycopg.Connection,
    p2panda_home: Path,
    dagster_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Unregistered through the command line: table, version table, registry and version
    rows, deleted set, instance accounts, views and partition go; the other schema stays
    as it was, the entries stay, and `panda status` counts the entries of the instance
    log as not processed."""
    notes = notes_corpus()
    note, memo = notes.schema_id("note"), notes.schema_id("memo")
    ingest(conn, notes.pairs)
    build_by_hand(conn, notes)
    before, memo_before = derived(conn, note), derived(conn, memo)
    assert [row[0] for row in before.rows] == [notes.kept["note"].hex()]
    assert [(v, t) for v, t, _ in before.versions] == [(2, version_table_name_for(note, 2))]
    assert before.versions[0][2] == before.rows
    assert len(before.instance_accounts) == 4 and before.deleted == [notes.gone["note"]]
    assert views(conn) == ["memo", "memo_v2", "note", "note_v2"]
    assert has_partition(note) and has_partition(memo)
    unprocessed = store_totals(conn).unprocessed
    assert unprocessed == len(notes.pairs) - 8  # the schema logs': no index step ran

    code, out, err = run(capsys, "unregister", "note")
    assert (code, err) == (0, "")
    assert out.splitlines()[0].split() == [note, "note", "unregistered", table_name_for(note)]
    assert f"version table {version_table_name_for(note, 2)}" in out
    pending = sum(state != "rejected" for _, state, _, _ in before.instance_accounts)
    assert f"{pending} entries of its logs wait for it to be registered again" in out

    assert_gone(conn, note, before_tables(before))
    assert derived(conn, memo) == memo_before
    assert views(conn) == ["memo", "memo_v2"]
    assert has_partition(memo)
    assert stored_entries(conn) == len(notes.pairs)
    assert [row.schema_id for row in status_rows(conn)] == [memo]
    # Every entry stays accounted for: the table's accounts wait for the schema now.
    after = store_totals(conn)
    assert after.unprocessed == unprocessed
    assert after.unregistered_pending + after.unregistered_rejected == 4


@pytest.mark.postgres
def test_a_table_something_else_depends_on_is_kept_with_everything_else(
    conn: psycopg.Connection,
    p2panda_home: Path,
    dagster_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A view of one's own on the table: DROP TABLE is refused, so nothing is removed
    (one transaction), not even the partition; without it, the schema goes."""
    notes = notes_corpus()
    note = notes.schema_id("note")
    ingest(conn, notes.pairs)
    build_by_hand(conn, notes)
    before = {name: derived(conn, notes.schema_id(name)) for name in notes.schemas}
    views_before = views(conn)
    mine = sql.Identifier("public", "my_notes_" + note[:8])
    conn.execute(
        sql.SQL("CREATE VIEW {} AS SELECT * FROM {}").format(
            mine, table_identifier(table_name_for(note))
        )
    )
    try:
        code, out, err = run(capsys, "unregister", note)
        assert (code, out) == (1, "")
        assert err.startswith(f"error: {Reason.INTERNAL}: cannot unregister {note}: ")
        assert "my_notes_" in err and len(err.splitlines()) == 1
        assert {name: derived(conn, notes.schema_id(name)) for name in notes.schemas} == before
        assert views(conn) == views_before
        assert has_partition(note)
    finally:
        conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(mine))
    assert run(capsys, "unregister", note)[0] == 0
    assert_gone(conn, note, before_tables(before["note"]))


@pytest.mark.postgres
def test_an_unknown_name_or_schema_id_is_refused(
    conn: psycopg.Connection,
    p2panda_home: Path,
    dagster_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    notes = notes_corpus()
    ingest(conn, notes.pairs)
    note = notes.schemas["note"]
    register(conn, note.owner.key_pair.public_key, note.log_id, None)
    before = registered_schemas(conn)
    for argument, reason in (
        ("nosuch", Reason.UNKNOWN_SCHEMA),
        (UNKNOWN_ID, Reason.AWAITING_SCHEMA),
    ):
        code, out, err = run(capsys, "unregister", argument)
        assert (code, out) == (1, "")
        assert err.startswith(f"error: {reason}: ") and argument in err
    assert registered_schemas(conn) == before


@pytest.mark.postgres
def test_the_leftover_partition_of_an_unregistered_schema_is_removed(
    conn: psycopg.Connection,
    p2panda_home: Path,
    dagster_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An unregistration cut short after the database's part left the partition: naming
    the schema by its id again removes it (then it is unknown, as any other id)."""
    add_partition(UNKNOWN_ID)
    code, out, err = run(capsys, "unregister", UNKNOWN_ID)
    assert (code, err) == (0, "")
    assert out == f"{UNKNOWN_ID}  not registered; removed its leftover partition\n"
    assert not has_partition(UNKNOWN_ID)
    code, _, err = run(capsys, "unregister", UNKNOWN_ID)
    assert code == 1 and err.startswith(f"error: {Reason.AWAITING_SCHEMA}: ")


# --- related schemas, materialized by the pipeline (Spark) --------------------------------


@dataclass(frozen=True)
class Related:
    """`mail.to` relates to `profile` with cascade; the panda's profile is deleted, so the
    mail to it goes too (both deleted sets are non-empty). Mail has three versions, so
    `--as-of-version 2` builds a version table beside the current one."""

    profile: SchemaAuthor
    mail: SchemaAuthor
    pairs: list[tuple[bytes, bytes]]


def related_corpus() -> Related:
    corpus = CorpusBuilder()
    owner = corpus.author(41)
    profile = owner.schema(21, "profile")
    profile.migrate(create_field("name", "varchar"))
    mail = owner.schema(20, "mail")
    mail.migrate(
        create_field("subject", "text"),
        create_field("to", "relation", schema=profile.log_ref, cascade=True),
    )
    people = instances(corpus.author(42), 1)
    panda = people.create(profile.ref(), name="panda")
    sloth = people.create(profile.ref(), name="sloth")
    letters = instances(corpus.author(43), 1)
    letters.create(mail.ref(), subject="to panda", to=panda)
    mail.migrate(create_field("body", "text"))
    to_sloth = letters.create(mail.ref(), subject="to sloth", to=sloth, body="hi")
    letters.update(mail.ref(), to_sloth, body="hi again")
    people.delete(panda, profile.ref())
    return Related(profile, mail, corpus.pairs)


def materialized(conn: psycopg.Connection, url: str, spark: SparkSession) -> dict[str, str]:
    from p2panda_assets.pipeline.run import run_pipeline

    return {o.schema_id: o.status for o in run_pipeline(spark, conn, url)}


def same_build(conn: psycopg.Connection, schema_id: str, before: Derived) -> None:
    """The schema's table, instance accounts and deleted set are as `before`."""
    now = derived(conn, schema_id)
    assert now.rows == before.rows and now.rows
    assert now.instance_accounts == before.instance_accounts and now.instance_accounts
    assert now.deleted == before.deleted and now.deleted


@pytest.mark.postgres
@pytest.mark.spark
def test_unregister_then_register_again_brings_the_same_table_back(
    spark: SparkSession,
    conn: psycopg.Connection,
    database_url: str,
    p2panda_home: Path,
    dagster_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from p2panda_assets.pipeline.build.as_of import materialize_as_of

    related = related_corpus()
    profile, mail = related.profile.schema_id, related.mail.schema_id
    ingest(conn, related.pairs)
    register_by_cli(capsys, related.profile)
    register_by_cli(capsys, related.mail)
    assert materialized(conn, database_url, spark) == {
        profile: "materialized",
        mail: "materialized",
    }
    assert materialize_as_of(spark, conn, database_url, mail, 2).status == "materialized"
    mail_before, profile_before = derived(conn, mail), derived(conn, profile)
    assert [v for v, _, rows in mail_before.versions if rows is not None] == [2]
    assert views(conn) == ["mail", "mail_v2", "profile"]
    assert has_partition(mail) and has_partition(profile)
    totals = store_totals(conn)
    assert totals.unprocessed == 0
    mail_stored = {row.schema_id: row.stored for row in status_rows(conn)}[mail]
    assert mail_stored == 6  # schema log 3, instance log 3

    code, out, err = run(capsys, "unregister", "mail")
    assert (code, err) == (0, "")
    assert out.split()[:4] == [mail, "mail", "unregistered", table_name_for(mail)]

    assert_gone(conn, mail, before_tables(mail_before))
    assert views(conn) == ["profile"]
    assert derived(conn, profile) == profile_before
    assert has_partition(profile)
    assert stored_entries(conn) == len(related.pairs)
    # The instance log's entries wait for the schema now, and the schema log's are
    # accounted as any unregistered schema's, until the next index step.
    others = derived(conn, mail).other_accounts
    assert set(mail_before.other_accounts) < set(others) and len(others) == 6
    after = store_totals(conn)
    assert after.unprocessed == 0
    unregistered = (
        after.unregistered_applied
        + after.unregistered_superseded
        + after.unregistered_pending
        + after.unregistered_rejected
    )
    assert unregistered == len(mail_before.other_accounts) + 3 == 6
    stored = sum(row.stored for row in status_rows(conn))
    assert stored + after.unprocessed + unregistered == stored_entries(conn)

    register_by_cli(capsys, related.mail)
    assert has_partition(mail)
    code, out, err = run(capsys, "materialize", mail)  # its name is known once built
    assert (code, err) == (0, "")
    assert [line.split()[0] for line in out.splitlines()] == [profile, mail]
    same_build(conn, mail, mail_before)
    same_build(conn, profile, profile_before)
    assert views(conn) == ["mail", "profile"]  # the version table is built on request only
    assert store_totals(conn).unprocessed == 0


@pytest.mark.postgres
@pytest.mark.spark
def test_a_schema_others_relate_to_is_only_unregistered_with_force(
    spark: SparkSession,
    conn: psycopg.Connection,
    database_url: str,
    p2panda_home: Path,
    dagster_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without --force nothing changes; with it the profile goes, mail keeps its table and
    waits for it at its next build; registering profile again builds both as before."""
    related = related_corpus()
    profile, mail = related.profile.schema_id, related.mail.schema_id
    ingest(conn, related.pairs)
    register_by_cli(capsys, related.profile)
    register_by_cli(capsys, related.mail)
    materialized(conn, database_url, spark)
    profile_before, mail_before, views_before = (
        derived(conn, profile),
        derived(conn, mail),
        views(conn),
    )
    assert mail_before.registry.upstream == [profile]

    code, out, err = run(capsys, "unregister", "profile")
    assert (code, out) == (1, "")
    assert err.startswith(f"error: {Reason.BAD_INPUT}: mail ({mail}) relates to profile ")
    assert "--force" in err and len(err.splitlines()) == 1
    assert derived(conn, profile) == profile_before and derived(conn, mail) == mail_before
    assert views(conn) == views_before == ["mail", "profile"]
    assert has_partition(profile)

    code, out, err = run(capsys, "unregister", "profile", "--force")
    assert (code, err) == (0, "")
    assert f"mail ({mail}) relates to it: its table stays as it is" in out
    assert_gone(conn, profile, before_tables(profile_before))
    assert derived(conn, mail) == mail_before
    assert views(conn) == ["mail"]
    assert has_partition(mail)

    assert materialized(conn, database_url, spark) == {mail: "pending"}
    row = registry_row(conn, mail)
    assert row.status == "pending"
    assert row.status_message == (
        f"{Reason.AWAITING_SCHEMA}: upstream schema {profile} is not registered"
    )
    assert derived(conn, mail).rows == mail_before.rows

    register_by_cli(capsys, related.profile)
    assert materialized(conn, database_url, spark) == {
        profile: "materialized",
        mail: "materialized",
    }
    same_build(conn, profile, profile_before)
    same_build(conn, mail, mail_before)
    assert views(conn) == ["mail", "profile"]


@pytest.mark.postgres
@pytest.mark.spark
def test_unregistering_a_schema_other_logs_name_builds_their_tables_as_the_engine_does(
    spark: SparkSession, conn: psycopg.Connection, database_url: str
) -> None:
    """A note's update that names another schema (tags) is `mixed-log` while tags is
    registered, and waits for it once it is not, holding the note's later update back
    (rule I-*). No entry is new after the unregistration, and the notes' messages are
    the same: their table must still be built again, as the engine reduces it."""
    from tests.pipeline.compare import engine_accounts, engine_tables, pg_accounts, pg_tables

    corpus = CorpusBuilder()
    notes = corpus.author(1).schema(1, "note")
    notes.migrate(create_field("title", "text"))
    tags = corpus.author(1).schema(2, "tag")
    tags.migrate(create_field("title", "text"))
    log = instances(corpus.author(2), 1)
    note = log.create(notes.ref(), title="first")
    log.update(tags.ref(), note, title="named the tags")
    log.update(notes.ref(), note, title="second")
    ingest(conn, corpus.pairs)
    for schema in (notes, tags):
        register(conn, *parse_schema_id(schema.schema_id), None)
    assert materialized(conn, database_url, spark)[notes.schema_id] == "materialized"
    unregister(conn, tags.schema_id)
    assert materialized(conn, database_url, spark) == {notes.schema_id: "materialized"}
    expected = reduce_corpus(corpus.pairs, {notes.schema_id})
    assert pg_tables(conn, [notes.schema_id]) == engine_tables(expected)
    assert pg_accounts(conn) == engine_accounts(expected)
    assert [row.values["title"] for row in expected.tables[notes.schema_id].rows] == ["first"]
