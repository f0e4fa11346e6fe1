"""The local authoring state, `$P2PANDA_HOME/authoring.json`: what this key has published.

An author can only continue a log it knows the end of, so every entry a command
publishes is recorded here: the entry hashes by seq num (a `LogWriter` resumes from
them), the payloads of schema messages (to fold the local schema log into its lens and
check a migration before publishing it), and the instances of each instance log (to
refuse an update or delete the engine would reject). Losing this file means the logs
cannot be continued without a fork, so it is only ever replaced whole, atomically, and
kept readable by the owner only (the file, 0600: the home it is in stays passable for
the embedded server's user).

Layout (`format` 1), keyed by author so a second key never continues the first's logs:

    {"format": 1, "authors": {"<author hex>": {
        "next_log_id": 7,
        "schemas": {"slothmail": {"log_id": 3, "schema_id": "<author hex>-3"}},
        "instance_logs": {"<schema id>": 6},
        "logs": {"3": {"kind": "schema", "hashes": {"1": HEX}, "payloads": {"1": HEX}},
                 "6": {"kind": "instances", "schema_id": "<schema id>",
                       "hashes": {"1": HEX}, "instances": {"<instance id hex>": false}}}}}}
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.home import PRIVATE_FILE_MODE, ensure_home

STATE_FILE = "authoring.json"
LOCK_FILE = "authoring.lock"
FORMAT = 1
FIRST_LOG_ID = 1

LogKind = Literal["schema", "instances"]


@dataclass(slots=True)
class LogRecord:
    """One of the author's logs: enough to continue it and to re-read what it says."""

    log_id: int
    kind: LogKind
    hashes: dict[int, bytes] = field(default_factory=dict)  # seq -> entry hash
    payloads: dict[int, bytes] = field(default_factory=dict)  # schema logs: seq -> payload
    schema_id: str | None = None  # instance logs: the one schema they hold
    instances: dict[str, bool] = field(default_factory=dict)  # instance id hex -> deleted

    @property
    def next_seq(self) -> int:
        return len(self.hashes) + 1


@dataclass(frozen=True, slots=True)
class SchemaRecord:
    """A schema this author created here, by the local name it was created under."""

    name: str
    log_id: int
    schema_id: str


@dataclass(slots=True)
class AuthorState:
    """Everything one key has published from this home."""

    author: bytes
    next_log_id: int = FIRST_LOG_ID
    schemas: dict[str, SchemaRecord] = field(default_factory=dict)
    instance_logs: dict[str, int] = field(default_factory=dict)  # schema id -> log id
    logs: dict[int, LogRecord] = field(default_factory=dict)

    def new_log(self, kind: LogKind, schema_id: str | None = None) -> LogRecord:
        """The next free log id (schema and instance logs share the counter)."""
        record = LogRecord(self.next_log_id, kind, schema_id=schema_id)
        self.logs[record.log_id] = record
        self.next_log_id += 1
        return record

    def schema_by_id(self, schema_id: str) -> SchemaRecord | None:
        return next((s for s in self.schemas.values() if s.schema_id == schema_id), None)

    def instance_log(self, schema_id: str) -> LogRecord | None:
        log_id = self.instance_logs.get(schema_id)
        return None if log_id is None else self.logs[log_id]

    def log_of_instance(self, instance_id: bytes) -> LogRecord | None:
        """The own instance log whose create made `instance_id`, if any."""
        key = instance_id.hex()
        return next((r for r in self.logs.values() if key in r.instances), None)


@dataclass(slots=True)
class AuthoringState:
    authors: dict[str, AuthorState] = field(default_factory=dict)

    def author(self, public_key: bytes) -> AuthorState:
        """The state of `public_key`, created empty on its first use."""
        return self.authors.setdefault(public_key.hex(), AuthorState(public_key))


# --------------------------------------------------------------------------- files


def state_path(home: Path) -> Path:
    return home / STATE_FILE


@contextmanager
def state_lock(home: Path) -> Iterator[None]:
    """Hold the home's authoring lock: two commands appending to one log would fork it."""
    ensure_home(home)
    fd = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def load_state(home: Path) -> AuthoringState:
    """The stored state, or an empty one when nothing was published from this home."""
    path = state_path(home)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return AuthoringState()
    except OSError as error:
        raise P2pandaError(Reason.UNREADABLE_FILE, f"{path}: {error.strerror}") from None
    try:
        return _decode_state(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise P2pandaError(Reason.BAD_INPUT, f"{path} is not an authoring state: {error}") from None


def write_state_aside(home: Path, state: AuthoringState) -> Path:
    """Write the state to a private temp file beside the real one; `os.replace` commits it.

    `mkstemp` creates it 0600, so the secret-free but private state is never readable by
    others; it is fsynced, so the replace swaps in a complete file.
    """
    ensure_home(home)
    fd, name = tempfile.mkstemp(prefix=".authoring-", suffix=".json", dir=home)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(_encode_state(state), file, indent=1, sort_keys=True)
            file.write("\n")
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


# --------------------------------------------------------------------------- JSON form


def _encode_state(state: AuthoringState) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "authors": {key: _encode_author(author) for key, author in state.authors.items()},
    }


def _encode_author(author: AuthorState) -> dict[str, Any]:
    return {
        "next_log_id": author.next_log_id,
        "schemas": {
            name: {"log_id": s.log_id, "schema_id": s.schema_id}
            for name, s in author.schemas.items()
        },
        "instance_logs": dict(author.instance_logs),
        "logs": {str(log_id): _encode_log(r) for log_id, r in author.logs.items()},
    }


def _encode_log(record: LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": record.kind,
        "hashes": {str(seq): h.hex() for seq, h in record.hashes.items()},
    }
    if record.kind == "schema":
        out["payloads"] = {str(seq): p.hex() for seq, p in record.payloads.items()}
    else:
        out["schema_id"] = record.schema_id
        out["instances"] = dict(record.instances)
    return out


def _decode_state(data: dict[str, Any]) -> AuthoringState:
    if data.get("format") != FORMAT:
        raise ValueError(f"unknown format {data.get('format')!r}")
    return AuthoringState(
        {key: _decode_author(key, value) for key, value in data["authors"].items()}
    )


def _decode_author(key: str, data: dict[str, Any]) -> AuthorState:
    return AuthorState(
        author=bytes.fromhex(key),
        next_log_id=int(data["next_log_id"]),
        schemas={
            name: SchemaRecord(name, int(s["log_id"]), str(s["schema_id"]))
            for name, s in data["schemas"].items()
        },
        instance_logs={sid: int(log_id) for sid, log_id in data["instance_logs"].items()},
        logs={int(log_id): _decode_log(int(log_id), r) for log_id, r in data["logs"].items()},
    )


def _decode_log(log_id: int, data: dict[str, Any]) -> LogRecord:
    kind = data["kind"]
    if kind not in ("schema", "instances"):
        raise ValueError(f"log {log_id} has unknown kind {kind!r}")
    hashes = {int(seq): bytes.fromhex(h) for seq, h in data["hashes"].items()}
    if sorted(hashes) != list(range(1, len(hashes) + 1)):
        raise ValueError(f"log {log_id} does not hold seq nums 1..{len(hashes)}")
    return LogRecord(
        log_id=log_id,
        kind=kind,
        hashes=hashes,
        payloads={int(seq): bytes.fromhex(p) for seq, p in data.get("payloads", {}).items()},
        schema_id=data.get("schema_id"),
        instances={str(i): bool(d) for i, d in data.get("instances", {}).items()},
    )
