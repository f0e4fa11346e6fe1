"""Resources, chosen per environment in one place: PostgreSQL (embedded unless
`P2PANDA_DATABASE_URL` is set) and PySpark (`SPARK_MASTER`, default `local[*]`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
import psycopg
from dagster_pyspark import PySparkResource
from pydantic import PrivateAttr

from p2panda_assets.defs.partitions import PARTITION_TAG, schema_id_of
from p2panda_assets.pipeline.postgres.jdbc import Jdbc
from p2panda_assets.pipeline.spark.session import spark_config, use_this_python
from p2panda_assets.store.database import connect, database_url, ensure_schema, jdbc_options
from p2panda_assets.store.pipeline_lock import label_session


class PostgresResource(dg.ConfigurableResource):
    """The product's database: the entry store, the registry and the tables."""

    url: str | None = None  # None: P2PANDA_DATABASE_URL, else the embedded server
    _run: tuple[str, str | None] | None = PrivateAttr(default=None)  # run id, schema id

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Remember the run and its partition's schema: the connections say so, and the
        pipeline lock they take tells whoever waits for it (`label_session`)."""
        run = context.run
        if run is not None:
            key = run.tags.get(PARTITION_TAG)
            self._run = (run.run_id, schema_id_of(key) if key else None)

    def resolved_url(self) -> str:
        return self.url or database_url()

    @contextmanager
    def connect(self) -> Iterator[psycopg.Connection]:
        """An autocommit connection (the pipeline commits in explicit transactions)."""
        conn = connect(self.resolved_url(), autocommit=True)
        try:
            ensure_schema(conn)
            if self._run is not None:
                label_session(conn, *self._run)
            yield conn
        finally:
            conn.close()

    def jdbc(self) -> Jdbc:
        return jdbc_options(self.resolved_url())


def default_resources() -> dict[str, object]:
    use_this_python()
    return {"postgres": PostgresResource(), "pyspark": PySparkResource(spark_config=spark_config())}
