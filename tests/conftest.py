"""Shared fixtures: the p2panda-js vectors, a `$P2PANDA_HOME` for the session and a
private one for each test that asks, a real PostgreSQL (the embedded server in a
temporary `$P2PANDA_HOME`, stopped at the end, or the server `P2PANDA_DATABASE_URL`
names), in a database of the tests' own that is dropped after the session; each test
that asks for `database_url` starts from empty schemas; and one local Spark session for
every Spark test."""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg import sql

from p2panda_assets.store.database import DATABASE_URL_ENV, connect, ensure_schema
from p2panda_assets.store.embedded import ensure_embedded
from p2panda_assets.tuning import PipelineTuning, tuned, tuning
from tests.postgres import embedded_home, with_database

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DATA = Path(__file__).parent / "data"
PRODUCT_SCHEMAS = ("p2panda", "p2panda_data", "p2panda_versions", "p2panda_api")
SLOWEST_FIRST = ("faults", "e2e", "spark")  # markers, by how long their files take


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files first: those with fault tests (minutes each), then end-to-end
    ones, then Spark ones, then the rest, each file's tests together and in their
    order. The two workers (`-n 2 --dist loadfile`, pyproject.toml) take whole files in
    this order, so a long file does not start last and leave one worker alone at the end."""

    def rank(item: pytest.Item) -> int:
        marks = {mark.name for mark in item.iter_markers()}
        return next((n for n, mark in enumerate(SLOWEST_FIRST) if mark in marks), 3)

    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    ranks: dict[str, int] = {}
    for item in items:
        ranks[file_of(item)] = min(ranks.get(file_of(item), 3), rank(item))
    items.sort(key=lambda item: ranks[file_of(item)])  # stable: files stay whole, in order


def _dagster_state_storage() -> object | None:
    """Dagster's current definitions-state storage, if Dagster is loaded at all."""
    base = sys.modules.get("dagster._core.storage.defs_state.base")
    return base.DefsStateStorage.get() if base is not None else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test must close every Dagster instance it enters. An entered instance sets
    Dagster's current definitions-state storage (a context variable); left open, the
    storage outlives its instance, and any later `materialize` in the same worker fails
    with "undefined DagsterInstance weakref", far from the test that caused it."""
    before = _dagster_state_storage()
    result = yield
    after = _dagster_state_storage()
    if after is not before:
        pytest.fail(
            f"{item.nodeid} left a Dagster instance entered (a sensor or asset context"
            " built from an instance ref and never closed?): use it in `with`",
            pytrace=False,
        )
    return result


@pytest.fixture(scope="session")
def vectors() -> dict:
    return json.loads((DATA / "p2panda-vectors.json").read_text())


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A `$P2PANDA_HOME` for the tests that name none: what they write under it (the
    columnar store of `run_pipeline`, the Dagster home of an in-process `panda`) stays
    out of the checkout and goes with the session's temporary files."""
    home = tmp_path_factory.mktemp("p2panda-home")
    before = os.environ.get("P2PANDA_HOME")
    os.environ["P2PANDA_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("P2PANDA_HOME", None)
    else:
        os.environ["P2PANDA_HOME"] = before


@pytest.fixture
def tune() -> Iterator[Callable[..., PipelineTuning]]:
    """`tune(max_layers=2, ...)`: the pipeline runs under that tuning for the rest of the
    test (`p2panda_assets.tuning`), instead of a patched module global."""
    with ExitStack() as stack:

        def put_in_force(**changes: object) -> PipelineTuning:
            return stack.enter_context(tuned(replace(tuning(), **changes)))

        yield put_in_force


@pytest.fixture
def p2panda_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("P2PANDA_HOME", str(home))
    return home


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
        for schema in PRODUCT_SCHEMAS:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    monkeypatch.setenv(DATABASE_URL_ENV, session_database)
    return session_database


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    with connect(database_url, autocommit=True) as connection:
        ensure_schema(connection)
        yield connection


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local session (it takes seconds to start), started before Dagster's
    PySparkResource asks for one: there is one SparkContext per JVM, so its getOrCreate
    returns this session. Imported here, so the Spark-free suite never loads PySpark."""
    from p2panda_assets.pipeline.spark.session import build_session, spark_config

    session = build_session(spark_config("local[2]"))
    yield session
    session.stop()
