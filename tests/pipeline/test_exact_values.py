"""Every value in a table equals what `panda preview` shows for it (rule T-VALUE): each
field type, its array form and null, with the values a JDBC writer changes or refuses
(NaN and ±Infinity, timestamps of years 1, 1582 and 9999, blob arrays, empty arrays),
a 512 KiB blob, 255 emoji in a varchar, and field names that differ only in case or
look like SQL. Written by the real pipeline (binary COPY), read back with psycopg."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg import sql

from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.engine.values import to_json
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register, table_name_for
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

EARLY = datetime(1, 1, 1, tzinfo=UTC)
JULIAN_GAP = datetime(1582, 10, 10, 12, 0, tzinfo=UTC)  # a JDBC writer stores 1582-10-15
LATE = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
EMOJI = "\U0001f9a5" * 255  # sloths: 255 characters, 1020 bytes
BIG_BLOB = bytes(range(256)) * 2048  # 512 KiB

TYPES = {
    "vc": "varchar",
    "tx": "text",
    "int": "integer",
    "fl": "float",
    "bl": "blob",
    "yes": "boolean",
    "ts": "timestamp",
}
ODD_NAMES = {
    "a": "text",
    "A": "text",
    'x"; DROP TABLE p2panda.entries; --': "text",
    "select": "integer",
    "dotted.name with space": "float",
    "CTID": "text",  # only the lower-case spelling is a system column
}


def edge_rows(related: bytes) -> list[dict[str, object]]:
    """Instances covering every type's edges, its array form, and null."""
    return [
        {
            "vc": EMOJI,
            "tx": "line\nbreak\t\\ and 'quotes\"",
            "int": -(2**63),
            "fl": math.nan,
            "bl": BIG_BLOB,
            "yes": True,
            "ts": EARLY,
            "vc[]": ["", EMOJI],
            "tx[]": [],
            "int[]": [2**63 - 1, 0, -1],
            "fl[]": [math.inf, -math.inf, math.nan, -0.0, 5e-324],
            "bl[]": [b"", b"\x00\xff", BIG_BLOB[:1024]],
            "yes[]": [False, True],
            "ts[]": [EARLY, JULIAN_GAP, LATE],
            "rel": related,
            "rel[]": [related, related],
            "a": "lower",
            "A": "upper",
            'x"; DROP TABLE p2panda.entries; --': "still data",
            "select": 1,
            "dotted.name with space": 1.5,
            "CTID": "not a system column",
        },
        {
            "fl": math.inf,
            "ts": JULIAN_GAP,
            "int": 2**63 - 1,
            "bl[]": [],
            "ts[]": [],
            "fl[]": [],
            "yes": False,
        },
        {"fl": -math.inf, "ts": LATE, "tx": ""},
        {},  # every field null
    ]


def corpus() -> tuple[CorpusBuilder, str]:
    built = CorpusBuilder()
    schema = built.author(1).schema(3, "edges")
    changes = [create_field(name, kind) for name, kind in TYPES.items()]
    changes += [create_field(f"{name}[]", f"{kind}[]") for name, kind in TYPES.items()]
    changes += [create_field(name, kind) for name, kind in ODD_NAMES.items()]
    changes += [
        create_field("rel", "relation", schema=schema.log_ref),
        create_field("rel[]", "relation[]", schema=schema.log_ref),
    ]
    schema.migrate(*changes)
    log = instances(built.author(2), 1)
    anchor = log.create(schema.ref(), tx="the instance the relations point at")
    for fields in edge_rows(anchor):
        log.create(schema.ref(), **fields)
    return built, schema.schema_id


def pg_value(value: object, ftype: FieldType) -> object:
    """A value psycopg read, in the engine's canonical form."""
    if value is None:
        return None
    if ftype.is_array:
        return tuple(pg_value(v, FieldType(ftype.base, False)) for v in value)
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN, and -0.0 told apart from 0.0."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    return type(a) is type(b) and a == b


def test_every_type_and_edge_value_reaches_postgresql_as_preview_shows_it(
    spark, database_url
) -> None:
    built, schema_id = corpus()
    expected = reduce_corpus(built.pairs, {schema_id}).tables[schema_id]
    assert len(expected.rows) == 5  # every message of the corpus is valid
    lens = expected.history.lens
    with connect(database_url, autocommit=True) as conn:
        ensure_schema(conn)
        ingest(conn, built.pairs)
        register(conn, *parse_schema_id(schema_id), None)
        outcomes = run_pipeline(spark, conn, database_url)
        assert [(o.status, o.rows) for o in outcomes] == [("materialized", 5)]
        schema, table = table_name_for(schema_id).split(".")
        declared = [
            name
            for (name,) in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                " ORDER BY attnum",
                (sql.Identifier(schema, table).as_string(conn),),
            )
        ]
        assert declared == ["_instance_id", "_author", "_version", "_seq", "_entry", *lens]
        got = {
            row["_instance_id"]: row
            for row in conn.cursor(row_factory=psycopg.rows.dict_row).execute(
                sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table))
            )
        }
    assert sorted(got) == [row.instance_id.hex() for row in expected.rows]
    for row in expected.rows:
        stored = got[row.instance_id.hex()]
        assert stored["_entry"] == row.entry.hex()
        for name, spec in lens.items():
            want, have = row.values[name], pg_value(stored[name], spec.type)
            assert same(want, have), (name, want, have)
            assert to_json(want, spec.type) == to_json(have, spec.type), name
