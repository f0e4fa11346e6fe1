"""`panda publish create|update|delete`: one log per schema, values checked before they go."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2panda_assets.engine.corpus import State
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.protocol.messages import Create, decode_message
from tests.authoring.helpers import Run, corpus_of, ok, preview

TYPES = """\
fields:
  title:
    type: varchar
    validation: '^[A-Z]'
  count:
    type: integer
  ratio:
    type: float
  done:
    type: boolean
  when:
    type: timestamp
  data:
    type: blob
  tags:
    type: text[]
"""


def entries(path: Path) -> list:
    return [
        decode_entry(bytes.fromhex(json.loads(line)["entry"]))
        for line in path.read_text().splitlines()
    ]


@pytest.fixture
def things(keyed: Run, tmp_path: Path) -> tuple[str, Path]:
    """A schema `thing` with one field of most types; returns (schema id, story file)."""
    out = tmp_path / "story.jsonl"
    definition = tmp_path / "thing.yaml"
    definition.write_text(TYPES)
    schema_id = ok(keyed("schema", "thing", "init", "--file", definition, "--out", out)).split()[0]
    return schema_id, out


def test_field_texts_convert_to_their_types(keyed: Run, things: tuple[str, Path]) -> None:
    schema_id, out = things
    instance = ok(
        keyed(
            "publish",
            "create",
            "--schema",
            "thing",
            "--field",
            "title=Hello",
            "--field",
            "count=3",
            "--field",
            "ratio=0.5",
            "--field",
            "done=true",
            "--field",
            "when=2020-05-22T11:58:50+0000",
            "--field",
            "data=cafe",
            "--field",
            'tags=["a", "b"]',
            "--null",
            "title",
            "--out",
            out,
        )
    )
    row = preview(keyed, out, schema_id)[instance]
    assert row["title"] is None  # --null wins over --field
    assert (row["count"], row["ratio"], row["done"]) == (3, 0.5, True)
    assert (row["when"], row["data"], row["tags"]) == ("2020-05-22T11:58:50Z", "cafe", ["a", "b"])


def test_fields_file_takes_typed_values(
    keyed: Run, things: tuple[str, Path], tmp_path: Path
) -> None:
    schema_id, out = things
    values = tmp_path / "values.yaml"
    values.write_text("title: Typed\ncount: 7\nwhen: 2021-01-02T03:04:05+01:00\ntags: [x]\n")
    instance = ok(
        keyed(
            "publish",
            "create",
            "--schema",
            schema_id,
            "--fields",
            values,
            "--field",
            "count=8",
            "--out",
            out,
        )
    )
    row = preview(keyed, out, schema_id)[instance]
    assert (row["title"], row["count"], row["when"], row["tags"]) == (
        "Typed",
        8,
        "2021-01-02T02:04:05Z",
        ["x"],
    )


@pytest.mark.parametrize(
    ("field", "reason"),
    [
        ("count=3x", "invalid-value"),
        ("count=1.5", "invalid-value"),
        ("done=yes", "invalid-value"),
        ("when=2020-05-22T11:58:50", "invalid-value"),
        ("data=xyz", "invalid-value"),
        ("title=lower case", "validation-failed"),
        ("colour=red", "unknown-field"),
    ],
)
def test_values_the_engine_would_reject_are_refused(
    keyed: Run, things: tuple[str, Path], field: str, reason: str
) -> None:
    _, out = things
    before = out.read_bytes()
    code, stdout, err = keyed(
        "publish", "create", "--schema", "thing", "--field", field, "--out", out
    )
    assert (code, stdout) == (1, "")
    assert err.startswith(f"error: {reason}:"), err
    assert out.read_bytes() == before


def test_each_schema_gets_its_own_instance_log(keyed: Run, tmp_path: Path) -> None:
    out = tmp_path / "story.jsonl"
    for name in ("a", "b"):
        definition = tmp_path / f"{name}.yaml"
        definition.write_text("fields:\n  n:\n    type: integer\n")
        ok(keyed("schema", name, "init", "--file", definition, "--out", out))
    for name in ("a", "b", "a", "b"):
        ok(keyed("publish", "create", "--schema", name, "--field", "n=1", "--out", out))
    logs = [(e.log_id, e.seq_num) for e in entries(out)]
    # Schema logs 1 and 2 (meta + migration each), then instance logs 3 (a) and 4 (b).
    assert logs == [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (4, 1), (3, 2), (4, 2)]
    corpus = corpus_of(out)
    assert {a.state for a in corpus.accounts.values()} == {State.APPLIED}
    assert [len(t.rows) for t in corpus.tables.values()] == [2, 2]


def test_logs_resume_across_invocations(keyed: Run, things: tuple[str, Path]) -> None:
    schema_id, out = things
    ids = [
        ok(keyed("publish", "create", "--schema", "thing", "--field", f"count={n}", "--out", out))
        for n in range(14)
    ]
    ok(
        keyed(
            "publish",
            "update",
            "--schema",
            "thing",
            "--instance",
            ids[3],
            "--field",
            "count=99",
            "--out",
            out,
        )
    )
    ok(keyed("publish", "delete", "--instance", ids[5], "--out", out))
    instance_log = [e for e in entries(out) if e.log_id == 2]
    assert [e.seq_num for e in instance_log] == list(range(1, 17))
    corpus = corpus_of(out)
    states = [a.state for a in corpus.accounts.values()]
    assert State.REJECTED not in states and State.PENDING not in states
    rows = preview(keyed, out, schema_id)
    assert len(rows) == 13 and rows[ids[3]]["count"] == 99 and ids[5] not in rows


def test_updates_and_deletes_only_of_own_live_instances(
    keyed: Run, things: tuple[str, Path], tmp_path: Path
) -> None:
    _, out = things
    other = tmp_path / "other.yaml"
    other.write_text("fields:\n  n:\n    type: integer\n")
    ok(keyed("schema", "other", "init", "--file", other, "--out", out))
    instance = ok(
        keyed("publish", "create", "--schema", "thing", "--field", "count=1", "--out", out)
    )
    unknown = "0020" + "ab" * 32
    cases = [
        (
            ("update", "--schema", "thing", "--instance", unknown, "--field", "count=2"),
            "unknown-instance",
        ),
        (("update", "--schema", "other", "--instance", instance, "--field", "n=2"), "wrong-schema"),
        (("update", "--schema", "thing", "--instance", instance), "bad-input"),
        (("update", "--schema", "thing", "--instance", "zz", "--field", "count=2"), "bad-hex"),
        (("delete", "--instance", instance, "--schema", "other"), "wrong-schema"),
    ]
    for argv, reason in cases:
        code, _, err = keyed("publish", *argv, "--out", out)
        assert code == 1 and err.startswith(f"error: {reason}:"), (argv, err)
    ok(keyed("publish", "delete", "--instance", instance, "--out", out))
    code, _, err = keyed("publish", "delete", "--instance", instance, "--out", out)
    assert err.startswith("error: instance-deleted:")
    code, _, err = keyed(
        "publish",
        "update",
        "--schema",
        "thing",
        "--instance",
        instance,
        "--field",
        "count=3",
        "--out",
        out,
    )
    assert err.startswith("error: instance-deleted:")


def test_a_schema_of_another_author_needs_a_version_or_its_entries(
    keyed: Run, things: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema_id, out = things
    monkeypatch.setenv("P2PANDA_HOME", str(tmp_path / "bob"))
    ok(keyed("key", "new"))
    code, _, err = keyed(
        "publish", "create", "--schema", schema_id, "--field", "count=1", "--out", out
    )
    assert code == 1 and err.startswith("error: bad-input:") and "--version" in err
    # Without a lens, a value is read as a YAML scalar.
    first = ok(
        keyed(
            "publish",
            "create",
            "--schema",
            schema_id,
            "--version",
            "2",
            "--field",
            "count=4",
            "--out",
            out,
        )
    )
    (create,) = [
        decode_message(bytes.fromhex(json.loads(line)["payload"]))
        for line in out.read_text().splitlines()
        if decode_entry(bytes.fromhex(json.loads(line)["entry"])).hash.hex() == first
    ]
    assert isinstance(create, Create) and create.fields == (("count", 4),)
    # With the schema log's entries, the lens is known: values are typed and checked.
    code, _, err = keyed(
        "publish",
        "create",
        "--schema",
        schema_id,
        "--entries",
        out,
        "--field",
        "count=x",
        "--out",
        out,
    )
    assert err.startswith("error: invalid-value:")
    second = ok(
        keyed(
            "publish",
            "create",
            "--schema",
            schema_id,
            "--entries",
            out,
            "--field",
            "data=00ff",
            "--out",
            out,
        )
    )
    rows = preview(keyed, out, schema_id)
    assert rows[first]["count"] == 4 and rows[second]["data"] == "00ff"
    assert rows[first]["_author"] != schema_id.split("-")[0]


def test_a_relation_names_an_instance_by_its_id(keyed: Run, tmp_path: Path) -> None:
    out = tmp_path / "story.jsonl"
    (tmp_path / "p.yaml").write_text("fields:\n  name:\n    type: varchar\n")
    (tmp_path / "m.yaml").write_text(
        "fields:\n  to:\n    type: relation\n    schema: person\n    cascade: true\n"
    )
    ok(keyed("schema", "person", "init", "--file", tmp_path / "p.yaml", "--out", out))
    mail_id = ok(
        keyed("schema", "mail", "init", "--file", tmp_path / "m.yaml", "--out", out)
    ).split()[0]
    person = ok(
        keyed("publish", "create", "--schema", "person", "--field", "name=Ada", "--out", out)
    )
    mail = ok(
        keyed("publish", "create", "--schema", "mail", "--field", f"to={person}", "--out", out)
    )
    assert preview(keyed, out, mail_id)[mail]["to"] == person
    code, _, err = keyed(
        "publish", "create", "--schema", "mail", "--field", "to=abcd", "--out", out
    )
    assert code == 1 and err.startswith("error: invalid-value:")
    ok(keyed("publish", "delete", "--instance", person, "--out", out))
    assert preview(keyed, out, mail_id) == {}  # cascade
