"""A materialized table's columns as PostgreSQL declares them, and the query that reads
them back under other names.

Types are compared in `format_type`'s spelling (`character varying(255)`,
`timestamp with time zone`, `numeric(20,0)`), into which `format_type_spelling` turns
the spellings the DDL is written in (`varchar(255)`, `timestamptz`, `numeric(20, 0)`).
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql

from p2panda_assets.store.registry import table_identifier
from p2panda_assets.store.tables import SYSTEM_COLUMNS

_FORMAT_TYPE_NAMES = {"varchar": "character varying", "timestamptz": "timestamp with time zone"}


def format_type_spelling(sql_type: str) -> str:
    """`sql_type` (as a CREATE TABLE writes it) as `format_type` writes it back."""
    is_array = sql_type.endswith("[]")
    name, paren, modifiers = sql_type.removesuffix("[]").partition("(")
    name = _FORMAT_TYPE_NAMES.get(name.strip(), name.strip())
    text = name + (paren + modifiers.replace(" ", "") if paren else "")
    return text + "[]" if is_array else text


def system_column_types() -> dict[str, str]:
    """The system columns of every table, with their types in `format_type`'s spelling."""
    return {name: format_type_spelling(pg_type) for name, pg_type in SYSTEM_COLUMNS}


COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_attribute a
WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def declared_columns(conn: psycopg.Connection, table: str) -> dict[str, tuple[str, bool]]:
    """Column -> (type as `format_type` writes it, NOT NULL) of `table`; empty if there
    is no such table."""
    return {name: (ptype, notnull) for name, ptype, notnull in conn.execute(COLUMNS, (table,))}


def select_renamed(
    conn: psycopg.Connection,
    table: str,
    names: Sequence[str],
    aliases: Sequence[str],
    where: sql.Composable | None = None,
) -> str:
    """The text of a query of `table`'s columns `names[i]`, each as `aliases[i]`, of
    the rows `where` holds for (all: None)."""
    selected = sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(sql.Identifier(name), sql.Identifier(alias))
        for name, alias in zip(names, aliases, strict=True)
    )
    query = sql.SQL("SELECT {} FROM {}").format(selected, table_identifier(table))
    if where is not None:
        query = sql.SQL("{} WHERE {}").format(query, where)
    return query.as_string(conn)


def renamed_rows(
    conn: psycopg.Connection,
    table: str,
    names: Sequence[str],
    aliases: Sequence[str],
    where: sql.Composable | None,
    limit: int,
) -> list[tuple[object, ...]] | None:
    """The rows of `select_renamed`, if there are at most `limit` of them (else None)."""
    query = sql.SQL(select_renamed(conn, table, names, aliases, where))
    rows = conn.execute(sql.SQL("{} LIMIT {}").format(query, sql.Literal(limit + 1))).fetchall()
    return None if len(rows) > limit else rows
