"""The strict CBOR codec: rule M-CBOR, floats, date-time tags, robustness."""

from __future__ import annotations

import contextlib
import math
from datetime import UTC, datetime, timedelta, timezone

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.cbor import (
    MAX_DEPTH,
    decode_cbor,
    encode_cbor,
    format_date_time,
    parse_date_time,
)


def decode_hex(text: str) -> object:
    return decode_cbor(bytes.fromhex(text.replace(" ", "")))


def reason_of_hex(text: str) -> Reason:
    with pytest.raises(P2pandaError) as caught:
        decode_hex(text)
    return caught.value.reason


# --------------------------------------------------------------------------- well-formedness


@pytest.mark.parametrize(
    "hex_text",
    [
        "5f 41 61 ff",  # indefinite byte string
        "7f 61 61 ff",  # indefinite text string
        "9f 01 ff",  # indefinite array
        "bf 61 61 01 ff",  # indefinite map
    ],
)
def test_indefinite_lengths_are_malformed(hex_text: str) -> None:
    assert reason_of_hex(hex_text) is Reason.CBOR_MALFORMED


@pytest.mark.parametrize(
    "hex_text",
    [
        "",  # nothing at all
        "62 61",  # text of 2 bytes, 1 present
        "19 01",  # uint16 argument cut short
        "f9 3c",  # half float cut short
        "fb 3f f0 00",  # double cut short
        "82 01",  # array of 2, 1 present
        "a1 61 61",  # map entry without its value
        "c0",  # tag without content
    ],
)
def test_truncated_input_is_malformed(hex_text: str) -> None:
    assert reason_of_hex(hex_text) is Reason.CBOR_MALFORMED


def test_trailing_bytes_are_malformed() -> None:
    assert reason_of_hex("01 01") is Reason.CBOR_MALFORMED


def test_invalid_utf8_text_is_malformed() -> None:
    assert reason_of_hex("62 c3 28") is Reason.CBOR_MALFORMED


def test_utf8_encoded_surrogate_is_malformed() -> None:
    assert reason_of_hex("63 ed a0 80") is Reason.CBOR_MALFORMED


@pytest.mark.parametrize("hex_text", ["1c", "3d", "5e", "fc", "ff", "f8 10"])
def test_reserved_information_break_and_short_simple_are_malformed(hex_text: str) -> None:
    assert reason_of_hex(hex_text) is Reason.CBOR_MALFORMED


@pytest.mark.parametrize(
    "hex_text",
    [
        "5b ffffffffffffffff",  # byte string of 2^64-1 bytes
        "7b 7fffffffffffffff",  # text string of 2^63-1 bytes
        "9b ffffffffffffffff 01",  # array of 2^64-1 items
        "bb ffffffffffffffff 61 61 01",  # map of 2^64-1 entries
        "82 5a ffffffff",  # a string inside an array
    ],
)
def test_declared_length_beyond_input_is_malformed_before_allocating(hex_text: str) -> None:
    assert reason_of_hex(hex_text) is Reason.CBOR_MALFORMED


# --------------------------------------------------------------------------- strictness rules


@pytest.mark.parametrize(
    "hex_text",
    [
        "a1 01 02",  # integer key
        "a1 41 61 02",  # byte-string key
        "a1 80 02",  # array key
        "a1 c0 74 323031332d30332d32315432303a30343a30305a 01",  # tagged text key
    ],
)
def test_map_keys_must_be_text(hex_text: str) -> None:
    assert reason_of_hex(hex_text) is Reason.CBOR_NON_TEXT_KEY


def test_map_keys_must_not_repeat() -> None:
    assert reason_of_hex("a2 61 61 01 61 61 02") is Reason.CBOR_DUPLICATE_KEY


def test_duplicate_key_in_nested_map_is_found() -> None:
    assert reason_of_hex("a1 61 78 a2 61 61 01 61 61 02") is Reason.CBOR_DUPLICATE_KEY


def test_nesting_depth_16_is_accepted() -> None:
    value = decode_hex("81" * 15 + "80")
    for _ in range(15):
        assert isinstance(value, list)
        value = value[0]
    assert value == []


def test_nesting_depth_17_is_too_deep() -> None:
    assert reason_of_hex("81" * 16 + "80") is Reason.CBOR_TOO_DEEP


def test_map_nesting_counts_toward_depth() -> None:
    decode_hex("a1 61 61" * 16 + "00")
    assert reason_of_hex("a1 61 61" * 17 + "00") is Reason.CBOR_TOO_DEEP


def test_tags_count_toward_depth() -> None:
    timestamp = "c1 00"  # tag 1, epoch 0
    assert decode_hex("81" * 15 + timestamp) is not None
    assert reason_of_hex("81" * 16 + timestamp) is Reason.CBOR_TOO_DEEP


@pytest.mark.parametrize(
    "hex_text",
    [
        "f7",  # undefined
        "e0",  # simple value 0
        "f0",  # simple value 16
        "f8 20",  # simple value 32, two-byte form
        "f8 ff",  # simple value 255
        "c2 41 01",  # tag 2: bignum
        "c4 82 21 19 6a b3",  # tag 4: decimal fraction
        "d8 20 63 61 62 63",  # tag 32: URI
        "d9 d9f7 01",  # tag 55799: self-described CBOR
    ],
)
def test_other_tags_and_simple_values_are_unsupported(hex_text: str) -> None:
    assert reason_of_hex(hex_text) is Reason.CBOR_UNSUPPORTED


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("hex_text", "expected"),
    [
        ("00", 0),
        ("17", 23),
        ("18 18", 24),
        ("19 0100", 256),
        ("1a 00010000", 65536),
        ("1b 0000000100000000", 2**32),
        ("1b ffffffffffffffff", 2**64 - 1),
        ("20", -1),
        ("38 63", -100),
        ("3b ffffffffffffffff", -(2**64)),
        ("f4", False),
        ("f5", True),
        ("f6", None),
        ("40", b""),
        ("43 010203", b"\x01\x02\x03"),
        ("60", ""),
        ("62 c3bc", "ü"),
        ("82 01 61 61", [1, "a"]),
    ],
)
def test_basic_items_decode(hex_text: str, expected: object) -> None:
    value = decode_hex(hex_text)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("hex_text", "expected"),
    [("18 00", 0), ("19 0001", 1), ("1b 0000000000000017", 23), ("58 00", b""), ("99 0000", [])],
)
def test_non_shortest_forms_are_accepted(hex_text: str, expected: object) -> None:
    assert decode_hex(hex_text) == expected


def test_maps_keep_their_order() -> None:
    value = decode_hex("a3 61 7a 01 61 61 02 61 6d 03")
    assert isinstance(value, dict)
    assert list(value) == ["z", "a", "m"]


@pytest.mark.parametrize(
    ("hex_text", "expected"),
    [
        ("f9 4480", 4.5),
        ("f9 3c00", 1.0),
        ("f9 c000", -2.0),
        ("f9 7bff", 65504.0),  # largest half
        ("f9 0001", 2.0**-24),  # smallest half subnormal, exactly
        ("f9 0400", 2.0**-14),  # smallest half normal
        ("fa 47c35000", 100000.0),
        ("fb 3ff199999999999a", 1.1),
    ],
)
def test_floats_decode_exactly(hex_text: str, expected: float) -> None:
    value = decode_hex(hex_text)
    assert type(value) is float
    assert value == expected


def test_half_float_specials_decode() -> None:
    assert decode_hex("f9 7c00") == math.inf
    assert decode_hex("f9 fc00") == -math.inf
    assert math.isnan(decode_hex("f9 7e00"))  # type: ignore[arg-type]
    negative_zero = decode_hex("f9 8000")
    assert negative_zero == 0.0
    assert math.copysign(1.0, negative_zero) == -1.0  # type: ignore[arg-type]


# --------------------------------------------------------------------------- date-time tags

TAG0_2013 = "c0 74 323031332d30332d32315432303a30343a30305a"  # "2013-03-21T20:04:00Z"
T_2013 = datetime(2013, 3, 21, 20, 4, tzinfo=UTC)


def tag0(text: str) -> bytes:
    return b"\xc0" + encode_cbor(text)


def test_tag0_decodes_to_aware_utc_datetime() -> None:
    value = decode_hex(TAG0_2013)
    assert value == T_2013
    assert isinstance(value, datetime)
    assert value.tzinfo is UTC


@pytest.mark.parametrize(
    "text",
    [
        "2013-03-21T22:04:00+02:00",
        "2013-03-21T22:04:00+0200",
        "2013-03-21T17:34:00-02:30",
        "2013-03-21t20:04:00z",
        "2013-03-21T20:04:00-00:00",
    ],
)
def test_tag0_offsets_are_converted_to_utc(text: str) -> None:
    value = decode_cbor(tag0(text))
    assert value == T_2013
    assert value.tzinfo is UTC  # type: ignore[union-attr]


def test_tag0_fraction_is_kept_to_microseconds() -> None:
    assert decode_cbor(tag0("2013-03-21T20:04:00.5Z")) == T_2013 + timedelta(microseconds=500000)
    assert decode_cbor(tag0("2013-03-21T20:04:00.123456789Z")) == T_2013 + timedelta(
        microseconds=123456
    )


@pytest.mark.parametrize(
    "text",
    [
        "2013-03-21T20:04:00",  # no offset: names no instant
        "2013-03-21 20:04:00Z",  # space separator is not RFC 3339
        "2013-03-21",  # a date alone
        "2013-03-21T20:04Z",  # seconds missing
        "2013-02-30T20:04:00Z",  # no such day
        "2013-03-21T24:00:00Z",
        "2013-03-21T20:04:60Z",  # leap second: datetime cannot hold it
        "2013-03-21T20:04:00+24:00",
        "2013-03-21T20:04:00+05:60",
        "0001-01-01T00:00:00+01:00",  # before year 1 once in UTC
        "2013-03-21T20:04:00.Z",
        "٢٠١٣-03-21T20:04:00Z",  # non-ASCII digits
        "",
    ],
)
def test_tag0_without_offset_or_malformed_is_bad_value(text: str) -> None:
    with pytest.raises(P2pandaError) as caught:
        decode_cbor(tag0(text))
    assert caught.value.reason is Reason.BAD_VALUE


def test_tag0_must_wrap_text() -> None:
    assert reason_of_hex("c0 01") is Reason.BAD_TYPE


@pytest.mark.parametrize(
    ("hex_text", "expected"),
    [
        ("c1 1a 514b67b0", T_2013),
        ("c1 fb 41d452d9ec200000", T_2013 + timedelta(seconds=0.5)),
        ("c1 00", datetime(1970, 1, 1, tzinfo=UTC)),
        ("c1 20", datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)),
    ],
)
def test_tag1_epoch_seconds_decode_to_utc(hex_text: str, expected: datetime) -> None:
    value = decode_hex(hex_text)
    assert value == expected
    assert value.tzinfo is UTC  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "hex_text",
    [
        "c1 f9 7e00",
        "c1 f9 7c00",
        "c1 1b ffffffffffffffff",
        "c1 3b ffffffffffffffff",
        "c1 fb 7fefffffffffffff",
    ],
)
def test_tag1_non_finite_or_out_of_range_is_bad_value(hex_text: str) -> None:
    assert reason_of_hex(hex_text) is Reason.BAD_VALUE


@pytest.mark.parametrize("hex_text", ["c1 61 31", "c1 f5", "c1 f6", "c1 80"])
def test_tag1_must_wrap_a_number(hex_text: str) -> None:
    assert reason_of_hex(hex_text) is Reason.BAD_TYPE


def test_parse_date_time_accepts_spec_example_offset_form() -> None:
    assert parse_date_time("2020-05-22T11:58:50+0000") == datetime(
        2020, 5, 22, 11, 58, 50, tzinfo=UTC
    )


# --------------------------------------------------------------------------- encoding


@pytest.mark.parametrize(
    ("value", "hex_text"),
    [
        (0, "00"),
        (23, "17"),
        (24, "1818"),
        (255, "18ff"),
        (256, "190100"),
        (65536, "1a00010000"),
        (2**32, "1b0000000100000000"),
        (2**64 - 1, "1bffffffffffffffff"),
        (-1, "20"),
        (-(2**64), "3bffffffffffffffff"),
        (True, "f5"),
        (False, "f4"),
        (None, "f6"),
        (b"\x01", "4101"),
        ("a", "6161"),
        ([1, [2]], "82018102"),
        ((1, 2), "820102"),
        ({"b": 1, "a": 2}, "a2616201616102"),
    ],
)
def test_encoder_writes_shortest_heads(value: object, hex_text: str) -> None:
    assert encode_cbor(value).hex() == hex_text


@pytest.mark.parametrize(
    ("value", "hex_text"),
    [
        (4.5, "f94480"),
        (1.0, "f93c00"),
        (-0.0, "f98000"),
        (65504.0, "f97bff"),
        (2.0**-24, "f90001"),
        (math.inf, "f97c00"),
        (-math.inf, "f9fc00"),
        (math.nan, "f97e00"),
        (100000.0, "fa47c35000"),
        (3.4028234663852886e38, "fa7f7fffff"),
        (1.1, "fb3ff199999999999a"),
        (1e300, "fb7e37e43c8800759c"),
    ],
)
def test_encoder_writes_shortest_exact_float(value: float, hex_text: str) -> None:
    assert encode_cbor(value).hex() == hex_text


def test_encoder_writes_datetimes_as_tag0_utc_text() -> None:
    assert encode_cbor(T_2013).hex() == TAG0_2013.replace(" ", "")
    plus_two = T_2013.astimezone(timezone(timedelta(hours=2)))
    assert encode_cbor(plus_two) == encode_cbor(T_2013)
    assert format_date_time(T_2013 + timedelta(microseconds=7)) == "2013-03-21T20:04:00.000007Z"


def test_encoder_rejects_naive_datetime() -> None:
    with pytest.raises(P2pandaError) as caught:
        encode_cbor(datetime(2013, 3, 21))
    assert caught.value.reason is Reason.BAD_VALUE


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (2**64, Reason.BAD_VALUE),
        (-(2**64) - 1, Reason.BAD_VALUE),
        ("\ud800", Reason.BAD_VALUE),
        ({1: 2}, Reason.CBOR_NON_TEXT_KEY),
        ({1, 2}, Reason.BAD_TYPE),
        (object(), Reason.BAD_TYPE),
        ([[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]], Reason.CBOR_TOO_DEEP),
    ],
)
def test_encoder_rejects_what_decoder_would_not_give_back(value: object, reason: Reason) -> None:
    with pytest.raises(P2pandaError) as caught:
        encode_cbor(value)
    assert caught.value.reason is reason


def test_encoder_accepts_depth_16() -> None:
    value: list[object] = []
    for _ in range(MAX_DEPTH - 1):
        value = [value]
    assert decode_cbor(encode_cbor(value)) == value


# --------------------------------------------------------------------------- properties

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(),
    st.datetimes(timezones=st.just(UTC)),
)


def cbor_values(depth: int = 4) -> st.SearchStrategy[object]:
    """Values `encode_cbor` accepts, nested at most `depth` levels (well under 16)."""
    if depth == 0:
        return SCALARS
    inner = cbor_values(depth - 1)
    return st.one_of(
        SCALARS,
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    )


@settings(max_examples=300, deadline=None)
@given(cbor_values())
def test_decode_inverts_encode(value: object) -> None:
    assert decode_cbor(encode_cbor(value)) == value


@settings(max_examples=200, deadline=None)
@given(cbor_values())
def test_cbor2_reads_what_we_write(value: object) -> None:
    assert cbor2.loads(encode_cbor(value)) == value


@settings(max_examples=200, deadline=None)
@given(cbor_values())
def test_we_read_what_cbor2_writes(value: object) -> None:
    assert decode_cbor(cbor2.dumps(value, timezone=UTC)) == value
    assert decode_cbor(cbor2.dumps(value, timezone=UTC, canonical=True)) == value


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_raise_only_p2panda_errors(data: bytes) -> None:
    with contextlib.suppress(P2pandaError):
        decode_cbor(data)


@settings(max_examples=300, deadline=None)
@given(cbor_values(), st.data())
def test_corrupted_encodings_raise_only_p2panda_errors(value: object, data: st.DataObject) -> None:
    """Random byte edits of well-formed CBOR reach the deep branches that random bytes miss."""
    encoded = bytearray(encode_cbor(value))
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(encoded)))
        action = data.draw(st.sampled_from(["set", "cut", "insert"]))
        byte = data.draw(st.integers(0, 255))
        if action == "set" and index < len(encoded):
            encoded[index] = byte
        elif action == "cut":
            del encoded[index:]
        else:
            encoded.insert(index, byte)
    with contextlib.suppress(P2pandaError):
        decode_cbor(bytes(encoded))


def test_memoryview_and_bytearray_inputs_decode() -> None:
    raw = bytes.fromhex("82 01 61 61".replace(" ", ""))
    assert decode_cbor(memoryview(raw)) == [1, "a"]
    assert decode_cbor(bytearray(raw)) == [1, "a"]
