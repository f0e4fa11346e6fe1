"""Strict CBOR (RFC 8949) for message payloads: a fast decoder and a canonical encoder.

The decoder accepts exactly the subset rule M-CBOR allows: definite lengths, text map
keys, no duplicate keys, nesting depth at most 16 (arrays, maps and tags each count one
level), one item with no trailing bytes. Integers, byte and text strings, arrays, maps,
false/true/null, half/single/double floats and the date-time tags 0 and 1 are supported;
every other tag or simple value is `cbor-unsupported`. Non-shortest forms are accepted:
other writers (p2panda-js) are not required to be canonical.

Arbitrary bytes either decode or raise `P2pandaError`, and quickly: a declared length is
checked against the bytes left before anything is allocated.

`decode_cbor_fast` is cbor2's C decoder, held to the same subset: it answers for the
items it is sure of, and leaves every other one (`UNDECIDED`) to `decode_cbor`, which
says why it is refused (`protocol.messages.decode_message` takes it first).

The encoder writes what the product itself produces: shortest heads, floats in the
shortest of half/single/double that round-trips exactly (as p2panda-js does), maps in
insertion order, and datetimes as tag 0 RFC 3339 text in UTC.
"""

from __future__ import annotations

import io
import math
import re
import struct
from datetime import UTC, datetime, timedelta
from typing import Final

import cbor2

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.ids import MAX_U64
from p2panda_assets.protocol.timestamps import (
    DATE_TIME,
    NotATimestamp,
    format_timestamp,
    parse_timestamp,
)

MAX_DEPTH = 16
NINT64_MIN = -(MAX_U64 + 1)

_U16 = struct.Struct(">H").unpack_from
_U32 = struct.Struct(">I").unpack_from
_U64 = struct.Struct(">Q").unpack_from
_F16 = struct.Struct(">e")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_UNPACK_F16 = _F16.unpack_from
_UNPACK_F32 = _F32.unpack_from
_UNPACK_F64 = _F64.unpack_from

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------- errors


def _malformed(message: str) -> P2pandaError:
    return P2pandaError(Reason.CBOR_MALFORMED, message)


def _unsupported(message: str) -> P2pandaError:
    return P2pandaError(Reason.CBOR_UNSUPPORTED, message)


def _too_deep() -> P2pandaError:
    return P2pandaError(Reason.CBOR_TOO_DEEP, f"CBOR nesting is deeper than {MAX_DEPTH}")


# --------------------------------------------------------------------------- date-times


def parse_date_time(text: str) -> datetime:
    """Parse RFC 3339 date-time text into an aware UTC datetime (`bad-value` if malformed).

    An offset (or `Z`) is required: a local time names no instant. Fractions beyond
    microseconds are truncated (datetime's resolution); a leap second (`:60`) cannot be
    held by datetime and is rejected.
    """
    try:
        return parse_timestamp(text, DATE_TIME)
    except NotATimestamp:
        raise P2pandaError(
            Reason.BAD_VALUE, f"not an RFC 3339 date-time with an offset: {text[:40]!r}"
        ) from None
    except (ValueError, OverflowError):
        raise P2pandaError(Reason.BAD_VALUE, f"date-time out of range: {text[:40]!r}") from None


def format_date_time(value: datetime) -> str:
    """RFC 3339 text in UTC with a `Z`; microseconds only when nonzero."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise P2pandaError(Reason.BAD_VALUE, "a naive datetime names no instant; give a tzinfo")
    try:
        return format_timestamp(value)
    except OverflowError:
        raise P2pandaError(
            Reason.BAD_VALUE, "datetime out of range once converted to UTC"
        ) from None


def _tag0(content: object) -> datetime:
    """Tag 0: RFC 3339 text."""
    if type(content) is not str:
        raise P2pandaError(Reason.BAD_TYPE, "CBOR tag 0 must wrap a text string")
    return parse_date_time(content)


def _tag1(content: object) -> datetime:
    """Tag 1: seconds since the epoch, integer or float."""
    kind = type(content)
    if kind is not int and kind is not float:
        raise P2pandaError(Reason.BAD_TYPE, "CBOR tag 1 must wrap an integer or a float")
    if kind is float and not math.isfinite(content):  # type: ignore[arg-type]
        raise P2pandaError(Reason.BAD_VALUE, "CBOR tag 1 epoch time is not finite")
    try:
        return _EPOCH + timedelta(seconds=content)  # type: ignore[arg-type]
    except OverflowError:
        raise P2pandaError(Reason.BAD_VALUE, "CBOR tag 1 epoch time is out of range") from None


# --------------------------------------------------------------------------- decoding


def decode_cbor(data: bytes | bytearray | memoryview) -> object:
    """Decode exactly one strict CBOR item (see the module docstring for the rules).
    Rule M-CBOR (docs/semantics.md)."""
    if type(data) is not bytes:
        data = bytes(data)
    try:
        value, pos = _item(data, 0, 0)
    except (IndexError, struct.error):
        raise _malformed("CBOR ends inside an item") from None
    if pos != len(data):
        raise _malformed(f"{len(data) - pos} trailing bytes after the CBOR item")
    return value


class _Undecided:
    """What `decode_cbor_fast` gives where only `decode_cbor` can answer."""

    def __repr__(self) -> str:
        return "UNDECIDED"


UNDECIDED: Final = _Undecided()

# The tags cbor2 decodes itself (into datetimes, big integers, decimals, sets, shared or
# referenced values...): each is decoded here as `UNDECIDED`, which no message shape
# takes, so the payload goes to `decode_cbor` (tags 0 and 1 are dates there, the rest
# `cbor-unsupported`). cbor2 gives every other tag as a `CBORTag`, which no message shape
# takes either. `tests/protocol/test_cbor_fast.py` finds cbor2's own tags again.
CBOR2_TAGS: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100)
CBOR2_TAGS += (256, 258, 260, 261, 1004, 43000, 55799)
_AS_UNDECIDED: Final = {tag: (lambda _decoder, _value: UNDECIDED) for tag in CBOR2_TAGS}
# A half-precision NaN or infinity (exponent bits all set), or bytes that look like one
# inside a string: cbor2 keeps a NaN's payload bits where `struct` does not, so those
# payloads are decoded by `decode_cbor`, whose floats are the reference.
_HALF_SPECIAL = re.compile(rb"\xf9[\x7c-\x7f\xfc-\xff]")


def decode_cbor_fast(data: bytes) -> object:
    """`decode_cbor` of the items cbor2's C decoder is sure of, in about half the time;
    `UNDECIDED` for any other, and for any item `decode_cbor` refuses. It may give a
    value `decode_cbor` refuses only as one a message shape refuses too: an unknown tag
    (a `CBORTag`), a simple value or undefined, a map key that is not text, `UNDECIDED`
    inside. Indefinite lengths, repeated keys, nesting past `MAX_DEPTH`, bad UTF-8 and
    trailing bytes are `UNDECIDED`. Rule M-CBOR (docs/semantics.md)."""
    if _HALF_SPECIAL.search(data) is not None:
        return UNDECIDED
    stream = io.BytesIO(data)
    try:
        value = cbor2.CBORDecoder(
            stream,
            semantic_decoders=_AS_UNDECIDED,
            allow_indefinite=False,
            allow_duplicate_keys=False,
            max_depth=MAX_DEPTH,
        ).decode()
    except Exception:  # whatever cbor2 refuses, decode_cbor says why
        return UNDECIDED
    if stream.tell() != len(data):  # cbor2 reads no further than the item
        return UNDECIDED
    return value


def _argument(data: bytes, pos: int, info: int) -> tuple[int, int]:
    """The head's argument for additional information >= 24; `pos` is after the head."""
    if info == 24:
        return data[pos], pos + 1
    if info == 25:
        return _U16(data, pos)[0], pos + 2
    if info == 26:
        return _U32(data, pos)[0], pos + 4
    if info == 27:
        return _U64(data, pos)[0], pos + 8
    if info == 31:
        raise _malformed("indefinite-length CBOR items are not allowed")
    raise _malformed(f"reserved CBOR additional information {info}")


def _item(data: bytes, pos: int, depth: int) -> tuple[object, int]:
    """Decode the item at `pos` inside `depth` containers; return (value, next position).

    Truncation shows up as IndexError or struct.error, which `decode_cbor` maps to
    `cbor-malformed`; string lengths are checked explicitly because slicing never fails.
    """
    head = data[pos]
    pos += 1
    major = head >> 5
    info = head & 31
    if major == 3:  # text first: the most frequent item in a message
        if info >= 24:
            info, pos = _argument(data, pos, info)
        end = pos + info
        if end > len(data):
            raise _malformed("a CBOR text string is longer than the bytes left")
        try:
            return data[pos:end].decode("utf-8"), end
        except UnicodeDecodeError:
            raise _malformed("a CBOR text string is not valid UTF-8") from None
    if major == 7:
        return _simple(data, pos, info)
    if info >= 24:
        info, pos = _argument(data, pos, info)
    if major == 0:
        return info, pos
    if major == 5:
        return _map(data, pos, depth + 1, info)
    if major == 4:
        return _array(data, pos, depth + 1, info)
    if major == 2:
        end = pos + info
        if end > len(data):
            raise _malformed("a CBOR byte string is longer than the bytes left")
        return data[pos:end], end
    if major == 1:
        return -1 - info, pos
    return _tag(data, pos, depth + 1, info)


def _array(data: bytes, pos: int, depth: int, count: int) -> tuple[list[object], int]:
    if depth > MAX_DEPTH:
        raise _too_deep()
    if count > len(data) - pos:  # every item takes at least one byte
        raise _malformed("a CBOR array declares more items than the bytes left")
    out: list[object] = []
    append = out.append
    for _ in range(count):
        value, pos = _item(data, pos, depth)
        append(value)
    return out, pos


def _map(data: bytes, pos: int, depth: int, count: int) -> tuple[dict[str, object], int]:
    if depth > MAX_DEPTH:
        raise _too_deep()
    size = len(data)
    if 2 * count > size - pos:  # every key and value takes at least one byte
        raise _malformed("a CBOR map declares more entries than the bytes left")
    out: dict[str, object] = {}
    for _ in range(count):
        head = data[pos]
        if head >> 5 != 3:
            if head == 0xFF:
                raise _malformed("unexpected CBOR break code in a definite-length map")
            raise P2pandaError(Reason.CBOR_NON_TEXT_KEY, "a CBOR map key is not a text string")
        length = head & 31
        if length < 24:
            pos += 1
        else:
            length, pos = _argument(data, pos + 1, length)
        end = pos + length
        if end > size:
            raise _malformed("a CBOR text string is longer than the bytes left")
        try:
            key = data[pos:end].decode("utf-8")
        except UnicodeDecodeError:
            raise _malformed("a CBOR text string is not valid UTF-8") from None
        if key in out:
            raise P2pandaError(Reason.CBOR_DUPLICATE_KEY, f"the CBOR map repeats key {key!r}")
        out[key], pos = _item(data, end, depth)
    return out, pos


def _tag(data: bytes, pos: int, depth: int, number: int) -> tuple[datetime, int]:
    if number > 1:
        raise _unsupported(f"CBOR tag {number} is not supported")
    if depth > MAX_DEPTH:
        raise _too_deep()
    content, pos = _item(data, pos, depth)
    return (_tag1(content) if number else _tag0(content)), pos


def _simple(data: bytes, pos: int, info: int) -> tuple[object, int]:
    """Major type 7: false/true/null and floats; other simple values are unsupported."""
    if info == 20:
        return False, pos
    if info == 21:
        return True, pos
    if info == 22:
        return None, pos
    if info == 25:
        return _UNPACK_F16(data, pos)[0], pos + 2
    if info == 26:
        return _UNPACK_F32(data, pos)[0], pos + 4
    if info == 27:
        return _UNPACK_F64(data, pos)[0], pos + 8
    if info == 24:
        value = data[pos]
        if value < 32:
            raise _malformed(f"simple value {value} must use the one-byte form")
        raise _unsupported(f"CBOR simple value {value} is not supported")
    if info == 31:
        raise _malformed("unexpected CBOR break code")
    if info > 24:
        raise _malformed(f"reserved CBOR additional information {info}")
    if info == 23:
        raise _unsupported("CBOR undefined is not supported")
    raise _unsupported(f"CBOR simple value {info} is not supported")


# --------------------------------------------------------------------------- encoding


def encode_cbor(value: object) -> bytes:
    """Encode a value canonically; `decode_cbor` gives it back (tuples come back as lists).

    Accepts None, bool, int (-2^64 .. 2^64-1), float, str, bytes, list/tuple, dict with
    str keys (insertion order kept) and aware datetimes (tag 0, UTC). Anything else is
    `bad-type`; an out-of-range int or naive datetime is `bad-value`.
    """
    out = bytearray()
    _encode(out, value, 0)
    return bytes(out)


def _head(out: bytearray, major: int, n: int) -> None:
    """Write a head with the shortest argument form."""
    mt = major << 5
    if n < 24:
        out.append(mt | n)
    elif n < 0x100:
        out.append(mt | 24)
        out.append(n)
    elif n < 0x10000:
        out.append(mt | 25)
        out += n.to_bytes(2, "big")
    elif n < 0x100000000:
        out.append(mt | 26)
        out += n.to_bytes(4, "big")
    else:
        out.append(mt | 27)
        out += n.to_bytes(8, "big")


def _encode_float(out: bytearray, value: float) -> None:
    """The shortest IEEE 754 width that holds `value` exactly; NaN as f97e00."""
    if value != value:
        out += b"\xf9\x7e\x00"
        return
    for prefix, packer in ((0xF9, _F16), (0xFA, _F32)):
        try:
            packed = packer.pack(value)
        except OverflowError:
            continue
        if packer.unpack(packed)[0] == value:
            out.append(prefix)
            out += packed
            return
    out.append(0xFB)
    out += _F64.pack(value)


def _encode_text(out: bytearray, value: str) -> None:
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise P2pandaError(Reason.BAD_VALUE, "text holds a lone surrogate") from None
    _head(out, 3, len(raw))
    out += raw


def _encode(out: bytearray, value: object, depth: int) -> None:
    if value is None:
        out.append(0xF6)
    elif value is True:
        out.append(0xF5)
    elif value is False:
        out.append(0xF4)
    elif isinstance(value, str):
        _encode_text(out, value)
    elif isinstance(value, int):
        if 0 <= value <= MAX_U64:
            _head(out, 0, value)
        elif NINT64_MIN <= value < 0:
            _head(out, 1, -1 - value)
        else:
            raise P2pandaError(Reason.BAD_VALUE, f"integer {value} does not fit CBOR")
    elif isinstance(value, float):
        _encode_float(out, value)
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        _head(out, 2, len(raw))
        out += raw
    elif isinstance(value, list | tuple):
        if depth >= MAX_DEPTH:
            raise _too_deep()
        _head(out, 4, len(value))
        for item in value:
            _encode(out, item, depth + 1)
    elif isinstance(value, dict):
        _encode_map(out, value, depth + 1)
    elif isinstance(value, datetime):
        if depth >= MAX_DEPTH:
            raise _too_deep()
        out.append(0xC0)  # tag 0
        _encode_text(out, format_date_time(value))
    else:
        raise P2pandaError(Reason.BAD_TYPE, f"cannot encode {type(value).__name__} as CBOR")


def _encode_map(out: bytearray, value: dict[object, object], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _too_deep()
    _head(out, 5, len(value))
    for key, item in value.items():
        if not isinstance(key, str):
            raise P2pandaError(Reason.CBOR_NON_TEXT_KEY, f"map key {key!r} is not text")
        _encode_text(out, key)
        _encode(out, item, depth)
