"""`panda materialize [NAME|SCHEMA_ID...]`: run the asset family through Dagster, upstream
schemas first, and print rows per schema. `--as-of-version N SCHEMA_ID` builds the table
as it was at version N instead, beside the current one. A schema is named by its id or by
its name (the registered name, else its own), as `panda check` takes it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.statuses import SchemaStatus

if TYPE_CHECKING:
    from p2panda_assets.store.registry import RegistryRow


def register(subparsers: argparse._SubParsersAction) -> None:
    materialize = subparsers.add_parser(
        "materialize", help="materialize registered schemas through the Dagster asset graph"
    )
    materialize.add_argument("schema_ids", nargs="*", metavar="NAME|SCHEMA_ID")
    materialize.add_argument(
        "--as-of-version",
        metavar="N",
        help="build the table of one SCHEMA_ID as it was at version N (in p2panda_versions)",
    )
    materialize.set_defaults(run=run_materialize)


def run_materialize(args: argparse.Namespace) -> int:
    """One line per schema on stdout (and one more if nothing was new, so no run was
    launched); one `error: <reason>: ...` line on stderr per schema whose build failed
    (the others are built all the same), then exit 1. Java and the JDBC driver are
    looked for first, before the database and Spark start (`setup_checks.preflight`)."""
    from p2panda_assets.defs.orchestration import a_short_run
    from p2panda_assets.setup_checks import preflight

    preflight()
    with a_short_run():
        if args.as_of_version is not None:
            return run_as_of(args)
        return run_current(args)


def run_current(args: argparse.Namespace) -> int:
    from p2panda_assets.defs.orchestration import materialize
    from p2panda_assets.store.database import connect
    from p2panda_assets.store.registry import registered_schemas

    result = materialize(resolve_schemas(args.schema_ids) or None)
    with connect() as conn:
        rows = {row.schema_id: row for row in registered_schemas(conn)}
    failed = {failure.schema_id for failure in result.failed}
    for schema_id in result.schema_ids:
        if schema_id not in failed:
            print(result_line(rows[schema_id]))
    if not result.launched:
        print("up to date: nothing new since these tables were built, no run launched")
    for failure in result.failed:
        print(f"error: {failure.reason}: {failure.schema_id}: {failure.message}", file=sys.stderr)
    return 1 if result.failed else 0


def result_line(row: RegistryRow) -> str:
    """One schema's line: id, name, version, rows or status (and why), table, and where
    its last build ran (`spark`, or the `driver` path of a small increment). A schema
    with no version yet (its schema log not in the store, or waiting) has no table."""
    name = row.registered_name or row.name or "-"
    detail = f"{row.rows or 0} rows" if row.status == SchemaStatus.MATERIALIZED else row.status
    if row.status_message:
        detail += f" ({row.status_message})"
    if row.version is None:
        return f"{row.schema_id}  {name}  no version yet  {detail}"
    line = f"{row.schema_id}  {name}  version {row.version}  {detail}  {row.table_name}"
    return f"{line}  built: {row.built_path}" if row.built_path else line


def run_as_of(args: argparse.Namespace) -> int:
    from p2panda_assets.cli.check_cmd import parse_version
    from p2panda_assets.defs.orchestration import materialize_as_of
    from p2panda_assets.store.database import connect
    from p2panda_assets.store.schema_versions import version_table
    from p2panda_assets.store.views import qualified_view

    version = parse_version(args.as_of_version)
    if len(args.schema_ids) != 1:
        raise P2pandaError(Reason.BAD_INPUT, "--as-of-version takes exactly one SCHEMA_ID")
    schema_id = resolve_schemas(args.schema_ids)[0]
    materialize_as_of(schema_id, version)
    with connect() as conn:
        found = version_table(conn, schema_id, version)
        view = found[2] if found is not None else None
        shown = f"  view {qualified_view(conn, view)}" if view else ""
    if found is None:
        print(f"{schema_id}  version {version}  no fields, no table")
        return 0
    rows, table, _view = found
    print(f"{schema_id}  version {version}  {rows} rows  {table}{shown}")
    return 0


def resolve_schemas(arguments: list[str]) -> list[str]:
    """The schema ids the arguments stand for: schema ids as they are, names through the
    registry (the resolver `panda check` uses)."""
    from p2panda_assets.coordination import is_schema_id, registered_names, resolve_schema_id

    if all(is_schema_id(argument) for argument in arguments):
        # Nothing to look up: no database needed for this.
        return [resolve_schema_id(argument, {}, "is registered") for argument in arguments]
    from p2panda_assets.cli.store_cmd import open_store
    from p2panda_assets.store.registry import registered_schemas

    with open_store() as conn:
        names = registered_names(registered_schemas(conn))
    return [
        resolve_schema_id(argument, names, "is registered", holders=True) for argument in arguments
    ]
