"""The `decoded_messages` asset's counts by kind: read by pyarrow from the chained
layers, they equal Spark's count of the same directories, undecodable messages and
their errors included, when a layer's counts were kept from an earlier run."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from p2panda_assets.pipeline.columnar.arrow_io import kinds_counted
from p2panda_assets.pipeline.columnar.layers import decoded_paths, read_schema_layers
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances
from tests.pipeline.test_pipeline_matches_engine import empty_store

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def test_counts_by_kind_equal_sparks(spark, session_database, monkeypatch):
    monkeypatch.setenv("P2PANDA_APPEND_MIN_ENTRIES", "1")  # the second run appends a layer
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(7, "garbled")
    schema.migrate(create_field("title", "text"))
    log = instances(corpus.author(2), 1)
    first = log.create(schema.ref(), title="one")
    log.create(schema.ref(), title="two")
    log.update(schema.ref(), first, title="uno")
    for payload in (b"\xff", b"\x80"):  # two payloads that do not decode
        log.raw(payload)
    early = len(corpus.pairs) - 2
    with empty_store(session_database) as conn:
        ingest(conn, corpus.pairs[:early])
        register(conn, *parse_schema_id(schema.schema_id), None)
        run_pipeline(spark, conn, session_database)
        first = kinds_counted(decoded_paths(spark, conn, schema.schema_id))  # read, and kept
        ingest(conn, corpus.pairs[early:])  # a second layer
        run_pipeline(spark, conn, session_database)
        paths = decoded_paths(spark, conn, schema.schema_id)
    frame = read_schema_layers(spark, paths)
    assert frame is not None
    by_kind = frame.groupBy("kind").agg(F.count(F.lit(1)).alias("n"), F.count("error").alias("e"))
    sparks = {r["kind"]: (r["n"], r["e"]) for r in by_kind.collect()}
    kinds = {"schema-meta": (1, 0), "schema-migration": (1, 0), "create": (2, 0), "update": (1, 0)}
    assert len(paths) == 2 and first == kinds
    assert kinds_counted(paths) == sparks  # the first layer's counts as kept, the second read
    assert sparks[None] == (2, 2) and sparks["create"] == (2, 0) and sparks["update"] == (1, 0)
