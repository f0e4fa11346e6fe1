"""`panda publish create|update|delete`: instance messages, checked, on the own instance log
of their schema."""

from __future__ import annotations

import argparse

from p2panda_assets.authoring.definitions import read_data
from p2panda_assets.authoring.instance_ops import (
    FieldInput,
    create_instance,
    delete_instance,
    update_instance,
)
from p2panda_assets.authoring.publish import finish, session
from p2panda_assets.errors import P2pandaError, Reason

SCHEMA_HELP = "a local schema name or a schema id <author hex>-<log id>"
VERSION_HELP = "the schema version to write at (default: the latest known)"
ENTRIES_HELP = "a JSON-lines file holding the schema log of a schema not authored here"


def register(subparsers: argparse._SubParsersAction) -> None:
    publish = subparsers.add_parser("publish", help="publish instance messages")
    kinds = publish.add_subparsers(dest="publish_kind", required=True, metavar="KIND")

    create = kinds.add_parser("create", help="create an instance")
    create.add_argument("--schema", required=True, metavar="SCHEMA", help=SCHEMA_HELP)
    _common(create, fields=True)
    create.set_defaults(run=run_create)

    update = kinds.add_parser("update", help="update an instance this key created")
    update.add_argument("--schema", required=True, metavar="SCHEMA", help=SCHEMA_HELP)
    update.add_argument("--instance", required=True, metavar="HASH", help="the instance id")
    _common(update, fields=True)
    update.set_defaults(run=run_update)

    delete = kinds.add_parser("delete", help="delete an instance this key created")
    delete.add_argument("--instance", required=True, metavar="HASH", help="the instance id")
    delete.add_argument("--schema", metavar="SCHEMA", help=SCHEMA_HELP)
    _common(delete, fields=False)
    delete.set_defaults(run=run_delete)


def _common(parser: argparse.ArgumentParser, *, fields: bool) -> None:
    parser.add_argument("--version", type=int, metavar="N", help=VERSION_HELP)
    if fields:
        parser.add_argument(
            "--field",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a field value as text, converted to the field's type (NAME= for null)",
        )
        parser.add_argument(
            "--null", action="append", default=[], metavar="NAME", help="set a field to null"
        )
        parser.add_argument(
            "--fields", metavar="FILE", help="a YAML or JSON mapping of field name -> value"
        )
    parser.add_argument("--entries", action="append", default=[], metavar="FILE", help=ENTRIES_HELP)
    parser.add_argument(
        "--out", metavar="FILE", help="append the entry to FILE (JSON lines) instead of printing it"
    )


def run_create(args: argparse.Namespace) -> int:
    inputs = _inputs(args)
    with session() as current:
        outcome = create_instance(current, args.schema, args.version, inputs, args.entries)
        return finish(current, args.out, outcome.result, outcome.notes)


def run_update(args: argparse.Namespace) -> int:
    inputs = _inputs(args)
    with session() as current:
        outcome = update_instance(
            current, args.schema, args.instance, args.version, inputs, args.entries
        )
        return finish(current, args.out, outcome.result, outcome.notes)


def run_delete(args: argparse.Namespace) -> int:
    with session() as current:
        outcome = delete_instance(current, args.instance, args.schema, args.version, args.entries)
        return finish(current, args.out, outcome.result, outcome.notes)


def _inputs(args: argparse.Namespace) -> FieldInput:
    data: dict[str, object] = {}
    if args.fields:
        loaded = read_data(args.fields)
        if not isinstance(loaded, dict) or not all(isinstance(k, str) for k in loaded):
            raise P2pandaError(
                Reason.BAD_INPUT, f"{args.fields} must be a mapping of field name -> value"
            )
        data = loaded
    texts = []
    for item in args.field:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise P2pandaError(Reason.BAD_INPUT, f"--field {item!r}: expected NAME=VALUE")
        texts.append((name, value))
    return FieldInput(data, tuple(texts), tuple(args.null))
