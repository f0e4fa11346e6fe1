"""One local Spark session for all pipeline tests (a session takes seconds to start)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.spark import build_session, spark_config


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(spark_config("local[2]"))
    yield session
    session.stop()
