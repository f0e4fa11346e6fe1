"""`bench/spark_events.py`: SQL executions read back from Spark's event log lines and
summed by the line of the package that started them."""

from __future__ import annotations

import json
from pathlib import Path

from bench.spark_events import SQL_END, SQL_START, by_site, event_files, executions


def start(execution_id: int, time_ms: int, description: str) -> str:
    return json.dumps(
        {
            "Event": SQL_START,
            "executionId": execution_id,
            "time": time_ms,
            "description": description,
            "details": "org.apache.spark.sql.Dataset.collect",
        }
    )


def end(execution_id: int, time_ms: int) -> str:
    return json.dumps({"Event": SQL_END, "executionId": execution_id, "time": time_ms})


def test_executions_are_summed_by_call_site_largest_first() -> None:
    lines = [
        start(0, 1_000, "collect at /work/x/p2panda_assets/pipeline/postgres/copy.py:152"),
        start(1, 1_500, "parquet at NativeMethodAccessorImpl.java:0"),
        end(1, 5_500),
        end(0, 2_000),
        start(2, 6_000, "collect at /elsewhere/p2panda_assets/pipeline/postgres/copy.py:152"),
        end(2, 6_250),
        start(3, 7_000, "collect at /x/p2panda_assets/pipeline/index/step.py:1"),  # never ended
        json.dumps({"Event": "SparkListenerJobStart", "Job ID": 0}),
    ]
    found = executions(iter(lines))
    assert [e.started_ms for e in found] == [1_000, 1_500, 6_000]
    assert by_site(found) == [
        ("parquet at NativeMethodAccessorImpl.java:0", 4.0, 1),
        ("collect at p2panda_assets/pipeline/postgres/copy.py:152", 1.25, 2),
    ]


def test_rolled_parts_are_read_in_order(tmp_path: Path) -> None:
    log = tmp_path / "eventlog_v2_local-1"
    log.mkdir()
    for n in (10, 2, 1):
        (log / f"events_{n}_local-1").write_text("")
    (log / "appstatus_local-1").write_text("")
    assert [p.name.split("_")[1] for p in event_files(log)] == ["1", "2", "10"]
