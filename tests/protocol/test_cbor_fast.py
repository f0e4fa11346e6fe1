"""cbor2's C decoder in front of the strict one (`decode_cbor_fast`, used first by
`decode_message`): every payload gets the message, or the error, that the strict decoder
alone gives, bit for bit; and the tags cbor2 decodes itself are the ones it is told to
leave to the strict decoder."""

from __future__ import annotations

import pickle
import struct

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2panda_assets.errors import P2pandaError
from p2panda_assets.protocol.cbor import (
    CBOR2_TAGS,
    UNDECIDED,
    decode_cbor,
    decode_cbor_fast,
    encode_cbor,
)
from p2panda_assets.protocol.messages import _message_of, decode_message


def strict_message(payload: bytes) -> object:
    """The reference: the strict decoder alone, then the message's shape."""
    return _message_of(decode_cbor(payload))


def outcome(decode: object, payload: bytes) -> tuple[str, bytes | str]:
    """A decode's message, pickled (floats bit for bit), or its error's reason and text."""
    try:
        message = decode(payload)  # type: ignore[operator]
    except P2pandaError as error:
        return ("error", f"{error.reason}: {error.message}")
    return ("message", pickle.dumps(message))


def head(major: int, n: int, width: int | None = None) -> bytes:
    """A head with the shortest argument, or one `width` bytes wide (non-shortest)."""
    if width is None:
        width = next(
            w
            for w, top in ((0, 24), (1, 1 << 8), (2, 1 << 16), (4, 1 << 32), (8, 1 << 64))
            if n < top
        )
    if width == 0:
        return bytes([major << 5 | n])
    info = {1: 24, 2: 25, 4: 26, 8: 27}[width]
    return bytes([major << 5 | info]) + n.to_bytes(width, "big")


widths = st.sampled_from([None, None, None, 1, 2, 4, 8])
texts = st.sampled_from(
    ["kind", "schema", "fields", "instance", "create", "update", "delete", "a", "b"]
)
scalars = st.one_of(
    st.integers(0, 2**64 - 1).flatmap(
        lambda n: widths.filter(lambda w: w is None or n < 1 << (8 * w)).map(
            lambda w: head(0, n, w)
        )
    ),
    st.integers(0, 2**64 - 1).map(lambda n: head(1, n)),
    st.binary(max_size=40).map(lambda b: head(2, len(b)) + b),
    st.one_of(texts, st.text(max_size=10)).map(
        lambda t: (
            head(3, len(t.encode("utf-8", "surrogatepass"))) + t.encode("utf-8", "surrogatepass")
        )
    ),
    st.sampled_from(
        [b"\xf4", b"\xf5", b"\xf6", b"\xf7", b"\xf0", b"\xf8\x20", b"\xf8\x10", b"\xff", b"\x1c"]
    ),
    st.binary(min_size=2, max_size=2).map(lambda b: b"\xf9" + b),  # half floats, NaNs
    st.binary(min_size=4, max_size=4).map(lambda b: b"\xfa" + b),
    st.binary(min_size=8, max_size=8).map(lambda b: b"\xfb" + b),
    st.just(b"\xc0\x74" + b"2013-03-21T20:04:00Z"),
    st.just(b"\xc1\x1a\x51\x4b\x67\xb0"),
    st.binary(min_size=9, max_size=9).map(lambda b: b"\xc2\x49" + b),  # a bignum
)


def containers(children: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    arrays = st.lists(children, max_size=4).map(lambda items: head(4, len(items)) + b"".join(items))
    maps = st.lists(
        st.tuples(texts.map(lambda t: head(3, len(t)) + t.encode()), children), max_size=4
    ).map(lambda pairs: head(5, len(pairs)) + b"".join(k + v for k, v in pairs))
    tagged = st.tuples(st.sampled_from([*CBOR2_TAGS, 6, 24, 32, 99999]), children).map(
        lambda t: head(6, t[0]) + t[1]
    )
    indefinite = st.lists(children, max_size=3).map(
        lambda items: b"\x9f" + b"".join(items) + b"\xff"
    )
    return st.one_of(arrays, maps, tagged, indefinite)


items = st.recursive(scalars, containers, max_leaves=12)


def message_payloads() -> st.SearchStrategy[bytes]:
    """Real message shapes (a create, an update, a delete), their fields any items."""
    schema = st.just(encode_cbor([b"\x11" * 32, 1, 1]))
    instance = st.just(head(2, 34) + b"\x00\x20" + b"\x01" * 32)
    fields = st.lists(st.tuples(st.sampled_from(["a", "b", "title"]), items), max_size=3).map(
        lambda pairs: (
            head(5, len(pairs)) + b"".join(head(3, len(k)) + k.encode() + v for k, v in pairs)
        )
    )
    text = lambda t: head(3, len(t)) + t.encode()  # noqa: E731
    create = st.tuples(schema, fields).map(
        lambda p: (
            head(5, 3)
            + text("kind")
            + text("create")
            + text("schema")
            + p[0]
            + text("fields")
            + p[1]
        )
    )
    update = st.tuples(schema, instance, fields).map(
        lambda p: (
            head(5, 4)
            + text("kind")
            + text("update")
            + text("schema")
            + p[0]
            + text("instance")
            + p[1]
            + text("fields")
            + p[2]
        )
    )
    delete = instance.map(
        lambda i: head(5, 2) + text("kind") + text("delete") + text("instance") + i
    )
    return st.one_of(create, update, delete)


def mutated(payloads: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """A payload, maybe with a byte changed, cut short, or with bytes after it."""

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        payload = bytearray(draw(payloads))
        how = draw(st.sampled_from(["as is", "as is", "flip", "cut", "trail"]))
        if how == "flip" and payload:
            payload[draw(st.integers(0, len(payload) - 1))] = draw(st.integers(0, 255))
        elif how == "cut" and payload:
            del payload[draw(st.integers(0, len(payload) - 1)) :]
        elif how == "trail":
            payload += draw(st.binary(min_size=1, max_size=3))
        return bytes(payload)

    return mutate()


@settings(max_examples=1500, deadline=None)
@given(mutated(st.one_of(message_payloads(), items, st.binary(max_size=60))))
def test_a_message_or_an_error_exactly_as_the_strict_decoder_gives_it(payload: bytes) -> None:
    assert outcome(decode_message, payload) == outcome(strict_message, payload)


def shapeless(value: object) -> bool:
    """Holds something no message shape takes: `UNDECIDED`, a tag, a simple value,
    undefined, or a map key that is not text."""
    if isinstance(value, list):
        return any(shapeless(item) for item in value)
    if isinstance(value, dict):
        return any(type(k) is not str or shapeless(v) for k, v in value.items())
    return value is UNDECIDED or isinstance(
        value, (cbor2.CBORTag, cbor2.CBORSimpleValue, type(cbor2.undefined))
    )


@settings(max_examples=1500, deadline=None)
@given(mutated(items))
def test_what_the_fast_decoder_answers_is_the_strict_decoders_value(payload: bytes) -> None:
    """Where both decode, the same value, bit for bit, or one that holds something no
    message shape takes; where only the fast one does, such a value too."""
    fast = decode_cbor_fast(payload)
    if fast is UNDECIDED:
        return
    try:
        strict = decode_cbor(payload)
    except P2pandaError:
        assert shapeless(fast)
        return
    assert pickle.dumps(fast) == pickle.dumps(strict) or shapeless(fast)


def test_the_bench_shapes_are_decided_fast() -> None:
    payload = encode_cbor(
        {"kind": "create", "schema": [b"\x11" * 32, 1, 2], "fields": {"title": "hi", "n": 7}}
    )
    assert decode_cbor_fast(payload) == decode_cbor(payload)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x01\x02",  # trailing bytes: cbor2 alone stops after the item
        bytes.fromhex("a2616101616102"),  # a repeated key
        bytes.fromhex("9f01ff"),  # an indefinite length
        b"\x81" * 17 + b"\x00",  # too deep
        bytes.fromhex("c249010000000000000000"),  # 2^64 as a bignum
        b"\xc0\x74" + b"2013-03-21T20:04:00Z",  # a date-time: the strict decoder's
        bytes.fromhex("f97e01"),  # a half-precision NaN with a payload
    ],
)
def test_what_only_the_strict_decoder_decides(payload: bytes) -> None:
    assert decode_cbor_fast(payload) is UNDECIDED


def test_the_half_nan_would_differ_in_its_bits() -> None:
    """Why half-precision NaNs are left to the strict decoder."""
    value = cbor2.loads(bytes.fromhex("f97e01"))
    strict = struct.unpack(">e", bytes.fromhex("7e01"))[0]
    assert struct.pack(">d", value) != struct.pack(">d", strict)


def test_the_tags_cbor2_decodes_itself_are_the_listed_ones() -> None:
    """Every tag up to 70,000 (and some larger) wrapping items of each kind: cbor2 gives a
    `CBORTag` for all but `CBOR2_TAGS` (so an upgrade that adds one fails here)."""
    contents = [
        b"\x00",
        b"\x61a",
        b"\x41a",
        b"\x80",
        b"\xa0",
        b"\xf9\x3c\x00",
        b"\x1a\x51\x4b\x67\xb0",
    ]
    contents += [b"\x74" + b"2013-03-21T20:04:00Z", b"\x4c" + b"\x01" * 12, b"\x82\x01\x02"]
    own = set()
    for tag in [*range(70_000), 2**32 - 1, 2**32, 2**64 - 1]:
        for content in contents:
            try:
                value = cbor2.loads(head(6, tag) + content)
            except cbor2.CBORDecodeError:
                own.add(tag)
                continue
            if not isinstance(value, cbor2.CBORTag):
                own.add(tag)
    assert own == set(CBOR2_TAGS)
