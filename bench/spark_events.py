"""Where a Spark application spent its time, from its event log: the wall time of every
SQL execution (a DataFrame action: collect, write, checkpoint), summed by the line of
`p2panda_assets` that started it, largest first.

Spark writes the log when a session is built with `spark.eventLog.enabled` (see
`event_log_config`; `bench/pipeline.py --spark-events DIR` does it). Uncompressed JSON
lines, one file per application or a directory of rolled files (Spark 4's default).
Time outside every execution (the driver's Python, PostgreSQL) is not in the log.

    .venv/bin/python bench/spark_events.py DIR [--top 15]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SQL_START = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart"
SQL_END = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd"
PACKAGE = "p2panda_assets"


def event_log_config(directory: Path) -> dict[str, str]:
    """Session settings that write an uncompressed event log into `directory` (made
    here: Spark refuses a directory that is not there)."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": directory.resolve().as_uri(),
        "spark.eventLog.compress": "false",
    }


@dataclass(frozen=True)
class Execution:
    started_ms: int
    seconds: float
    site: str  # the action and where it was called


def newest_application(directory: Path) -> Path:
    """The log of the application written last in `directory`: a file, or a directory
    of rolled files."""
    logs = [p for p in directory.iterdir() if not p.name.startswith(".")]
    if not logs:
        raise SystemExit(f"no Spark event log in {directory}")
    return max(logs, key=lambda p: p.stat().st_mtime)


def event_files(log: Path) -> list[Path]:
    """The files of one application's log, its rolled parts in order."""
    if log.is_file():
        return [log]

    def part(path: Path) -> int:  # events_<n>_<application id>
        number = path.name.split("_")[1]
        return int(number) if number.isdigit() else 0

    files = [p for p in log.iterdir() if p.name.startswith("events_")]
    return sorted(files, key=part)


def executions(lines: Iterator[str]) -> list[Execution]:
    """Every SQL execution that started and ended in these event lines."""
    started: dict[int, tuple[int, str]] = {}
    done: list[Execution] = []
    for text in lines:
        event = json.loads(text)
        kind = event.get("Event")
        if kind == SQL_START:
            # PySpark names the Python line of a collect ("collect at .../copy.py:152");
            # a write is named by its JVM entry point ("parquet at ...").
            site = str(event.get("description", ""))
            if PACKAGE in site:
                site = site.split(" at ", 1)[0] + " at " + site[site.index(PACKAGE) :]
            started[event["executionId"]] = (int(event["time"]), site)
        elif kind == SQL_END and event["executionId"] in started:
            begin, site = started.pop(event["executionId"])
            done.append(Execution(begin, (int(event["time"]) - begin) / 1000, site))
    return sorted(done, key=lambda e: e.started_ms)


def read_executions(directory: Path) -> list[Execution]:
    """The SQL executions of the newest application logged in `directory`."""
    found: list[Execution] = []
    for path in event_files(newest_application(directory)):
        with path.open() as lines:
            found += executions(lines)
    return found


def by_site(found: list[Execution]) -> list[tuple[str, float, int]]:
    """(call site, seconds, executions), largest first."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for execution in found:
        sums[execution.site] += execution.seconds
        counts[execution.site] += 1
    return sorted(((s, sums[s], counts[s]) for s in sums), key=lambda t: -t[1])


def report(directory: Path, top: int = 15) -> list[str]:
    """Lines for the `top` call sites and the total."""
    found = read_executions(directory)
    rows = by_site(found)
    lines = [f"{seconds:8.1f} s {n:5d}x  {site}" for site, seconds, n in rows[:top]]
    total = sum(e.seconds for e in found)
    lines.append(f"{total:8.1f} s {len(found):5d}x  in all SQL executions")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    print("\n".join(report(args.directory, args.top)))


if __name__ == "__main__":
    main()
