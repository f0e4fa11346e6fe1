"""`check` and `ensure` for applications: does the database hold version N of a schema?

Rule P-CHECK (docs/semantics.md), a vocabulary check: an application
states the schema and version it was written against, and the database answers from
what it holds itself, the registry row written in the same transaction as the table, so
the answer is right also after a restore from an older backup:

- `present`: the table holds exactly that version;
- `not-present`: no registered schema by that name or id, or its table was never built;
- `needs-update`: the table holds an older version;
- `too-new`: the table holds a later version (the application is the older party);
- `conflicting`: the version is not the one the application knows (reverted, rejected,
  or another entry hash).

A name two registered schemas are known by (own names met after their registration) is
its holder's, as its view is (rule T-VIEW, `name_holder`): the registered name first,
then the schema registered first.

`ensure` materializes what is missing (registering a schema named by its id) and checks
again; it never downgrades: a `too-new` table stays as it is.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum

import psycopg

from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.ids import (
    MAX_U64,
    format_schema_id,
    parse_schema_id,
    read_typed_schema_id,
)
from p2panda_assets.store.catalog import load_catalog
from p2panda_assets.store.registry import RegistryRow, registered_schemas


class Presence(StrEnum):
    PRESENT = "present"
    NOT_PRESENT = "not-present"
    NEEDS_UPDATE = "needs-update"
    TOO_NEW = "too-new"
    CONFLICTING = "conflicting"


@dataclass(frozen=True, slots=True)
class CheckResult:
    schema: str  # as the application named it
    schema_id: str | None  # None when the name resolves to no single schema
    version: int  # wanted
    outcome: Presence
    held: int | None  # the version the table holds
    message: str
    changed: bool = False  # `ensure` materialized something

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "outcome": str(self.outcome)}


def check(
    conn: psycopg.Connection, schema: str, version: int, version_hash: str | None = None
) -> CheckResult:
    """Rule P-CHECK (docs/semantics.md): where the database stands on `version` of
    `schema` (a schema id, or a name: the registered name, else the name in the
    schema's meta message), from its registry row: `present`, `not-present`,
    `needs-update`, `too-new` or `conflicting`."""
    registered = registered_schemas(conn)
    rows = _named(registered, schema)
    if not rows:
        names = {row.schema_id: row.shown_name for row in registered}
        message = (
            f"no registered schema {schema}"
            if is_schema_id(schema)
            else unknown_name_message(schema, names, "is registered")
        )
        return CheckResult(schema, None, version, Presence.NOT_PRESENT, None, message)
    row = name_holder(rows)

    def result(outcome: Presence, message: str) -> CheckResult:
        return CheckResult(schema, row.schema_id, version, outcome, row.version, message)

    disowned = _disowned(_history(conn, row), version, version_hash)
    if disowned is not None:
        return result(Presence.CONFLICTING, disowned)
    if row.version is None:
        return result(Presence.NOT_PRESENT, f"{row.schema_id} is {row.status}, not built")
    if row.version == version:
        return result(Presence.PRESENT, f"{row.table_name} holds version {version}")
    if row.version < version:
        return result(
            Presence.NEEDS_UPDATE, f"{row.table_name} holds version {row.version}, not {version}"
        )
    return result(
        Presence.TOO_NEW, f"{row.table_name} holds version {row.version}, later than {version}"
    )


def ensure(schema: str, version: int, version_hash: str | None = None) -> CheckResult:
    """`check`, and if the table is missing or older, materialize it (through Dagster,
    as `panda materialize` does) and check again. Never downgrades. Before it registers
    or builds anything, Java and the JDBC driver are looked for (`setup_checks.preflight`):
    a version already there needs neither."""
    from p2panda_assets.defs.orchestration import add_partition, materialize, prepare_environment
    from p2panda_assets.setup_checks import preflight
    from p2panda_assets.store.database import connect, ensure_schema
    from p2panda_assets.store.registry import register

    prepare_environment()
    with connect(autocommit=True) as conn:
        ensure_schema(conn)
        before = check(conn, schema, version, version_hash)
        if before.outcome not in (Presence.NOT_PRESENT, Presence.NEEDS_UPDATE):
            return before
        schema_id = before.schema_id or _schema_id_or_none(schema)
        if schema_id is None:
            return before  # a name nobody registered: nothing to build
        preflight()
        if before.schema_id is None:
            author, log_id = parse_schema_id(schema_id)
            register(conn, author, log_id, None)
            add_partition(schema_id)
    materialize([schema_id])
    with connect(autocommit=True) as conn:
        after = check(conn, schema, version, version_hash)
    if after.outcome is Presence.NEEDS_UPDATE:
        after = replace(after, message=f"{after.message}: version {version} is not in the store")
    return replace(after, changed=True)


def name_holder(rows: list[RegistryRow]) -> RegistryRow:
    """Of registered schemas known by one name, the one that holds it, as for its view
    (`store.views.view_holder`): a registered name before a schema's own name, then the
    schema registered first. `panda register` keeps names unique; two share one only
    when a schema's own name is read after its registration."""
    return min(
        rows, key=lambda row: (row.registered_name is None, row.registered_at, row.schema_id)
    )


def registered_names(rows: list[RegistryRow]) -> dict[str, str | None]:
    """Schema id -> the name it is known by, holders first (`name_holder`): what
    `resolve_schema_id(..., holders=True)` resolves a registry name in."""
    ordered = sorted(
        rows, key=lambda row: (row.registered_name is None, row.registered_at, row.schema_id)
    )
    return {row.schema_id: row.shown_name for row in ordered}


def _named(rows: list[RegistryRow], schema: str) -> list[RegistryRow]:
    ids = set(schemas_named(schema, {row.schema_id: row.shown_name for row in rows}))
    return [row for row in rows if row.schema_id in ids]


def schemas_named(schema: str, names: Mapping[str, str | None]) -> list[str]:
    """The schema ids `schema` names among `names` (schema id -> its name): itself if it
    is a schema id, else every schema of that name."""
    schema_id = _schema_id_or_none(schema)
    if schema_id is not None:
        return [known for known in names if known == schema_id]
    return [known for known, name in names.items() if name == schema]


def resolve_schema_id(
    schema: str, names: Mapping[str, str | None], where: str, holders: bool = False
) -> str:
    """The schema id a command's argument stands for: a schema id as it is (the command
    says if it knows none such), a name if exactly one schema in `names` has it (`where`
    says where they are, as in "is registered"); else `unknown-schema` (no schema has
    that name: a typo, most likely) or `bad-input` (two have it). `holders`: `names` is
    the registry's, holders first (`registered_names`), and a shared name is its
    holder's, as its view is."""
    schema_id = _schema_id_or_none(schema)
    if schema_id is not None:
        return schema_id
    ids = schemas_named(schema, names)
    if not ids:
        raise P2pandaError(Reason.UNKNOWN_SCHEMA, unknown_name_message(schema, names, where))
    if len(ids) > 1 and not holders:
        raise P2pandaError(
            Reason.BAD_INPUT,
            f"{len(ids)} schemas are named {schema!r} ({', '.join(sorted(ids))}):"
            " name one by its schema id",
        )
    return ids[0]


def unknown_name_message(schema: str, names: Mapping[str, str | None], where: str) -> str:
    """No schema in `names` is named `schema`: say so, with the closest names there are
    (a name mistyped is the likely cause, and the likely fix)."""
    closest = closest_names(schema, names)
    hint = f"; the closest: {', '.join(closest)}" if closest else ""
    return f"no schema named {schema!r} {where}{hint}"


def closest_names(schema: str, names: Mapping[str, str | None]) -> list[str]:
    """The names in `names` closest to `schema` (difflib's ratio, 0.6 and over), best
    first, at most three."""
    known = sorted({name for name in names.values() if name is not None})
    return difflib.get_close_matches(schema, known, n=3)


def is_schema_id(text: str) -> bool:
    """Is `text` a schema id (`<author hex>-<log id>`) rather than a name?"""
    return _schema_id_or_none(text) is not None


def _schema_id_or_none(text: str) -> str | None:
    """The schema id `text` is, as a person may type it (hex digits in either case, a log
    id with leading zeros: as `panda register` takes it), written as the registry writes
    it; None if `text` is a name (a name has at most 64 characters: never a schema id)."""
    typed = read_typed_schema_id(text)
    if typed is None or typed[1] > MAX_U64:
        return None
    return format_schema_id(*typed)


def _history(conn: psycopg.Connection, row: RegistryRow) -> SchemaHistory | None:
    catalog = load_catalog(conn, [(row.author, row.log_id)], {row.schema_id})
    return catalog.histories.get(row.schema_id)


def _disowned(history: SchemaHistory | None, version: int, version_hash: str | None) -> str | None:
    """Why the store's schema log does not have the version the application knows: the
    history says it is rejected or dead (`SchemaHistory.version_state`, rule
    S-STANDING), or it is another entry than the one the application names."""
    if history is None:
        return None
    refusal = history.version_state(version).refusal()
    if refusal is not None:
        return refusal.message
    stored = history.entry_hashes.get(version)
    if version_hash is not None and stored is not None and stored.hex() != version_hash.lower():
        return f"version {version} is entry {stored.hex()}, not {version_hash}"
    return None
