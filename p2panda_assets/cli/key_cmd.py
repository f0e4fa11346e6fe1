"""`panda key new`: create the local author key and print its public key."""

from __future__ import annotations

import argparse

from p2panda_assets.keystore import create_key


def register(subparsers: argparse._SubParsersAction) -> None:
    key = subparsers.add_parser("key", help="manage the local author key")
    actions = key.add_subparsers(dest="key_command", required=True)
    new = actions.add_parser("new", help="create a key under $P2PANDA_HOME")
    new.add_argument("--force", action="store_true", help="replace an existing key")
    new.set_defaults(run=run_new)


def run_new(args: argparse.Namespace) -> int:
    print(create_key(force=args.force).public_key.hex())
    return 0
