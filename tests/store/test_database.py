"""Which database, its tables, and the same database described for Spark's JDBC."""

from __future__ import annotations

import getpass

import pytest

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.store.database import (
    DATABASE_URL_ENV,
    connect,
    database_url,
    ensure_schema,
    jdbc_options,
)
from p2panda_assets.store.pipeline_state import count_good_entries, pipeline_state

TABLES = {
    "entries",
    "message_index",
    "schemas",
    "accounts",
    "deleted_instances",
    "schema_versions",
}


def tables(conn) -> set[str]:
    rows = conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'p2panda'"
    ).fetchall()
    return {row[0] for row in rows}


@pytest.mark.postgres
def test_ensure_schema_creates_the_tables_and_is_idempotent(database_url: str) -> None:
    with connect(database_url) as conn:
        ensure_schema(conn)
        ensure_schema(conn)
        assert conn.info.transaction_status == 0  # no transaction left open
        assert tables(conn) >= TABLES
        schemas = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'p2panda%'"
        ).fetchall()
        assert {row[0] for row in schemas} == {
            "p2panda",
            "p2panda_data",
            "p2panda_versions",
            "p2panda_api",
        }


@pytest.mark.postgres
def test_ensure_schema_repairs_a_store_missing_a_table(conn) -> None:
    conn.execute("DROP TABLE p2panda.deleted_instances")
    conn.execute("COMMENT ON SCHEMA p2panda IS NULL")
    ensure_schema(conn)
    assert tables(conn) >= TABLES


def test_the_environment_names_the_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATABASE_URL_ENV, "postgresql://u@db.example:6543/store")
    assert database_url() == "postgresql://u@db.example:6543/store"


def test_jdbc_options_of_the_embedded_url() -> None:
    assert jdbc_options("postgresql://postgres@127.0.0.1:54321/postgres") == {
        "url": "jdbc:postgresql://127.0.0.1:54321/postgres",
        "user": "postgres",
        "password": "",
        "driver": "org.postgresql.Driver",
    }


def test_jdbc_options_with_password_ipv6_quoting_and_sslmode() -> None:
    options = jdbc_options("postgresql://ann:p%40ss@[::1]:6000/my%20db?sslmode=require")
    assert options == {
        "url": "jdbc:postgresql://[::1]:6000/my%20db",
        "user": "ann",
        "password": "p@ss",
        "driver": "org.postgresql.Driver",
        "sslmode": "require",
    }


def test_jdbc_options_apply_libpq_defaults() -> None:
    user = getpass.getuser()
    assert (
        jdbc_options("postgres://db.example")["url"] == f"jdbc:postgresql://db.example:5432/{user}"
    )
    assert jdbc_options("postgres://db.example")["user"] == user


def test_jdbc_options_keep_several_hosts() -> None:
    url = jdbc_options("postgresql://u@h1:5433,h2:5434/x")["url"]
    assert url == "jdbc:postgresql://h1:5433,h2:5434/x"


@pytest.mark.parametrize(
    "url",
    ["postgresql:///store?host=/var/run/postgresql", "postgresql:///store", "mysql://h/db"],
)
def test_jdbc_options_refuse_urls_spark_cannot_use(url: str) -> None:
    with pytest.raises(P2pandaError) as error:
        jdbc_options(url)
    assert error.value.reason is Reason.BAD_INPUT


@pytest.mark.postgres
def test_a_new_schema_text_makes_the_next_run_index_again(conn) -> None:
    """An upgrade's DDL forgets what the last index step saw: the chained messages are
    written again with the columns the new release reads. The same text does not."""
    conn.execute("INSERT INTO p2panda.index_state VALUES (1, 'indexed') ON CONFLICT DO NOTHING")
    ensure_schema(conn)  # the same text: nothing runs
    assert conn.execute("SELECT count(*) FROM p2panda.index_state").fetchone()[0] == 1
    conn.execute("COMMENT ON SCHEMA p2panda IS 'p2panda ddl an older release'")
    ensure_schema(conn)
    assert conn.execute("SELECT count(*) FROM p2panda.index_state").fetchone()[0] == 0


@pytest.mark.postgres
def test_an_upgrade_counts_the_good_entries_once_and_keeps_schema_messages_only(conn) -> None:
    """A store verified before the count was kept: three entries verified, one of them
    rejected by verification; the message index still holds an instance message."""
    pipeline_state(conn)  # the progress row
    for seq, hash_ in enumerate((b"good-1", b"good-2", b"bad-3"), start=1):
        conn.execute(
            "INSERT INTO p2panda.entries (hash, entry, payload, author, log_id, seq_num)"
            " VALUES (%s, '', '', %s, 1, %s)",
            (hash_, bytes(32), seq),
        )
    conn.execute(
        "INSERT INTO p2panda.accounts (hash, state, reason, origin)"
        " VALUES ('bad-3', 'rejected', 'bad-signature', 'verify')"
    )
    conn.execute(
        "INSERT INTO p2panda.message_index (hash, kind) VALUES ('good-1', 'schema-meta'),"
        " ('good-2', 'create')"
    )
    conn.execute("ALTER TABLE p2panda.pipeline_state ALTER COLUMN good_entries DROP NOT NULL")
    conn.execute(
        "UPDATE p2panda.pipeline_state SET verified_through ="
        " (SELECT max(ingest_seq) FROM p2panda.entries), good_entries = NULL"
    )
    conn.execute("COMMENT ON SCHEMA p2panda IS 'p2panda ddl an older release'")
    ensure_schema(conn)
    assert count_good_entries(conn) == 2
    kinds = conn.execute("SELECT kind FROM p2panda.message_index").fetchall()
    assert kinds == [("schema-meta",)]


@pytest.mark.postgres
def test_an_upgrade_drops_the_indexes_nothing_reads(conn) -> None:
    """Earlier releases indexed the entries without a verdict; nothing reads that index
    since verification stopped writing verdicts, and ingest paid for it. They also
    indexed each log's entries without their hash and ingest_seq (`entries_log`), which
    `entries_by_log` replaces."""
    conn.execute(
        "CREATE INDEX entries_unverified ON p2panda.entries (ingest_seq) WHERE verdict IS NULL"
    )
    conn.execute("DROP INDEX p2panda.entries_by_log")
    conn.execute("CREATE INDEX entries_log ON p2panda.entries (author, log_id, seq_num)")
    conn.execute("COMMENT ON SCHEMA p2panda IS 'p2panda ddl an older release'")
    ensure_schema(conn)
    rows = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = 'p2panda' AND tablename = 'entries'"
    )
    indexes = {name for (name,) in rows}
    assert indexes == {"entries_pkey", "entries_ingest_seq_key", "entries_by_log"}
