"""Views by name (`store/views.py`) without Spark: hostile and over-long names, a name
two schemas are known by, a view PostgreSQL refuses, comments, two refreshes racing, and
the PostGraphile smart comments (primary key, foreign keys of single relations,
descriptions that cannot add tags)."""

from __future__ import annotations

import re
import threading

import psycopg
import pytest
from psycopg import sql

from p2panda_assets.engine.corpus import Catalog, chain_log
from p2panda_assets.engine.lens import FieldSpec, lens_from
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.protocol.ids import format_schema_id
from p2panda_assets.protocol.messages import SchemaHashRef, SchemaLogRef
from p2panda_assets.store.database import connect
from p2panda_assets.store.registry import register, table_identifier, table_name_for
from p2panda_assets.store.views import (
    built_lens,
    create_views,
    drop_views,
    escape_description,
    refresh_views,
    relation_keys,
    smart_comment,
    tag_name,
)
from p2panda_assets.testing.builder import CorpusBuilder, create_field, update_field

VIEWS = "SELECT viewname FROM pg_views WHERE schemaname = 'p2panda_api' ORDER BY 1"


def built(conn: psycopg.Connection, seed: int, name: str | None, description: str | None) -> str:
    """A registered schema with a table (as a materialization leaves it)."""
    schema_id = register(conn, bytes([seed]) * 32, seed, name).schema_id
    table = table_identifier(table_name_for(schema_id))
    conn.execute(sql.SQL("CREATE TABLE {} (_instance_id text PRIMARY KEY, x text)").format(table))
    conn.execute(sql.SQL("INSERT INTO {} VALUES ('a', 'b')").format(table))
    conn.execute(
        "UPDATE p2panda.schemas SET status = 'materialized', version = 2, description = %s"
        " WHERE schema_id = %s",
        (description, schema_id),
    )
    refresh_views(conn)
    return schema_id


def registry_views(conn: psycopg.Connection) -> dict[str, tuple[str | None, str | None]]:
    rows = conn.execute("SELECT schema_id, view_name, view_conflict FROM p2panda.schemas")
    return {schema_id: (view, conflict) for schema_id, view, conflict in rows}


@pytest.mark.postgres
def test_a_hostile_name_is_a_view_name_and_nothing_else(conn: psycopg.Connection) -> None:
    name = 'x"; DROP TABLE p2panda.entries; --'
    schema_id = built(conn, 1, name, 'it\'s a "description"; DROP TABLE p2panda.schemas')
    assert conn.execute(VIEWS).fetchall() == [(name,)]
    assert conn.execute(
        sql.SQL("SELECT x FROM {}").format(sql.Identifier("p2panda_api", name))
    ).fetchall() == [("b",)]
    comment = conn.execute(
        "SELECT obj_description(%s::regclass)",
        (sql.Identifier("p2panda_api", name).as_string(conn),),
    ).fetchone()[0]
    assert comment == '@primaryKey _instance_id\nit\'s a "description"; DROP TABLE p2panda.schemas'
    assert registry_views(conn)[schema_id] == (name, None)
    assert conn.execute("SELECT count(*) FROM p2panda.entries").fetchone() == (0,)


@pytest.mark.postgres
def test_a_name_over_63_bytes_gets_no_view_and_says_why(conn: psycopg.Connection) -> None:
    schema_id = built(conn, 2, "n" * 64, None)
    assert conn.execute(VIEWS).fetchall() == []
    view, conflict = registry_views(conn)[schema_id]
    assert view is None and "longer than 63 bytes" in conflict


def own_name(conn: psycopg.Connection, schema_id: str, name: str) -> None:
    """The schema's own name as its first build reads it from its meta message."""
    conn.execute("UPDATE p2panda.schemas SET name = %s WHERE schema_id = %s", (name, schema_id))


@pytest.mark.postgres
def test_a_name_met_after_registration_leaves_its_holder_the_view(
    conn: psycopg.Connection,
) -> None:
    """Rule T-VIEW: a schema whose own name turns out to be another's registered name
    (its log arrived after its registration) gets no view and says why; the holder
    keeps its view, until the newcomer is registered with --name."""
    first = built(conn, 3, "notes", None)
    second = built(conn, 4, None, None)
    own_name(conn, second, "notes")
    refresh_views(conn)
    assert conn.execute(VIEWS).fetchall() == [("notes",)]
    assert conn.execute("SELECT x FROM p2panda_api.notes").fetchall() == [("b",)]
    held = f"name 'notes' is held by schema {first}: register it with --name"
    assert registry_views(conn) == {first: ("notes", None), second: (None, held)}
    register(conn, bytes([4]) * 32, 4, "other notes")
    assert conn.execute(VIEWS).fetchall() == [("notes",), ("other notes",)]
    assert registry_views(conn) == {first: ("notes", None), second: ("other notes", None)}


@pytest.mark.postgres
def test_of_two_schemas_own_names_the_first_registered_keeps_the_view(
    conn: psycopg.Connection,
) -> None:
    first = built(conn, 5, None, None)
    second = built(conn, 6, None, None)
    for schema_id in (second, first):
        own_name(conn, schema_id, "memo")
    refresh_views(conn)
    assert conn.execute(VIEWS).fetchall() == [("memo",)]
    assert registry_views(conn)[first] == ("memo", None)
    assert registry_views(conn)[second][0] is None


@pytest.mark.postgres
def test_a_view_postgresql_refuses_costs_only_its_own_schema(conn: psycopg.Connection) -> None:
    """A user's table named like a view in `p2panda_api`: that schema has no view and says
    why; the others' views are made, and the refresh (a swap's, a registration's) goes
    through instead of failing for every schema."""
    conn.execute("CREATE TABLE p2panda_api.notes (x int)")
    notes = built(conn, 7, "notes", None)
    other = built(conn, 8, "other", None)
    assert conn.execute(VIEWS).fetchall() == [("other",)]
    view, conflict = registry_views(conn)[notes]
    assert view is None and conflict.startswith("view 'notes' not created: ")
    assert "already exists" in conflict
    assert registry_views(conn)[other] == ("other", None)


@pytest.mark.postgres
def test_two_refreshes_at_once_both_succeed(conn: psycopg.Connection, database_url: str) -> None:
    """The first creates a view the second cannot see yet: unserialized, the second
    would create it too and fail on the first's commit ("already exists")."""
    built(conn, 5, "notes", None)
    with conn.transaction():
        drop_views(conn)  # committed: no view
    errors: list[BaseException] = []
    with connect(database_url, autocommit=True) as first:
        with first.transaction():
            drop_views(first)
            create_views(first)

            def second_refresh() -> None:
                try:
                    with connect(database_url, autocommit=True) as second:
                        refresh_views(second)  # waits for the first to commit
                except BaseException as error:
                    errors.append(error)

            racer = threading.Thread(target=second_refresh)
            racer.start()
            racer.join(timeout=1)
            assert racer.is_alive()  # blocked on the refresh lock
        racer.join(timeout=30)
    assert not racer.is_alive() and errors == []
    assert conn.execute(VIEWS).fetchall() == [("notes",)]


# --- PostGraphile smart comments ---------------------------------------------------------

PK = "@primaryKey _instance_id"
_TAG = re.compile(r"@[a-zA-Z][a-zA-Z0-9_]*(?:\Z|\s)")


def parse_tags(comment: str) -> tuple[dict[str, object], str]:
    """PostGraphile v4's smart comment parser (graphile-build-pg 4.x, `parseTags` in
    utils.js), line for line: tags are read from the first lines until one that is not a
    tag; an empty line does not end them. (tests/apps runs the real one under node.)"""
    tags: dict[str, object] = {}
    text = ""
    for line in re.split(r"\r?\n", comment):
        if text != "":
            text = f"{text}\n{line}"
            continue
        match = _TAG.match(line)
        if match is None:
            text = line
            continue
        key = match.group(0)[1:].strip()
        value: object = True if match.group(0) == line else line.replace(match.group(0), "", 1)
        previous = tags.get(key)
        if key not in tags:
            tags[key] = value
        elif isinstance(previous, list):
            tags[key] = [*previous, value]
        else:
            tags[key] = [previous, value]
    return tags, text


# Descriptions that would add tags if written as they are: a first line, a line after
# empty ones (v4 reads tags until the first non-empty text), after blanks (v5 ignores
# them), after CRLF.
HOSTILE_DESCRIPTIONS = [
    "@omit",
    "@primaryKey subject",
    "\n@omit",
    "\n\n@name hijacked\nreal text",
    "\r\n@foreignKey (recipient) references entries (hash)",
    "  @omit create,update",
    "\t@deprecated",
    "first line\n@omit\r\n@name x",
]


def test_a_view_comment_is_its_primary_key_then_its_description() -> None:
    description = "Send slothmail to your friends!\nMulti-line, with an @ inside."
    comment = smart_comment(True, [], description)
    assert comment == f"{PK}\n{description}"
    assert parse_tags(comment) == ({"primaryKey": "_instance_id"}, description)
    assert smart_comment(True, [], None) == PK
    assert smart_comment(False, [], None) is None
    assert smart_comment(False, [], "plain") == "plain"


def test_each_foreign_key_names_its_column_and_target_view_quoted() -> None:
    comment = smart_comment(
        True, [("recipient", "profile"), ("sent by", "sloth's Profile@2")], "Mail"
    )
    assert comment == (
        f"{PK}\n"
        '@foreignKey ("recipient") references "profile" (_instance_id)\n'
        '@foreignKey ("sent by") references "sloth\'s Profile@2" (_instance_id)\n'
        "Mail"
    )
    tags, text = parse_tags(comment)
    assert tags == {
        "primaryKey": "_instance_id",
        "foreignKey": [
            '("recipient") references "profile" (_instance_id)',
            '("sent by") references "sloth\'s Profile@2" (_instance_id)',
        ],
    }
    assert text == "Mail"


@pytest.mark.parametrize("description", HOSTILE_DESCRIPTIONS)
def test_a_description_can_never_add_a_tag(description: str) -> None:
    comment = smart_comment(True, [("recipient", "profile")], description)
    assert comment is not None
    expected = {
        "primaryKey": "_instance_id",
        "foreignKey": '("recipient") references "profile" (_instance_id)',
    }
    assert parse_tags(comment)[0] == expected
    # PostGraphile v5 reads tags after leading spaces and tabs too.
    unindented = "\n".join(line.lstrip(" \t") for line in comment.split("\n"))
    assert parse_tags(unindented)[0] == expected
    # Only a backslash is added, before each line that starts (after blanks) with `@`.
    escaped = escape_description(description)
    assert escaped.replace("\\", "") == description
    assert escaped.count("\\") == len(re.findall(r"(?:^|[\r\n])[ \t]*@", description))
    assert comment.endswith(escaped)


def test_an_at_sign_inside_a_line_is_left_as_it_is() -> None:
    assert escape_description("mail me @ home\nor @work") == "mail me @ home\nor @work"


@pytest.mark.parametrize(
    "name", ["a,b", "a(b", "a)b", "a|b", "a.b", 'a"b', "a\nb", "a\r@omit", "a\x00b", "a\u2028b"]
)
def test_a_name_a_tag_cannot_carry_gets_no_foreign_key(name: str) -> None:
    assert tag_name(name) is None
    assert smart_comment(True, [(name, "profile")], None) == PK
    assert smart_comment(True, [("recipient", name)], None) == PK


def _relation(name: str, type_: str, target: object) -> FieldSpec:
    return FieldSpec(name, FieldType.parse(type_), None, None, target, False, 2)  # type: ignore[arg-type]


def test_relation_keys_are_the_single_relations_whose_schema_has_a_view() -> None:
    profile = SchemaLogRef(bytes([1]) * 32, 1)
    attachment_hash = bytes([0, 32]) + bytes([7]) * 32
    attachment = format_schema_id(bytes([2]) * 32, 4)
    unviewed = SchemaLogRef(bytes([3]) * 32, 9)
    lens = lens_from(
        {
            "subject": _relation("subject", "text", None),
            "recipient": _relation("recipient", "relation", profile),
            "cc": _relation("cc", "relation[]", profile),  # an array: no foreign key
            "photo": _relation("photo", "relation", SchemaHashRef(attachment_hash)),
            "draft": _relation("draft", "relation", unviewed),  # its schema has no view
            "lost": _relation("lost", "relation", SchemaHashRef(bytes([0, 32]) + bytes(32))),
            "gone": _relation("gone", "relation", profile),  # not a column of the view
            "legacy": _relation("legacy", "relation", profile),  # the view has text[]
        }
    )
    columns = {name: "text" for name in ("subject", "recipient", "photo", "draft", "lost")}
    columns |= {"cc": "text[]", "legacy": "text[]", "_instance_id": "text"}
    views = {profile.schema_id: "profile", attachment: "attachment"}
    hash_index = {attachment_hash: (attachment, 2)}
    expected = [("recipient", "profile"), ("photo", "attachment")]
    assert relation_keys(lens, hash_index, views, columns) == expected
    # An array is never a foreign key, whatever its column says.
    assert relation_keys(lens, hash_index, views, columns | {"cc": "text"}) == expected


def mail_and_profile() -> tuple[Catalog, str, str, dict[int, bytes]]:
    """Mail version 2 relates recipient (and cc, an array) to profile; version 3 makes
    recipient plain text and adds reply_to, a relation to mail itself. The catalog, the
    two schema ids, and mail's entry hashes by version."""
    corpus = CorpusBuilder()
    author = corpus.author(11)
    profile = author.schema(1, "profile")
    profile.migrate(create_field("name", "text"))
    mail = author.schema(2, "mail")
    mail.migrate(
        create_field("recipient", "relation", schema=profile.log_ref),
        create_field("cc", "relation[]", schema=profile.log_ref),
        create_field("subject", "text"),
    )
    mail.migrate(
        update_field("recipient", "text", ""),
        create_field("reply_to", "relation", schema=mail.log_ref),
    )
    logs: dict[tuple[bytes, int], list] = {}
    for raw, payload in corpus.pairs:
        entry = decode_entry(raw)
        logs.setdefault((entry.author, entry.log_id), []).append((entry, payload))
    catalog = Catalog.build([chain_log(*key, entries) for key, entries in logs.items()], None)
    return catalog, profile.schema_id, mail.schema_id, author.log(2).hashes


def test_each_view_gets_the_relations_of_the_version_its_table_was_built_at() -> None:
    catalog, profile, mail, hashes = mail_and_profile()
    views = {profile: "profile", mail: "mail"}
    text = {"recipient": "text", "cc": "text[]", "subject": "text", "reply_to": "text"}
    at_2 = built_lens(catalog, mail, 2, hashes[2].hex())
    at_3 = built_lens(catalog, mail, 3, hashes[3].hex().upper())
    assert at_2 is not None and at_3 is not None
    # Both tables hold recipient as `text`: only the lens tells a relation from text.
    assert relation_keys(at_2, catalog.hash_index, views, text) == [("recipient", "profile")]
    assert relation_keys(at_3, catalog.hash_index, views, text) == [("reply_to", "mail")]
    assert relation_keys(at_3, catalog.hash_index, {profile: "profile"}, text) == []
    # A version the store's log does not have (another entry at that seq, or none):
    # the lens is not known.
    assert built_lens(catalog, mail, 3, hashes[2].hex()) is None
    assert built_lens(catalog, mail, 4, hashes[3].hex()) is None
    assert built_lens(catalog, mail, None, None) is None
    assert built_lens(catalog, "00" * 34 + "-1", 2, hashes[2].hex()) is None


@pytest.mark.postgres
def test_a_stored_description_cannot_add_a_tag(conn: psycopg.Connection) -> None:
    built(conn, 6, "notes", "\n@omit\nNotes, @ anywhere")
    comment = conn.execute("SELECT obj_description('p2panda_api.notes'::regclass)").fetchone()[0]
    assert comment == f"{PK}\n\n\\@omit\nNotes, @ anywhere"
    assert parse_tags(comment) == ({"primaryKey": "_instance_id"}, "\\@omit\nNotes, @ anywhere")
