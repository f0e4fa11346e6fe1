"""The whole pipeline without Dagster: the index step, then every registered schema in
relation order. Dagster runs the same steps as assets; tests and benchmarks call this."""

from __future__ import annotations

import psycopg
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.decoded import decode_schema
from p2panda_assets.pipeline.index import run_index
from p2panda_assets.pipeline.jdbc import Jdbc
from p2panda_assets.pipeline.materialize import Outcome, materialize_schema


def run_pipeline(spark: SparkSession, conn: psycopg.Connection, jdbc: Jdbc) -> list[Outcome]:
    index = run_index(spark, conn, jdbc)
    registered = index.catalog.registered or set()
    ordered = list(index.order.order) + sorted(registered - set(index.order.order))
    outcomes = []
    for schema_id in ordered:
        decoded = decode_schema(spark, jdbc, schema_id) if schema_id in index.order.order else None
        outcomes.append(
            materialize_schema(spark, conn, jdbc, schema_id, index.catalog, index.order, decoded)
        )
    return outcomes
