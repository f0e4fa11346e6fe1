"""With the Dagster daemon running, ingesting entries leads to an updated table through
the sensors alone: no call of `panda materialize`, no run launched by the test."""

from __future__ import annotations

import pytest

from bench.latency import scenario

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.postgres]


def test_the_daemon_materializes_a_registered_schema_and_then_new_entries() -> None:
    with scenario() as run:
        run.author_schema()  # authored, ingested and registered; nothing materialized
        assert run.rows() == set()
        run.start_daemon()
        run.publish_and_wait("second", phase=0.0, timeout=600)  # raises if the row never shows
        assert len(run.rows()) == 2  # the first instance and the new one, built by the sensors
