"""The driver JVM's options: the product's own, then P2PANDA_SPARK_JAVA_OPTIONS."""

from __future__ import annotations

import pytest

from p2panda_assets.pipeline.spark import JAVA_OPTIONS_ENV, spark_config


def test_the_setting_follows_the_products_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JAVA_OPTIONS_ENV, "-Xss4m  -Dsome.flag=1 ")
    options = spark_config("local[1]")["spark.driver.extraJavaOptions"].split()
    assert options[:2] == ["-Duser.timezone=UTC", "-XX:+UseParallelGC"]
    assert options[-2:] == ["-Xss4m", "-Dsome.flag=1"]
    monkeypatch.delenv(JAVA_OPTIONS_ENV)
    without = spark_config("local[1]")["spark.driver.extraJavaOptions"]
    assert without.split()[-1].startswith("-Dlog4j2.configurationFile=")
