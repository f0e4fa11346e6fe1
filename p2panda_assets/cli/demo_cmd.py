"""`panda demo`: the slothmail story (`resources/`) on the embedded defaults, end to end.

An author (a fixed demo key, so a second run publishes the same entries and changes
nothing) writes the profile, attachment and slothmail schemas and some mail with the
authoring commands, into `$P2PANDA_HOME/demo/story.jsonl` (written anew on each run and
kept, so that `panda preview` can be tried on it); the server side ingests, registers and
materializes them through Dagster and prints the slothmail table. Then the author reverts
the migration that removed attachments and validated subjects, the table is materialized
again, and the demo says what changed, from the data (`what_changed`):

- a multi-line subject written at an old version shows as `<Subject>` while subjects
  are validated, and as written once the validation is reverted;
- attachments hidden by the migration come back after the revert;
- a mail deleted at a version the revert kills stays deleted.

Rows are printed as `panda preview` prints them (`preview_values`). Run again over the
same store, the demo says so: its entries are all there, the revert among them.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import shlex
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

from p2panda_assets.cli import materialize_cmd, publish_cmd, schema_cmd, store_cmd
from p2panda_assets.engine.corpus import Corpus, State, reduce_corpus
from p2panda_assets.engine.lens import FieldSpec
from p2panda_assets.engine.migrate import migrate_values
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.engine.values import Value, format_float, to_json
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.home import ensure_home, p2panda_home, write_private_file
from p2panda_assets.jsonlines import read_entry_lines
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.protocol.keys import KeyPair
from p2panda_assets.protocol.messages import (
    Create,
    Delete,
    SchemaHashRef,
    SchemaRevert,
    SchemaVersionRef,
    decode_message,
)
from p2panda_assets.protocol.timestamps import format_timestamp

RESOURCES = Path(__file__).resolve().parents[2] / "resources"
DEMO_COMMANDS = (schema_cmd, publish_cmd, store_cmd, materialize_cmd)
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


def command_parser() -> argparse.ArgumentParser:
    """The commands the demo runs, parsed as `panda` parses them. Not `cli.main`'s
    parser: that one holds this command, so importing it here closed an import circle."""
    parser = argparse.ArgumentParser(prog="panda")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in DEMO_COMMANDS:
        module.register(subparsers)
    return parser


def _panda(*argv: str) -> str:
    """One `panda` command in this process (inside the demo's own quiet output); its
    stdout. A typed error raises as it is; a command that fails otherwise (a build that
    failed: exit 1 and its lines on stderr) raises with those lines."""
    args = command_parser().parse_args(list(argv))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = args.run(args)
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


def serve(story: Path, author: Author, explain: bool = False) -> str:
    """The server's side: ingest, register, materialize (through Dagster); what it
    printed, for the narration to come first; `explain`: with what `built:` means."""
    ingested = _panda("ingest", str(story))
    for name in ("profile", "attachment", "slothmail"):
        key, log_id = parse_schema_id(author.schema_id(name))
        _panda("register", key.hex(), str(log_id), "--name", name)
    materialized = _panda("materialize")
    return (
        f"$ panda ingest {shlex.quote(str(story))}\n{ingested}\n"
        f"$ panda materialize\n{materialized}{built_legend(materialized) if explain else ''}"
    )


BUILT_LEGEND = (
    "(built: where a table was built: spark = Spark jobs, driver = a small change, no Spark)"
)


def built_legend(materialized: str) -> str:
    """The line that says what `panda materialize`'s `built: driver|spark` means, after
    its output when it says it (issue 56: the demo printed it unexplained)."""
    said = any(" built: " in line for line in materialized.splitlines())
    return f"\n{BUILT_LEGEND}" if said else ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A schema's table as PostgreSQL holds it, beside the engine's reduction of the story
    file as it stood then (which says why the table is what it is)."""

    schema_id: str
    table: str
    version: int  # the table's, as the registry says
    columns: list[str]
    rows: dict[str, dict[str, Any]]  # by instance id, values as `panda preview` shows them
    corpus: Corpus

    @property
    def history(self) -> SchemaHistory:
        return self.corpus.histories[self.schema_id]

    @property
    def ahead(self) -> bool:
        """Whether the table is at a later version than the story file so far: this
        store kept the entries of an earlier `panda demo`, its revert among them."""
        latest = self.history.latest
        return latest is not None and self.version > latest.seq


def snapshot(schema_id: str, story: Path) -> Snapshot:
    from p2panda_assets.store.database import connect
    from p2panda_assets.store.registry import registered_version, table_name_for, table_records

    table = table_name_for(schema_id)
    with connect() as conn:
        columns, records = table_records(conn, table)
        version = registered_version(conn, schema_id)
    assert version is not None  # its table was just read, so the schema is registered
    corpus = reduce_corpus(item for item in read_entry_lines([story]) if isinstance(item, tuple))
    history = corpus.histories[schema_id]
    # The story's lens is the table's unless the store holds a later version (a rerun).
    held = history.latest is not None and history.latest.seq == version
    lens = history.lens if held else {}
    rows = {str(record["_instance_id"]): preview_values(record, lens) for record in records}
    return Snapshot(schema_id, table, version, columns, rows, corpus)


def preview_values(record: dict[str, Any], lens: Mapping[str, FieldSpec]) -> dict[str, Any]:
    """A row as PostgreSQL returns it, with its values as `panda preview` prints them
    (rule T-VALUE: `_seq` a number, timestamps ISO 8601 in UTC with `Z`, bytes as hex): a
    field of the lens by `to_json`, as preview does, any other column by its type."""
    return {
        name: to_json(_value(value), lens[name].type) if name in lens else _column_json(value)
        for name, value in record.items()
    }


def _value(value: object) -> Value:
    """A PostgreSQL value as the engine holds it: arrays as tuples."""
    return cast(Value, tuple(value) if isinstance(value, list) else value)


def _column_json(value: object) -> object:
    """A column outside the lens (system columns, or one of a later version), in the
    form `to_json` gives its type."""
    if isinstance(value, list):
        return [_column_json(item) for item in value]
    if isinstance(value, Decimal):
        return int(value)
    if isinstance(value, datetime):
        return format_timestamp(value)
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, float) and not math.isfinite(value):
        return format_float(value)
    return value


def print_table(table: Snapshot) -> None:
    print(f"\n{table.table}  ({len(table.rows)} rows)")
    for record in table.rows.values():
        shown = {k: v for k, v in record.items() if k not in ("_author",)}
        shown["_instance_id"] = _short(shown["_instance_id"])
        print("  " + _json(shown))


def _short(instance_id: object) -> str:
    return str(instance_id)[:12] + "…"


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _versions(seqs: list[int]) -> str:
    return ("version " if len(seqs) == 1 else "versions ") + ", ".join(map(str, seqs))


# --- what a revert changed, from the data -----------------------------------------------


def what_changed(before: Snapshot, after: Snapshot, story: Path) -> list[str]:
    """A few plain lines on how the table changed between two snapshots of one schema
    across a revert: columns back or gone, values re-derived, rows gone or still gone."""
    old, new = before.history, after.history
    assert old.latest is not None and new.latest is not None
    revert = new.latest.message
    if not isinstance(revert, SchemaRevert) or new.latest.ignored_revert:
        return [f"version {new.latest.seq} is not an effective revert"]
    if before.version == after.version:
        return [
            f"nothing: the table was at version {after.version} already (this store kept "
            "the revert of an earlier `panda demo`)"
        ]
    target, killed = revert.target, sorted(new.dead - old.dead)
    lines = [
        f"version {new.latest.seq} reverts to version {target}, so {_versions(killed)} "
        f"{'is' if len(killed) == 1 else 'are'} dead: the table has version {target}'s lens "
        "again, applied to the same signed messages"
    ]
    lines += _columns(before, after, killed)
    lines += _values(before, after, target, killed)
    lines += _deletions(before, after, story)
    return lines


def _changes(history: SchemaHistory, seqs: list[int], name: str, action: str) -> list[int]:
    """Which of the versions `seqs` of `history` change field `name` by `action`."""
    found = []
    for seq in seqs:
        migration = history.versions[seq].migration
        if migration and any(c.name == name and c.action == action for c in migration.fields):
            found.append(seq)
    return found


def _columns(before: Snapshot, after: Snapshot, killed: list[int]) -> list[str]:
    lines = []
    for column in after.columns:
        if column not in before.columns:
            removed = _changes(before.history, killed, column, "remove")
            held = sum(row[column] is not None for row in after.rows.values())
            why = f"{_versions(removed)} had removed it" if removed else "a new column"
            lines.append(
                f"column {column} is back ({why}), with values in {held} of {len(after.rows)} rows"
            )
    for column in before.columns:
        if column not in after.columns:
            created = _changes(before.history, killed, column, "create")
            why = f"{_versions(created)} had created it" if created else "not in the lens"
            lines.append(f"column {column} is gone ({why})")
    return lines


def _values(before: Snapshot, after: Snapshot, target: int, killed: list[int]) -> list[str]:
    """Values that changed in rows in both tables. A field's value that fell back to its
    default on the killed migrations is found as the engine finds it: the row's values
    under the target's lens, migrated along the killed versions (`migrate_values`)."""
    engine_rows = {row.instance_id.hex(): row for row in after.corpus.tables[after.schema_id].rows}
    lines = []
    for instance_id in sorted(before.rows.keys() & after.rows.keys()):
        old, new = before.rows[instance_id], after.rows[instance_id]
        row = engine_rows.get(instance_id)
        fell_back: set[str] = set()
        if row is not None:
            _, fell_back = migrate_values(row.values, target, before.history, is_create=False)
        for column in after.columns:
            if column.startswith("_") or column not in old or old[column] == new[column]:
                continue
            change = f"{_short(instance_id)} {column}: {_json(old[column])} -> {_json(new[column])}"
            if row is not None and column in fell_back:
                at = _changes(before.history, killed, column, "update")
                spec = before.history.versions[at[-1]].lens[column] if at else None
                rule = f" (validation '{spec.validation}')" if spec and spec.validation else ""
                lines.append(
                    f"{change}: the value as written had fallen back to the field's default "
                    f"at {_versions(at)}{rule}; version {target}'s lens derives it again "
                    "from its message, which never changed"
                )
            else:
                lines.append(f"{change}: derived again through version {target}'s lens")
    return lines


def _deletions(before: Snapshot, after: Snapshot, story: Path) -> list[str]:
    """Rows gone from the table, and deleted instances that stay gone: a delete applies
    at every version, even one a revert made dead (rule I-DEAD)."""
    history = after.history
    versions = {h: (history.schema_id, seq) for seq, h in history.entry_hashes.items()}
    creates: dict[bytes, Create] = {}
    deletes: list[tuple[bytes, Delete]] = []
    for raw, payload in (i for i in read_entry_lines([story]) if isinstance(i, tuple)):
        if payload is None:
            continue
        entry_hash, message = decode_entry(raw).hash, decode_message(payload)
        if isinstance(message, Create):
            creates[entry_hash] = message
        elif isinstance(message, Delete):
            deletes.append((entry_hash, message))
    lines = []
    for entry_hash, delete in deletes:
        create = creates.get(delete.instance)
        account = after.corpus.accounts.get(entry_hash)
        if create is None or account is None or account.state != State.APPLIED:
            continue
        schema_id, created_at = _named(create.schema, versions)
        if schema_id != after.schema_id:
            continue
        instance_id = delete.instance.hex()
        at = _named(delete.schema, versions)[1] if delete.schema is not None else None
        when = "" if at is None else f" at version {at}"
        dead = " (dead now)" if at in history.dead else ""
        still = "still gone" if instance_id not in before.rows else "gone"
        lens = history.versions[created_at].lens if created_at in history.versions else {}
        label = next(
            (
                f" {_json(value)}"
                for name, value in create.fields
                if isinstance(value, str) and name in lens and not lens[name].type.is_relation
            ),
            "",
        )
        lines.append(
            f"{_short(instance_id)}{label} is {still}: deleted{when}{dead}, and a delete "
            "applies at every version"
        )
    for instance_id in sorted(before.rows.keys() - after.rows.keys()):
        if not any(d.instance.hex() == instance_id for _, d in deletes):
            lines.append(f"{_short(instance_id)} is gone from the table")
    return lines


def _named(
    ref: SchemaVersionRef | SchemaHashRef, versions: dict[bytes, tuple[str, int]]
) -> tuple[str | None, int | None]:
    """(schema id, version) that a message's schema reference names; (None, None) if it
    names a version not in `versions`."""
    if isinstance(ref, SchemaHashRef):
        return versions.get(ref.hash, (None, None))
    return ref.schema_id, ref.version


def opening(before: Snapshot) -> str:
    """The first heading, true on a first run and on a rerun over the same store."""
    if before.ahead:
        return (
            "The slothmail authors publish the same four versions again: this store kept"
            f" them from an earlier `panda demo`, revert included, so the table is at"
            f" version {before.version} already"
        )
    return "The slothmail authors publish four versions; one mail is deleted at version 4"


def revert_heading(before: Snapshot) -> str:
    if before.ahead:
        return "The authors revert slothmail to version 3 again: this store has that revert"
    return "The authors revert slothmail to version 3 (attachments, unvalidated subjects)"


def run_demo(args: argparse.Namespace) -> int:
    """The story, told; what Spark needs is looked for first (`setup_checks.preflight`),
    not after the authors and the ingest have run."""
    from p2panda_assets.setup_checks import preflight

    preflight()
    story = ensure_home(p2panda_home()) / "demo" / "story.jsonl"
    story.parent.mkdir(exist_ok=True)
    story.unlink(missing_ok=True)  # the commands append: each run writes the story anew
    with tempfile.TemporaryDirectory(prefix="p2panda-demo-") as scratch:
        author = Author(Path(scratch) / "author", story)
        write_story_until_revert(author)
        served = serve(story, author, explain=True)
        slothmail = author.schema_id("slothmail")
        before = snapshot(slothmail, story)
        print(f"== {opening(before)}\n{served}")
        print_table(before)
        print(f"\n== {revert_heading(before)}")
        author.run("schema", "slothmail", "revert", "--target", "3", "--yes")
        print(serve(story, author))
        after = snapshot(slothmail, story)
        print_table(after)
    print("\n== What changed")
    for line in what_changed(before, after, story):
        print(f"  {line}")
    print("\n$ panda status")
    print(_panda("status"))
    print(f"\n== The authors' entries are kept in {story}")
    print("The engine alone (no Spark, no database) computes the same table from them:")
    print(f"  panda preview {shlex.quote(str(story))} --schema {slothmail}")
    return 0
