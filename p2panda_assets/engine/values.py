"""Typed values: what a raw CBOR value *is* at a field type, and how a value renders.

The canonical Python value of each base type (rule M-VALUE), shared by the whole
engine so that conversion, validation and reduction never see a raw value:

- varchar, text: `str` (varchar at most 255 code points); never U+0000 or a lone
  surrogate, because PostgreSQL text cannot hold them
- integer: `int` in [-2^63, 2^63 - 1] (a `bool` is not an integer)
- float: `float`, an IEEE double; NaN and ±Infinity are values (PostgreSQL double
  precision stores them); all NaNs are one value, `math.nan`
- blob: `bytes`, at most 512 KiB
- boolean: `bool`
- timestamp: an aware `datetime` in UTC (`tzinfo=datetime.UTC`), microsecond precision
- relation: `str`, the lowercase hex of a well-formed YASMF or YAMF hash (an instance id)
- `T[]`: a `tuple` of element values, never holding `None`
- any type: `None` (null, an empty field)

`interpret` is strict: a raw value that does not fit its type makes the message
invalid (`invalid-value`); converting between types is `conversion.py`'s job.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.fieldtypes import (
    BLOB_MAX_BYTES,
    INTEGER_MAX,
    INTEGER_MIN,
    VARCHAR_MAX_CHARS,
    BaseType,
    FieldType,
)
from p2panda_assets.protocol.hashing import is_hash
from p2panda_assets.protocol.timestamps import (
    TIMESTAMP_TEXT,
    NotATimestamp,
    format_timestamp,
    parse_timestamp,
)

Scalar = str | int | float | bytes | bool | datetime
Value = Scalar | tuple[Scalar, ...] | None

# The canonical text (and JSON string) of the doubles JSON numbers cannot carry.
NAN_TEXT = "NaN"
INFINITY_TEXT = "Infinity"
NEG_INFINITY_TEXT = "-Infinity"


# --- helpers shared with conversion -------------------------------------------------


def exact_float(number: int) -> float | None:
    """`number` as a double if the double is exactly `number`, else None (never rounds)."""
    try:
        as_float = float(number)
    except OverflowError:
        return None
    return as_float if int(as_float) == number else None


def format_float(number: float) -> str:
    """The canonical text of a double: Python's shortest round-trip `repr` (`4.5`,
    `1e+20`, `-0.0`), or `NaN`, `Infinity`, `-Infinity`."""
    if math.isnan(number):
        return NAN_TEXT
    if math.isinf(number):
        return INFINITY_TEXT if number > 0 else NEG_INFINITY_TEXT
    return repr(float(number))


def parse_timestamp_text(text: str) -> datetime:
    """Parse `YYYY-MM-DD[T| ]hh:mm:ss[.f{1,9}](Z|±hh[[:]mm])` to an aware UTC datetime.

    Digits finer than a microsecond must be zero: the value is never rounded.
    Raises `invalid-value` when there is no offset or a field is out of range.
    """
    try:
        return parse_timestamp(text, TIMESTAMP_TEXT)
    except NotATimestamp:
        raise _invalid(BaseType.TIMESTAMP, text, "not ISO 8601 with a UTC offset") from None
    except (ValueError, OverflowError) as error:
        raise _invalid(BaseType.TIMESTAMP, text, str(error)) from None


# --- interpret: raw CBOR value -> canonical value -----------------------------------


def interpret(raw: object, ftype: FieldType) -> Value:
    """The canonical value of `raw` (as decoded from a message) at `ftype` (rule
    M-VALUE, docs/semantics.md).

    Strict: anything that does not fit raises `P2pandaError(invalid-value)`, because a
    value invalid at the version it names rejects the message (rule I-STRICT).
    """
    if raw is None:
        return None
    if ftype.is_array:
        if not isinstance(raw, list | tuple):
            raise _invalid(ftype, raw, "expected an array")
        return tuple(_interpret_element(item, ftype.base) for item in raw)
    return _interpret_scalar(raw, ftype.base)


def _interpret_element(raw: object, base: BaseType) -> Scalar:
    if raw is None:
        raise _invalid(FieldType(base, True), raw, "arrays hold no null elements")
    return _interpret_scalar(raw, base)


def _interpret_scalar(raw: object, base: BaseType) -> Scalar:
    if isinstance(raw, list | tuple):
        raise _invalid(base, raw, "expected a single value, not an array")
    return _INTERPRETERS[base](raw)


def _interpret_varchar(raw: object) -> str:
    text = _interpret_text(raw, BaseType.VARCHAR)
    if len(text) > VARCHAR_MAX_CHARS:
        raise _invalid(BaseType.VARCHAR, raw, f"longer than {VARCHAR_MAX_CHARS} characters")
    return text


def _interpret_text(raw: object, base: BaseType = BaseType.TEXT) -> str:
    if not isinstance(raw, str):
        raise _invalid(base, raw, "expected a text string")
    if "\x00" in raw:
        raise _invalid(base, raw, "U+0000 cannot be stored")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid(base, raw, "not valid Unicode (lone surrogate)") from None
    return str(raw)


def _interpret_integer(raw: object) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise _invalid(BaseType.INTEGER, raw, "expected an integer")
    if not INTEGER_MIN <= raw <= INTEGER_MAX:
        raise _invalid(BaseType.INTEGER, raw, "outside signed 64-bit")
    return int(raw)


def _interpret_float(raw: object) -> float:
    """A float, or an integer the double represents exactly (JS clients write 2.0 as 2)."""
    if isinstance(raw, float):
        return math.nan if math.isnan(raw) else float(raw)
    if isinstance(raw, int) and not isinstance(raw, bool):
        exact = exact_float(raw)
        if exact is not None:
            return exact
        raise _invalid(BaseType.FLOAT, raw, "integer not exactly representable as a double")
    raise _invalid(BaseType.FLOAT, raw, "expected a float")


def _interpret_blob(raw: object) -> bytes:
    if not isinstance(raw, bytes):
        raise _invalid(BaseType.BLOB, raw, "expected a byte string")
    if len(raw) > BLOB_MAX_BYTES:
        raise _invalid(BaseType.BLOB, raw, f"larger than {BLOB_MAX_BYTES} bytes")
    return bytes(raw)


def _interpret_boolean(raw: object) -> bool:
    if not isinstance(raw, bool):
        raise _invalid(BaseType.BOOLEAN, raw, "expected a boolean")
    return raw


def _interpret_timestamp(raw: object) -> datetime:
    """An aware datetime (CBOR tag 0 or 1) or ISO 8601 text with a UTC offset."""
    if isinstance(raw, str):
        return parse_timestamp_text(raw)
    if not isinstance(raw, datetime):
        raise _invalid(BaseType.TIMESTAMP, raw, "expected a timestamp")
    if raw.utcoffset() is None:
        raise _invalid(BaseType.TIMESTAMP, raw, "no UTC offset")
    try:
        return raw.astimezone(UTC)
    except OverflowError:
        raise _invalid(BaseType.TIMESTAMP, raw, "outside years 1..9999 in UTC") from None


def _interpret_relation(raw: object) -> str:
    if not isinstance(raw, bytes) or not is_hash(raw):
        raise _invalid(BaseType.RELATION, raw, "expected the bytes of a YASMF or YAMF hash")
    return raw.hex()


_INTERPRETERS: dict[BaseType, Callable[[object], Scalar]] = {
    BaseType.VARCHAR: _interpret_varchar,
    BaseType.TEXT: _interpret_text,
    BaseType.INTEGER: _interpret_integer,
    BaseType.FLOAT: _interpret_float,
    BaseType.BLOB: _interpret_blob,
    BaseType.BOOLEAN: _interpret_boolean,
    BaseType.TIMESTAMP: _interpret_timestamp,
    BaseType.RELATION: _interpret_relation,
}


# --- natural type: a raw value read as what it plainly is ---------------------------

# Order matters: bool is a subclass of int.
_NATURAL_BASES: tuple[tuple[type, BaseType], ...] = (
    (bool, BaseType.BOOLEAN),
    (int, BaseType.INTEGER),
    (float, BaseType.FLOAT),
    (str, BaseType.TEXT),
    (bytes, BaseType.BLOB),
    (datetime, BaseType.TIMESTAMP),
)


def natural_type(raw: object) -> FieldType:
    """The type a non-null raw value plainly has (str: text, bytes: blob, list: T[]).

    Lets a migration default of any CBOR shape be converted to its field's type.
    An empty array reads as `text[]` (it converts to an empty array of any type);
    an array mixing types, holding null or nesting arrays has no natural type.
    """
    if not isinstance(raw, list | tuple):
        return FieldType(_natural_base(raw))
    bases = {_natural_base(item) for item in raw}
    if len(bases) > 1:
        raise _invalid("an array", raw, "elements of different types")
    return FieldType(bases.pop() if bases else BaseType.TEXT, True)


def _natural_base(raw: object) -> BaseType:
    for kind, base in _NATURAL_BASES:
        if isinstance(raw, kind):
            return base
    raise _invalid("any type", raw, "no field type holds this value")


# --- rendering ------------------------------------------------------------------------


def to_json(value: Value, ftype: FieldType) -> Any:
    """The JSON form of `panda preview` (rule T-VALUE): text as strings, bytes and ids
    as hex, timestamps ISO 8601 UTC with `Z`, arrays as arrays, null as null. Finite
    floats are numbers; NaN and ±Infinity, which JSON lacks, are the strings `NaN`,
    `Infinity`, `-Infinity`."""
    if value is None:
        return None
    if ftype.is_array:
        assert isinstance(value, tuple)
        return [_JSON[ftype.base](item) for item in value]
    return _JSON[ftype.base](value)


def _float_json(number: float) -> float | str:
    return number if math.isfinite(number) else format_float(number)


_JSON: dict[BaseType, Callable[[Any], Any]] = {
    BaseType.VARCHAR: str,
    BaseType.TEXT: str,
    BaseType.INTEGER: int,
    BaseType.FLOAT: _float_json,
    BaseType.BLOB: bytes.hex,
    BaseType.BOOLEAN: bool,
    BaseType.TIMESTAMP: format_timestamp,
    BaseType.RELATION: str,
}


def to_raw(value: Value, ftype: FieldType) -> object:
    """The raw (CBOR-level) value a client writes for `value`: the inverse of
    `interpret`, so messages can be authored from typed values."""
    if value is None:
        return None
    if ftype.is_array:
        assert isinstance(value, tuple)
        return [_scalar_to_raw(item, ftype.base) for item in value]
    return _scalar_to_raw(value, ftype.base)


def _scalar_to_raw(value: Any, base: BaseType) -> object:
    return bytes.fromhex(value) if base is BaseType.RELATION else value


# --- errors -----------------------------------------------------------------------------


def _invalid(where: object, raw: object, why: str) -> P2pandaError:
    """An `invalid-value` error naming the type, the reason and a short view of the value."""
    shown = repr(raw)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return P2pandaError(Reason.INVALID_VALUE, f"{why} ({where}): {shown}")
