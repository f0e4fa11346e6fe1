"""A lens in time: a schema's table as it was at an older version, built beside the
current one from the same immutable messages (`panda materialize --as-of-version N`).

"As it was at version N" means: the schema's log cut at entry N, every instance log as
the store holds it. Messages naming a later version wait (the version had not arrived),
exactly as `panda preview` computes for the log cut at N.
"""

from __future__ import annotations

import psycopg
from pyspark.sql import SparkSession

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.pipeline.index.step import run_index
from p2panda_assets.pipeline.materialize import materialize_version
from p2panda_assets.pipeline.spark.watchdog import watched
from p2panda_assets.protocol.ids import checked_schema_id
from p2panda_assets.store.catalog import stored_catalog
from p2panda_assets.store.tables import Outcome


def materialize_as_of(
    spark: SparkSession, conn: psycopg.Connection, url: str, schema_id: str, version: int
) -> Outcome:
    """Build `p2panda_versions.<table>_v<version>` for a registered schema."""
    schema_id = checked_schema_id(schema_id)
    index = run_index(spark, conn, url)
    catalog = stored_catalog(conn, cut={schema_id: version})
    if schema_id not in (catalog.registered or set()):
        raise P2pandaError(Reason.AWAITING_SCHEMA, f"schema {schema_id} is not registered")
    history = catalog.histories.get(schema_id)
    held = max(history.entry_hashes, default=0) if history else 0
    if history is None or version not in history.entry_hashes:
        raise P2pandaError(
            Reason.AWAITING_VERSION,
            f"the store holds the schema log of {schema_id} up to version {held}, not {version}",
        )
    if version in history.rejected:
        rejection = history.rejected[version]
        raise P2pandaError(
            Reason.REJECTED_VERSION, f"version {version} was rejected ({rejection.reason})"
        )
    with watched(spark, holder=conn):
        return materialize_version(spark, conn, url, index, catalog, schema_id, version)
