"""`panda check NAME|SCHEMA_ID VERSION` and `panda ensure ...`: whether the database holds
that version of a schema (`coordination.check`), and materializing it if it does not.

Both print one JSON object (`outcome`: present, not-present, needs-update, too-new or
conflicting) and exit 0 when the version is present, 3 when it is not: a script can
branch on the exit status alone. Errors exit 1, as every command's do. A name that no
registered schema has is `not-present` too (no schema id): the object's `message` says
so, with the closest registered names, and nothing more is printed. (It was said again
on stderr as a warning, twice in a terminal; stderr is for errors.)
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.ids import MAX_U64

if TYPE_CHECKING:
    from p2panda_assets.coordination import CheckResult

EXIT_NOT_PRESENT = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    for name, run, help_text in (
        ("check", run_check, "does the database hold this version of a schema?"),
        ("ensure", run_ensure, "materialize a schema up to this version (never downgrades)"),
    ):
        command = subparsers.add_parser(name, help=help_text)
        command.add_argument("schema", metavar="NAME|SCHEMA_ID")
        command.add_argument("version", metavar="VERSION")
        command.add_argument(
            "--hash", metavar="HEX", help="the entry hash the application knows for VERSION"
        )
        command.set_defaults(run=run)


def run_check(args: argparse.Namespace) -> int:
    from p2panda_assets.cli.store_cmd import open_store
    from p2panda_assets.coordination import check

    with open_store() as conn:
        return _report(check(conn, args.schema, parse_version(args.version), args.hash))


def run_ensure(args: argparse.Namespace) -> int:
    from p2panda_assets.coordination import ensure

    return _report(ensure(args.schema, parse_version(args.version), args.hash))


def _report(result: CheckResult) -> int:
    from p2panda_assets.coordination import Presence

    print(json.dumps(result.as_json(), ensure_ascii=False))
    return 0 if result.outcome is Presence.PRESENT else EXIT_NOT_PRESENT


def parse_version(text: str) -> int:
    """A schema version as a command names it: its entry's seq number."""
    if not (text.isascii() and text.isdecimal()) or not 1 <= int(text) <= MAX_U64:
        raise P2pandaError(Reason.BAD_VALUE, f"VERSION is a seq number 1..2^64-1, not {text!r}")
    return int(text)
