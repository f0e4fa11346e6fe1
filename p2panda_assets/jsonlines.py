"""The JSON-lines form p2panda clients publish: one `{"entry": HEX, "payload": HEX}` a line.

A line that is not in that form is normal input too: it is reported with its place and a
reason code, and never stops the lines after it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from p2panda_assets.errors import P2pandaError, Reason


@dataclass(frozen=True, slots=True)
class BadLine:
    path: str
    line: int
    error: P2pandaError


def parse_line(text: str) -> tuple[bytes, bytes | None]:
    """One line's (entry bytes, payload bytes or None)."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        raise P2pandaError(Reason.BAD_INPUT, "not a JSON object") from None
    except RecursionError:  # arrays or objects nested thousands deep
        raise P2pandaError(Reason.BAD_INPUT, "JSON nested too deeply") from None
    except ValueError as error:  # well-formed, but not for Python (an integer of 4,301 digits)
        raise P2pandaError(Reason.BAD_INPUT, f"JSON not read: {error}") from None
    if not isinstance(record, dict) or not isinstance(record.get("entry"), str):
        raise P2pandaError(Reason.BAD_INPUT, 'needs {"entry": HEX, "payload": HEX}')
    payload = record.get("payload")
    if payload is not None and not isinstance(payload, str):
        raise P2pandaError(Reason.BAD_INPUT, "payload must be a hex string")
    try:
        return bytes.fromhex(record["entry"]), None if payload is None else bytes.fromhex(payload)
    except ValueError:
        raise P2pandaError(Reason.BAD_HEX, "entry or payload is not hex") from None


# Some Windows tools begin a UTF-8 file with a byte order mark; JSON readers may ignore it
# (RFC 8259, section 8.1), and here it would cost the first line.
UTF8_BOM = b"\xef\xbb\xbf"


def read_entry_lines(paths: Iterable[str | Path]) -> Iterator[tuple[bytes, bytes | None] | BadLine]:
    """Every line of every file, in order; unreadable files raise `unreadable-file`. A
    line that is not UTF-8 is a bad line like any other, not the end of the file."""
    for _, _, item in read_located_lines(paths):
        yield item


def read_located_lines(
    paths: Iterable[str | Path],
) -> Iterator[tuple[str, int, tuple[bytes, bytes | None] | BadLine]]:
    """`read_entry_lines` with each item's file and line number, for a later warning."""
    for path in paths:
        try:
            file = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as error:
            raise P2pandaError(Reason.UNREADABLE_FILE, f"{path}: {error.strerror}") from None
        with file:
            for number, raw in enumerate(file, start=1):
                if number == 1:
                    raw = raw.removeprefix(UTF8_BOM)
                if not raw.strip():
                    continue
                try:
                    yield str(path), number, parse_line(_text(raw))
                except P2pandaError as error:
                    yield str(path), number, BadLine(str(path), number, error)


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise P2pandaError(Reason.BAD_INPUT, "the line is not UTF-8 text") from None


def entry_line(entry: bytes, payload: bytes) -> str:
    return json.dumps({"entry": entry.hex(), "payload": payload.hex()})
