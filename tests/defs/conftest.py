"""The Dagster tests' local Spark session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.spark import build_session, spark_config


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The tests' local session, started before Dagster's PySparkResource asks for one:
    there is one SparkContext per JVM, so its getOrCreate returns this session."""
    session = build_session(spark_config("local[2]"))
    yield session
    session.stop()
