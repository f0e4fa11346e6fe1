"""Views by name in schema `p2panda_api`, so that tools which generate GraphQL or REST
from PostgreSQL (PostgREST, PostGraphile) show `slothmail`, not a hash: one view per
registered schema, named after its registered name (`panda register --name`), else the
name in its meta message, on its current table; and `<name>_v<version>` on each table
that `--as-of-version` built (`AS_OF_SUFFIX`: no character that SQL needs quoted
where the name needs none, unlike the `<name>@<version>` of before). The schema's
description is the view's comment.

Names are data chosen by strangers, so a view name is only ever composed with
`sql.Identifier`. A name two schemas would both have a view by goes to one of them, its
holder (`view_holder`): a registered name before a schema's own name, a schema's current
table before a version table, then the schema registered first; the other gets none,
and the registry's `view_conflict` says why (`panda register` keeps registered names
unique and refuses a name a version table's view holds, so this is a schema's own name
met after its registration). A name over 63
bytes gets no view either (PostgreSQL would cut it silently). Each view is created in a
savepoint of its own: one PostgreSQL refuses (a user's table of that name in
`p2panda_api`) leaves only its own schema without a view, never the others, nor the
swap or registration the views are made in.

A view has no constraints of its own, so its comment starts with PostGraphile's smart
tags (v4, `graphile-build-pg`'s `parseTags`): `@primaryKey _instance_id`, so that one
row can be fetched by its instance id, and `@foreignKey (field) references "view"
(_instance_id)` for each single (non-array) relation field of the lens the table was
built with whose target schema has a view, so that apps follow relations. The
description follows the tags; a description line that starts with `@` (after blanks)
is prefixed with a backslash, so an author's description never adds a tag. A name that
a smart tag cannot carry exactly (PostGraphile splits tags on `|`, `,` and line breaks,
and does not unescape quotes) gets no foreign key.

The views are derived from the registry and the registered schemas' logs in the store.
`drop_views` and `create_views` run in the caller's transaction around a table swap: a
view depends on its table, and readers see the old views or the new ones.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg import sql

from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.engine.lens import Lens
from p2panda_assets.engine.relations import HashIndex, relation_target
from p2panda_assets.store import schema_versions, schemas
from p2panda_assets.store.catalog import load_catalog

API_SCHEMA = "p2panda_api"
MAX_IDENTIFIER = 63  # bytes: PostgreSQL's NAMEDATALEN - 1
VIEWS_LOCK_KEY = 0x7032_7061_6E64_6176  # "p2pandav": an advisory lock of the product's
KEY_COLUMN = "_instance_id"
AS_OF_SUFFIX = "_v"  # a version table's view: <name>_v<version>, e.g. my_mail_v3
RELATION_COLUMN_TYPE = "text"  # a single relation's column (`relation[]` is text[])

# Characters a name in a smart tag's constraint spec cannot carry exactly: PostGraphile v4
# splits a tag's value on `|`, column lists on `,`, the spec's parts on `(`, `)` and `.`,
# comments into lines on line breaks; it strips the outer quotes of a name without
# unescaping inner ones.
_UNTAGGABLE = re.compile(r'[()|,."\x00-\x1f\x7f-\x9f\u2028\u2029]')
# The start of a line that a smart comment parser could read as a tag: PostGraphile v4
# at `@`, v5 also after leading spaces and tabs.
_TAG_LIKE = re.compile(r"(^|[\r\n])([ \t]*@)")


@dataclass(frozen=True, slots=True)
class _Claim:
    """A schema (or one version table of it) that wants a view named `view`."""

    view: str
    schema_id: str
    version: int | None  # None: the current table
    table_name: str
    built: bool  # the table exists
    comment: str | None  # the schema's description
    built_version: int | None  # the schema version the table was built at
    built_hash: str | None  # that version's entry hash (hex)
    registered: bool  # the name is the schema's registered name, not its own
    registered_at: datetime

    @property
    def precedence(self) -> tuple[bool, bool, datetime, str, int]:
        """Lower holds a shared view name first (`view_holder`)."""
        return (
            not self.registered,
            self.version is not None,
            self.registered_at,
            self.schema_id,
            self.version or 0,
        )


def qualified_view(conn: psycopg.Connection, view: str) -> str:
    """`p2panda_api.<view>` as a user types it in SQL: quoted only where PostgreSQL needs
    it (`quote_ident`: `my_mail_v3` bare, `"sloth's Profile_v2"` quoted)."""
    row = conn.execute("SELECT quote_ident(%s)", (view,)).fetchone()
    assert row is not None
    return f"{API_SCHEMA}.{row[0]}"


def lock_views(conn: psycopg.Connection) -> None:
    """Serialize view refreshes (two swaps at once would each drop, then create, the same
    views). Taken first in the transaction, before any registry row, so that a refresh
    and a registration cannot wait on each other's locks. Held until commit."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (VIEWS_LOCK_KEY,))


def drop_views(conn: psycopg.Connection) -> None:
    """Drop every view of `p2panda_api` (the registry's own; derived, so always rebuilt)
    but those a user's object depends on: a computed column of PostGraphile or PostgREST
    (a function of the view's row type), a view of their own on it. Such a view is kept
    as it is (`create_views` leaves it): dropping it failed the whole transaction, and
    with it every schema's swap, registration and unregistration. Only its own schema's
    swap fails now, as for a user's view on the table, saying what depends on it."""
    lock_views(conn)
    for view in _api_views(conn):
        try:
            with conn.transaction():
                conn.execute(
                    sql.SQL("DROP VIEW IF EXISTS {}").format(sql.Identifier(API_SCHEMA, view))
                )
        except psycopg.errors.DependentObjectsStillExist:
            pass


def _api_views(conn: psycopg.Connection) -> set[str]:
    rows = conn.execute("SELECT viewname FROM pg_views WHERE schemaname = %s", (API_SCHEMA,))
    return {view for (view,) in rows}


def create_views(conn: psycopg.Connection) -> None:
    """Create the views the registry names (after `drop_views`), with their smart
    comments, and record in the registry which view each schema got, or why it got none.
    Rule T-VIEW (docs/semantics.md): a view name goes to its holder alone, and a view
    PostgreSQL refuses costs only its own schema its view."""
    claims: dict[str, list[_Claim]] = defaultdict(list)
    for claim in _claims(conn):
        claims[claim.view].append(claim)
    kept = _api_views(conn)  # what `drop_views` could not drop
    current: dict[str, tuple[str | None, str | None]] = {}  # schema -> (view, conflict)
    versions: list[tuple[str, int, str | None]] = []
    made: list[_Claim] = []
    for view, holders in sorted(claims.items()):
        holder = view_holder(view, holders)
        for claim in holders:
            conflict = _conflict(view, claim, holder)
            if conflict is None and claim.built and view not in kept:
                conflict = _try_create_view(conn, claim)
                if conflict is None:
                    made.append(claim)
            view_made = view if conflict is None and claim.built else None
            if claim.version is None:
                current[claim.schema_id] = (view_made, conflict)
            else:
                versions.append((claim.schema_id, claim.version, view_made))
    _comment_views(conn, made)
    schemas.clear_view_names(conn)
    for schema_id, (view_name, conflict) in current.items():
        schemas.record_view(conn, schema_id, view_name, conflict)
    schema_versions.clear_view_names(conn)
    for schema_id, version, view_name in versions:
        schema_versions.record_view_name(conn, schema_id, version, view_name)


def refresh_views(conn: psycopg.Connection) -> None:
    """Views made anew from the registry, in one transaction (or savepoint, inside the
    caller's: a registration's)."""
    with conn.transaction():
        drop_views(conn)
        create_views(conn)


# --- smart comments ---------------------------------------------------------------------


def smart_comment(
    primary_key: bool, foreign_keys: Iterable[tuple[str, str]], description: str | None
) -> str | None:
    """A view's comment: the smart tags (`_instance_id` as primary key; a foreign key
    from each (column, target view) to the target's `_instance_id`), then the
    description, escaped. None when there is nothing to say. A foreign key whose names a
    tag cannot carry exactly is left out."""
    lines = [f"@primaryKey {KEY_COLUMN}"] if primary_key else []
    for column, view in foreign_keys:
        quoted_column, quoted_view = tag_name(column), tag_name(view)
        if quoted_column is not None and quoted_view is not None:
            lines.append(f"@foreignKey ({quoted_column}) references {quoted_view} ({KEY_COLUMN})")
    if description:
        lines.append(escape_description(description))
    return "\n".join(lines) or None


def tag_name(name: str) -> str | None:
    """`name` quoted as a smart tag's constraint spec reads it back exactly, or None."""
    return None if _UNTAGGABLE.search(name) else f'"{name}"'


def escape_description(text: str) -> str:
    """The description with a backslash before each line that a smart comment parser
    could take for a tag (`@…`, after blanks), so a description can never add a tag."""
    return _TAG_LIKE.sub(r"\1\\\2", text)


def relation_keys(
    lens: Lens,
    hash_index: HashIndex,
    views_by_schema: Mapping[str, str],
    columns: Mapping[str, str],
) -> list[tuple[str, str]]:
    """(column, target view) for each single relation field of `lens` whose target
    schema has a view and whose column the view has as a scalar `text`; in lens order."""
    keys = []
    for name, spec in lens.items():
        if spec.relation is None or not spec.type.is_relation or spec.type.is_array:
            continue
        target = relation_target(spec.relation, hash_index)
        view = views_by_schema.get(target) if target is not None else None
        if view is not None and columns.get(name) == RELATION_COLUMN_TYPE:
            keys.append((name, view))
    return keys


def _comment_views(conn: psycopg.Connection, made: list[_Claim]) -> None:
    """Each view's comment: primary key, foreign keys (to views keyed on `_instance_id`,
    from the lens its table was built with), description."""
    if not made:
        return
    columns = _view_columns(conn)
    keyed = {c.view for c in made if KEY_COLUMN in columns.get(c.view, {})}
    views_by_schema = {c.schema_id: c.view for c in made if c.version is None and c.view in keyed}
    catalog = _registered_catalog(conn)
    for claim in made:
        view_columns = columns.get(claim.view, {})
        lens = built_lens(catalog, claim.schema_id, claim.built_version, claim.built_hash)
        keys = (
            relation_keys(lens, catalog.hash_index, views_by_schema, view_columns)
            if lens is not None
            else []
        )
        comment = smart_comment(claim.view in keyed, keys, claim.comment)
        if comment is not None:
            conn.execute(
                sql.SQL("COMMENT ON VIEW {} IS {}").format(
                    sql.Identifier(API_SCHEMA, claim.view), sql.Literal(comment)
                )
            )


def _view_columns(conn: psycopg.Connection) -> dict[str, dict[str, str]]:
    """Column name -> type, per view of `p2panda_api`."""
    rows = conn.execute(
        """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE n.nspname = %s AND c.relkind = 'v'
        """,
        (API_SCHEMA,),
    ).fetchall()
    columns: dict[str, dict[str, str]] = defaultdict(dict)
    for view, column, type_ in rows:
        columns[view][column] = type_
    return columns


def _registered_catalog(conn: psycopg.Connection) -> Catalog:
    """The registered schemas' logs folded (a relation can only lead to a view of a
    registered schema, and its version hashes are in these logs)."""
    rows = conn.execute("SELECT schema_id, author, log_id FROM p2panda.schemas").fetchall()
    keys = [(bytes(author), int(log_id)) for _, author, log_id in rows]
    return load_catalog(conn, keys, {schema_id for schema_id, _, _ in rows})


def built_lens(
    catalog: Catalog, schema_id: str, version: int | None, version_hash: str | None
) -> Lens | None:
    """The lens of the schema at `version`, the version a table was built at, if the
    store's log has that very version (entry hash `version_hash`); else None."""
    history = catalog.histories.get(schema_id)
    if history is None or version is None or version_hash is None:
        return None
    built = history.versions.get(version)
    if built is None or built.hash.hex() != version_hash.lower():
        return None
    return built.lens


# --- claims -----------------------------------------------------------------------------


def _claims(conn: psycopg.Connection) -> list[_Claim]:
    rows = conn.execute(
        """
        SELECT coalesce(s.registered_name, s.name), s.schema_id, NULL::bigint, s.table_name,
               to_regclass(s.table_name) IS NOT NULL, s.description, s.version,
               s.version_hash, s.registered_name IS NOT NULL, s.registered_at
        FROM p2panda.schemas s
        WHERE coalesce(s.registered_name, s.name) IS NOT NULL
        UNION ALL
        SELECT coalesce(s.registered_name, s.name) || %s || v.version, s.schema_id,
               v.version, v.table_name, to_regclass(v.table_name) IS NOT NULL, s.description,
               v.version, v.version_hash, s.registered_name IS NOT NULL, s.registered_at
        FROM p2panda.schema_versions v JOIN p2panda.schemas s USING (schema_id)
        WHERE coalesce(s.registered_name, s.name) IS NOT NULL
        """,
        (AS_OF_SUFFIX,),
    ).fetchall()
    return [_Claim(*row) for row in rows]


def view_holder(view: str, claims: list[_Claim]) -> _Claim | None:
    """The claim that gets the view `view`: a registered name before a schema's own
    name, a current table before a version table, then the schema registered first, so
    that a newcomer never takes a view away from a schema that had it. None for a name
    PostgreSQL would cut."""
    if len(view.encode()) > MAX_IDENTIFIER:
        return None
    return min(claims, key=lambda claim: claim.precedence)


def _conflict(view: str, claim: _Claim, holder: _Claim | None) -> str | None:
    """Why `claim` does not get the view `view` (`holder` does), or None."""
    if holder is None:
        return f"name {view!r} is longer than {MAX_IDENTIFIER} bytes: register it with --name"
    if claim is not holder:
        return f"name {view!r} is held by schema {holder.schema_id}: register it with --name"
    return None


def _try_create_view(conn: psycopg.Connection, claim: _Claim) -> str | None:
    """Create the claim's view in a savepoint; why not, if PostgreSQL refused it."""
    try:
        with conn.transaction():
            _create_view(conn, claim)
    except psycopg.Error as error:
        return f"view {claim.view!r} not created: {str(error).strip()}"
    return None


def _create_view(conn: psycopg.Connection, claim: _Claim) -> None:
    view = sql.Identifier(API_SCHEMA, claim.view)
    schema, _, table = claim.table_name.partition(".")
    conn.execute(
        sql.SQL("CREATE VIEW {} AS SELECT * FROM {}").format(view, sql.Identifier(schema, table))
    )
