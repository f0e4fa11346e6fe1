"""For tests that run the asset family in process, with Spark: a fresh store in the
session's database, and the resources those runs take."""

from __future__ import annotations

from dagster_pyspark import PySparkResource

from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.pipeline.spark.session import spark_config
from p2panda_assets.store.database import connect, ensure_schema
from tests.automation.store import publish, register_schemas


def fresh_store(url: str, pairs: list[tuple[bytes, bytes]], *schema_ids: str) -> None:
    """The product's schemas of the database at `url` dropped and made anew, then
    `pairs` published and `schema_ids` registered."""
    with connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS p2panda CASCADE")
        conn.execute("DROP SCHEMA IF EXISTS p2panda_data CASCADE")
        ensure_schema(conn)
        publish(conn, pairs)
        register_schemas(conn, *schema_ids)


def family_resources(url: str) -> dict[str, object]:
    """The resources of the family's assets and checks, on a local Spark."""
    return {
        "postgres": PostgresResource(url=url),
        "pyspark": PySparkResource(spark_config=spark_config("local[2]")),
    }
