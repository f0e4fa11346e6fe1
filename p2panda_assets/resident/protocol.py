"""What the launcher and its worker say to each other.

The launcher writes to the worker's stdin: first the serialized instance ref, then one
run id a line. The worker answers `finished <run id>` a line when it is done with a run,
on a pipe of its own (its stdout and stderr are captured into the runs' compute logs
while a run executes).
"""

from __future__ import annotations

FINISHED = "finished"
REPORT_FD_ARG = "--report-fd"
NO_WARM_UP_ARG = "--no-warm-up"  # for runs that need no Spark (the launcher's tests)


def finished_line(run_id: str) -> str:
    return f"{FINISHED} {run_id}\n"


def finished_run(line: str) -> str | None:
    """The run id of a `finished` line, else None."""
    verb, _, run_id = line.strip().partition(" ")
    return run_id if verb == FINISHED and run_id else None
