"""What every step of one materialization reads: the Spark session, the connection and
its url, the index step's result, the catalog and its build order, and the version a
lens in time is built at. The planning, building and writing steps
(`pipeline.build.planning`, `pipeline.build.building`, `pipeline.build.writing`) take it in
one argument instead of threading each of these through every call."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from pyspark.sql import SparkSession

from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.pipeline.index.step import IndexResult


@dataclass(frozen=True)
class BuildContext:
    """One materialization's shared inputs. `catalog` is the index's, or for a lens in
    time (`as_of`, a version) one whose schema log is cut there; `order` is its build
    order. With `as_of` set the build writes a version table and records nothing in
    the registry (no status, no accounts, no deleted set)."""

    spark: SparkSession
    conn: psycopg.Connection
    url: str
    index: IndexResult
    catalog: Catalog
    order: BuildOrder
    as_of: int | None = None

    @classmethod
    def of(
        cls,
        spark: SparkSession,
        conn: psycopg.Connection,
        url: str,
        index: IndexResult,
        catalog: Catalog,
        as_of: int | None = None,
    ) -> BuildContext:
        """The context of a build of `catalog`'s schemas, in its build order."""
        return cls(spark, conn, url, index, catalog, catalog.order(), as_of)
