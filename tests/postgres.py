"""Helpers for tests against a real PostgreSQL (the fixtures are in conftest.py)."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from p2panda_assets.store.embedded import stop_embedded


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


def throwaway_role(url: str) -> Iterator[str]:
    """A role name of one test's own, for `panda api-role` (roles belong to the server,
    which the tests share, not to their database); the role is dropped afterwards, with
    its privileges and default privileges in the database of `url`."""
    name = f"app_{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            role = sql.Identifier(name)
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(role))
                conn.execute(sql.SQL("DROP ROLE {}").format(role))
