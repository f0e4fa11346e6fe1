"""`panda demo`: the seeds' slothmail story on the embedded defaults, end to end.

An author (a fixed demo key, so a second run publishes the same entries and changes
nothing) writes the profile, attachment and slothmail schemas and some mail with the
authoring commands; the server side ingests, registers and materializes them through
Dagster and prints the slothmail table. Then the author reverts the migration that
removed attachments and validated subjects, and the table is materialized again:

- a multi-line subject written at an old version shows as `<Subject>` while subjects
  are validated, and as written once the validation is reverted;
- attachments hidden by the migration come back after the revert;
- a mail deleted at a version the revert kills stays deleted.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from psycopg import sql

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.home import ensure_home, write_private_file
from p2panda_assets.protocol.keys import KeyPair

RESOURCES = Path(__file__).resolve().parents[2] / "resources"
DEMO_KEY = hashlib.sha256(b"p2panda-assets demo author").digest()


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="run the slothmail story on the embedded defaults")
    demo.set_defaults(run=run_demo)


@contextlib.contextmanager
def _home(path: Path) -> Iterator[None]:
    """Run authoring commands as the author, whose keys live in their own home."""
    before = os.environ.get("P2PANDA_HOME")
    os.environ["P2PANDA_HOME"] = str(path)
    try:
        yield
    finally:
        if before is None:
            del os.environ["P2PANDA_HOME"]
        else:
            os.environ["P2PANDA_HOME"] = before


def _panda(*argv: str) -> str:
    """One `panda` command in this process; its stdout (errors raise)."""
    from p2panda_assets.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    if code != 0:
        raise P2pandaError(Reason.BAD_INPUT, f"panda {' '.join(argv)}: {err.getvalue().strip()}")
    return out.getvalue().strip()


class Author:
    """The slothmail authors' side: a key, authoring state, and the entries file."""

    def __init__(self, home: Path, story: Path) -> None:
        self.home, self.story = home, story
        ensure_home(home)
        write_private_file(home / "author.key", DEMO_KEY.hex() + "\n")
        self.public_key = KeyPair.from_private_key(DEMO_KEY).public_key.hex()

    def run(self, *argv: str) -> str:
        with _home(self.home):
            return _panda(*argv, "--out", str(self.story))

    def schema_id(self, name: str) -> str:
        state = json.loads((self.home / "authoring.json").read_text())
        return state["authors"][self.public_key]["schemas"][name]["schema_id"]


def write_story_until_revert(author: Author) -> dict[str, str]:
    """Everything up to (not including) the revert; returns the instance ids."""
    author.run("schema", "profile", "init", "--file", str(RESOURCES / "profile-001.yaml"))
    author.run("schema", "attachment", "init", "--file", str(RESOURCES / "attachment-001.yaml"))
    author.run("schema", "slothmail", "init", "--description", "Send slothmail to your friends!")
    author.run("schema", "slothmail", "migrate", str(RESOURCES / "slothmail-001.yaml"))  # v2
    ids = {"sloth": author.run("publish", "create", "--schema", "profile", "--field", "name=sloth")}
    mail = ("publish", "create", "--schema", "slothmail", "--field", f"recipient={ids['sloth']}")
    ids["old multi-line"] = author.run(
        *mail, "--field", "subject=Hello!\n...friend", "--field", "created=2020-05-22T11:58:50+0000"
    )
    author.run("schema", "slothmail", "migrate", str(RESOURCES / "slothmail-002.yaml"))  # v3
    photo = author.run(
        "publish",
        "create",
        "--schema",
        "attachment",
        "--field",
        "filename=sloth.png",
        "--field",
        "data=89504e47",
    )
    ids["with attachment"] = author.run(
        *mail, "--field", "subject=A photo", "--field", f'attachments=["{photo}"]'
    )
    ids["deleted"] = author.run(*mail, "--field", "subject=Never mind")
    author.run("schema", "slothmail", "migrate", str(RESOURCES / "slothmail-003.yaml"))  # v4
    author.run("publish", "delete", "--schema", "slothmail", "--instance", ids["deleted"])
    return ids


def serve(story: Path, author: Author) -> None:
    """The server's side: ingest, register, materialize (through Dagster)."""
    print(f"$ panda ingest {story.name}\n{_panda('ingest', str(story))}")
    for name in ("profile", "attachment", "slothmail"):
        author_hex, log_id = author.schema_id(name).rsplit("-", 1)
        _panda("register", author_hex, log_id, "--name", name)
    print(f"$ panda materialize\n{_panda('materialize')}")


def print_table(schema_id: str) -> None:
    from p2panda_assets.store.database import connect
    from p2panda_assets.store.registry import table_identifier, table_name_for

    table = table_name_for(schema_id)
    with connect() as conn:
        cursor = conn.execute(
            sql.SQL("SELECT * FROM {} ORDER BY _instance_id").format(table_identifier(table))
        )
        columns = [c.name for c in cursor.description]
        rows = cursor.fetchall()
    print(f"\n{table}  ({len(rows)} rows)")
    for row in rows:
        record = dict(zip(columns, row, strict=True))
        shown = {k: v for k, v in record.items() if k not in ("_author",)}
        shown["_instance_id"] = str(shown["_instance_id"])[:12] + "…"
        print("  " + json.dumps(shown, default=str, ensure_ascii=False))


def run_demo(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="p2panda-demo-") as scratch:
        story = Path(scratch) / "story.jsonl"
        author = Author(Path(scratch) / "author", story)
        print("== The slothmail authors publish four versions; one mail is deleted at version 4")
        write_story_until_revert(author)
        serve(story, author)
        slothmail = author.schema_id("slothmail")
        print_table(slothmail)
        print("\n== The authors revert slothmail to version 3 (attachments, unvalidated subjects)")
        author.run("schema", "slothmail", "revert", "--target", "3")
        serve(story, author)
        print_table(slothmail)
    print("\n$ panda status")
    print(_panda("status"))
    return 0
