"""`panda schema NAME init|migrate|revert`: what is published, and what is refused."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from p2panda_assets.authoring.state import STATE_FILE
from p2panda_assets.engine.corpus import State
from p2panda_assets.keystore import KEY_FILE
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.protocol.messages import SchemaMeta, SchemaMigration, decode_message
from tests.authoring.helpers import RESOURCES, Run, corpus_of, ok


def messages(path: Path) -> list:
    return [
        decode_message(bytes.fromhex(json.loads(line)["payload"]))
        for line in path.read_text().splitlines()
    ]


def test_init_without_a_key_is_no_key(panda: Run, tmp_path: Path) -> None:
    code, out, err = panda("schema", "slothmail", "init", "--out", tmp_path / "s.jsonl")
    assert (code, out) == (1, "")
    assert err.startswith("error: no-key:")
    assert not (tmp_path / "s.jsonl").exists()


def test_init_publishes_a_schema_meta_at_seq_1_of_a_new_log(keyed: Run, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    code, stdout, err = keyed(
        "schema",
        "slothmail",
        "init",
        "--description",
        "Send slothmail to your friends!",
        "--out",
        out,
    )
    assert code == 0
    schema_id = stdout.strip().split()[0]
    assert "Registered slothmail schema at log 1" in err
    (line,) = out.read_text().splitlines()
    entry = decode_entry(bytes.fromhex(json.loads(line)["entry"]))
    assert (entry.seq_num, entry.log_id) == (1, 1)
    assert schema_id == f"{entry.author.hex()}-1"
    assert messages(out) == [
        SchemaMeta(name="slothmail", spec=1, description="Send slothmail to your friends!")
    ]
    # The next schema gets the next log id.
    assert ok(keyed("schema", "profile", "init", "--out", out)).startswith(
        f"{entry.author.hex()}-2 "
    )


def test_comment_toml_from_the_seeds(keyed: Run, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    schema_id, _, version = ok(
        keyed("schema", "comment", "init", "--file", RESOURCES / "comment-001.toml", "--out", out)
    ).split()
    assert version == "2"
    meta, migration = messages(out)
    assert meta == SchemaMeta(name="comment", spec=1, description="Send comments to your friends!")
    assert isinstance(migration, SchemaMigration)
    assert [(c.name, c.action, str(c.type)) for c in migration.fields] == [
        ("body", "create", "text"),
        ("created", "create", "timestamp"),
    ]
    history = corpus_of(out).histories[schema_id]
    assert history.name == "comment" and list(history.lens) == ["body", "created"]


def test_seed_form_without_name_takes_it_from_the_file(keyed: Run, tmp_path: Path) -> None:
    code, _, err = keyed(
        "schema", "init", "--file", RESOURCES / "comment-001.toml", "--out", tmp_path / "s.jsonl"
    )
    assert code == 0 and "Registered comment schema" in err


def test_init_of_an_existing_name_is_refused(keyed: Run, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    ok(keyed("schema", "comment", "init", "--out", out))
    code, _, err = keyed("schema", "comment", "init", "--out", out)
    assert code == 1 and err.startswith("error: schema-exists:") and "already exists" in err
    assert len(out.read_text().splitlines()) == 1


def test_a_failed_init_takes_no_log_id(keyed: Run, tmp_path: Path, p2panda_home: Path) -> None:
    out = tmp_path / "s.jsonl"
    bad = write(tmp_path, "bad.yaml", "fields:\n  n:\n    type: integer\n    default: x\n")
    code, _, err = keyed("schema", "counter", "init", "--file", bad, "--out", out)
    assert code == 1 and err.startswith("error: bad-default:")
    assert not out.exists() and not (p2panda_home / STATE_FILE).exists()
    assert ok(keyed("schema", "counter", "init", "--out", out)).split()[0].endswith("-1")


def test_init_refuses_a_bad_name(keyed: Run, tmp_path: Path) -> None:
    code, _, err = keyed("schema", "x" * 65, "init", "--out", tmp_path / "s.jsonl")
    assert code == 1 and err.startswith("error: bad-name:")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def snapshot(home: Path, out: Path) -> tuple[bytes, bytes]:
    return (home / STATE_FILE).read_bytes(), out.read_bytes()


def test_migrations_the_engine_would_reject_publish_nothing(
    keyed: Run, tmp_path: Path, p2panda_home: Path
) -> None:
    out = tmp_path / "s.jsonl"
    ok(keyed("schema", "slothmail", "init", "--out", out))
    first = write(
        tmp_path, "001.yaml", "fields:\n  subject:\n    type: text\n  body:\n    type: text\n"
    )
    ok(keyed("schema", "slothmail", "migrate", first, "--out", out))
    before = snapshot(p2panda_home, out)
    cases = {
        "field-exists": "fields:\n  subject:\n    type: text\n",
        "field-missing": "fields:\n  nothing:\n    action: remove\n",
        "bad-default": "fields:\n  count:\n    type: integer\n    default: many\n",
        "bad-validation": "fields:\n  title:\n    type: text\n    validation: '('\n",
        "unknown-type": "fields:\n  title:\n    type: string\n",
        "missing-key": "fields:\n  body:\n    action: update\n    type: varchar\n",
    }
    for reason, text in cases.items():
        code, stdout, err = keyed(
            "schema", "slothmail", "migrate", write(tmp_path, f"{reason}.yaml", text), "--out", out
        )
        assert code == 1 and stdout == "", reason
        assert err.startswith(f"error: {reason}:"), err
        assert snapshot(p2panda_home, out) == before, reason
    # A default that converts but fails its own validation is a bad default too.
    bad = write(
        tmp_path,
        "v.yaml",
        "fields:\n  subject:\n    action: update\n    validation: '^x'\n    default: y\n",
    )
    assert keyed("schema", "slothmail", "migrate", bad, "--out", out)[2].startswith(
        "error: bad-default:"
    )
    assert snapshot(p2panda_home, out) == before


def test_an_unknown_key_names_the_file_and_the_key(keyed: Run, tmp_path: Path) -> None:
    ok(keyed("schema", "slothmail", "init", "--out", tmp_path / "s.jsonl"))
    path = write(tmp_path, "typo.yaml", "fields:\n  subject:\n    type: text\n    valdiation: x\n")
    code, _, err = keyed("schema", "slothmail", "migrate", path, "--out", tmp_path / "s.jsonl")
    assert code == 1 and err.startswith("error: unknown-key:")
    assert "typo.yaml" in err and "valdiation" in err
    toml = write(tmp_path, "typo.toml", "[meta]\nauthor = 'me'\n")
    code, _, err = keyed("schema", "slothmail", "migrate", toml, "--out", tmp_path / "s.jsonl")
    assert err.startswith("error: unknown-key:") and "typo.toml" in err and "author" in err


def test_migrate_with_meta_publishes_meta_first_and_keeps_other_keys(
    keyed: Run, tmp_path: Path
) -> None:
    out = tmp_path / "s.jsonl"
    ok(keyed("schema", "slothmail", "init", "--description", "old", "--out", out))
    path = write(
        tmp_path,
        "m.yaml",
        "meta:\n  homepage: https://example.org\nfields:\n  subject:\n    type: text\n",
    )
    assert ok(keyed("schema", "slothmail", "migrate", path, "--out", out)).endswith("version 3")
    _, meta, migration = messages(out)
    assert meta == SchemaMeta(
        name="slothmail", spec=1, description="old", homepage="https://example.org"
    )
    assert isinstance(migration, SchemaMigration)


def test_revert_to_a_version_that_does_not_exist_is_refused(keyed: Run, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    ok(keyed("schema", "slothmail", "init", "--out", out))
    code, _, err = keyed("schema", "slothmail", "revert", "--target", "7", "--out", out)
    assert code == 1 and err.startswith("error: bad-revert-target:")
    assert len(out.read_text().splitlines()) == 1


def test_without_out_entries_go_to_stdout_and_the_result_to_stderr(
    keyed: Run, tmp_path: Path
) -> None:
    code, stdout, err = keyed("schema", "profile", "init", "--file", RESOURCES / "profile-001.yaml")
    assert code == 0
    lines = stdout.splitlines()
    assert len(lines) == 2 and all(set(json.loads(line)) == {"entry", "payload"} for line in lines)
    assert err.strip().endswith("-1 version 2")
    story = write(tmp_path, "story.jsonl", stdout)
    assert {a.state for a in corpus_of(story).accounts.values()} == {State.APPLIED}


def test_key_and_state_are_owner_only(keyed: Run, tmp_path: Path, p2panda_home: Path) -> None:
    ok(keyed("schema", "profile", "init", "--out", tmp_path / "s.jsonl"))
    for name in (KEY_FILE, STATE_FILE):
        assert stat.S_IMODE((p2panda_home / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE(p2panda_home.stat().st_mode) == 0o700
    assert not [p for p in p2panda_home.iterdir() if p.name.startswith(".authoring-")]


def test_an_unwritable_out_file_publishes_nothing(
    keyed: Run, tmp_path: Path, p2panda_home: Path
) -> None:
    code, _, err = keyed("schema", "profile", "init", "--out", tmp_path)  # a directory
    assert code == 1 and err.startswith("error: unwritable-file:")
    assert not (p2panda_home / STATE_FILE).exists()
    assert ok(keyed("schema", "profile", "init", "--out", tmp_path / "s.jsonl")).endswith(
        "-1 version 1"
    )
