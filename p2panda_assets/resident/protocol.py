"""What the launcher and its worker say to each other.

The launcher writes to the worker's stdin: first the serialized instance ref, then one
run id a line. The worker answers on a separate pipe (its stdout and stderr are captured
into the runs' compute logs while a run executes): `started <run id>` and
`finished <run id>`, one a line.
"""

from __future__ import annotations

STARTED = "started"
FINISHED = "finished"
REPORT_FD_ARG = "--report-fd"
NO_WARM_UP_ARG = "--no-warm-up"  # for runs that need no Spark (the launcher's tests)


def report_line(verb: str, run_id: str) -> str:
    return f"{verb} {run_id}\n"


def parse_report(line: str) -> tuple[str, str] | None:
    """(verb, run id), or None for a line that is not a report."""
    verb, _, run_id = line.strip().partition(" ")
    return (verb, run_id) if verb in (STARTED, FINISHED) and run_id else None
