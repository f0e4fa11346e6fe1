"""Issue 14: `panda demo` explains itself. Run as a user runs it (the installed command,
in a new `$P2PANDA_HOME`), it keeps its story file, ends with a `panda preview` line that
computes the very table it materialized, and says what the revert changed and why; its
stderr stays empty."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from p2panda_assets.cli.demo_cmd import BUILT_LEGEND
from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.engine.values import to_json
from p2panda_assets.jsonlines import read_entry_lines
from p2panda_assets.store.database import DATABASE_URL_ENV
from p2panda_assets.store.registry import table_name_for

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.e2e]

PANDA = Path(sys.executable).parent / "panda"


def section(out: str, title: str) -> list[str]:
    """The lines of the demo's `== title` section, up to the next blank line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"== {title}"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def table_as_preview(url: str, schema_id: str, story: Path) -> list[dict]:
    """The materialized table's rows in `panda preview`'s JSON form."""
    pairs = (item for item in read_entry_lines([story]) if isinstance(item, tuple))
    lens = reduce_corpus(pairs).tables[schema_id].history.lens
    with psycopg.connect(url) as conn:
        cursor = conn.execute(
            sql.SQL("SELECT * FROM {} ORDER BY _instance_id").format(
                sql.Identifier(*table_name_for(schema_id).split("."))
            )
        )
        names = [column.name for column in cursor.description]
        records = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    rows = []
    for record in records:
        row = {name: record.pop(name) for name in ("_instance_id", "_author", "_version", "_seq")}
        row["_seq"] = int(row["_seq"]) if isinstance(row["_seq"], Decimal) else row["_seq"]
        record.pop("_entry")
        for name, spec in lens.items():
            value = record.pop(name)
            row[name] = to_json(tuple(value) if isinstance(value, list) else value, spec.type)
        assert not record, f"columns outside the lens: {sorted(record)}"
        rows.append(row)
    return rows


def test_the_demo_keeps_its_story_and_says_what_the_revert_changed(
    database_url: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "P2PANDA_HOME": str(home), DATABASE_URL_ENV: database_url}
    env["SPARK_MASTER"] = "local[2]"
    env.pop("DAGSTER_HOME", None)
    demo = subprocess.run(
        [str(PANDA), "demo"], capture_output=True, text=True, env=env, timeout=1200
    )
    assert demo.returncode == 0, demo.stderr
    assert demo.stderr == ""
    assert demo.stdout.count(BUILT_LEGEND) == 1  # what `built: spark` means, said once

    # The story is kept, and the last line is a preview command that works as printed.
    story = home / "demo" / "story.jsonl"
    assert len(story.read_text().splitlines()) == 15  # 14 entries, then the revert
    kept = section(demo.stdout, "The authors' entries are kept in")
    assert kept[0] == f"== The authors' entries are kept in {story}"
    command = shlex.split(kept[-1])
    assert command[:3] == ["panda", "preview", str(story)]
    assert command[3] == "--schema" and len(command) == 5
    schema_id = command[4]
    preview = subprocess.run(
        [str(PANDA), *command[1:]], capture_output=True, text=True, env=env, timeout=120
    )
    assert (preview.returncode, preview.stderr) == (0, "")
    rows = [json.loads(line) for line in preview.stdout.splitlines()]
    assert rows == table_as_preview(database_url, schema_id, story)
    assert {row["subject"] for row in rows} == {"Hello!\n...friend", "A photo"}

    # What the revert changed, said from the data.
    changed = section(demo.stdout, "What changed")[1:]
    assert changed[0].startswith("  version 5 reverts to version 3, so version 4 is dead")
    back = [line for line in changed if "column attachments is back" in line]
    assert back == [
        "  column attachments is back (version 4 had removed it), with values in 1 of 2 rows"
    ]
    subject = [line for line in changed if " subject: " in line]
    assert len(subject) == 1
    assert ' subject: "<Subject>" -> "Hello!\\n...friend": ' in subject[0]
    assert "fallen back to the field's default at version 4" in subject[0]
    assert "version 3's lens derives it again from its message" in subject[0]
    gone = [line for line in changed if "gone" in line]
    assert len(gone) == 1
    assert '"Never mind" is still gone: deleted at version 4 (dead now)' in gone[0]
    assert len(changed) == 4
