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
from p2panda_assets.protocol.hashing import is_hash
from p2panda_assets.protocol.ids import AUTHOR_SIZE, MAX_U64, format_schema_id

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
    """The stored state, or an empty one when nothing was published from this home.
    A damaged file is `bad-state`, never guessed at: continuing a log from a wrong
    record would fork it."""
    path = state_path(home)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return AuthoringState()
    except OSError as error:
        raise P2pandaError(Reason.UNREADABLE_FILE, f"{path}: {error.strerror}") from None
    try:
        return _decode_state(_parse_json(raw))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        # The decoder checks every part it reads (ValueError); the others would be one it
        # missed, and still a damaged file rather than the product's failure.
        raise P2pandaError(Reason.BAD_STATE, f"{path} is damaged: {error}") from None


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


def _parse_json(raw: bytes) -> object:
    """The JSON value of the file's bytes; ValueError for text that is not one."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error})") from None
    except RecursionError:  # arrays or objects nested thousands deep
        raise ValueError("JSON nested too deeply") from None


def _decode_state(data: object) -> AuthoringState:
    state = _object(data, "the file")
    if state.get("format") != FORMAT:
        raise ValueError(f"unknown format {state.get('format')!r} (this panda reads {FORMAT})")
    authors = _object(_member(state, "authors", "the file"), '"authors"')
    return AuthoringState({key: _decode_author(key, value) for key, value in authors.items()})


def _decode_author(key: str, value: object) -> AuthorState:
    where = f"author {key}"
    data = _object(value, where)
    author = _hex(key, "an author key")
    if len(author) != AUTHOR_SIZE or author.hex() != key:
        raise ValueError(f"{key!r} is not an author key (64 lowercase hex digits)")
    schemas = _object(_member(data, "schemas", where), f"{where}: schemas")
    instance_logs = _object(_member(data, "instance_logs", where), f"{where}: instance_logs")
    logs = _object(_member(data, "logs", where), f"{where}: logs")
    decoded = AuthorState(
        author=author,
        next_log_id=_number(_member(data, "next_log_id", where), f"{where}: next_log_id"),
        schemas={name: _decode_schema(name, s, where) for name, s in schemas.items()},
        instance_logs={
            sid: _number(log_id, f"{where}: instance log of {sid}")
            for sid, log_id in instance_logs.items()
        },
        logs={log.log_id: log for log in (_decode_log(k, r, where) for k, r in logs.items())},
    )
    _check_references(decoded, where)
    return decoded


def _decode_schema(name: str, value: object, where: str) -> SchemaRecord:
    here = f"{where}: schema {name!r}"
    data = _object(value, here)
    schema_id = _member(data, "schema_id", here)
    if not isinstance(schema_id, str):
        raise ValueError(f"{here}: schema_id is not a string")
    return SchemaRecord(name, _number(_member(data, "log_id", here), f"{here}: log_id"), schema_id)


def _decode_log(key: str, value: object, where: str) -> LogRecord:
    log_id = _numeral(key, f"{where}: log {key!r}")
    here = f"{where}: log {log_id}"
    data = _object(value, here)
    kind = _member(data, "kind", here)
    if kind not in ("schema", "instances"):
        raise ValueError(f"{here} has unknown kind {kind!r}")
    hashes = {
        _numeral(seq, f"{here}: seq {seq!r}"): _hash(h, f"{here}: hash of seq {seq}")
        for seq, h in _object(_member(data, "hashes", here), f"{here}: hashes").items()
    }
    if sorted(hashes) != list(range(1, len(hashes) + 1)):
        raise ValueError(f"{here} does not hold seq nums 1..{len(hashes)}")
    payloads = _object(data.get("payloads", {}), f"{here}: payloads")
    instances = _object(data.get("instances", {}), f"{here}: instances")
    schema_id = data.get("schema_id")
    if schema_id is not None and not isinstance(schema_id, str):
        raise ValueError(f"{here}: schema_id is not a string")
    return LogRecord(
        log_id=log_id,
        kind=kind,
        hashes=hashes,
        payloads={
            _numeral(seq, f"{here}: payload {seq!r}"): _hex(p, f"{here}: payload of seq {seq}")
            for seq, p in payloads.items()
        },
        schema_id=schema_id,
        instances={
            _instance(i, f"{here}: instance {i!r}"): _flag(d, f"{here}: instance {i}")
            for i, d in instances.items()
        },
    )


def _check_references(author: AuthorState, where: str) -> None:
    """What the records say of each other holds: no log at or past `next_log_id` (a new
    log would take its id), every schema and instance log named is there and of its
    kind, every instance log is the one of its schema, and a schema log has the payload
    of each entry (the local lens folds them)."""
    for log_id, record in author.logs.items():
        if log_id >= author.next_log_id:
            raise ValueError(f"{where}: log {log_id} is not below next_log_id")
        if record.kind == "schema" and set(record.payloads) != set(record.hashes):
            raise ValueError(f"{where}: log {log_id} lacks the payload of an entry")
        if record.kind == "instances" and (
            record.schema_id is None or author.instance_logs.get(record.schema_id) != log_id
        ):
            raise ValueError(f"{where}: log {log_id} is no schema's instance log")
    for schema in author.schemas.values():
        log = author.logs.get(schema.log_id)
        if log is None or log.kind != "schema":
            raise ValueError(f"{where}: schema {schema.name!r} has no schema log {schema.log_id}")
        if schema.schema_id != format_schema_id(author.author, schema.log_id):
            raise ValueError(f"{where}: schema {schema.name!r} is not schema {schema.schema_id}")
    for schema_id, log_id in author.instance_logs.items():
        log = author.logs.get(log_id)
        if log is None or log.kind != "instances" or log.schema_id != schema_id:
            raise ValueError(f"{where}: no instance log {log_id} of {schema_id}")


# The parts of the JSON form: each checks its value and says where a wrong one is.


def _member(data: dict[str, Any], key: str, where: str) -> object:
    if key not in data:
        raise ValueError(f"{where} has no {key!r}")
    return data[key]


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} is not a JSON object")
    return value


def _number(value: object, where: str) -> int:
    """A log id or seq num: 1 up to a varu64's largest."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_U64:
        raise ValueError(f"{where} is not a number from 1 to 2^64 - 1")
    return value


def _numeral(text: str, where: str) -> int:
    """A log id or seq num as a JSON key spells it (plain decimal, no sign or spaces)."""
    if not (text.isascii() and text.isdigit() and text == str(int(text))):
        raise ValueError(f"{where} is not a decimal number")
    return _number(int(text), where)


def _hex(value: object, where: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{where} is not a hex string")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"{where} is not hex") from None


def _hash(value: object, where: str) -> bytes:
    digest = _hex(value, where)
    if not is_hash(digest):
        raise ValueError(f"{where} is not an entry hash")
    return digest


def _instance(key: str, where: str) -> str:
    """An instance id: the lowercase hex hash of the entry that created it (as looked up)."""
    if _hash(key, where).hex() != key:
        raise ValueError(f"{where} is not lowercase hex")
    return key


def _flag(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where}: deleted is not true or false")
    return value
