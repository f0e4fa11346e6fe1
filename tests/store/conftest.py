"""A real PostgreSQL for the store tests: the embedded server in a temporary
`$P2PANDA_HOME` (stopped at the end), or the server `P2PANDA_DATABASE_URL` names.

Either way the tests run in a database of their own, created for the session and
dropped after it, so a developer's data is never touched; each test starts from empty
`p2panda` and `p2panda_data` schemas.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from p2panda_assets.engine.builder import CorpusBuilder, create_field, instances
from p2panda_assets.store.database import DATABASE_URL_ENV, connect, ensure_schema
from p2panda_assets.store.embedded import ensure_embedded, stop_embedded


def with_database(url: str, dbname: str) -> str:
    """`url` pointing at another database (URL or key=value form)."""
    if url.startswith(("postgresql://", "postgres://")):
        return urlsplit(url)._replace(path=f"/{dbname}").geturl()
    return make_conninfo(url, dbname=dbname)


def embedded_home() -> Iterator[Path]:
    """A fresh `$P2PANDA_HOME` for an embedded server, removed afterwards.

    Made directly under the system temp dir, not with tmp_path: as root the server runs
    as another user, who must traverse the path, and every pytest session resets
    /tmp/pytest-of-root to 0700 (which would break a server another session started).
    """
    home = Path(tempfile.mkdtemp(prefix="p2panda-test-home-"))
    try:
        yield home
    finally:
        stop_embedded(home)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """The server: P2PANDA_DATABASE_URL's, else an embedded one started for the session."""
    external = os.environ.get(DATABASE_URL_ENV, "").strip()
    if external:
        yield external
        return
    for home in embedded_home():
        yield ensure_embedded(home)


@pytest.fixture(scope="session")
def session_database(server_url: str) -> Iterator[str]:
    """A database of the tests' own on that server, dropped afterwards."""
    name = f"p2panda_test_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def database_url(session_database: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """An empty store, also named by P2PANDA_DATABASE_URL (for the CLI)."""
    with psycopg.connect(session_database, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS p2panda CASCADE")
        conn.execute("DROP SCHEMA IF EXISTS p2panda_data CASCADE")
    monkeypatch.setenv(DATABASE_URL_ENV, session_database)
    return session_database


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    with connect(database_url, autocommit=True) as connection:
        ensure_schema(connection)
        yield connection


def small_corpus(seed: int = 1) -> list[tuple[bytes, bytes]]:
    """A schema log of two entries and an instance log of three: five good pairs."""
    corpus = CorpusBuilder()
    schema = corpus.author(seed).schema(7, "note")
    schema.migrate(create_field("title", "text"))
    writer = instances(corpus.author(seed + 100), 1)
    note = writer.create(schema.ref(2), title="hello")
    writer.update(schema.ref(2), note, title="hello again")
    writer.delete(note)
    return corpus.pairs


@pytest.fixture
def pairs() -> list[tuple[bytes, bytes]]:
    return small_corpus()


@pytest.fixture
def jsonl(tmp_path: Path) -> Callable[[str, list[str]], Path]:
    """Write lines to a file in the test's directory; its path."""

    def write(name: str, lines: list[str]) -> Path:
        path = tmp_path / name
        path.write_text("".join(line + "\n" for line in lines))
        return path

    return write
