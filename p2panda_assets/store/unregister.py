"""Unregistering a schema (`panda unregister`): everything the product derived for it goes,
in one transaction; the entries it was built from stay.

What goes: its table (`p2panda_data.s_...`), its version tables (`p2panda_versions`) and
their rows in `p2panda.schema_versions`, its registry row and its deleted set. The
accounts its builds wrote (origin `instance`) become what the index step writes for the
logs of a schema that is not registered (`accounts.wait_for_registration`): their entries are
pending, awaiting the schema, rather than applied to a table that is gone, or accounted
for by nothing (rule A-ONCE). The accounts the verification and index steps wrote stay:
they describe the entries. `panda status` counts both as "not registered", as any
unregistered schema's, and the next index step writes them again as it decides. The views are
dropped first (they depend on the tables) and made again from the registry last, under
the views lock, as a registration does. The entry store is append-only: registering the
schema again and materializing it builds the same table from the same entries.

Every other schema's next build is whole (`schemas.forget_build_states`): a message of
its logs may name the unregistered schema, and waits for it now.

A schema that other registered schemas relate to (their registry row's `upstream` names
it) is only unregistered with `force`: their tables stay as they are, and their next
build waits until it is registered again. The caller removes the Dagster partition
afterwards (`p2panda_assets.defs.partitions_admin`).

Every identifier is composed with `psycopg.sql.Identifier`. The transaction is a
composition: each `p2panda.*` table it changes is written by its own module
(`schema_versions.py`, `accounts.py`, `deleted_instances.py`, `schemas.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store import accounts as accounts_sql
from p2panda_assets.store import deleted_instances as deleted_sql
from p2panda_assets.store import schema_versions, schemas
from p2panda_assets.store.pipeline_lock import hold_pipeline_lock, release_pipeline_lock
from p2panda_assets.store.registry import table_identifier
from p2panda_assets.store.views import create_views, drop_views, lock_views


@dataclass(frozen=True, slots=True)
class Unregistered:
    """What unregistering a schema removed."""

    schema_id: str
    name: str | None  # the registered name, else the schema's own
    table_name: str
    version_tables: list[str]  # of the versions `--as-of-version` had built, by version
    accounts: int  # instance accounts made pending (their entries wait for the schema)
    deleted: int  # rows of its deleted set removed
    dependents: list[Dependent]  # registered schemas that relate to it (only with force)


@dataclass(frozen=True, slots=True)
class Dependent:
    """A registered schema whose relations reach the one unregistered."""

    schema_id: str
    name: str | None  # the registered name, else the schema's own

    def __str__(self) -> str:
        return self.schema_id if self.name is None else f"{self.name} ({self.schema_id})"


def dependents(conn: psycopg.Connection, schema_id: str) -> list[Dependent]:
    """The other registered schemas whose relations reach `schema_id` (their registry
    row's `upstream` names it), by schema id."""
    rows = conn.execute(
        "SELECT schema_id, coalesce(registered_name, name) FROM p2panda.schemas"
        " WHERE schema_id <> %s AND %s = ANY(upstream) ORDER BY schema_id",
        (schema_id, schema_id),
    ).fetchall()
    return [Dependent(*row) for row in rows]


def force_refusal(schema_id: str, name: str | None, related: list[Dependent]) -> str:
    """Why a schema others relate to is not unregistered without --force, and what
    --force would do, in words a new user can act on: each schema by name and id once,
    by name after that."""
    shown = schema_id if name is None else f"{name} ({schema_id})"
    short = name or schema_id
    if len(related) == 1:
        other = related[0].name or related[0].schema_id
        return (
            f"{related[0]} relates to {shown}: unregister {other} first, or run again with"
            f" --force to unregister {short} anyway; {other}'s table then stays as it is,"
            f" and is not built again until {short} is registered again"
        )
    return (
        f"{', '.join(map(str, related))} relate to {shown}: unregister them first, or run"
        f" again with --force to unregister {short} anyway; their tables then stay as they"
        f" are, and are not built again until {short} is registered again"
    )


def unregister(conn: psycopg.Connection, schema_id: str, force: bool = False) -> Unregistered:
    """Remove a registered schema's table, version tables, registry row and deleted set,
    make its instance accounts pending, and make the views again, in one transaction;
    `awaiting-schema` if it is not registered, `bad-input` if other registered schemas
    relate to it and `force` is not given. Under the pipeline lock, so that no build
    swaps its table back in meanwhile; `conn` is an autocommit connection."""
    parse_schema_id(schema_id)  # `bad-value` for what is not a schema id
    hold_pipeline_lock(conn)
    try:
        with conn.transaction():
            return _unregister(conn, schema_id, force)
    finally:
        release_pipeline_lock(conn)


def _unregister(conn: psycopg.Connection, schema_id: str, force: bool) -> Unregistered:
    lock_views(conn)  # first, as every registration and view refresh takes it
    row = conn.execute(
        "SELECT table_name, coalesce(registered_name, name) FROM p2panda.schemas"
        " WHERE schema_id = %s FOR UPDATE",
        (schema_id,),
    ).fetchone()
    if row is None:
        raise P2pandaError(Reason.AWAITING_SCHEMA, f"schema {schema_id} is not registered")
    table_name, name = row
    related = dependents(conn, schema_id)
    if related and not force:
        raise P2pandaError(Reason.BAD_INPUT, force_refusal(schema_id, name, related))
    drop_views(conn)  # they depend on the tables
    versions = schema_versions.forget_versions(conn, schema_id)
    version_tables = [table for _, table in sorted(versions)]
    for table in [table_name, *version_tables]:
        _drop_table(conn, schema_id, table)
    accounts = accounts_sql.wait_for_registration(conn, schema_id)
    deleted = deleted_sql.forget_deleted_set(conn, schema_id)
    schemas.forget_schema(conn, schema_id)
    # Every other schema is built whole next: a message of another schema's log that
    # names this one was rejected while it was registered (`mixed-log`) and waits for it
    # now, holding later messages of its instance back; the other schema's messages are
    # the same, and an increment would keep its rows as they were. Which logs name it is
    # not known without reading every message; unregistering is rare.
    schemas.forget_build_states(conn)
    create_views(conn)
    return Unregistered(schema_id, name, table_name, version_tables, accounts, deleted, related)


def _drop_table(conn: psycopg.Connection, schema_id: str, table_name: str) -> None:
    """Drop one of the schema's tables, if it was built. Something outside the product
    that depends on it (a view of one's own) makes the whole unregistration fail, as it
    makes a swap fail: `internal`, a refused write, with PostgreSQL's detail."""
    try:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table_identifier(table_name)))
    except psycopg.errors.DependentObjectsStillExist as error:
        primary = error.diag.message_primary or str(error).strip()
        detail = "; ".join((error.diag.message_detail or "").splitlines())
        raise P2pandaError(
            Reason.INTERNAL,
            f"cannot unregister {schema_id}: {primary}" + (f" ({detail})" if detail else ""),
        ) from None
