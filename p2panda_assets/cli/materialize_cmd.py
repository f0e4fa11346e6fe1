"""`panda materialize [SCHEMA_ID...]`: run the asset family through Dagster, upstream
schemas first, and print rows per schema. `--as-of-version N SCHEMA_ID` builds the table
as it was at version N instead, beside the current one."""

from __future__ import annotations

import argparse

from p2panda_assets.errors import P2pandaError, Reason


def register(subparsers: argparse._SubParsersAction) -> None:
    materialize = subparsers.add_parser(
        "materialize", help="materialize registered schemas through the Dagster asset graph"
    )
    materialize.add_argument("schema_ids", nargs="*", metavar="SCHEMA_ID")
    materialize.add_argument(
        "--as-of-version",
        metavar="N",
        help="build the table of one SCHEMA_ID as it was at version N (in p2panda_versions)",
    )
    materialize.set_defaults(run=run_materialize)


def run_materialize(args: argparse.Namespace) -> int:
    if args.as_of_version is not None:
        return run_as_of(args)
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


def run_as_of(args: argparse.Namespace) -> int:
    from p2panda_assets.cli.check_cmd import parse_version
    from p2panda_assets.orchestration import materialize_as_of
    from p2panda_assets.store.database import connect

    version = parse_version(args.as_of_version)
    if len(args.schema_ids) != 1:
        raise P2pandaError(Reason.BAD_INPUT, "--as-of-version takes exactly one SCHEMA_ID")
    schema_id = args.schema_ids[0]
    materialize_as_of(schema_id, version)
    with connect() as conn:
        row = conn.execute(
            "SELECT rows, table_name, view_name FROM p2panda.schema_versions"
            " WHERE schema_id = %s AND version = %s",
            (schema_id, version),
        ).fetchone()
    if row is None:
        print(f"{schema_id}  version {version}  no fields, no table")
        return 0
    rows, table, view = row
    shown = f"  view p2panda_api.{view!r}" if view else ""
    print(f"{schema_id}  version {version}  {rows} rows  {table}{shown}")
    return 0
