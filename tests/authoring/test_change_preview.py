"""`panda schema NAME revert|migrate` say what they do to the store's data before they
publish (issue 56, item 3): the class, and how many instances the store holds that they
reject or change, counted by the pure engine over the stored entries. A revert that
rejects rows needs `--yes`; one that changes nothing needs `--force`.

Mail versions: 1 meta, 2 `subject` (init --file), 3 `body`; one mail written at 2,
four at 3, all ingested: a revert to 2 kills version 3 and so four of the five mails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from p2panda_assets.errors import Reason
from p2panda_assets.store.database import DATABASE_URL_ENV
from tests.authoring.helpers import Run, ok

pytestmark = pytest.mark.postgres

SUBJECT = "fields:\n  subject:\n    action: create\n    type: text\n"
BODY = "fields:\n  body:\n    action: create\n    type: text\n"
SINGLE_LINE = (
    "fields:\n  subject:\n    action: update\n    type: text\n"
    "    validation: '^[^#]'\n    default: <Subject>\n"
)


def definition(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def write_mails(panda: Run, tmp_path: Path) -> Path:
    """The story file: mail up to version 3, one mail at 2 and four at 3."""
    out = tmp_path / "story.jsonl"
    ok(
        panda(
            "schema",
            "mail",
            "init",
            "--file",
            definition(tmp_path, "1.yaml", SUBJECT),
            "--out",
            out,
        )
    )
    ok(panda("publish", "create", "--schema", "mail", "--field", "subject=#at 2", "--out", out))
    ok(panda("schema", "mail", "migrate", definition(tmp_path, "2.yaml", BODY), "--out", out))
    for n in range(4):
        ok(panda("publish", "create", "--schema", "mail", "--field", f"subject=#{n}", "--out", out))
    return out


@pytest.fixture
def stored(keyed: Run, tmp_path: Path, database_url: str) -> Path:
    """The mails, written and ingested into the store."""
    out = write_mails(keyed, tmp_path)
    ok(keyed("ingest", out))
    return out


def test_a_revert_that_rejects_rows_says_how_many_and_needs_yes(keyed: Run, stored: Path) -> None:
    before = stored.read_bytes()
    code, out, err = keyed("schema", "mail", "revert", "--target", "2", "--out", stored)
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "revert to version 2 (breaking): 4 of 5 instances would be rejected"
        " (reverted-version), 1 kept; 0 rows change values",
        f"error: {Reason.UNCONFIRMED}: revert to version 2 would reject 4 of 5 instances:"
        " pass --yes to publish it; nothing was published",
    ]
    assert stored.read_bytes() == before
    code, out, err = keyed("schema", "mail", "revert", "--target", "2", "--yes", "--out", stored)
    assert code == 0 and out.strip().endswith("version 4"), err
    assert err.startswith("revert to version 2 (breaking): 4 of 5 instances would be rejected")
    assert len(stored.read_text().splitlines()) == len(before.splitlines()) + 1


def test_a_revert_that_changes_nothing_needs_force(keyed: Run, stored: Path) -> None:
    """The issue's `revert --target 4` after a revert to 2: an earlier revert makes it
    ignored (rule S-REVERT-2), as is a revert to the latest version."""
    ok(keyed("schema", "mail", "revert", "--target", "2", "--yes", "--out", stored))
    ok(keyed("ingest", stored))
    before = stored.read_bytes()
    for target in ("3", "4"):
        code, _, err = keyed("schema", "mail", "revert", "--target", target, "--out", stored)
        assert code == 1, err
        assert err.splitlines()[0] == (
            f"revert to version {target} (no-op): 0 of 1 instances would be rejected, 1 kept;"
            " 0 rows change values"
        )
        assert err.splitlines()[-1] == (
            f"error: no-change: revert to version {target} changes nothing; nothing was"
            " published (--force publishes it)"
        )
        assert stored.read_bytes() == before
    code, out, err = keyed("schema", "mail", "revert", "--target", "4", "--force", "--out", stored)
    assert code == 0 and out.strip().endswith("version 5"), err


def test_migrate_prints_its_class_and_what_changes(
    keyed: Run, stored: Path, tmp_path: Path
) -> None:
    file = definition(tmp_path, "3.yaml", SINGLE_LINE)
    code, out, err = keyed("schema", "mail", "migrate", file, "--out", stored)
    assert code == 0 and out.strip().endswith("version 4"), err
    assert err.splitlines()[0] == (
        "migrate to version 4 (lossy): 0 of 5 instances would be rejected, 5 kept;"
        " 5 rows change values"
    )


def test_without_a_store_a_breaking_revert_says_so_and_needs_yes(
    keyed: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    out = write_mails(keyed, tmp_path)
    code, _, err = keyed("schema", "mail", "revert", "--target", "2", "--out", out)
    assert code == 1
    assert err.splitlines() == [
        "revert to version 2 (breaking)",
        "note: no store here (no P2PANDA_DATABASE_URL, no embedded server): no counts",
        f"error: {Reason.UNCONFIRMED}: revert to version 2 would reject every create and"
        " update written at version 3: pass --yes to publish it; nothing was published",
    ]
    ok(keyed("schema", "mail", "revert", "--target", "2", "--yes", "--out", out))


def test_a_store_behind_the_local_log_gives_no_counts_and_says_why(
    keyed: Run, stored: Path, tmp_path: Path
) -> None:
    """Version 4 is not ingested: the revert would not chain onto the stored log, so
    the class alone is said, and the breaking revert needs `--yes` as without a store."""
    ok(keyed("schema", "mail", "migrate", definition(tmp_path, "3.yaml", SINGLE_LINE)))
    code, _, err = keyed("schema", "mail", "revert", "--target", "3", "--out", stored)
    assert code == 1
    assert err.splitlines()[:2] == [
        "revert to version 3 (breaking)",
        "note: the store holds mail up to version 3, the local log is at 4: no counts"
        " (ingest the schema log first)",
    ]
    assert err.splitlines()[-1].startswith(f"error: {Reason.UNCONFIRMED}: ")
