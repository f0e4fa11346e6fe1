"""Named points where the crash-safety tests (`tests/faults/`) make a run die or stop.

A failpoint (as in FreeBSD's fail(9) or TiKV's fail-rs) marks a place where a crash
leaves the most behind: a verified batch written but not committed, staging tables
loaded but not swapped, a swap transaction half done. Unset, `failpoint()` is one
environment lookup.

    P2PANDA_FAILPOINT=<name>          the process kills itself there (SIGKILL: no cleanup
                                      runs, as when the kernel or an operator kills it)
    P2PANDA_FAILPOINT=<name>:pause    it writes `<name>.reached` into P2PANDA_FAILPOINT_DIR
                                      and waits (at most 10 minutes) until a test writes
                                      `<name>.go` there: a test can restart PostgreSQL or
                                      ingest under a run stopped at a known place
"""

from __future__ import annotations

import os
import signal
import time
from enum import StrEnum
from pathlib import Path

FAILPOINT_ENV = "P2PANDA_FAILPOINT"
FAILPOINT_DIR_ENV = "P2PANDA_FAILPOINT_DIR"
PAUSE_SECONDS = 600


class Failpoint(StrEnum):
    VERIFIED = "verified"  # a verified batch is in the columnar store, not yet committed
    INDEXED = "indexed"  # the chained messages are written, the index not yet committed
    STAGED = "staged"  # every table of the build is loaded into staging, none swapped
    SWAPPING = "swapping"  # inside a swap's transaction, the new table in place
    # A Spark task's rows are committed, its result not yet given: the first attempt of
    # each task that writes to PostgreSQL (`pipeline.postgres.once_per_task`) dies there.
    TASK_COMMITTED = "task-committed"


def failpoint(point: Failpoint) -> None:
    """Die or pause here if the environment asks for this point; else nothing."""
    wanted = os.environ.get(FAILPOINT_ENV, "")
    if not wanted:
        return
    name, _, action = wanted.partition(":")
    if name != point:
        return
    if action == "pause":
        _pause(point)
    else:
        os.kill(os.getpid(), signal.SIGKILL)


def _pause(point: Failpoint) -> None:
    folder = Path(os.environ[FAILPOINT_DIR_ENV])
    (folder / f"{point}.reached").write_text(str(os.getpid()))
    go = folder / f"{point}.go"
    deadline = time.monotonic() + PAUSE_SECONDS
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
