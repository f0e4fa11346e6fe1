"""The one writer of `p2panda.checked_tables`: each schema's table as it last passed the
blocking lens check (`defs.checks.table`), named by the relation it was and the entries
its build held.

A whole build swaps a new relation in (`tables.replace_table`); an increment changes the
relation that is there, in place (`tables.apply_increment`), and each row it writes
names the newest message that shaped it (`_entry`): one verified after the entries the
table held before, since a data-only increment reduces an instance again only because
a new message names it, and a message that does not apply leaves its row as it was. So
the rows of a relation that passed, and was changed only by increments since, are those
that passed, and those whose `_entry` is an entry ingested after the bound it passed at
(`written_after`)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql


@dataclass(frozen=True, slots=True)
class CheckedTable:
    """A table as a check read it: its relation (the oid a swap changes), and the
    ingest_seq up to which its build held every verified entry (`feed.built_through`)."""

    relation: int
    through: int


def table_relation(conn: psycopg.Connection, table: str) -> int | None:
    """The oid of the relation named `table` now (None: no such table)."""
    row = conn.execute("SELECT to_regclass(%s)::oid", (table,)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def checked_table(conn: psycopg.Connection, schema_id: str) -> CheckedTable | None:
    """The schema's table as it last passed the check (None: not since its last failure)."""
    row = conn.execute(
        "SELECT relation, through FROM p2panda.checked_tables WHERE schema_id = %s",
        (schema_id,),
    ).fetchone()
    return None if row is None else CheckedTable(int(row[0]), int(row[1]))


def record_checked_table(conn: psycopg.Connection, schema_id: str, checked: CheckedTable) -> None:
    """The schema's table passed, as `checked` names it."""
    conn.execute(
        "INSERT INTO p2panda.checked_tables (schema_id, relation, through) VALUES (%s, %s, %s)"
        " ON CONFLICT (schema_id) DO UPDATE"
        " SET relation = EXCLUDED.relation, through = EXCLUDED.through",
        (schema_id, checked.relation, checked.through),
    )


def forget_checked_table(conn: psycopg.Connection, schema_id: str) -> None:
    """Check the schema's whole table next time (it failed, or a test tampered with it)."""
    conn.execute("DELETE FROM p2panda.checked_tables WHERE schema_id = %s", (schema_id,))


def written_after(through: int) -> sql.Composable:
    """A condition on a table's rows: written by an entry ingested after `through`."""
    return sql.SQL(
        "_entry IN (SELECT encode(hash, 'hex') FROM p2panda.entries WHERE ingest_seq > {})"
    ).format(sql.Literal(through))
