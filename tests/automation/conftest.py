"""Fixtures of the automation tests: a real Dagster instance and the sensors evaluated
against it and the test database."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import dagster as dg
import pytest

from p2panda_assets.defs.resources import PostgresResource

Tick = Callable[[dg.SensorDefinition, str | None], dg.SensorResult]


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as instance:
        yield instance


@pytest.fixture
def tick(instance: dg.DagsterInstance, database_url: str) -> Tick:
    """One evaluation of a sensor with a cursor, as the daemon would run it."""

    def evaluate(sensor: dg.SensorDefinition, cursor: str | None) -> dg.SensorResult:
        context = dg.build_sensor_context(
            instance=instance,
            cursor=cursor,
            resources={"postgres": PostgresResource(url=database_url)},
        )
        result = sensor(context)
        assert isinstance(result, dg.SensorResult)
        return result

    return evaluate
