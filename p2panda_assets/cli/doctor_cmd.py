"""`panda doctor`: is this machine ready to run the pipeline? One line per check of
`setup_checks` (Java, the JDBC driver, PostgreSQL, Dagster's home, the warehouse, the
Spark master): `ok` and what it found, or `problem` and the fix. Exit 0 when every check
is ok; else 1, with one `error: setup:` line on stderr naming the checks that found a
problem, as every failed command ends.

Nothing starts Spark here, so what only Spark can see (a cluster's executors, a Hadoop
file system) is not checked. The embedded PostgreSQL is started if it is not running,
as any command that needs it does: a server that cannot start is what to find out.
"""

from __future__ import annotations

import argparse
import sys

from p2panda_assets.errors import Reason


def register(subparsers: argparse._SubParsersAction) -> None:
    doctor = subparsers.add_parser(
        "doctor", help="check Java, the JDBC driver, PostgreSQL, Dagster and Spark's settings"
    )
    doctor.set_defaults(run=run_doctor)


def run_doctor(args: argparse.Namespace) -> int:
    """Each line as soon as its check is done: a login or a TCP connection may take
    seconds to fail."""
    from p2panda_assets.setup_checks import CHECKS

    problems = []
    for check in CHECKS:
        found = check()
        print(f"{'ok' if found.ok else 'problem':<8} {found.name:<13} {found.detail}", flush=True)
        if not found.ok:
            problems.append(found.name)
    if not problems:
        return 0
    summary = f"{len(problems)} of {len(CHECKS)} checks found a problem: {', '.join(problems)}"
    print(f"error: {Reason.SETUP}: {summary}", file=sys.stderr)
    return 1
