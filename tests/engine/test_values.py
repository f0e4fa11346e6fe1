"""The value model: `interpret` is strict, and values render to JSON and raw CBOR."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from p2panda_assets.engine.values import (
    format_float,
    format_timestamp,
    interpret,
    natural_type,
    parse_timestamp_text,
    to_json,
    to_raw,
)
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.fieldtypes import BLOB_MAX_BYTES, BaseType, FieldType
from p2panda_assets.protocol.hashing import HashAlgorithm

YASMF = HashAlgorithm.YASMF.hash(b"an entry")
YAMF = HashAlgorithm.YAMF.hash(b"an entry")
MOMENT = datetime(2020, 5, 22, 11, 58, 50, tzinfo=UTC)
PLUS_TWO = timezone(timedelta(hours=2))


def t(text: str) -> FieldType:
    return FieldType.parse(text)


ACCEPTED = [
    # varchar, text: str; varchar up to 255 code points (not bytes)
    ("hello", "varchar", "hello"),
    ("x" * 255, "varchar", "x" * 255),
    ("ä" * 255, "varchar", "ä" * 255),
    ("x" * 10_000, "text", "x" * 10_000),
    ("", "text", ""),
    # integer: signed 64-bit
    (-(2**63), "integer", -(2**63)),
    (2**63 - 1, "integer", 2**63 - 1),
    # float: a float, or an integer the double holds exactly
    (4.5, "float", 4.5),
    (2, "float", 2.0),
    (2**53, "float", float(2**53)),
    (2**60, "float", float(2**60)),
    (math.inf, "float", math.inf),
    (-0.0, "float", -0.0),
    # blob: bytes up to 512 KiB
    (b"", "blob", b""),
    (b"\x00" * BLOB_MAX_BYTES, "blob", b"\x00" * BLOB_MAX_BYTES),
    # boolean
    (True, "boolean", True),
    (False, "boolean", False),
    # timestamp: aware datetime or text with an offset, to UTC
    (MOMENT, "timestamp", MOMENT),
    (datetime(2020, 5, 22, 13, 58, 50, tzinfo=PLUS_TWO), "timestamp", MOMENT),
    ("2020-05-22T11:58:50+0000", "timestamp", MOMENT),
    ("2020-05-22T11:58:50+00:00", "timestamp", MOMENT),
    ("2020-05-22T11:58:50Z", "timestamp", MOMENT),
    ("2020-05-22T13:58:50+02", "timestamp", MOMENT),
    ("2020-05-22T06:28:50-05:30", "timestamp", MOMENT),
    ("2020-05-22 11:58:50z", "timestamp", MOMENT),
    ("2020-05-22T11:58:50.25Z", "timestamp", MOMENT.replace(microsecond=250_000)),
    ("2020-05-22T11:58:50.123456000Z", "timestamp", MOMENT.replace(microsecond=123_456)),
    # relation: the bytes of a hash, as lowercase hex
    (YASMF, "relation", YASMF.hex()),
    (YAMF, "relation", YAMF.hex()),
    # arrays: list or tuple -> tuple
    (["a", "b"], "text[]", ("a", "b")),
    (("a",), "varchar[]", ("a",)),
    ([], "integer[]", ()),
    ([1, 2.5], "float[]", (1.0, 2.5)),
    ([YASMF], "relation[]", (YASMF.hex(),)),
]


@pytest.mark.parametrize(("raw", "ftype", "expected"), ACCEPTED)
def test_interpret_accepts_fitting_raw_values(raw: object, ftype: str, expected: object) -> None:
    value = interpret(raw, t(ftype))
    assert value == expected
    assert type(value) is type(expected)


def test_interpret_canonicalizes_every_nan_to_one_value() -> None:
    assert math.isnan(interpret(float("-nan"), t("float")))
    assert math.isnan(interpret(math.nan, t("float")))


def test_interpret_timestamps_are_utc() -> None:
    value = interpret(datetime(2020, 5, 22, 13, 58, 50, tzinfo=PLUS_TWO), t("timestamp"))
    assert value.tzinfo is UTC


REJECTED = [
    # wrong CBOR type
    (1, "text"),
    (b"x", "varchar"),
    ("1", "integer"),
    (True, "integer"),
    (1.0, "integer"),
    ("1.5", "float"),
    (False, "float"),
    ("00", "blob"),
    (bytearray(b"x"), "blob"),
    (1, "boolean"),
    ("true", "boolean"),
    (1590148730, "timestamp"),
    (date(2020, 5, 22), "timestamp"),
    (YASMF.hex(), "relation"),
    # out of range or malformed
    ("x" * 256, "varchar"),
    ("a\x00b", "text"),
    ("\ud800", "text"),
    (2**63, "integer"),
    (-(2**63) - 1, "integer"),
    (2**53 + 1, "float"),
    (2**1100, "float"),
    (b"\x00" * (BLOB_MAX_BYTES + 1), "blob"),
    (b"\x00\x20" + b"\x00" * 31, "relation"),
    (YASMF + b"\x00", "relation"),
    (b"", "relation"),
    # timestamps: no offset, bad fields, finer than a microsecond
    ("2020-05-22T11:58:50", "timestamp"),
    ("2020-05-22", "timestamp"),
    ("2020-05-22T11:58Z", "timestamp"),
    ("2020-13-22T11:58:50Z", "timestamp"),
    ("2020-02-30T11:58:50Z", "timestamp"),
    ("2020-05-22T24:00:00Z", "timestamp"),
    ("2020-05-22T11:58:60Z", "timestamp"),
    ("2020-05-22T11:58:50+24:00", "timestamp"),
    ("2020-05-22T11:58:50+01:60", "timestamp"),
    ("2020-05-22T11:58:50.1234567Z", "timestamp"),
    ("0001-01-01T00:00:00+01:00", "timestamp"),
    (" 2020-05-22T11:58:50Z", "timestamp"),
    ("2020-05-22T11:58:50Z\n", "timestamp"),
    ("２020-05-22T11:58:50Z", "timestamp"),
    (datetime(2020, 5, 22, 11, 58, 50), "timestamp"),
    # a scalar where an array is expected, and the reverse
    ("a", "text[]"),
    (["a"], "text"),
    ([["a"]], "text[]"),
    # arrays hold no nulls, and every element must fit
    (["a", None], "text[]"),
    ([1, "2"], "integer[]"),
    (["x" * 256], "varchar[]"),
]


@pytest.mark.parametrize(("raw", "ftype"), REJECTED)
def test_interpret_rejects_values_that_do_not_fit_with_invalid_value(
    raw: object, ftype: str
) -> None:
    with pytest.raises(P2pandaError) as caught:
        interpret(raw, t(ftype))
    assert caught.value.reason is Reason.INVALID_VALUE


@pytest.mark.parametrize("ftype", [str(FieldType(b, a)) for b in BaseType for a in (False, True)])
def test_interpret_null_is_null_at_every_type(ftype: str) -> None:
    assert interpret(None, t(ftype)) is None


def test_timestamp_digits_finer_than_a_microsecond_are_accepted_only_when_zero() -> None:
    assert parse_timestamp_text("2020-05-22T11:58:50.123456000Z").microsecond == 123_456
    with pytest.raises(P2pandaError):
        parse_timestamp_text("2020-05-22T11:58:50.123456001Z")


def test_timestamp_minus_zero_offset_is_utc() -> None:
    assert parse_timestamp_text("2020-05-22T11:58:50-00:00") == MOMENT


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (MOMENT, "2020-05-22T11:58:50Z"),
        (MOMENT.replace(microsecond=250_000), "2020-05-22T11:58:50.250000Z"),
        (MOMENT.replace(microsecond=1), "2020-05-22T11:58:50.000001Z"),
        (datetime(2020, 5, 22, 13, 58, 50, tzinfo=PLUS_TWO), "2020-05-22T11:58:50Z"),
        (datetime(999, 1, 2, 3, 4, 5, tzinfo=UTC), "0999-01-02T03:04:05Z"),
    ],
)
def test_format_timestamp_is_iso_8601_utc_with_z(moment: datetime, text: str) -> None:
    assert format_timestamp(moment) == text
    assert parse_timestamp_text(text) == moment


def test_format_timestamp_refuses_a_naive_datetime() -> None:
    with pytest.raises(ValueError):
        format_timestamp(datetime(2020, 5, 22))


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (4.5, "4.5"),
        (100.0, "100.0"),
        (1e20, "1e+20"),
        (1e-7, "1e-07"),
        (-0.0, "-0.0"),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
    ],
)
def test_format_float_is_shortest_round_trip_repr(number: float, text: str) -> None:
    assert format_float(number) == text


JSON_CASES = [
    (None, "text", None),
    ("hi", "varchar", "hi"),
    ("hi", "text", "hi"),
    (-(2**63), "integer", -(2**63)),
    (4.5, "float", 4.5),
    (math.nan, "float", "NaN"),
    (math.inf, "float", "Infinity"),
    (-math.inf, "float", "-Infinity"),
    (b"\x00\xff", "blob", "00ff"),
    (True, "boolean", True),
    (MOMENT, "timestamp", "2020-05-22T11:58:50Z"),
    (YASMF.hex(), "relation", YASMF.hex()),
    ((MOMENT,), "timestamp[]", ["2020-05-22T11:58:50Z"]),
    ((b"\x01", b"\x02"), "blob[]", ["01", "02"]),
    ((), "text[]", []),
]


@pytest.mark.parametrize(("value", "ftype", "expected"), JSON_CASES)
def test_to_json_renders_preview_values(value: object, ftype: str, expected: object) -> None:
    assert to_json(value, t(ftype)) == expected


ROUND_TRIPS = [
    ("hi", "text"),
    (7, "integer"),
    (1.5, "float"),
    (b"\x01", "blob"),
    (False, "boolean"),
    (MOMENT, "timestamp"),
    (YAMF.hex(), "relation"),
    ((YASMF.hex(), YAMF.hex()), "relation[]"),
    (("a", "b"), "varchar[]"),
    (None, "integer"),
]


@pytest.mark.parametrize(("value", "ftype"), ROUND_TRIPS)
def test_to_raw_is_the_inverse_of_interpret(value: object, ftype: str) -> None:
    assert interpret(to_raw(value, t(ftype)), t(ftype)) == value


def test_to_raw_writes_relations_as_bytes_and_arrays_as_lists() -> None:
    assert to_raw(YASMF.hex(), t("relation")) == YASMF
    assert to_raw((YASMF.hex(),), t("relation[]")) == [YASMF]


@pytest.mark.parametrize(
    ("raw", "ftype"),
    [
        (True, "boolean"),
        (1, "integer"),
        (1.5, "float"),
        ("x", "text"),
        (b"x", "blob"),
        (MOMENT, "timestamp"),
        ([1, 2], "integer[]"),
        ([], "text[]"),
    ],
)
def test_natural_type_is_what_a_raw_value_plainly_is(raw: object, ftype: str) -> None:
    assert natural_type(raw) == t(ftype)


@pytest.mark.parametrize("raw", [[1, 2.5], [1, None], [[1]], {"a": 1}, None])
def test_natural_type_rejects_raw_values_no_field_type_holds(raw: object) -> None:
    with pytest.raises(P2pandaError) as caught:
        natural_type(raw)
    assert caught.value.reason is Reason.INVALID_VALUE
