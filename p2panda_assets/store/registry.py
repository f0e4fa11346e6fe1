"""The registry (`p2panda.schemas`): which schemas are materialized, under which table
name, and how far each has got; and the per-schema accounting that `panda status` shows.
Registering writes the registry row through its one writer (`schemas.py`).

Table names come from the schema id, never from the schema's `name` (names are data,
chosen by strangers, and not unique). Every identifier is composed with
`psycopg.sql.Identifier`.

A registered schema is known by one name, its registered name, else its own (the meta
message's): a name one schema is known by, or that the view of one of its version
tables has (`<name>_v<N>`), no other may register (`name-taken`), and one whose own
name is taken is registered under its qualified name (`qualified_name`), so that a
newcomer never takes a view or a name away from a schema registered before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.ids import AUTHOR_SIZE, MAX_U64, format_schema_id, parse_schema_id
from p2panda_assets.statuses import SchemaStatus
from p2panda_assets.store import schemas
from p2panda_assets.store.catalog import stored_schema_name
from p2panda_assets.store.views import lock_views, refresh_views

DATA_SCHEMA = "p2panda_data"
MAX_NAME = 64
TABLE_AUTHOR_CHARS = 32  # 128 bits of the author key: unique in practice, and it fits
VERSIONS_SCHEMA = "p2panda_versions"
VERSION_AUTHOR_CHARS = 16  # 64 bits, so that "_v<version>" fits in 63 bytes too
QUALIFIER_AUTHOR_CHARS = 8  # of a qualified name: `<name>_<8 hex digits>_<log id>`
REGISTERED_NAME_INDEX = "schemas_registered_name"  # unique (ddl.sql)


@dataclass(frozen=True, slots=True)
class Registration:
    schema_id: str
    table_name: str
    registered_name: str | None
    created: bool  # False when the schema was registered already
    earlier_registered_name: str | None = None  # before this registration (not created)
    shown_before: str | None = None  # the name it was known by before (not created)
    shown_name: str | None = None  # the name it is known by now, if it has one
    qualified_for: str | None = None  # its own name, held by another: why it is qualified
    held_by: str | None = None  # the schema that holds `qualified_for`

    @property
    def renamed(self) -> bool:
        """Whether a schema that had a name is now known by another (`renamed A -> B`)."""
        return not self.created and self.shown_before not in (None, self.shown_name)


@dataclass(frozen=True, slots=True)
class _Names:
    """A registered schema's names: the registered one, and the one it is known by."""

    registered: str | None
    shown: str | None


@dataclass(frozen=True, slots=True)
class RegistryRow:
    schema_id: str
    author: bytes
    log_id: int
    name: str | None
    registered_name: str | None
    version: int | None
    version_hash: str | None
    table_name: str
    status: str
    status_message: str | None
    rows: int | None
    upstream: list[str]
    registered_at: datetime
    materialized_at: datetime | None
    description: str | None
    view_name: str | None  # its view in p2panda_api, if it has one
    view_conflict: str | None  # why it has none
    migrations: dict[str, str]  # version -> compatibility class of that migration
    fallbacks: dict[str, int]  # field -> rows whose value fell back to the default
    built_path: str | None  # where its last build ran: spark | driver (BuildPath)

    @property
    def shown_name(self) -> str | None:
        return self.registered_name or self.name


@dataclass(frozen=True, slots=True)
class StatusRow:
    """One line of `panda status`: a registered schema and where its entries ended."""

    schema_id: str
    name: str | None  # the registered name, else the name from the schema's meta message
    version: int | None
    status: str
    rows: int | None
    applied: int
    superseded: int
    pending: int
    rejected: int
    stored: int  # entries of the store attributed to this schema (accounts rows)
    safe: int  # migrations of its log no value can fall back in
    lossy: int  # migrations of its log some value may fall back in
    fell_back: int  # values of its table that fell back to their field's default
    view: str | None  # its view in p2panda_api
    view_conflict: str | None  # why it has none
    status_message: str | None  # why it waits, or why its last build failed


@dataclass(frozen=True, slots=True)
class StoreTotals:
    """Entries that no registered schema's line counts: not yet processed at all (no
    accounts row), and accounted for without a registered schema (e.g. undecodable)."""

    unprocessed: int
    unregistered_applied: int
    unregistered_superseded: int
    unregistered_pending: int
    unregistered_rejected: int


def schema_id_for(author: bytes, log_id: int) -> str:
    """`<author hex>-<log id>` (rule S-ID)."""
    _check_author(author)
    _check_log_id(log_id)
    return format_schema_id(author, log_id)


def table_name_for(schema_id: str) -> str:
    """`p2panda_data.s_<first 32 hex digits of the author>_<log id>`: lowercase, at most
    55 bytes, so usable in SQL unquoted and within PostgreSQL's 63-byte limit.
    Rule T-NAME (docs/semantics.md)."""
    author, log_id = parse_schema_id(schema_id)
    return f"{DATA_SCHEMA}.s_{author.hex()[:TABLE_AUTHOR_CHARS]}_{log_id}"


def version_table_name_for(schema_id: str, version: int) -> str:
    """`p2panda_versions.s_<first 16 hex digits of the author>_<log id>_v<version>`: the
    table `--as-of-version` builds, at most 61 bytes. (A 64-bit author prefix shared by
    two registered schemas is refused at registration, as `table_name_for`'s is.)"""
    author, log_id = parse_schema_id(schema_id)
    _check_log_id(version)
    return f"{VERSIONS_SCHEMA}.s_{author.hex()[:VERSION_AUTHOR_CHARS]}_{log_id}_v{version}"


def table_identifier(table_name: str) -> sql.Identifier:
    """A schema-qualified table name from the registry as an identifier for composition."""
    schema, _, table = table_name.partition(".")
    return sql.Identifier(schema, table)


def register(
    conn: psycopg.Connection, author: bytes, log_id: int, name: str | None
) -> Registration:
    """Register a schema for materializing (status 'registered'); registering it again
    only changes its registered name (kept when `name` is None). A name another
    registered schema is known by is refused (`name-taken`), in the transaction that
    would take it: the views lock it takes first serializes every registration. A new
    schema whose own name is held is registered under its qualified name. Rule
    T-NAME-HELD (docs/semantics.md)."""
    schema_id = schema_id_for(author, log_id)
    if name is not None:
        _check_name(name)
    table_name = table_name_for(schema_id)
    with conn.transaction():
        lock_views(conn)  # before the registry row, as every view refresh takes them
        _refuse_table_name_collision(conn, schema_id, table_name)
        before = _names_of(conn, schema_id)
        own = stored_schema_name(conn, author, log_id) if before is None else None
        wanted, held_by = _name_to_register(conn, schema_id, name, own, before)
        registered_name, created = _add_registration(
            conn, schema_id, author, log_id, wanted, own, table_name
        )
        refresh_views(conn)  # a name given or changed may claim or free a view
    return Registration(
        schema_id,
        table_name,
        registered_name,
        created,
        earlier_registered_name=None if before is None else before.registered,
        shown_before=None if before is None else before.shown,
        shown_name=registered_name or (own if before is None else before.shown),
        qualified_for=own if held_by is not None else None,
        held_by=held_by,
    )


def qualified_name(name: str, schema_id: str) -> str:
    """`<name>_<first 8 hex digits of the author>_<log id>`, the name cut to keep it
    within 64 characters: the name a schema is registered under when its own is held
    by another. The log id keeps two schemas of one author apart. (`ddl.sql` qualifies
    the names registries from before shared, the same way.)"""
    author, log_id = parse_schema_id(schema_id)
    suffix = f"_{author.hex()[:QUALIFIER_AUTHOR_CHARS]}_{log_id}"
    return name[: MAX_NAME - len(suffix)] + suffix


def _name_to_register(
    conn: psycopg.Connection,
    schema_id: str,
    name: str | None,
    own: str | None,
    before: _Names | None,
) -> tuple[str | None, str | None]:
    """(the registered name to write, None to keep; the holder of the schema's own name
    if it is qualified). A name asked for must be free; a new schema's own name that is
    taken is qualified (none is written when it is free: the schema is known by it)."""
    if name is not None:
        if before is None or name != before.registered:
            _refuse_taken(conn, schema_id, name)
        return name, None
    if before is not None or own is None:
        return None, None
    holder = _holder_of(conn, own, schema_id)
    if holder is None:
        return None, None
    qualified = qualified_name(own, schema_id)
    _refuse_taken(conn, schema_id, qualified)
    return qualified, holder


def _refuse_taken(conn: psycopg.Connection, schema_id: str, name: str) -> None:
    """A name another registered schema is known by stays its."""
    holder = _holder_of(conn, name, schema_id)
    if holder is not None:
        raise name_taken(name, holder)


def name_taken(name: str, holder: str) -> P2pandaError:
    """The error a name already held gives, naming its holder (the user's way out)."""
    return P2pandaError(
        Reason.NAME_TAKEN, f"the name {name} is held by {holder}; pick another with --name"
    )


HOLDERS = """
SELECT schema_id FROM (
    SELECT schema_id, 0 AS kind, registered_at FROM p2panda.schemas
    WHERE schema_id <> %(schema)s AND coalesce(registered_name, name) = %(name)s
    UNION ALL
    SELECT v.schema_id, 1, s.registered_at
    FROM p2panda.schema_versions v JOIN p2panda.schemas s USING (schema_id)
    WHERE v.schema_id <> %(schema)s AND v.view_name = %(name)s
) holders
ORDER BY kind, registered_at, schema_id
LIMIT 1
"""


def _holder_of(conn: psycopg.Connection, name: str, schema_id: str) -> str | None:
    """The registered schema other than `schema_id` known by `name` (its registered
    name, else its own), or whose version table's view is named so (`my_mail_v3`,
    `store.views`), if any: a registration never takes a view away."""
    row = conn.execute(HOLDERS, {"schema": schema_id, "name": name}).fetchone()
    return None if row is None else row[0]


def _names_of(conn: psycopg.Connection, schema_id: str) -> _Names | None:
    """The schema's names, None if it is not registered."""
    row = conn.execute(
        "SELECT registered_name, coalesce(registered_name, name) FROM p2panda.schemas"
        " WHERE schema_id = %s",
        (schema_id,),
    ).fetchone()
    return None if row is None else _Names(*row)


def _add_registration(
    conn: psycopg.Connection,
    schema_id: str,
    author: bytes,
    log_id: int,
    registered_name: str | None,
    own: str | None,
    table_name: str,
) -> tuple[str | None, bool]:
    """`schemas.add_registration`, with the unique index on registered names as the
    store's own guard (a registry row written by other means than `register`)."""
    try:
        with conn.transaction():
            return schemas.add_registration(
                conn,
                schema_id,
                author,
                log_id,
                registered_name,
                own,
                table_name,
                SchemaStatus.REGISTERED.value,
            )
    except psycopg.errors.UniqueViolation as error:
        if error.diag.constraint_name != REGISTERED_NAME_INDEX or registered_name is None:
            raise
        holder = _holder_of(conn, registered_name, schema_id) or "another schema"
        raise name_taken(registered_name, holder) from None


def registered_schemas(conn: psycopg.Connection) -> list[RegistryRow]:
    """Every registered schema, ordered by schema id."""
    columns = sql.SQL(", ").join(sql.Identifier(f.name) for f in fields(RegistryRow))
    query = sql.SQL("SELECT {} FROM p2panda.schemas ORDER BY schema_id").format(columns)
    with conn.cursor(row_factory=class_row(RegistryRow)) as cursor:
        rows = cursor.execute(query).fetchall()
    return [_with_int_log_id(row) for row in rows]


def status_rows(conn: psycopg.Connection) -> list[StatusRow]:
    """Per registered schema: version, status, rows, and where its entries ended.
    Rule A-COUNTS (docs/semantics.md)."""
    with conn.cursor(row_factory=class_row(StatusRow)) as cursor:
        return cursor.execute(
            """
            SELECT s.schema_id,
                   coalesce(s.registered_name, s.name) AS name,
                   s.version, s.status, s.rows,
                   count(a.hash) FILTER (WHERE a.state = 'applied') AS applied,
                   count(a.hash) FILTER (WHERE a.state = 'superseded') AS superseded,
                   count(a.hash) FILTER (WHERE a.state = 'pending') AS pending,
                   count(a.hash) FILTER (WHERE a.state = 'rejected') AS rejected,
                   count(a.hash) AS stored,
                   (SELECT count(*) FROM jsonb_each_text(s.migrations) m
                    WHERE m.value = 'safe') AS safe,
                   (SELECT count(*) FROM jsonb_each_text(s.migrations) m
                    WHERE m.value = 'lossy') AS lossy,
                   (SELECT coalesce(sum(f.value::bigint), 0)
                    FROM jsonb_each_text(s.fallbacks) f) AS fell_back,
                   s.view_name AS view, s.view_conflict, s.status_message
            FROM p2panda.schemas s
            LEFT JOIN p2panda.accounts a ON a.schema_id = s.schema_id
            GROUP BY s.schema_id
            ORDER BY s.schema_id
            """
        ).fetchall()


def store_totals(conn: psycopg.Connection) -> StoreTotals:
    """What the per-schema lines leave out, so that the totals add up to the store."""
    row = conn.execute(
        """
        SELECT
            (SELECT count(*) FROM p2panda.entries e
             WHERE NOT EXISTS (SELECT 1 FROM p2panda.accounts a WHERE a.hash = e.hash)),
            count(*) FILTER (WHERE a.state = 'applied'),
            count(*) FILTER (WHERE a.state = 'superseded'),
            count(*) FILTER (WHERE a.state = 'pending'),
            count(*) FILTER (WHERE a.state = 'rejected')
        FROM p2panda.accounts a
        WHERE a.schema_id IS NULL
           OR NOT EXISTS (SELECT 1 FROM p2panda.schemas s WHERE s.schema_id = a.schema_id)
        """
    ).fetchone()
    assert row is not None
    return StoreTotals(*row)


def _refuse_table_name_collision(conn: psycopg.Connection, schema_id: str, table: str) -> None:
    """Two authors sharing the first 128 bits of their keys would share a table name
    (64 bits: a version table name): never by chance, so only by an attack; refuse
    rather than mix two schemas' rows."""
    other = conn.execute(
        "SELECT schema_id FROM p2panda.schemas WHERE schema_id <> %s"
        " AND (table_name = %s OR (log_id = %s AND substr(encode(author, 'hex'), 1, %s) = %s))",
        (
            schema_id,
            table,
            parse_schema_id(schema_id)[1],
            VERSION_AUTHOR_CHARS,
            schema_id[:VERSION_AUTHOR_CHARS],
        ),
    ).fetchone()
    if other is not None:
        raise P2pandaError(
            Reason.BAD_VALUE, f"table name {table} is already used by schema {other[0]}"
        )


def _check_author(author: bytes) -> None:
    if not isinstance(author, bytes) or len(author) != AUTHOR_SIZE:
        size = len(author) if isinstance(author, bytes | bytearray) else type(author).__name__
        raise P2pandaError(Reason.BAD_VALUE, f"an author key has {AUTHOR_SIZE} bytes, not {size}")


def _check_log_id(log_id: int) -> None:
    if isinstance(log_id, bool) or not isinstance(log_id, int) or not 0 <= log_id <= MAX_U64:
        raise P2pandaError(Reason.BAD_VALUE, f"a log id is an integer 0..2^64-1, not {log_id!r}")


def _check_name(name: str) -> None:
    """The same rule as a schema's own name: 1..64 printable ASCII characters."""
    if not 1 <= len(name) <= MAX_NAME or not (name.isascii() and name.isprintable()):
        raise P2pandaError(Reason.BAD_NAME, "a name is 1..64 printable ASCII characters")


def _with_int_log_id(row: RegistryRow) -> RegistryRow:
    """numeric(20, 0) arrives as Decimal; a log id is an int everywhere else."""
    return replace(row, log_id=int(row.log_id))


def log_is_stored(conn: psycopg.Connection, author: bytes, log_id: int) -> bool:
    """Whether the store holds any entry of the log (by the entries' log index)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM p2panda.entries WHERE author = %s AND log_id = %s)",
        (author, log_id),
    ).fetchone()
    return bool(row and row[0])


def schema_entry_count(conn: psycopg.Connection, schema_id: str) -> int:
    """Entries in the logs the index assigned to the schema (its own log included)."""
    row = conn.execute(
        "SELECT count(*) FROM p2panda.entries e JOIN p2panda.logs l"
        " ON e.author = l.author AND e.log_id = l.log_id WHERE l.schema_id = %s",
        (schema_id,),
    ).fetchone()
    return int(row[0]) if row else 0


def shown_name_of(conn: psycopg.Connection, schema_id: str) -> str | None:
    """The name people know the schema by: its registered name, else its own."""
    return shown_names_of(conn, [schema_id]).get(schema_id)


def shown_names_of(conn: psycopg.Connection, schema_ids: Sequence[str]) -> dict[str, str | None]:
    """`shown_name_of` each of `schema_ids` that the registry knows, in one query."""
    rows = conn.execute(
        "SELECT schema_id, coalesce(registered_name, name) FROM p2panda.schemas"
        " WHERE schema_id = ANY(%s)",
        (list(schema_ids),),
    ).fetchall()
    return {schema_id: name for schema_id, name in rows}


def registered_version(conn: psycopg.Connection, schema_id: str) -> int | None:
    """The version the schema's table is at, None if it is not registered."""
    row = conn.execute(
        "SELECT version FROM p2panda.schemas WHERE schema_id = %s", (schema_id,)
    ).fetchone()
    return None if row is None else row[0]


def table_records(
    conn: psycopg.Connection, table_name: str
) -> tuple[list[str], list[dict[str, Any]]]:
    """A materialized table's columns, and every row as column -> value, by instance id."""
    cursor = conn.execute(
        sql.SQL("SELECT * FROM {} ORDER BY _instance_id").format(table_identifier(table_name))
    )
    assert cursor.description is not None  # a SELECT has columns
    columns = [c.name for c in cursor.description]
    return columns, [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
