"""Views by name in schema `p2panda_api`, so that tools which generate GraphQL or REST
from PostgreSQL (PostgREST, PostGraphile) show `slothmail`, not a hash: one view per
registered schema, named after its registered name (`panda register --name`), else the
name in its meta message, on its current table; and `<name>@<version>` on each table
that `--as-of-version` built. The schema's description is the view's comment.

Names are data chosen by strangers, so a view name is only ever composed with
`sql.Identifier`, and a name that two views would share gives neither a view: the
registry's `view_conflict` says why, and registering one schema with `--name` resolves
it. A name over 63 bytes gets no view either (PostgreSQL would cut it silently).

The views are derived from the registry alone. `drop_views` and `create_views` run in
the caller's transaction around a table swap: a view depends on its table, and readers
see the old views or the new ones.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import psycopg
from psycopg import sql

API_SCHEMA = "p2panda_api"
MAX_IDENTIFIER = 63  # bytes: PostgreSQL's NAMEDATALEN - 1
VIEWS_LOCK_KEY = 0x7032_7061_6E64_6176  # "p2pandav": an advisory lock of the product's


@dataclass(frozen=True, slots=True)
class _Claim:
    """A schema (or one version table of it) that wants a view named `view`."""

    view: str
    schema_id: str
    version: int | None  # None: the current table
    table_name: str
    built: bool  # the table exists
    comment: str | None


def lock_views(conn: psycopg.Connection) -> None:
    """Serialize view refreshes (two swaps at once would each drop, then create, the same
    views). Taken first in the transaction, before any registry row, so that a refresh
    and a registration cannot wait on each other's locks. Held until commit."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (VIEWS_LOCK_KEY,))


def drop_views(conn: psycopg.Connection) -> None:
    """Drop every view of `p2panda_api` (the registry's own; derived, so always rebuilt)."""
    lock_views(conn)
    rows = conn.execute(
        "SELECT viewname FROM pg_views WHERE schemaname = %s", (API_SCHEMA,)
    ).fetchall()
    for (view,) in rows:
        conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(sql.Identifier(API_SCHEMA, view)))


def create_views(conn: psycopg.Connection) -> None:
    """Create the views the registry names (after `drop_views`), and record in the
    registry which view each schema got, or why it got none."""
    claims: dict[str, list[_Claim]] = defaultdict(list)
    for claim in _claims(conn):
        claims[claim.view].append(claim)
    current: dict[str, tuple[str | None, str | None]] = {}  # schema -> (view, conflict)
    versions: list[tuple[str, int, str | None]] = []
    for view, holders in sorted(claims.items()):
        conflict = _conflict(view, holders)
        for claim in holders:
            made = conflict is None and claim.built
            if made:
                _create_view(conn, claim)
            if claim.version is None:
                current[claim.schema_id] = (view if made else None, conflict)
            else:
                versions.append((claim.schema_id, claim.version, view if made else None))
    conn.execute("UPDATE p2panda.schemas SET view_name = NULL, view_conflict = NULL")
    for schema_id, (view, conflict) in current.items():
        conn.execute(
            "UPDATE p2panda.schemas SET view_name = %s, view_conflict = %s WHERE schema_id = %s",
            (view, conflict, schema_id),
        )
    conn.execute("UPDATE p2panda.schema_versions SET view_name = NULL")
    for schema_id, version, view in versions:
        conn.execute(
            "UPDATE p2panda.schema_versions SET view_name = %s"
            " WHERE schema_id = %s AND version = %s",
            (view, schema_id, version),
        )


def refresh_views(conn: psycopg.Connection) -> None:
    """Views made anew from the registry, in one transaction (or savepoint, inside the
    caller's: a registration's)."""
    with conn.transaction():
        drop_views(conn)
        create_views(conn)


def _claims(conn: psycopg.Connection) -> list[_Claim]:
    rows = conn.execute(
        """
        SELECT coalesce(s.registered_name, s.name), s.schema_id, NULL::bigint, s.table_name,
               to_regclass(s.table_name) IS NOT NULL, s.description
        FROM p2panda.schemas s
        WHERE coalesce(s.registered_name, s.name) IS NOT NULL
        UNION ALL
        SELECT coalesce(s.registered_name, s.name) || '@' || v.version, s.schema_id,
               v.version, v.table_name, to_regclass(v.table_name) IS NOT NULL, s.description
        FROM p2panda.schema_versions v JOIN p2panda.schemas s USING (schema_id)
        WHERE coalesce(s.registered_name, s.name) IS NOT NULL
        """
    ).fetchall()
    return [_Claim(*row) for row in rows]


def _conflict(view: str, holders: list[_Claim]) -> str | None:
    """Why no schema gets the view `view`, or None."""
    if len(view.encode()) > MAX_IDENTIFIER:
        return f"name {view!r} is longer than {MAX_IDENTIFIER} bytes: register it with --name"
    if len(holders) > 1:
        others = ", ".join(sorted({c.schema_id for c in holders}))
        return f"name {view!r} is shared by schemas {others}: register one with --name"
    return None


def _create_view(conn: psycopg.Connection, claim: _Claim) -> None:
    view = sql.Identifier(API_SCHEMA, claim.view)
    schema, _, table = claim.table_name.partition(".")
    conn.execute(
        sql.SQL("CREATE VIEW {} AS SELECT * FROM {}").format(view, sql.Identifier(schema, table))
    )
    if claim.comment:
        conn.execute(sql.SQL("COMMENT ON VIEW {} IS {}").format(view, sql.Literal(claim.comment)))
