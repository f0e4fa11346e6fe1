"""A schema whose table PostgreSQL refuses fails alone: the other schemas of the run are
built, its registry row says `failed` and why, and no staging table is left behind."""

from __future__ import annotations

import pytest

from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

# More fields than a PostgreSQL table may have columns (1,600, its system columns
# besides); nothing in SPEC bounds a lens, and the migration is ~60 KB of its 1 MiB.
TOO_MANY_FIELDS = 1_600


def test_a_schema_with_more_fields_than_a_table_may_have_fails_alone(spark, database_url) -> None:
    built = CorpusBuilder()
    wide = built.author(1).schema(1, "wide")
    wide.migrate(*(create_field(f"f{i}", "text") for i in range(TOO_MANY_FIELDS)))
    plain = built.author(1).schema(2, "plain")
    plain.migrate(create_field("title", "text"))
    writer = built.author(2)
    instances(writer, 1).create(wide.ref(), f0="one")
    instances(writer, 2).create(plain.ref(), title="two")
    with connect(database_url, autocommit=True) as conn:
        ensure_schema(conn)
        ingest(conn, built.pairs)
        for schema in (wide, plain):
            register(conn, *parse_schema_id(schema.schema_id), None)
        outcomes = {o.name: o for o in run_pipeline(spark, conn, database_url)}
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
