"""The slothmail story (resources/), end to end through `panda schema` and `panda publish`, one
JSON-lines file, and `panda preview` reading it back.

Versions of slothmail: 1 init (meta), 2 slothmail-001 (subject, body, recipient,
created), 3 slothmail-002 (attachments), 4 slothmail-003 (attachments removed, subject
single-line with default `<Subject>`), 5 revert to 3 (version 4 dead).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from p2panda_assets.engine.corpus import State
from p2panda_assets.errors import Reason
from tests.authoring.helpers import RESOURCES, Run, corpus_of, ok, preview

MULTI_LINE = "Hello!\n...friend"
CREATED = "2020-05-22T11:58:50+0000"


@pytest.fixture
def story(keyed: Run, tmp_path: Path) -> dict:
    """Publish the story up to slothmail version 4 (before the revert)."""
    out = tmp_path / "story.jsonl"
    panda = keyed
    ids: dict = {"out": out}
    ids["profile"] = ok(
        panda("schema", "profile", "init", "--file", RESOURCES / "profile-001.yaml", "--out", out)
    ).split()[0]
    ids["attachment"] = ok(
        panda(
            "schema",
            "attachment",
            "init",
            "--file",
            RESOURCES / "attachment-001.yaml",
            "--out",
            out,
        )
    ).split()[0]
    result = ok(
        panda(
            "schema",
            "slothmail",
            "init",
            "--description",
            "Send slothmail to your friends!",
            "--out",
            out,
        )
    )
    ids["slothmail"], _, version = result.split()
    assert version == "1"
    code, out_text, err = panda(
        "schema", "slothmail", "migrate", RESOURCES / "slothmail-001.yaml", "--out", out
    )
    assert code == 0 and out_text.strip() == f"{ids['slothmail']} version 2"
    assert "Published slothmail version 2" in err and "- created<timestamp>" in err
    ids["sloth"] = ok(
        panda("publish", "create", "--schema", "profile", "--field", "name=Sloth", "--out", out)
    )
    ids["m1"] = ok(
        panda(
            "publish",
            "create",
            "--schema",
            "slothmail",
            "--version",
            "2",
            "--field",
            f"subject={MULTI_LINE}",
            "--field",
            "body=",
            "--field",
            f"created={CREATED}",
            "--field",
            f"recipient={ids['sloth']}",
            "--out",
            out,
        )
    )
    ok(panda("schema", "slothmail", "migrate", RESOURCES / "slothmail-002.yaml", "--out", out))
    ids["att"] = ok(
        panda(
            "publish",
            "create",
            "--schema",
            "attachment",
            "--field",
            "filename=hello.txt",
            "--field",
            "data=68656c6c6f",
            "--out",
            out,
        )
    )
    ids["m2"] = ok(
        panda(  # at the latest version, 3: with attachments
            "publish",
            "create",
            "--schema",
            "slothmail",
            "--field",
            "subject=With attachment",
            "--field",
            f'attachments=["{ids["att"]}"]',
            "--field",
            f"recipient={ids['sloth']}",
            "--out",
            out,
        )
    )
    ids["m3"] = ok(
        panda(
            "publish", "create", "--schema", "slothmail", "--field", "subject=Doomed", "--out", out
        )
    )
    assert ok(
        panda("schema", "slothmail", "migrate", RESOURCES / "slothmail-003.yaml", "--out", out)
    ).endswith("version 4")
    return ids


def test_old_multi_line_subject_materializes_as_default_and_attachments_hide(
    keyed: Run, story: dict
) -> None:
    rows = preview(keyed, story["out"], story["slothmail"])
    m1, m2 = rows[story["m1"]], rows[story["m2"]]
    assert m1["subject"] == "<Subject>"
    assert m1["recipient"] == story["sloth"] and m1["body"] is None
    assert m1["created"] == "2020-05-22T11:58:50Z" and m1["_version"] == 2
    assert m2["subject"] == "With attachment"
    assert "attachments" not in m1 and "attachments" not in m2


def test_revert_brings_back_attachments_and_the_original_subject(keyed: Run, story: dict) -> None:
    out = story["out"]
    ok(
        keyed(
            "publish",
            "update",
            "--schema",
            "slothmail",
            "--instance",
            story["m2"],
            "--field",
            "subject=Changed at 4",
            "--out",
            out,
        )
    )
    code, stdout, err = keyed(
        "schema", "slothmail", "revert", "--target", "3", "--yes", "--out", out
    )
    assert code == 0 and stdout.strip() == f"{story['slothmail']} version 5"
    assert "Published slothmail version 5" in err
    rows = preview(keyed, out, story["slothmail"])
    m1, m2 = rows[story["m1"]], rows[story["m2"]]
    assert m2["attachments"] == [story["att"]]
    assert m1["subject"] == MULTI_LINE and m1["attachments"] is None
    # The update named version 4, which the revert made dead: it is ignored.
    assert m2["subject"] == "With attachment"
    rejected = [a for a in corpus_of(out).accounts.values() if a.state is State.REJECTED]
    assert [a.reason for a in rejected] == [Reason.REVERTED_VERSION]


def test_delete_at_a_version_the_revert_kills_still_applies(keyed: Run, story: dict) -> None:
    out = story["out"]
    assert (
        ok(
            keyed(
                "publish",
                "delete",
                "--instance",
                story["m3"],
                "--schema",
                "slothmail",
                "--out",
                out,
            )
        )
        == story["m3"]
    )
    assert story["m3"] not in preview(keyed, out, story["slothmail"])
    ok(keyed("schema", "slothmail", "revert", "--target", "3", "--yes", "--out", out))
    rows = preview(keyed, out, story["slothmail"])
    assert story["m3"] not in rows
    assert set(rows) == {story["m1"], story["m2"]}


def test_after_the_revert_the_dead_version_is_refused_locally(keyed: Run, story: dict) -> None:
    out = story["out"]
    ok(keyed("schema", "slothmail", "revert", "--target", "3", "--yes", "--out", out))
    before = out.read_bytes()
    code, _, err = keyed(
        "publish",
        "create",
        "--schema",
        "slothmail",
        "--version",
        "4",
        "--field",
        "subject=x",
        "--out",
        out,
    )
    assert code == 1 and err.startswith("error: reverted-version:")
    assert out.read_bytes() == before
    # The latest version is 5, whose lens is version 3's: attachments are back.
    att = story["att"]
    mail = ok(
        keyed(
            "publish",
            "create",
            "--schema",
            "slothmail",
            "--field",
            f"attachments={att}",
            "--out",
            out,
        )
    )
    assert preview(keyed, out, story["slothmail"])[mail]["attachments"] == [att]


def test_the_whole_story_is_accounted_for_with_nothing_pending(keyed: Run, story: dict) -> None:
    corpus = corpus_of(story["out"])
    states = {a.state for a in corpus.accounts.values()}
    assert states <= {State.APPLIED, State.SUPERSEDED}
    assert not corpus.pending
    assert corpus.histories[story["slothmail"]].name == "slothmail"
    assert sorted(corpus.histories[story["slothmail"]].versions) == [1, 2, 3, 4]
