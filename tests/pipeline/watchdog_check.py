"""A stuck run, in a process of its own: `panda materialize`'s runs (Dagster, in process)
on a Spark application whose master has no worker, so no executor ever comes.

`tests/pipeline/test_watchdog.py` runs this module as a subprocess (one JVM holds one
SparkContext; the test session's local one must not stand in the way). It materializes
every registered schema of the database it is given, with SPARK_MASTER and
P2PANDA_SPARK_NO_EXECUTOR_TIMEOUT from its environment, prints one JSON line (the
reason the run failed with, how long it took, the Dagster run's status), and then stays
alive with its Spark application and its connections until its stdin closes, as the
resident run worker would: what it held must be free while it lives.

    python -m tests.pipeline.watchdog_check
"""

from __future__ import annotations

import json
import sys
import time

import dagster as dg

from p2panda_assets.defs.orchestration import materialize
from p2panda_assets.errors import P2pandaError


def main() -> int:
    started = time.monotonic()
    evidence: dict[str, object] = {}
    try:
        result = materialize()
        evidence |= {"reason": None, "failed": [f.reason for f in result.failed]}
    except P2pandaError as error:
        evidence |= {"reason": str(error.reason), "message": error.message}
    evidence["seconds"] = round(time.monotonic() - started, 1)
    with dg.DagsterInstance.get() as instance:
        runs = instance.get_runs(limit=1)
        evidence["run_status"] = runs[0].status.value if runs else None
        evidence["run_id"] = runs[0].run_id if runs else None
    print(json.dumps(evidence, sort_keys=True), flush=True)
    sys.stdin.read()  # alive, its Spark application with it, until the test is done
    return 0


if __name__ == "__main__":
    sys.exit(main())
