"""Issue 49: `panda api-role NAME` makes a login role for apps that reads every view of
`p2panda_api` (the current ones, the `<name>_v<N>` ones, and those made after the role, through
the default privileges of the role that creates them) and nothing else: no entry, no
table of the product or of Dagster, no write, no CREATE. Its URL is the last line of
the command's output; its password is kept, 0600, and only `--rotate` changes it."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from p2panda_assets.cli.api_role_cmd import password_path
from p2panda_assets.cli.main import main
from p2panda_assets.errors import Reason
from p2panda_assets.store.registry import register, table_identifier, table_name_for
from p2panda_assets.store.views import refresh_views
from tests.postgres import throwaway_role
from tests.store.test_registry import as_of_table

pytestmark = pytest.mark.postgres

DAGSTER_TABLES = ("runs", "event_logs", "run_tags")


def panda(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def role_url(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """`panda api-role ...` must succeed; the URL on its last line."""
    code, out, err = panda(capsys, "api-role", *argv)
    assert (code, err) == (0, ""), err
    return out.splitlines()[-1]


def built(conn: psycopg.Connection, seed: int, name: str) -> str:
    """A registered, materialized schema with a row, and its view; its table's name."""
    schema_id = register(conn, bytes([seed]) * 32, seed, name).schema_id
    table = table_name_for(schema_id)
    conn.execute(
        sql.SQL("CREATE TABLE {} (_instance_id text PRIMARY KEY, x text)").format(
            table_identifier(table)
        )
    )
    conn.execute(
        sql.SQL("INSERT INTO {} VALUES ('a', %s)").format(table_identifier(table)), (name,)
    )
    conn.execute(
        "UPDATE p2panda.schemas SET status = 'materialized', version = 2 WHERE schema_id = %s",
        (schema_id,),
    )
    refresh_views(conn)
    return table


def built_version(conn: psycopg.Connection, name: str, version: int) -> str:
    """A `--as-of-version` table of the schema registered as `name`, and its
    `<name>_v<version>` view (`as_of_table`)."""
    row = conn.execute(
        "SELECT schema_id FROM p2panda.schemas WHERE registered_name = %s", (name,)
    ).fetchone()
    assert row is not None
    return as_of_table(conn, row[0], version)


@pytest.fixture
def role(conn: psycopg.Connection, database_url: str, p2panda_home: Path) -> Iterator[str]:
    yield from throwaway_role(database_url)


@pytest.fixture
def dagster_tables(database_url: str) -> None:
    """Dagster's run and event log storage in the product's database (as dagster.yaml
    puts it)."""
    from dagster_postgres.event_log import PostgresEventLogStorage
    from dagster_postgres.run_storage import PostgresRunStorage

    PostgresRunStorage(database_url).dispose()
    PostgresEventLogStorage(database_url).dispose()


def view(name: str) -> sql.Composed:
    return sql.SQL("SELECT x FROM {}").format(sql.Identifier("p2panda_api", name))


def test_the_role_reads_every_view_and_nothing_else(
    capsys: pytest.CaptureFixture[str],
    conn: psycopg.Connection,
    role: str,
    dagster_tables: None,
) -> None:
    notes = built(conn, 1, "notes")
    old_notes = built_version(conn, "notes", 1)
    code, out, err = panda(capsys, "api-role", role)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"created role {role}: SELECT on the views of p2panda_api, now and later"
    url = lines[-1]
    assert url.startswith(f"postgresql://{role}:")

    later = built(conn, 2, "later")  # a view made after the role: no second command
    with psycopg.connect(url, autocommit=True) as app:
        assert app.execute("SELECT current_user").fetchone() == (role,)
        assert app.execute(view("notes")).fetchall() == [("notes",)]
        assert app.execute(view("notes_v1")).fetchall() == [("old",)]
        assert app.execute(view("later")).fetchall() == [("later",)]
        refresh_views(conn)  # as every materialization does: every view dropped, made anew
        assert app.execute(view("notes")).fetchall() == [("notes",)]

        denied = [
            "SELECT * FROM p2panda.entries",
            "SELECT * FROM p2panda.schemas",
            *(f"SELECT * FROM {table}" for table in (notes, old_notes, later)),
            *(f"SELECT * FROM public.{table}" for table in DAGSTER_TABLES),
            "INSERT INTO p2panda_api.notes (_instance_id, x) VALUES ('b', 'y')",
            "UPDATE p2panda_api.notes SET x = 'y'",
            "DELETE FROM p2panda_api.notes",
            "TRUNCATE p2panda.entries",
            "DELETE FROM p2panda.entries",
            "UPDATE public.runs SET status = 'FAILURE'",
        ]
        for statement in denied:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
                app.execute(statement)
        creating = [
            "CREATE TABLE public.mine (x text)",
            "CREATE TABLE p2panda_api.mine (x text)",
            "CREATE VIEW p2panda_api.mine AS SELECT 1 AS x",
            "CREATE TABLE p2panda_data.mine (x text)",
            "CREATE FUNCTION public.mine() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "CREATE SCHEMA mine",
            "CREATE ROLE mine",
            "CREATE DATABASE mine",
            "ALTER VIEW p2panda_api.notes RENAME TO mine",
            "DROP VIEW p2panda_api.notes",
            "COMMENT ON VIEW p2panda_api.notes IS 'mine'",
        ]
        for statement in creating:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                app.execute(statement)
        app.execute("GRANT SELECT ON p2panda_api.notes TO PUBLIC")  # a warning, no grant
        shared = "SELECT has_table_privilege('public', 'p2panda_api.notes', 'SELECT')"
        assert conn.execute(shared).fetchone() == (False,)
    assert conn.execute("SELECT count(*) FROM p2panda_api.notes").fetchone() == (1,)


def test_the_password_is_kept_and_rotated_on_demand(
    capsys: pytest.CaptureFixture[str], conn: psycopg.Connection, role: str
) -> None:
    built(conn, 3, "notes")
    first = role_url(capsys, role)
    path = password_path(role)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f":{path.read_text().strip()}@" in first
    code, out, _ = panda(capsys, "api-role", role)
    assert code == 0 and out.splitlines()[0].startswith(f"updated role {role}")
    assert out.splitlines()[-1] == first  # the same URL again
    rotated = role_url(capsys, role, "--rotate")
    assert rotated != first
    assert f":{path.read_text().strip()}@" in rotated
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(first, connect_timeout=5)
    with psycopg.connect(rotated) as app:
        assert app.execute(view("notes")).fetchall() == [("notes",)]


def test_attributes_given_by_hand_are_taken_back(
    capsys: pytest.CaptureFixture[str], conn: psycopg.Connection, role: str
) -> None:
    role_url(capsys, role)
    conn.execute(sql.SQL("ALTER ROLE {} CREATEDB CREATEROLE INHERIT").format(sql.Identifier(role)))
    url = role_url(capsys, role)
    flags = conn.execute(
        "SELECT rolcreatedb, rolcreaterole, rolinherit, rolcanlogin, rolsuper"
        " FROM pg_roles WHERE rolname = %s",
        (role,),
    ).fetchone()
    assert flags == (False, False, False, True, False)
    conn.execute(sql.SQL("GRANT pg_read_all_data TO {}").format(sql.Identifier(role)))
    code, _, err = panda(capsys, "api-role", role)
    assert code == 1
    assert err.startswith(
        f"error: {Reason.BAD_INPUT}: role {role!r} is a member of pg_read_all_data"
    )
    conn.execute(sql.SQL("REVOKE pg_read_all_data FROM {}").format(sql.Identifier(role)))
    assert role_url(capsys, role) == url


@pytest.mark.parametrize("name", ["Bad-Name", "pg_app", "public", "1app", "a" * 64, "../x"])
def test_a_bad_name_is_refused(
    capsys: pytest.CaptureFixture[str], conn: psycopg.Connection, p2panda_home: Path, name: str
) -> None:
    code, out, err = panda(capsys, "api-role", name)
    assert (code, out) == (1, "")
    assert err.startswith(f"error: {Reason.BAD_INPUT}: role name {name!r}"), err
    assert not (p2panda_home / "api-roles").exists()


def test_a_role_not_made_by_the_command_is_left_alone(
    capsys: pytest.CaptureFixture[str], conn: psycopg.Connection, role: str
) -> None:
    """The product's own role (the superuser, on the embedded server), or an admin's."""
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEDB").format(sql.Identifier(role)))
    for name in (conn.info.user, role):
        before = conn.execute("SELECT * FROM pg_authid WHERE rolname = %s", (name,)).fetchone()
        code, out, err = panda(capsys, "api-role", name)
        assert (code, out) == (1, "")
        assert err == (
            f"error: {Reason.BAD_INPUT}: role {name!r} exists and is not an API role made by"
            " `panda api-role`; choose another name\n"
        )
        after = conn.execute("SELECT * FROM pg_authid WHERE rolname = %s", (name,)).fetchone()
        assert after == before
        assert not password_path(name).exists()
