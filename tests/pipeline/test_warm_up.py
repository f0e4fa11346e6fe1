"""The warm-up a long-lived process runs before its first pipeline run."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.spark.session import WORKER_MODULES, warm_up

pytestmark = [pytest.mark.spark]


def test_the_warm_up_imports_the_pipeline_in_every_task(spark: SparkSession) -> None:
    imported = warm_up(spark)
    tasks = spark.sparkContext.defaultParallelism
    assert sorted(imported) == sorted(WORKER_MODULES * tasks)
