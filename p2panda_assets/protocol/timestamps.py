"""Timestamp text: the one RFC 3339 / ISO 8601 grammar, in two named variants.

`DATE_TIME` is RFC 3339 as CBOR tag 0 holds it: `T` between date and time, an offset of
hours and minutes (`Z`, `+hh:mm` or `+hhmm`, the form rule M-VALUE uses), any number of
fraction digits, those finer than a microsecond dropped (datetime's resolution).

`TIMESTAMP_TEXT` is the text a `timestamp` field value may be written as, a little looser
in form and stricter in precision: `T` or a space between date and time, an offset that
may omit its minutes (`+hh`), at most nine fraction digits, and those finer than a
microsecond must be zero (a value is never rounded).

Both require an offset (a local time names no instant) and give an aware UTC datetime.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone


def _grammar(separators: str, fraction: str, offset_minutes: str) -> re.Pattern[str]:
    # `re.ASCII`, and [0-9] rather than \d: digits are the ASCII digits only.
    return re.compile(
        r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})"
        rf"[{separators}]"
        r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
        rf"(?:\.(?P<fraction>[0-9]{fraction}))?"
        r"(?:(?P<zulu>[Zz])|(?P<sign>[+-])(?P<offset_hour>[0-9]{2})"
        rf"(?::?(?P<offset_minute>[0-9]{{2}})){offset_minutes})",
        re.ASCII,
    )


@dataclass(frozen=True, slots=True)
class TimestampGrammar:
    """One variant of the grammar: the text it accepts, and what it does with digits
    finer than a microsecond (drop them, or require them to be zero)."""

    name: str
    pattern: re.Pattern[str]
    truncates: bool


DATE_TIME = TimestampGrammar("RFC 3339 date-time", _grammar("Tt", "+", ""), truncates=True)
TIMESTAMP_TEXT = TimestampGrammar(
    "ISO 8601 timestamp text", _grammar("Tt ", "{1,9}", "?"), truncates=False
)


class NotATimestamp(ValueError):
    """The text is not in the grammar's form at all."""


def parse_timestamp(text: str, grammar: TimestampGrammar) -> datetime:
    """`text` read with `grammar` as an aware UTC datetime.

    Raises `NotATimestamp` when the text is not in the grammar's form, and `ValueError`
    (or `OverflowError`) when it is but names no instant datetime can hold: a field out
    of range (a leap second `:60` too), offset minutes above 59, digits finer than a
    microsecond where the grammar does not drop them, or a UTC instant outside years
    1..9999.
    """
    match = grammar.pattern.fullmatch(text)
    if match is None:
        raise NotATimestamp(f"not {grammar.name}: {text[:40]!r}")
    fraction = match["fraction"] or ""
    if not grammar.truncates and fraction[6:].strip("0"):
        raise ValueError("finer than a microsecond")
    moment = datetime(
        int(match["year"]),
        int(match["month"]),
        int(match["day"]),
        int(match["hour"]),
        int(match["minute"]),
        int(match["second"]),
        int(fraction[:6].ljust(6, "0")),
        tzinfo=_offset(match),
    )
    return moment.astimezone(UTC)


def _offset(match: re.Match[str]) -> timezone:
    """The UTC offset of a parsed timestamp (`-00:00` is UTC too)."""
    if match["zulu"]:
        return UTC
    minutes = int(match["offset_minute"] or 0)
    if minutes > 59:
        raise ValueError("offset minutes out of range")
    total = int(match["offset_hour"]) * 60 + minutes
    return timezone(timedelta(minutes=-total if match["sign"] == "-" else total))


def format_timestamp(moment: datetime) -> str:
    """The one written form, for both variants: ISO 8601 in UTC with `Z`, microseconds
    (6 digits) only when nonzero. `ValueError` for a naive datetime (it names no
    instant), `OverflowError` when its UTC instant falls outside years 1..9999."""
    if moment.utcoffset() is None:
        raise ValueError("a timestamp value must be timezone-aware")
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"
