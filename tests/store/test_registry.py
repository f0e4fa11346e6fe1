"""The registry: table names from schema ids (never from names), registration, a name
held by one schema, and the per-schema accounting `panda status` shows."""

from __future__ import annotations

import re
import threading

import psycopg
import pytest
from psycopg import sql

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import (
    StatusRow,
    StoreTotals,
    qualified_name,
    register,
    registered_schemas,
    status_rows,
    store_totals,
    table_identifier,
    table_name_for,
    version_table_name_for,
)
from p2panda_assets.store.views import qualified_view, refresh_views
from p2panda_assets.testing.builder import CorpusBuilder
from tests.store.test_views import VIEWS, built

AUTHOR = bytes.fromhex("ab" * 32)
SCHEMA_ID = f"{'ab' * 32}-5"
MAX_SCHEMA_ID = f"{'ff' * 32}-{2**64 - 1}"


def test_table_name_comes_from_the_schema_id() -> None:
    assert table_name_for(SCHEMA_ID) == f"p2panda_data.s_{'ab' * 16}_5"


def test_table_names_fit_postgres_and_need_no_quoting() -> None:
    table = table_name_for(MAX_SCHEMA_ID).split(".", 1)[1]
    assert len(table.encode()) <= 63
    assert re.fullmatch(r"[a-z_][a-z0-9_]*", table)


@pytest.mark.parametrize(
    "schema_id",
    ["AB" * 32 + "-5", "ab" * 32, "ab" * 31 + "-5", f"{'ab' * 32}-{2**64}", f"{'ab' * 32}-05"],
)
def test_table_name_refuses_what_is_not_a_schema_id(schema_id: str) -> None:
    with pytest.raises(P2pandaError) as error:
        table_name_for(schema_id)
    assert error.value.reason is Reason.BAD_VALUE


@pytest.mark.postgres
def test_table_names_are_usable_in_sql_as_written(conn: psycopg.Connection) -> None:
    name = table_name_for(MAX_SCHEMA_ID)
    conn.execute(f"CREATE TABLE {name} (x int)")  # as written: no quoting needed
    conn.execute(sql.SQL("INSERT INTO {} VALUES (7)").format(table_identifier(name)))
    assert conn.execute(f"SELECT x FROM {name}").fetchone() == (7,)


@pytest.mark.postgres
def test_register_then_register_again_changes_only_the_name(conn: psycopg.Connection) -> None:
    first = register(conn, AUTHOR, 5, "notes")
    assert (first.schema_id, first.created, first.registered_name) == (SCHEMA_ID, True, "notes")
    conn.execute("UPDATE p2panda.schemas SET status = 'materialized', version = 3")
    again = register(conn, AUTHOR, 5, "notes 2")
    assert (again.created, again.registered_name) == (False, "notes 2")
    assert register(conn, AUTHOR, 5, None).registered_name == "notes 2"  # kept
    [row] = registered_schemas(conn)
    assert (row.schema_id, row.log_id, row.author) == (SCHEMA_ID, 5, AUTHOR)
    assert (row.status, row.version, row.table_name) == ("materialized", 3, first.table_name)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("author", "log_id", "name", "reason"),
    [
        (AUTHOR[:31], 1, None, Reason.BAD_VALUE),
        (AUTHOR, -1, None, Reason.BAD_VALUE),
        (AUTHOR, 2**64, None, Reason.BAD_VALUE),
        (AUTHOR, 1, "", Reason.BAD_NAME),
        (AUTHOR, 1, "x" * 65, Reason.BAD_NAME),
        (AUTHOR, 1, "tab\tname", Reason.BAD_NAME),
    ],
)
def test_register_validates(conn, author: bytes, log_id: int, name, reason: Reason) -> None:
    with pytest.raises(P2pandaError) as error:
        register(conn, author, log_id, name)
    assert error.value.reason is reason
    assert registered_schemas(conn) == []


@pytest.mark.postgres
def test_a_name_is_data_never_sql(conn: psycopg.Connection) -> None:
    name = "x'); DROP TABLE p2panda.entries; --"
    assert register(conn, AUTHOR, 1, name).registered_name == name
    assert conn.execute("SELECT count(*) FROM p2panda.entries").fetchone() == (0,)


def account(conn, hash_: bytes, schema_id: str | None, state: str) -> None:
    conn.execute("INSERT INTO p2panda.entries (hash, entry) VALUES (%s, %s)", (hash_, b"e" + hash_))
    if state != "none":
        conn.execute(
            "INSERT INTO p2panda.accounts (hash, schema_id, state) VALUES (%s, %s, %s)",
            (hash_, schema_id, state),
        )


@pytest.mark.postgres
def test_status_counts_where_each_entry_ended(conn: psycopg.Connection) -> None:
    register(conn, AUTHOR, 5, "notes")
    other = register(conn, bytes(32), 9, None).schema_id
    conn.execute("UPDATE p2panda.schemas SET name = 'meta', version = 2, rows = 1")
    states = ["applied", "applied", "superseded", "pending", "rejected", "rejected", "rejected"]
    for i, state in enumerate(states):
        account(conn, bytes([i]), SCHEMA_ID, state)
    account(conn, b"\x50", None, "rejected")  # undecodable: no schema
    account(conn, b"\x51", f"{'cd' * 32}-1", "pending")  # a schema nobody registered
    account(conn, b"\x52", None, "none")  # not processed yet
    account(conn, b"\x53", None, "none")
    assert status_rows(conn) == sorted(
        [
            StatusRow(
                SCHEMA_ID, "notes", 2, "registered", 1, 2, 1, 1, 3, 7, 0, 0, 0, None, None, None
            ),
            StatusRow(other, "meta", 2, "registered", 1, 0, 0, 0, 0, 0, 0, 0, 0, None, None, None),
        ],
        key=lambda row: row.schema_id,
    )
    assert store_totals(conn) == StoreTotals(
        unprocessed=2,
        unregistered_applied=0,
        unregistered_superseded=0,
        unregistered_pending=1,
        unregistered_rejected=1,
    )


# --- a name is held by one schema (rule T-NAME-HELD) -------------------------------------


def stored_schema(conn: psycopg.Connection, seed: int, log_id: int, name: str) -> str:
    """A schema log whose meta message names it `name`, ingested and not verified yet
    (as `panda ingest` leaves it); its schema id."""
    corpus = CorpusBuilder()
    schema = corpus.author(seed).schema(log_id, name)
    ingest(conn, corpus.pairs)
    return schema.schema_id


def refused(conn: psycopg.Connection, author: bytes, log_id: int, name: str | None) -> str:
    """Register, which must fail with `name-taken`; its message."""
    with pytest.raises(P2pandaError) as error:
        register(conn, author, log_id, name)
    assert error.value.reason is Reason.NAME_TAKEN
    return error.value.message


@pytest.mark.postgres
def test_a_name_another_schema_holds_is_refused_and_every_view_stays(
    conn: psycopg.Connection,
) -> None:
    """Issue 56: after `panda demo`, the walkthrough's `register ... --name slothmail`
    (and profile, attachment) for another author's schemas was accepted, and the three
    shared names took every schema's view away. Now each is refused, nothing changes."""
    names = ("profile", "attachment", "slothmail")
    holders = {name: built(conn, seed, name, None) for seed, name in enumerate(names, start=1)}
    before = registered_schemas(conn)
    for log_id, name in enumerate(names, start=1):
        message = refused(conn, bytes([9]) * 32, log_id, name)
        assert message == f"the name {name} is held by {holders[name]}; pick another with --name"
    assert registered_schemas(conn) == before
    assert conn.execute(VIEWS).fetchall() == sorted((name,) for name in names)
    for name in names:
        view = sql.Identifier("p2panda_api", name)
        assert conn.execute(sql.SQL("SELECT x FROM {}").format(view)).fetchall() == [("b",)]


@pytest.mark.postgres
def test_a_name_a_schema_is_known_by_as_its_own_is_held_too(conn: psycopg.Connection) -> None:
    own = stored_schema(conn, 2, 7, "note")
    registration = register(conn, *parse_schema_id(own), None)
    assert (registration.registered_name, registration.shown_name) == (None, "note")
    assert [row.name for row in status_rows(conn)] == ["note"]  # before its first build
    assert refused(conn, AUTHOR, 1, "note").startswith(f"the name note is held by {own};")


@pytest.mark.postgres
def test_a_schema_whose_own_name_is_held_is_registered_under_its_qualified_name(
    conn: psycopg.Connection,
) -> None:
    holder = register(conn, AUTHOR, 1, "note").schema_id
    newcomer = stored_schema(conn, 2, 7, "note")
    registration = register(conn, *parse_schema_id(newcomer), None)
    author_hex = newcomer.split("-")[0]
    assert registration.registered_name == f"note_{author_hex[:8]}_7"
    assert registration.registered_name == qualified_name("note", newcomer)
    assert (registration.qualified_for, registration.held_by) == ("note", holder)
    names = {row.schema_id: row.shown_name for row in registered_schemas(conn)}
    assert names == {holder: "note", newcomer: f"note_{author_hex[:8]}_7"}


def test_a_qualified_name_keeps_within_64_characters() -> None:
    name = qualified_name("x" * 64, MAX_SCHEMA_ID)
    assert len(name) == 64 and name.endswith(f"_ffffffff_{2**64 - 1}")
    assert qualified_name("mail", SCHEMA_ID) == "mail_abababab_5"


@pytest.mark.postgres
def test_a_rename_says_from_what_to_what(conn: psycopg.Connection) -> None:
    assert not register(conn, AUTHOR, 5, "a").renamed
    renamed = register(conn, AUTHOR, 5, "b")
    assert (renamed.renamed, renamed.shown_before, renamed.shown_name) == (True, "a", "b")
    assert renamed.earlier_registered_name == "a"
    assert not register(conn, AUTHOR, 5, "b").renamed  # the same name again
    assert not register(conn, AUTHOR, 5, None).renamed  # kept
    assert register(conn, bytes(32), 1, "a").registered_name == "a"  # freed by the rename


@pytest.mark.postgres
def test_the_store_refuses_a_second_holder_of_a_registered_name(
    conn: psycopg.Connection,
) -> None:
    """Whoever writes the registry (not only `register`), the unique index holds."""
    register(conn, AUTHOR, 1, "x")
    register(conn, AUTHOR, 2, "y")
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute("UPDATE p2panda.schemas SET registered_name = 'x' WHERE log_id = 2")


@pytest.mark.postgres
def test_names_an_older_registry_shared_are_qualified_when_the_store_is_upgraded(
    conn: psycopg.Connection,
) -> None:
    """A registry from before the unique index holds a name three times: the first
    registration keeps it, the others get their qualified names (as `qualified_name`)."""
    conn.execute("DROP INDEX p2panda.schemas_registered_name")
    ids = [register(conn, author, 3, name).schema_id for author, name in _three()]
    conn.execute("UPDATE p2panda.schemas SET registered_name = 'slothmail'")
    conn.execute("COMMENT ON SCHEMA p2panda IS NULL")  # an older release's design
    ensure_schema(conn)
    names = {row.schema_id: row.registered_name for row in registered_schemas(conn)}
    assert names == {
        ids[0]: "slothmail",
        ids[1]: qualified_name("slothmail", ids[1]),
        ids[2]: qualified_name("slothmail", ids[2]),
    }
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute("UPDATE p2panda.schemas SET registered_name = 'slothmail'")


@pytest.mark.postgres
def test_two_registrations_of_one_name_at_once_one_is_refused(
    conn: psycopg.Connection, database_url: str
) -> None:
    """The check and the taking are one step: a second registration waits for the
    first to commit, then finds the name held."""
    errors: list[P2pandaError] = []
    with connect(database_url, autocommit=True) as first, first.transaction():
        holder = register(first, AUTHOR, 1, "x").schema_id

        def second_registration() -> None:
            with connect(database_url, autocommit=True) as second:
                try:
                    register(second, AUTHOR, 2, "x")
                except P2pandaError as error:
                    errors.append(error)

        racer = threading.Thread(target=second_registration)
        racer.start()
        racer.join(timeout=1)
        assert racer.is_alive()  # waits for the views lock the first holds
    racer.join(timeout=30)
    assert [(e.reason, e.message.split(";")[0]) for e in errors] == [
        (Reason.NAME_TAKEN, f"the name x is held by {holder}")
    ]
    assert [row.registered_name for row in registered_schemas(conn)] == ["x"]


def _three() -> list[tuple[bytes, str]]:
    return [(bytes([seed]) * 32, f"name {seed}") for seed in (1, 2, 3)]


def as_of_table(conn: psycopg.Connection, schema_id: str, version: int) -> str:
    """A `--as-of-version` table of the schema (as `tables.swap_version` leaves it), with
    the views made again; its name."""
    table = version_table_name_for(schema_id, version)
    conn.execute(
        sql.SQL("CREATE TABLE {} (_instance_id text PRIMARY KEY, x text)").format(
            table_identifier(table)
        )
    )
    conn.execute(sql.SQL("INSERT INTO {} VALUES ('a', 'old')").format(table_identifier(table)))
    conn.execute(
        "INSERT INTO p2panda.schema_versions (schema_id, version, version_hash, table_name, rows)"
        " VALUES (%s, %s, '00', %s, 1)",
        (schema_id, version, table),
    )
    refresh_views(conn)
    return table


@pytest.mark.postgres
def test_an_as_of_view_is_named_name_v_version_and_needs_no_quoting(
    conn: psycopg.Connection,
) -> None:
    mail = built(conn, 1, "my_mail", None)
    as_of_table(conn, mail, 3)
    assert conn.execute(VIEWS).fetchall() == [("my_mail",), ("my_mail_v3",)]
    assert conn.execute("SELECT x FROM p2panda_api.my_mail_v3").fetchall() == [("old",)]
    assert qualified_view(conn, "my_mail_v3") == "p2panda_api.my_mail_v3"
    assert qualified_view(conn, "sloth's mail_v3") == 'p2panda_api."sloth\'s mail_v3"'


@pytest.mark.postgres
def test_a_name_an_as_of_view_holds_is_refused_and_the_view_stays(
    conn: psycopg.Connection,
) -> None:
    """Rule T-NAME-HELD: `my_mail_v3`, the view of my_mail's table as of version 3, is
    held: `--name my_mail_v3` is refused, a schema whose own name it is gets its
    qualified name, and the view stays my_mail's."""
    mail = built(conn, 1, "my_mail", None)
    as_of_table(conn, mail, 3)
    message = refused(conn, AUTHOR, 1, "my_mail_v3")
    assert message == f"the name my_mail_v3 is held by {mail}; pick another with --name"
    newcomer = stored_schema(conn, 2, 7, "my_mail_v3")
    registration = register(conn, *parse_schema_id(newcomer), None)
    assert registration.registered_name == qualified_name("my_mail_v3", newcomer)
    assert registration.held_by == mail
    assert ("my_mail_v3",) in conn.execute(VIEWS).fetchall()
    assert conn.execute("SELECT x FROM p2panda_api.my_mail_v3").fetchall() == [("old",)]


@pytest.mark.postgres
def test_a_version_table_never_takes_a_schemas_view(conn: psycopg.Connection) -> None:
    """A schema registered as `note_v2` (after note) holds that view; note's table as of
    version 2, built afterwards, gets none: it would take a current view away."""
    note = built(conn, 1, "note", None)
    other = built(conn, 2, "note_v2", None)
    as_of_table(conn, note, 2)
    assert conn.execute(VIEWS).fetchall() == [("note",), ("note_v2",)]
    assert conn.execute("SELECT x FROM p2panda_api.note_v2").fetchall() == [("b",)]
    row = conn.execute(
        "SELECT view_name FROM p2panda.schemas WHERE schema_id = %s", (other,)
    ).fetchone()
    assert row == ("note_v2",)
    assert conn.execute(
        "SELECT view_name FROM p2panda.schema_versions WHERE schema_id = %s", (note,)
    ).fetchone() == (None,)
