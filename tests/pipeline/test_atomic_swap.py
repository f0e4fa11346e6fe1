"""Tables are replaced atomically: a run that fails inside the swap leaves the previous
table whole and readable (and no staging tables behind), readers racing a swap see the
old table or the new one, a second run changes nothing, and the next run converges."""

from __future__ import annotations

import threading

import psycopg
import pytest

from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.store import tables
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register, table_name_for
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances
from tests.pipeline.compare import engine_accounts, engine_tables, pg_accounts, pg_tables

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def store(url: str) -> psycopg.Connection:
    conn = connect(url, autocommit=True)
    ensure_schema(conn)
    return conn


def story(corpus: CorpusBuilder, notes: int) -> tuple[str, list]:
    schema = corpus.author(1).schema(5, "note")
    schema.migrate(create_field("title", "text"), create_field("n", "integer"))
    log = instances(corpus.author(2), 1)
    for n in range(notes):
        log.create(schema.ref(), title=f"note {n}", n=n)
    return schema.schema_id, log


def snapshot(conn: psycopg.Connection, schema_id: str) -> tuple:
    return pg_tables(conn, [schema_id]), pg_accounts(conn)


def stage_tables(conn: psycopg.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT schemaname || '.' || tablename FROM pg_tables WHERE tablename LIKE 'stage_%'"
    )
    return [r[0] for r in rows]


def test_a_failed_swap_leaves_the_previous_table_and_the_next_run_converges(
    spark, database_url, monkeypatch
) -> None:
    corpus = CorpusBuilder()
    schema_id, log = story(corpus, 3)
    with store(database_url) as conn:
        ingest(conn, corpus.pairs)
        register(conn, *_split(schema_id), None)
        run_pipeline(spark, conn, database_url)
        before = snapshot(conn, schema_id)
        assert len(before[0][schema_id]) == 3
        log.create(_ref(corpus, schema_id), title="one more", n=99)
        ingest(conn, corpus.pairs)

        def crash_inside_the_transaction(*args: object) -> None:
            raise RuntimeError("killed while swapping")

        monkeypatch.setattr(tables, "update_registry", crash_inside_the_transaction)
        with pytest.raises(RuntimeError, match="killed while swapping"):
            run_pipeline(spark, conn, database_url)
        assert pg_tables(conn, [schema_id]) == before[0]  # the old table, whole
        assert stage_tables(conn) == []
        monkeypatch.undo()
        run_pipeline(spark, conn, database_url)
        expected = reduce_corpus(corpus.pairs, {schema_id})
        assert pg_tables(conn, [schema_id]) == engine_tables(expected)
        assert pg_accounts(conn) == engine_accounts(expected)
        converged = snapshot(conn, schema_id)
        run_pipeline(spark, conn, database_url)  # a second run changes nothing
        assert snapshot(conn, schema_id) == converged


def test_readers_racing_a_swap_see_the_old_table_or_the_new_one(spark, database_url) -> None:
    corpus = CorpusBuilder()
    schema_id, log = story(corpus, 2)
    with store(database_url) as conn:
        ingest(conn, corpus.pairs)
        register(conn, *_split(schema_id), None)
        run_pipeline(spark, conn, database_url)
        for n in range(3):
            log.create(_ref(corpus, schema_id), title=f"later {n}", n=n)
        ingest(conn, corpus.pairs)
    table = table_name_for(schema_id)
    seen: set[int] = set()
    errors: list[Exception] = []
    done = threading.Event()

    def read() -> None:
        with connect(database_url, autocommit=True) as reader:
            while not done.is_set():
                try:
                    seen.add(reader.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
                except psycopg.Error as error:  # a half-swapped table would show up here
                    errors.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        with store(database_url) as conn:
            run_pipeline(spark, conn, database_url)
    finally:
        done.set()
        reader.join(timeout=30)
    assert errors == []
    assert seen <= {2, 5} and 5 in seen


def _split(schema_id: str) -> tuple[bytes, int]:
    author, log_id = schema_id.rsplit("-", 1)
    return bytes.fromhex(author), int(log_id)


def _ref(corpus: CorpusBuilder, schema_id: str):
    from p2panda_assets.protocol.messages import SchemaVersionRef

    author, log_id = _split(schema_id)
    return SchemaVersionRef(author, log_id, 2)
