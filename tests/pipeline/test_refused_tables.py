"""What PostgreSQL refuses of one schema stops no other: each test builds an odd schema
beside a plain one in one run. A description it cannot hold is shown with a replacement
character and the schema is built; a table it refuses (too many columns) fails that
schema alone, its registry row says `failed` and why, and no staging table is left."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from psycopg import sql

from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from p2panda_assets.store.tables import Outcome
from p2panda_assets.testing.builder import CorpusBuilder, SchemaAuthor, create_field, instances

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

# More fields than a PostgreSQL table may have columns (1,600, its system columns
# besides); nothing in the protocol bounds a lens, and the migration is ~60 KB of its 1 MiB.
TOO_MANY_FIELDS = 1_600


@contextmanager
def built_beside_a_plain_schema(
    spark, url: str, built: CorpusBuilder, odd: SchemaAuthor, **fields: object
) -> Iterator[tuple[psycopg.Connection, list[Outcome]]]:
    """`odd` (author 1's schema log 1 in `built`) with an instance of `fields`, and a
    plain schema with one instance: ingested, registered and built in one run."""
    plain = built.author(1).schema(2, "plain")
    plain.migrate(create_field("title", "text"))
    writer = built.author(2)
    instances(writer, 1).create(odd.ref(), **fields)
    instances(writer, 2).create(plain.ref(), title="two")
    with connect(url, autocommit=True) as conn:
        ensure_schema(conn)
        ingest(conn, built.pairs)
        for schema in (odd, plain):
            register(conn, *parse_schema_id(schema.schema_id), None)
        yield conn, run_pipeline(spark, conn, url)


def test_a_description_postgresql_cannot_hold_is_shown_with_a_replacement(
    spark, database_url
) -> None:
    """A description is a CBOR text string, which may hold U+0000; a PostgreSQL text
    value cannot. The schema is valid (a description may be any text string): it is
    built, and so is every other schema, its registry row and its view's comment showing
    U+FFFD instead. (Its registry row could not be written, and the build of the other
    schemas stopped.)"""
    built = CorpusBuilder()
    odd = built.author(1).schema(1, "odd")
    odd.meta("odd", description="nul\x00here")
    odd.migrate(create_field("title", "text"))
    with built_beside_a_plain_schema(spark, database_url, built, odd, title="one") as (
        conn,
        outcomes,
    ):
        assert sorted((o.name, o.status, o.rows) for o in outcomes) == [
            ("odd", "materialized", 1),
            ("plain", "materialized", 1),
        ]
        description = conn.execute(
            "SELECT description FROM p2panda.schemas WHERE schema_id = %s", (odd.schema_id,)
        ).fetchone()
        assert description == ("nul\ufffdhere",)
        comment = conn.execute(
            "SELECT obj_description(%s::regclass)",
            (sql.Identifier("p2panda_api", "odd").as_string(conn),),
        ).fetchone()
        assert comment == ("@primaryKey _instance_id\nnul\ufffdhere",)


def test_a_schema_with_more_fields_than_a_table_may_have_fails_alone(spark, database_url) -> None:
    built = CorpusBuilder()
    wide = built.author(1).schema(1, "wide")
    wide.migrate(*(create_field(f"f{i}", "text") for i in range(TOO_MANY_FIELDS)))
    with built_beside_a_plain_schema(spark, database_url, built, wide, f0="one") as (
        conn,
        found,
    ):
        outcomes = {o.name: o for o in found}
        assert (outcomes["plain"].status, outcomes["plain"].rows) == ("materialized", 1)
        assert outcomes["wide"].status == "failed"
        registry = conn.execute(
            "SELECT status, status_message FROM p2panda.schemas WHERE schema_id = %s",
            (wide.schema_id,),
        ).fetchone()
        assert registry is not None
        assert registry[0] == "failed"
        assert "staging its table failed: tables can have at most 1600 columns" in registry[1]
        left = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE tablename LIKE 'stage%'"
        ).fetchall()
        assert left == []
