"""The whole pipeline without Dagster: the index step, then every registered schema in
one Spark job, relation order kept. Dagster runs the same steps as assets; tests and
benchmarks call this."""

from __future__ import annotations

import psycopg
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.index.step import run_index
from p2panda_assets.pipeline.materialize import materialize_schemas
from p2panda_assets.pipeline.spark.watchdog import watched
from p2panda_assets.store.tables import Outcome


def run_pipeline(spark: SparkSession, conn: psycopg.Connection, url: str) -> list[Outcome]:
    index = run_index(spark, conn, url)
    with watched(spark, holder=conn):
        return materialize_schemas(spark, conn, url, index, sorted(index.catalog.registered or ()))
