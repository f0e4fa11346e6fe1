"""Entry point of `panda`: parse arguments, dispatch, and turn typed errors into
`error: <reason-code>: <message>` on stderr with a non-zero exit."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from p2panda_assets.cli import (
    check_cmd,
    demo_cmd,
    entry_cmd,
    key_cmd,
    materialize_cmd,
    preview_cmd,
    publish_cmd,
    schema_cmd,
    store_cmd,
)
from p2panda_assets.errors import P2pandaError

EXIT_ERROR = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="panda", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in (
        entry_cmd,
        key_cmd,
        schema_cmd,
        publish_cmd,
        preview_cmd,
        store_cmd,
        materialize_cmd,
        check_cmd,
        demo_cmd,
    ):
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except P2pandaError as error:
        print(f"error: {error.reason}: {error.message}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
