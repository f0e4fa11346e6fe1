"""`panda materialize [SCHEMA_ID...]`: run the asset family through Dagster, upstream
schemas first, and print rows per schema."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    materialize = subparsers.add_parser(
        "materialize", help="materialize registered schemas through the Dagster asset graph"
    )
    materialize.add_argument("schema_ids", nargs="*", metavar="SCHEMA_ID")
    materialize.set_defaults(run=run_materialize)


def run_materialize(args: argparse.Namespace) -> int:
    from p2panda_assets.orchestration import materialize
    from p2panda_assets.store.database import connect
    from p2panda_assets.store.registry import registered_schemas

    ran = materialize(args.schema_ids or None)
    with connect() as conn:
        rows = {row.schema_id: row for row in registered_schemas(conn)}
    for schema_id in ran:
        row = rows[schema_id]
        name = row.registered_name or row.name or "-"
        detail = f"{row.rows or 0} rows" if row.status == "materialized" else row.status
        if row.status_message:
            detail += f" ({row.status_message})"
        print(f"{schema_id}  {name}  version {row.version}  {detail}  {row.table_name}")
    return 0
