"""A publishing session: sign messages onto the author's own logs, then commit all at once.

Entries are made in memory; nothing reaches a file until `commit`. So a command that
fails (a migration the engine would reject, a value that does not fit) publishes
nothing and leaves the state as it was. Commit order protects against forks: the new
state is written aside first, the entries are appended to the out file, and only then
is the state swapped in; if the swap fails, the out file is cut back to where it was.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from p2panda_assets.authoring.state import (
    AuthoringState,
    AuthorState,
    LogRecord,
    load_state,
    state_lock,
    state_path,
    write_state_aside,
)
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.home import p2panda_home
from p2panda_assets.jsonlines import entry_line
from p2panda_assets.keystore import load_key
from p2panda_assets.protocol.keys import KeyPair
from p2panda_assets.protocol.log_writer import LogWriter
from p2panda_assets.protocol.messages import Message, encode_message, is_schema_message


@dataclass(frozen=True, slots=True)
class Published:
    """One new entry: where it went and its bytes."""

    log_id: int
    seq: int
    hash: bytes
    entry: bytes
    payload: bytes

    @property
    def line(self) -> str:
        return entry_line(self.entry, self.payload)


@dataclass(slots=True)
class Session:
    """One command's view of the local author: its key, its logs, and what it adds."""

    home: Path
    key: KeyPair
    state: AuthoringState
    published: list[Published] = field(default_factory=list)

    @property
    def me(self) -> AuthorState:
        return self.state.author(self.key.public_key)

    def append(self, record: LogRecord, message: Message) -> Published:
        """Sign `message` as the next entry of `record`'s log and record it in the state."""
        payload = encode_message(message)
        writer = LogWriter(self.key, record.log_id, hashes=record.hashes)
        entry = writer.append(payload)
        seq = writer.next_seq - 1
        record.hashes[seq] = writer.hashes[seq]
        if is_schema_message(message):
            record.payloads[seq] = payload
        published = Published(record.log_id, seq, record.hashes[seq], entry, payload)
        self.published.append(published)
        return published

    def commit(self, out: Path | None) -> None:
        """Make the session's entries real: append them to `out` (if given), save the state."""
        if not self.published:
            return
        aside = write_state_aside(self.home, self.state)
        try:
            start = None if out is None else _append(out, self.lines())
            try:
                os.replace(aside, state_path(self.home))
            except OSError:
                if out is not None and start is not None:
                    _truncate(out, start)
                raise
        finally:
            aside.unlink(missing_ok=True)

    def lines(self) -> str:
        return "".join(p.line + "\n" for p in self.published)


@contextmanager
def session(home: Path | None = None) -> Iterator[Session]:
    """A session on the local key (`no-key` without one), holding the authoring lock."""
    home = home or p2panda_home()
    key = load_key(home)
    with state_lock(home):
        yield Session(home, key, load_state(home))


def finish(session: Session, out: str | None, result: str, notes: Sequence[str]) -> int:
    """Commit and report, the output contract of the authoring commands (rule P-OUTPUT):
    with `--out` the entries are appended to the file and stdout gets the result; without
    it stdout gets the entry lines (so `panda ... >> story.jsonl` works) and stderr the
    result. Lines for people always go to stderr."""
    path = None if out is None else Path(out)
    session.commit(path)
    for note in notes:
        print(note, file=sys.stderr)
    if path is None:
        sys.stdout.write(session.lines())
        print(result, file=sys.stderr)
    else:
        print(result)
    return 0


def _append(out: Path, text: str) -> int:
    """Append `text` to `out` durably; return the size it had before (to undo)."""
    try:
        with open(out, "ab") as file:
            start = file.seek(0, os.SEEK_END)
            try:
                file.write(text.encode("utf-8"))
                file.flush()
                os.fsync(file.fileno())
            except OSError:
                file.truncate(start)
                raise
    except OSError as error:
        raise P2pandaError(
            Reason.UNWRITABLE_FILE, f"{out}: cannot write: {error.strerror}"
        ) from None
    return start


def _truncate(out: Path, size: int) -> None:
    with open(out, "r+b") as file:
        file.truncate(size)
