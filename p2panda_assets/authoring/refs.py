"""Naming schemas while authoring: local names, schema ids, and what each version says.

A user names a schema by the local name it was created under (`slothmail`) or by its
schema id (`<author hex>-<log id>`), optionally with a version (`slothmail@3`). For a
schema authored here the history (versions, lenses, dead versions) is folded from the
payloads in the state; for another author's schema it can be folded from a JSON-lines
file of its entries (`--entries`), else it is unknown and only its id is used.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from p2panda_assets.authoring.state import AuthorState, LogRecord
from p2panda_assets.engine.schema_log import SchemaHistory, fold_schema_log
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.jsonlines import BadLine, read_entry_lines
from p2panda_assets.protocol.entry import Entry, verify_entry
from p2panda_assets.protocol.ids import AUTHOR_HEX, format_schema_id, read_typed_schema_id
from p2panda_assets.protocol.log import validate_log
from p2panda_assets.protocol.messages import (
    Message,
    SchemaLogRef,
    SchemaRef,
    SchemaVersionRef,
    decode_message,
)


@dataclass(frozen=True, slots=True)
class Schema:
    """A schema as a command sees it: its log, a label for messages, and (if known) its
    folded history."""

    author: bytes
    log_id: int
    label: str
    history: SchemaHistory | None
    record: LogRecord | None = None  # the schema log, when this author wrote it

    @property
    def schema_id(self) -> str:
        return format_schema_id(self.author, self.log_id)

    @property
    def log_ref(self) -> SchemaLogRef:
        return SchemaLogRef(self.author, self.log_id)

    def version_ref(self, version: int) -> SchemaVersionRef:
        return SchemaVersionRef(self.author, self.log_id, version)

    @property
    def latest(self) -> int | None:
        """The latest valid version, when the history is known."""
        if self.history is None or self.history.latest is None:
            return None
        return self.history.latest.seq


def local_history(author: bytes, record: LogRecord) -> SchemaHistory:
    """Fold an own schema log from the payloads kept in the state."""
    items = [
        (seq, record.hashes[seq], decode_message(record.payloads[seq]))
        for seq in sorted(record.hashes)
    ]
    return fold_schema_log(author, record.log_id, items)


def find_schema(me: AuthorState, text: str, entries: Sequence[str] = ()) -> Schema:
    """The schema a user names: a local name, or a schema id (own or another author's)."""
    parsed = read_typed_schema_id(text)
    if parsed is None:
        record = me.schemas.get(text)
        if record is None:
            raise P2pandaError(
                Reason.UNKNOWN_SCHEMA,
                f"no local schema named {text!r} (name one by its schema id `<author>-<log>`)",
            )
        return _own(me, record.log_id, text)
    author, log_id = parsed
    if author == me.author and log_id in me.logs and me.logs[log_id].kind == "schema":
        own = me.schema_by_id(format_schema_id(author, log_id))
        return _own(me, log_id, own.name if own else text)
    history = foreign_history(author, log_id, entries) if entries else None
    label = (history.name if history else None) or text
    return Schema(author, log_id, label, history)


def _own(me: AuthorState, log_id: int, label: str) -> Schema:
    record = me.logs[log_id]
    return Schema(me.author, log_id, label, local_history(me.author, record), record)


def schema_ref(me: AuthorState, text: object, *, versioned: bool = False) -> SchemaRef:
    """A relation target or dependency as written in a definition file.

    `NAME`, `SCHEMA_ID` (the schema as a whole) or either with `@VERSION`; also the
    message form `[author hex, log id]` / `[author hex, log id, version]`. With
    `versioned`, a bare local name means its latest version.
    """
    if isinstance(text, list):
        return _ref_from_list(text)
    if not isinstance(text, str):
        raise P2pandaError(Reason.BAD_TYPE, f"a schema reference must be text, not {text!r}")
    base, version_text = text, ""
    if text not in me.schemas and "@" in text:
        base, _, version_text = text.rpartition("@")
    schema = find_schema(me, base)
    if version_text:
        if not version_text.isdigit() or int(version_text) < 1:
            raise P2pandaError(Reason.BAD_VALUE, f"{text!r}: the version must be a seq num >= 1")
        return schema.version_ref(int(version_text))
    if not versioned:
        return schema.log_ref
    if schema.latest is None:
        raise P2pandaError(Reason.BAD_VALUE, f"{text!r} needs a version: `{base}@VERSION`")
    return schema.version_ref(schema.latest)


def _ref_from_list(items: list[object]) -> SchemaRef:
    ok = (
        len(items) in (2, 3)
        and isinstance(items[0], str)
        and re.fullmatch(AUTHOR_HEX, items[0], re.IGNORECASE) is not None
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in items[1:])
    )
    if not ok:
        raise P2pandaError(
            Reason.BAD_VALUE,
            f"{items!r} is not [author hex, log id] or [author hex, log id, version]",
        )
    # Checked just above: author hex text, then non-negative ints.
    author = bytes.fromhex(cast(str, items[0]))
    numbers = cast(list[int], items[1:])
    if len(numbers) == 1:
        return SchemaLogRef(author, numbers[0])
    return SchemaVersionRef(author, numbers[0], numbers[1])


def foreign_history(author: bytes, log_id: int, paths: Sequence[str]) -> SchemaHistory:
    """Fold another author's schema log from JSON-lines files holding its entries, with
    the same checks a reader makes (signature, payload, chain)."""
    entries: dict[bytes, tuple[Entry, bytes]] = {}
    for item in read_entry_lines(paths):
        if isinstance(item, BadLine) or item[1] is None:
            continue
        try:
            entry = verify_entry(*item)
        except P2pandaError:
            continue
        if entry.author == author and entry.log_id == log_id:
            entries[entry.hash] = (entry, item[1])
    verdict = validate_log(entry for entry, _ in entries.values())
    if not verdict.accepted:
        raise P2pandaError(
            Reason.UNKNOWN_SCHEMA,
            f"no entries of schema {format_schema_id(author, log_id)} in {', '.join(paths)}",
        )
    items = [(e.seq_num, e.hash, _decode(entries[e.hash][1])) for e in verdict.accepted]
    return fold_schema_log(author, log_id, items)


def _decode(payload: bytes) -> Message | P2pandaError:
    try:
        return decode_message(payload)
    except P2pandaError as error:
        return error
