"""`panda unregister NAME|SCHEMA_ID [--force]`: take a registered schema out of the product.

Its table, version tables, views, registry row and deleted set go, and the entries its
builds accounted for are pending again (awaiting the schema), in one database
transaction (`store/unregister.py`), then its Dagster partition (`partitions_admin.py`).
Its entries stay in the store: registering it again and materializing builds the same
table. A schema that other registered schemas relate to is refused (`bad-input`) unless
`--force` is given: their tables then stay as they are, and wait for it. A schema named
by its id that is no longer registered but still has a partition (an unregistration cut
short after the database's part) loses the partition now.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from p2panda_assets.errors import P2pandaError, Reason

if TYPE_CHECKING:
    from p2panda_assets.store.unregister import Dependent


def register(subparsers: argparse._SubParsersAction) -> None:
    command = subparsers.add_parser(
        "unregister",
        help="remove a registered schema's tables, views and partition (its entries stay)",
    )
    command.add_argument("schema", metavar="NAME|SCHEMA_ID")
    command.add_argument(
        "--force",
        action="store_true",
        help="unregister it even if other registered schemas relate to it: their tables"
        " stay as they are, and are not built again until it is registered again",
    )
    command.set_defaults(run=run_unregister)


def run_unregister(args: argparse.Namespace) -> int:
    from p2panda_assets.cli.materialize_cmd import resolve_schemas
    from p2panda_assets.cli.store_cmd import open_store
    from p2panda_assets.defs.orchestration import prepare_environment
    from p2panda_assets.defs.partitions_admin import remove_partition
    from p2panda_assets.store.unregister import unregister

    prepare_environment()  # the database Dagster's storage is in, and DAGSTER_HOME
    [schema_id] = resolve_schemas([args.schema])
    try:
        with open_store() as conn:
            removed = unregister(conn, schema_id, args.force)
    except P2pandaError as error:
        if error.reason is Reason.AWAITING_SCHEMA and remove_partition(schema_id):
            print(f"{schema_id}  not registered; removed its leftover partition")
            return 0
        raise
    remove_partition(schema_id)
    print(f"{schema_id}  {removed.name or '-'}  unregistered  {removed.table_name}")
    for table in removed.version_tables:
        print(f"  version table {table}")
    print(
        f"  {removed.accounts} entries of its logs wait for it to be registered again"
        " (pending); the store keeps them"
    )
    if removed.dependents:
        print(f"  {forced_line(removed.dependents)}")
    return 0


def forced_line(related: list[Dependent]) -> str:
    """What --force left behind: the schemas that relate to the one unregistered, by
    name and id, and what becomes of their tables."""
    names = ", ".join(map(str, related))
    if len(related) == 1:
        return (
            f"{names} relates to it: its table stays as it is, and is not built again"
            " until this schema is registered again"
        )
    return (
        f"{names} relate to it: their tables stay as they are, and are not built again"
        " until this schema is registered again"
    )
