"""Issue 7, lenses: `panda materialize --as-of-version N` for every version of the
slothmail story equals `panda preview` of the log cut at N; each row names the signed
entry that last wrote it; views by name and by version, as PostgREST-style
introspection sees them."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import SparkSession

from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.engine.lens import Lens
from p2panda_assets.engine.values import to_json
from p2panda_assets.jsonlines import read_entry_lines
from p2panda_assets.protocol.entry import verify_entry
from p2panda_assets.protocol.messages import decode_message
from p2panda_assets.store.registry import table_name_for, version_table_name_for
from tests.coordination.story import Panda, Story, ok, panda_runner, preview_rows, write_story

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

DESCRIPTION = "Send slothmail to your friends!"
# What PostgREST and PostGraphile read to build their API: relations of an exposed schema
# with their comments (pg_description), and their columns.
INTROSPECT = """
SELECT c.relname, c.relkind::text, d.description,
       array_agg(a.attname::text ORDER BY a.attnum) AS columns
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_description d ON d.objoid = c.oid AND d.objsubid = 0
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = 'p2panda_api' AND c.relkind IN ('r', 'v', 'm', 'f', 'p')
GROUP BY c.relname, c.relkind, d.description
"""


@pytest.fixture
def panda(capsys: pytest.CaptureFixture[str]) -> Panda:
    return panda_runner(capsys)


@pytest.fixture
def served(
    spark: SparkSession,
    conn: psycopg.Connection,
    p2panda_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    panda: Panda,
) -> Story:
    """The whole story, the revert included (slothmail versions 1..5), materialized."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    story = write_story(tmp_path / "scratch")
    story.revert()
    story.serve(panda)
    return story


def table_json(conn: psycopg.Connection, table_name: str, lens: Lens) -> list[dict]:
    """A table's rows in `panda preview --trace`'s JSON form."""
    cursor = conn.execute(
        sql.SQL("SELECT * FROM {} ORDER BY _instance_id").format(
            sql.Identifier(*table_name.split("."))
        )
    )
    names = [column.name for column in cursor.description]
    rows = []
    for row in cursor.fetchall():
        record = dict(zip(names, row, strict=True))
        out: dict = {k: record.pop(k) for k in ("_instance_id", "_author", "_version", "_seq")}
        out["_seq"] = int(out["_seq"]) if isinstance(out["_seq"], Decimal) else out["_seq"]
        out["_entry"] = record.pop("_entry")
        for name, spec in lens.items():
            value = record.pop(name)
            out[name] = to_json(tuple(value) if isinstance(value, list) else value, spec.type)
        assert not record, f"columns outside the lens: {sorted(record)}"
        rows.append(out)
    return rows


def test_as_of_every_version_equals_preview_of_the_log_cut_there(
    served: Story, conn: psycopg.Connection, panda: Panda, tmp_path: Path
) -> None:
    schema_id = served.slothmail
    built = {}
    for version in range(1, 6):
        cut = served.cut(version, tmp_path / f"cut-{version}.jsonl")
        expected = preview_rows(panda, cut, schema_id)
        out = ok(panda("materialize", "--as-of-version", version, schema_id))
        table = reduce_corpus(
            item for item in read_entry_lines([cut]) if isinstance(item, tuple)
        ).tables[schema_id]
        if not table.history.lens:  # version 1: meta only, no field, so no table
            assert "no fields, no table" in out and expected == []
            continue
        table_name = version_table_name_for(schema_id, version)
        assert f"{len(expected)} rows  {table_name}" in out
        assert table_json(conn, table_name, table.history.lens) == expected
        built[version] = expected
    # The story's own checkpoints: version 3 shows attachments, version 4 hides them and
    # the multi-line subject falls back to its default; the revert (5) equals version 3
    # but for the version names. The delete written at version 4 applies at every version
    # cut: a delete never waits for the version it names (rule I-PENDING-3).
    assert "attachments" in built[3][0] and "attachments" not in built[4][0]
    assert "<Subject>" in {row["subject"] for row in built[4]}
    assert len(built[5]) == len(built[4]) == len(built[3])
    # The current table is untouched by the version tables, and equals version 5.
    current = conn.execute(
        "SELECT table_name, version FROM p2panda.schemas WHERE schema_id = %s", (schema_id,)
    ).fetchone()
    assert current[1] == 5
    lens = (
        reduce_corpus(item for item in read_entry_lines([served.file]) if isinstance(item, tuple))
        .tables[schema_id]
        .history.lens
    )
    assert table_json(conn, current[0], lens) == built[5]


def test_each_row_names_the_signed_entry_that_last_wrote_it(
    served: Story, conn: psycopg.Connection
) -> None:
    traced = 0
    for (table_name,) in conn.execute(
        "SELECT table_name FROM p2panda.schemas WHERE status = 'materialized'"
    ).fetchall():
        rows = conn.execute(
            sql.SQL("SELECT _instance_id, _author, _seq, _entry FROM {}").format(
                sql.Identifier(*table_name.split("."))
            )
        ).fetchall()
        for instance_id, author, seq, entry_hash in rows:
            stored = conn.execute(
                "SELECT entry, payload FROM p2panda.entries WHERE hash = %s",
                (bytes.fromhex(entry_hash),),
            ).fetchone()
            assert stored is not None, f"{table_name}: {entry_hash} is not a stored entry"
            # Raises unless the signature and the payload hash hold.
            entry = verify_entry(bytes(stored[0]), bytes(stored[1]))
            assert (entry.author.hex(), entry.seq_num) == (author, int(seq))
            message = decode_message(bytes(stored[1]))
            if message.kind == "create":
                assert entry.hash.hex() == instance_id
            else:
                assert message.kind == "update" and message.instance.hex() == instance_id
            traced += 1
    assert traced >= 4  # profile, attachment and the slothmail rows


def test_views_by_name_and_by_version_as_api_generators_see_them(
    served: Story, conn: psycopg.Connection, panda: Panda
) -> None:
    out = ok(panda("materialize", "--as-of-version", 3, served.slothmail))
    assert out.rstrip().endswith("view p2panda_api.slothmail_v3")  # pastes into SQL as it is
    seen = {
        name: (kind, comment, columns) for name, kind, comment, columns in conn.execute(INTROSPECT)
    }
    assert set(seen) == {"profile", "attachment", "slothmail", "slothmail_v3"}
    kind, comment, columns = seen["slothmail"]
    assert kind == "v" and comment.splitlines()[-1] == DESCRIPTION  # after the smart tags
    assert columns[:5] == ["_instance_id", "_author", "_version", "_seq", "_entry"]
    assert "attachments" in columns  # version 5 (the revert to 3) shows them again
    kind, comment, _ = seen["slothmail_v3"]
    assert kind == "v" and comment.splitlines()[-1] == DESCRIPTION
    for view, table_name in (
        ("slothmail", table_name_for(served.slothmail)),
        ("slothmail_v3", version_table_name_for(served.slothmail, 3)),
    ):
        by_view = conn.execute(
            sql.SQL("SELECT * FROM {} ORDER BY _instance_id").format(
                sql.Identifier("p2panda_api", view)
            )
        ).fetchall()
        by_table = conn.execute(
            sql.SQL("SELECT * FROM {} ORDER BY _instance_id").format(
                sql.Identifier(*table_name.split("."))
            )
        ).fetchall()
        assert by_view == by_table and by_view
    registry = conn.execute(
        "SELECT view_name, view_conflict FROM p2panda.schemas WHERE schema_id = %s",
        (served.slothmail,),
    ).fetchone()
    assert registry == ("slothmail", None)
