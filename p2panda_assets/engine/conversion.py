"""Conversion between field types: total, documented, never guessing (rule C-CONVERT).

`convert` either yields the value at the target type or raises `ConversionFailed`;
a migration then stores the field's default. Failing is normal, so `ConversionFailed`
is not a `P2pandaError`. The scalar rules are one table, `SCALAR_RULES`, keyed by
(source base, target base); a pair it does not list always fails. Arrays follow the
rules in `convert`. `docs/conversion.md` is rendered from this module
(`python -m p2panda_assets.engine.conversion > docs/conversion.md`) and a test keeps
the two equal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from p2panda_assets.engine.values import (
    INFINITY_TEXT,
    NAN_TEXT,
    NEG_INFINITY_TEXT,
    Scalar,
    Value,
    exact_float,
    format_float,
    format_timestamp,
    interpret,
    natural_type,
    parse_timestamp_text,
)
from p2panda_assets.errors import P2pandaError
from p2panda_assets.protocol.fieldtypes import (
    BLOB_MAX_BYTES,
    INTEGER_MAX,
    INTEGER_MIN,
    VARCHAR_MAX_CHARS,
    BaseType,
    FieldType,
)
from p2panda_assets.protocol.hashing import is_hash


class ConversionFailed(Exception):
    """A value has no counterpart at the target type (the migration stores the default)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """How one (source, target) pair of base types converts, and its one-line doc."""

    convert: Callable[[Any], Scalar]
    text: str
    lossless: bool = False  # every source value converts, and converts back identically


# --- the scalar converters (each takes a canonical value, see values.py) ------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_DECIMAL = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT_LITERAL = re.compile(
    r"[+-]?(?P<mantissa>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII
)
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*", re.ASCII)
_NON_FINITE = {NAN_TEXT: math.nan, INFINITY_TEXT: math.inf, NEG_INFINITY_TEXT: -math.inf}
_BOOLEAN_TEXT = {"true": True, "false": False}
_INTEGER_MAX_DIGITS = len(str(INTEGER_MAX))


def _identity(value: Scalar) -> Scalar:
    return value


def _varchar(to_text: Callable[[Any], str]) -> Callable[[Any], str]:
    """`to_text`, failing when the text is longer than a varchar holds."""

    def to_varchar(value: Any) -> str:
        return _text_to_varchar(to_text(value))

    to_varchar.__name__ = f"{to_text.__name__}_as_varchar"
    return to_varchar


def _text_to_varchar(text: str) -> str:
    if len(text) > VARCHAR_MAX_CHARS:
        raise ConversionFailed(f"text of {len(text)} characters exceeds varchar")
    return text


def _text_to_integer(text: str) -> int:
    if _DECIMAL.fullmatch(text) is None:
        raise ConversionFailed("not a whole decimal integer")
    if len(text.lstrip("+-").lstrip("0")) > _INTEGER_MAX_DIGITS:
        raise ConversionFailed("integer outside signed 64-bit")
    return _integer_in_range(int(text))


def _integer_in_range(number: int) -> int:
    if not INTEGER_MIN <= number <= INTEGER_MAX:
        raise ConversionFailed("integer outside signed 64-bit")
    return number


def _text_to_float(text: str) -> float:
    if text in _NON_FINITE:
        return _NON_FINITE[text]
    match = _FLOAT_LITERAL.fullmatch(text)
    if match is None:
        raise ConversionFailed("not a decimal number")
    number = float(text)
    if math.isinf(number):
        raise ConversionFailed("number overflows a double")
    if number == 0 and match["mantissa"].strip("0.") != "":
        raise ConversionFailed("nonzero number underflows a double to zero")
    return number


def _text_to_blob(text: str) -> bytes:
    if _HEX.fullmatch(text) is None:
        raise ConversionFailed("not hex of even length")
    if len(text) // 2 > BLOB_MAX_BYTES:
        raise ConversionFailed("bytes exceed the blob size limit")
    return bytes.fromhex(text)


def _text_to_boolean(text: str) -> bool:
    if text not in _BOOLEAN_TEXT:
        raise ConversionFailed("not exactly `true` or `false`")
    return _BOOLEAN_TEXT[text]


def _text_to_timestamp(text: str) -> datetime:
    try:
        return parse_timestamp_text(text)
    except P2pandaError as error:
        raise ConversionFailed(error.message) from None


def _text_to_relation(text: str) -> str:
    if _HEX.fullmatch(text) is None:
        raise ConversionFailed("not hex of even length")
    return _blob_to_relation(bytes.fromhex(text))


def _integer_to_text(number: int) -> str:
    return str(number)


def _integer_to_float(number: int) -> float:
    exact = exact_float(number)
    if exact is None:
        raise ConversionFailed("integer not exactly representable as a double")
    return exact


def _integer_to_boolean(number: int) -> bool:
    if number not in (0, 1):
        raise ConversionFailed("only 0 and 1 are booleans")
    return number == 1


def _integer_to_timestamp(seconds: int) -> datetime:
    try:
        return _EPOCH + timedelta(seconds=seconds)
    except OverflowError:
        raise ConversionFailed("epoch seconds outside years 1..9999") from None


def _float_to_integer(number: float) -> int:
    if not math.isfinite(number) or not number.is_integer():
        raise ConversionFailed("float is not integral")
    return _integer_in_range(int(number))


def _blob_to_text(data: bytes) -> str:
    return data.hex()


def _blob_to_relation(data: bytes) -> str:
    if not is_hash(data):
        raise ConversionFailed("bytes are not a well-formed YASMF or YAMF hash")
    return data.hex()


def _boolean_to_text(flag: bool) -> str:
    return "true" if flag else "false"


def _boolean_to_integer(flag: bool) -> int:
    return int(flag)


def _timestamp_to_integer(moment: datetime) -> int:
    if moment.microsecond:
        raise ConversionFailed("timestamp is not a whole second")
    return (moment - _EPOCH) // _SECOND


def _relation_to_text(instance_id: str) -> str:
    return instance_id


def _relation_to_blob(instance_id: str) -> bytes:
    return bytes.fromhex(instance_id)


# --- the table ----------------------------------------------------------------------

VARCHAR = BaseType.VARCHAR
TEXT = BaseType.TEXT
INTEGER = BaseType.INTEGER
FLOAT = BaseType.FLOAT
BLOB = BaseType.BLOB
BOOLEAN = BaseType.BOOLEAN
TIMESTAMP = BaseType.TIMESTAMP
RELATION = BaseType.RELATION

_DECIMAL_RULE = "the whole text is `[+-]?[0-9]+` (ASCII digits, leading zeros allowed) in int64"
_FLOAT_RULE = (
    "the whole text is a decimal literal (`1`, `-2.5`, `.5`, `1e+20`) that neither overflows"
    " nor underflows to zero, or exactly `NaN`, `Infinity`, `-Infinity`"
)
_HEX_RULE = "the whole text is hex of even length (either case), at most 512 KiB decoded"
_TIMESTAMP_RULE = "ISO 8601 with a UTC offset (`Z`, `±hh`, `±hhmm`, `±hh:mm`), to UTC"
_RELATION_RULE = "hex (either case) of a well-formed YASMF/YAMF hash, lowercased"

SCALAR_RULES: dict[tuple[BaseType, BaseType], Rule] = {
    **{(base, base): Rule(_identity, "identity", lossless=True) for base in BaseType},
    (VARCHAR, TEXT): Rule(_identity, "always, unchanged", lossless=True),
    (VARCHAR, INTEGER): Rule(_text_to_integer, _DECIMAL_RULE),
    (VARCHAR, FLOAT): Rule(_text_to_float, _FLOAT_RULE),
    (VARCHAR, BLOB): Rule(_text_to_blob, _HEX_RULE),
    (VARCHAR, BOOLEAN): Rule(_text_to_boolean, "exactly `true` or `false`"),
    (VARCHAR, TIMESTAMP): Rule(_text_to_timestamp, _TIMESTAMP_RULE),
    (VARCHAR, RELATION): Rule(_text_to_relation, _RELATION_RULE),
    (TEXT, VARCHAR): Rule(_text_to_varchar, "unchanged when at most 255 characters"),
    (TEXT, INTEGER): Rule(_text_to_integer, _DECIMAL_RULE),
    (TEXT, FLOAT): Rule(_text_to_float, _FLOAT_RULE),
    (TEXT, BLOB): Rule(_text_to_blob, _HEX_RULE),
    (TEXT, BOOLEAN): Rule(_text_to_boolean, "exactly `true` or `false`"),
    (TEXT, TIMESTAMP): Rule(_text_to_timestamp, _TIMESTAMP_RULE),
    (TEXT, RELATION): Rule(_text_to_relation, _RELATION_RULE),
    (INTEGER, VARCHAR): Rule(_varchar(_integer_to_text), "decimal, `-` if negative", True),
    (INTEGER, TEXT): Rule(_integer_to_text, "decimal, `-` if negative", lossless=True),
    (INTEGER, FLOAT): Rule(_integer_to_float, "when the double is exactly the integer"),
    (INTEGER, BOOLEAN): Rule(_integer_to_boolean, "0 is false, 1 is true, others fail"),
    (INTEGER, TIMESTAMP): Rule(_integer_to_timestamp, "as Unix epoch seconds, years 1..9999"),
    (FLOAT, VARCHAR): Rule(_varchar(format_float), "canonical float text", lossless=True),
    (FLOAT, TEXT): Rule(format_float, "canonical float text", lossless=True),
    (FLOAT, INTEGER): Rule(_float_to_integer, "when integral and in int64"),
    (BLOB, VARCHAR): Rule(_varchar(_blob_to_text), "lowercase hex, when at most 255 chars"),
    (BLOB, TEXT): Rule(_blob_to_text, "lowercase hex", lossless=True),
    (BLOB, RELATION): Rule(_blob_to_relation, "when the bytes are a well-formed hash"),
    (BOOLEAN, VARCHAR): Rule(_varchar(_boolean_to_text), "`true` or `false`", lossless=True),
    (BOOLEAN, TEXT): Rule(_boolean_to_text, "`true` or `false`", lossless=True),
    (BOOLEAN, INTEGER): Rule(_boolean_to_integer, "false is 0, true is 1", lossless=True),
    (TIMESTAMP, VARCHAR): Rule(_varchar(format_timestamp), "ISO 8601 UTC with `Z`", True),
    (TIMESTAMP, TEXT): Rule(format_timestamp, "ISO 8601 UTC with `Z`", lossless=True),
    (TIMESTAMP, INTEGER): Rule(_timestamp_to_integer, "Unix epoch seconds, when whole"),
    (RELATION, VARCHAR): Rule(_varchar(_relation_to_text), "its lowercase hex", True),
    (RELATION, TEXT): Rule(_relation_to_text, "its lowercase hex", lossless=True),
    (RELATION, BLOB): Rule(_relation_to_blob, "the hash bytes", lossless=True),
}


# --- conversion -------------------------------------------------------------------------


def convert(value: Value, source: FieldType, target: FieldType) -> Value:
    """`value` (canonical at `source`) at `target`, or `ConversionFailed` (rule C-ARRAY,
    docs/semantics.md).

    Null stays null. A scalar to an array converts it and wraps it in a one-element
    array; an array to a scalar converts only a one-element array (its element);
    an array to an array converts element-wise and fails if any element fails.
    """
    if value is None:
        return None
    if not source.is_array:
        assert not isinstance(value, tuple)  # canonical at a scalar type
        converted = convert_scalar(value, source.base, target.base)
        return (converted,) if target.is_array else converted
    assert isinstance(value, tuple)
    if target.is_array:
        return tuple(convert_scalar(item, source.base, target.base) for item in value)
    if len(value) != 1:
        raise ConversionFailed(f"an array of {len(value)} elements is not one value")
    return convert_scalar(value[0], source.base, target.base)


def convert_scalar(value: Scalar, source: BaseType, target: BaseType) -> Scalar:
    """Rule C-CONVERT (docs/semantics.md): one non-null value through the table; a pair
    the table lacks fails."""
    rule = SCALAR_RULES.get((source, target))
    if rule is None:
        raise ConversionFailed(f"{source} does not convert to {target}")
    return rule.convert(value)


def convert_raw(raw: object, target: FieldType) -> Value:
    """A raw CBOR value (a migration default) read at its natural type, then converted.

    Raises `ConversionFailed` also when the raw value is no field value at all.
    """
    if raw is None:
        return None
    try:
        source = natural_type(raw)
        value = interpret(raw, source)
    except P2pandaError as error:
        raise ConversionFailed(error.message) from None
    return convert(value, source, target)


def is_lossless(source: FieldType, target: FieldType) -> bool:
    """True when every value of `source` converts to `target` and back unchanged."""
    if source.is_array and not target.is_array:
        return False  # arrays of two or more elements do not convert
    rule = SCALAR_RULES.get((source.base, target.base))
    return rule is not None and rule.lossless


# --- the documentation ------------------------------------------------------------------

_MATRIX_MARKS = {"identity": "=", "lossless": "L", "conditional": "C", "fails": "-"}

_HEADER = """\
# Conversion between field types

<!-- Generated by `python -m p2panda_assets.engine.conversion > docs/conversion.md`
from p2panda_assets/engine/conversion.py; tests/engine/test_conversion.py fails when
this file and the code disagree. Do not edit by hand. -->

When a migration changes a field's type (rule C-FALLBACK), every stored value is
converted to the new type. Conversion is total: it yields a value or fails, and a value
that fails to convert (or then fails the field's validation) is replaced by the
migration's default. It never guesses. Null converts to null at every type.
"""

_ARRAYS = """\
## Arrays

- scalar `S` to array `T[]`: convert the value by the `S` to `T` rule and wrap it in a
  one-element array.
- array `S[]` to scalar `T`: only a one-element array converts (its element, by the
  `S` to `T` rule); an empty or longer array fails.
- array `S[]` to array `T[]`: element by element by the `S` to `T` rule; if any
  element fails, the whole value fails. An empty array converts to an empty array.
- lossless: `S` to `T[]` and `S[]` to `T[]` when `S` to `T` is; `S[]` to `T` never.
"""

_CANONICAL_TEXT = """\
## Canonical text forms

What a value becomes as text. `panda preview` writes blobs, relations, timestamps and
non-finite floats as JSON strings in these same forms.

- integer: decimal digits, `-` if negative, no `+`, no leading zeros (`-42`).
- float: the shortest text that reads back as the same double, in Python `repr` form
  (`4.5`, `100.0`, `1e+20`, `1e-07`, `-0.0`); `NaN`, `Infinity`, `-Infinity` for the
  non-finite doubles (all NaNs are one value).
- boolean: `true`, `false`.
- blob: lowercase hex, two digits per byte (empty bytes are the empty text).
- timestamp: ISO 8601 in UTC with `Z`, microseconds only when nonzero
  (`2020-05-22T11:58:50Z`, `2020-05-22T11:58:50.250000Z`).
- relation: the lowercase hex of the instance id.
"""


def _classify(source: BaseType, target: BaseType) -> str:
    rule = SCALAR_RULES.get((source, target))
    if source is target:
        return "identity"
    if rule is None:
        return "fails"
    return "lossless" if rule.lossless else "conditional"


def _matrix() -> list[str]:
    header = "| from \\ to | " + " | ".join(b.value for b in BaseType) + " |"
    lines = [header, "|---" * (len(BaseType) + 1) + "|"]
    for source in BaseType:
        marks = (_MATRIX_MARKS[_classify(source, target)] for target in BaseType)
        lines.append(f"| **{source.value}** | " + " | ".join(marks) + " |")
    return lines


def _pairs() -> list[str]:
    lines = ["| from | to | rule | lossless |", "|---|---|---|---|"]
    for source in BaseType:
        for target in BaseType:
            rule = SCALAR_RULES.get((source, target))
            text = rule.text if rule else "fails (no rule)"
            lossless = "yes" if rule and rule.lossless else ""
            lines.append(f"| {source.value} | {target.value} | {text} | {lossless} |")
    return lines


def render_conversion_table() -> str:
    """The Markdown of docs/conversion.md, rendered from `SCALAR_RULES`."""
    legend = (
        "`=` identity, `L` always converts and converts back unchanged (lossless),"
        " `C` converts when the rule below allows, `-` never converts."
    )
    lossless = [
        f"- {source.value} -> {target.value}"
        for (source, target), rule in SCALAR_RULES.items()
        if rule.lossless and source is not target
    ]
    sections = [
        _HEADER,
        "## Matrix\n",
        legend + "\n",
        "\n".join(_matrix()) + "\n",
        "## Scalar rules\n",
        "\n".join(_pairs()) + "\n",
        _ARRAYS,
        _CANONICAL_TEXT,
        "## Lossless pairs\n",
        "Besides identity, these convert every value and back unchanged:\n",
        "\n".join(lossless) + "\n",
    ]
    return "\n".join(sections)


if __name__ == "__main__":
    print(render_conversion_table(), end="")
