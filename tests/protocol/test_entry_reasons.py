"""One crafted entry per reason code of the entry layer; and arbitrary bytes never
raise anything but the product's own typed error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.entry import (
    MAX_PAYLOAD_SIZE,
    decode_entry,
    encode_unsigned,
    sign_entry,
    verify_entry,
)
from p2panda_assets.protocol.hashing import HashAlgorithm
from p2panda_assets.protocol.keys import KeyPair
from p2panda_assets.protocol.log_writer import LogWriter
from p2panda_assets.protocol.varu64 import encode_varu64

KEY = KeyPair.from_private_key(bytes(range(32)))
PAYLOAD = b"a payload"


def reason_of(call, *args) -> Reason:
    with pytest.raises(P2pandaError) as raised:
        call(*args)
    return raised.value.reason


def first_entry(payload: bytes = PAYLOAD, **kwargs) -> bytes:
    return sign_entry(KEY, log_id=1, seq_num=1, payload=payload, **kwargs)


def resign(unsigned: bytes) -> bytes:
    return unsigned + KEY.sign(unsigned)


def test_a_valid_entry_verifies() -> None:
    entry = verify_entry(first_entry(), PAYLOAD)
    assert (entry.log_id, entry.seq_num, entry.backlink, entry.lipmaa_link) == (1, 1, None, None)


def test_end_of_log_tag_is_read() -> None:
    assert decode_entry(first_entry(end_of_log=True)).end_of_log


def test_unknown_tag() -> None:
    raw = first_entry()
    assert reason_of(decode_entry, b"\x02" + raw[1:]) is Reason.UNKNOWN_TAG


def test_truncated_at_every_length() -> None:
    raw = sign_entry(KEY, log_id=300, seq_num=1, payload=PAYLOAD)
    for length in range(len(raw)):
        assert reason_of(decode_entry, raw[:length]) is Reason.TRUNCATED


def test_trailing_bytes() -> None:
    assert reason_of(decode_entry, first_entry() + b"\x00") is Reason.TRAILING_BYTES


def test_non_canonical_log_id() -> None:
    raw = first_entry()
    tampered = raw[:33] + bytes.fromhex("f801") + raw[34:]  # log id 1 in two bytes
    assert reason_of(decode_entry, tampered) is Reason.NON_CANONICAL_VARU64


def test_seq_zero() -> None:
    raw = first_entry()
    tampered = raw[:34] + b"\x00" + raw[35:]
    assert reason_of(decode_entry, tampered) is Reason.SEQ_ZERO
    assert (
        reason_of(lambda: encode_unsigned(author=KEY.public_key, log_id=1, seq_num=0, payload=b""))
        is Reason.SEQ_ZERO
    )


def test_bad_hash_form() -> None:
    raw = first_entry()
    # payload hash header 00 20 -> 00 21: a length no hash form has
    at = raw.index(HashAlgorithm.YASMF.value, 36)
    tampered = raw[:at] + b"\x00\x21" + raw[at + 2 :] + b"\x00"
    assert reason_of(decode_entry, tampered) is Reason.BAD_HASH


def test_bad_signature() -> None:
    raw = bytearray(first_entry())
    raw[-1] ^= 0x01
    assert reason_of(verify_entry, bytes(raw), PAYLOAD) is Reason.BAD_SIGNATURE


def test_bad_signature_when_an_author_byte_changes() -> None:
    raw = bytearray(first_entry())
    raw[5] ^= 0x80
    assert reason_of(verify_entry, bytes(raw), PAYLOAD) is Reason.BAD_SIGNATURE


def test_payload_hash_mismatch() -> None:
    assert reason_of(verify_entry, first_entry(), b"another!!") is Reason.PAYLOAD_HASH_MISMATCH


def test_payload_size_mismatch() -> None:
    assert reason_of(verify_entry, first_entry(), PAYLOAD + b"!") is Reason.PAYLOAD_SIZE_MISMATCH


def test_missing_payload() -> None:
    assert reason_of(verify_entry, first_entry(), None) is Reason.MISSING_PAYLOAD


def test_payload_too_large() -> None:
    unsigned = first_entry(b"")[:-64]
    # Rewrite the payload size field (a single 0 byte at offset 35) as 1 MiB + 1.
    tampered = unsigned[:35] + encode_varu64(MAX_PAYLOAD_SIZE + 1) + unsigned[36:]
    assert reason_of(decode_entry, resign(tampered)) is Reason.PAYLOAD_TOO_LARGE
    too_large = b"\x00" * (MAX_PAYLOAD_SIZE + 1)
    assert reason_of(first_entry, too_large) is Reason.PAYLOAD_TOO_LARGE


def test_a_payload_of_exactly_1_mib_is_fine() -> None:
    payload = b"\x00" * MAX_PAYLOAD_SIZE
    assert verify_entry(first_entry(payload), payload).payload_size == MAX_PAYLOAD_SIZE


def test_missing_and_unexpected_links_are_refused_when_encoding() -> None:
    link = HashAlgorithm.YASMF.hash(b"x")
    assert reason_of(lambda: sign_entry(KEY, log_id=1, seq_num=2, payload=b"")) is (
        Reason.MISSING_LINK
    )
    assert reason_of(lambda: sign_entry(KEY, log_id=1, seq_num=4, payload=b"", backlink=link)) is (
        Reason.MISSING_LINK
    )
    assert reason_of(lambda: first_entry(backlink=link)) is Reason.UNEXPECTED_LINK
    assert (
        reason_of(
            lambda: sign_entry(
                KEY, log_id=1, seq_num=2, payload=b"", backlink=link, lipmaa_link=link
            )
        )
        is Reason.UNEXPECTED_LINK
    )


def test_links_in_another_hash_than_the_payload_hash() -> None:
    writer = LogWriter(KEY, 1, algorithm=HashAlgorithm.YAMF)
    writer.append(b"one")
    yasmf_link = HashAlgorithm.YASMF.hash(b"one")
    assert (
        reason_of(
            lambda: sign_entry(
                KEY,
                log_id=1,
                seq_num=2,
                payload=b"two",
                backlink=yasmf_link,
                algorithm=HashAlgorithm.YAMF,
            )
        )
        is Reason.HASH_ALGORITHM_MISMATCH
    )
    second = writer.append(b"two")
    # Re-sign seq 2 with its YAMF backlink replaced by a YASMF one: decode must refuse it.
    entry = decode_entry(second)
    unsigned = entry.signed_bytes.replace(entry.backlink, yasmf_link)
    assert reason_of(decode_entry, resign(unsigned)) is Reason.HASH_ALGORITHM_MISMATCH


@settings(max_examples=800)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_decode_or_raise_the_typed_error(data: bytes) -> None:
    try:
        decode_entry(data)
    except P2pandaError as error:
        assert isinstance(error.reason, Reason)


@settings(max_examples=300)
@given(st.data())
def test_mutated_entries_decode_or_raise_the_typed_error(data: st.DataObject) -> None:
    raw = bytearray(LogWriter(KEY, 7).append(PAYLOAD) if data.draw(st.booleans()) else b"")
    writer = LogWriter(KEY, 300)
    for _ in range(data.draw(st.integers(1, 5))):
        raw = bytearray(writer.append(PAYLOAD))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(raw) - 1))
        raw[position] = data.draw(st.integers(0, 255))
    try:
        verify_entry(bytes(raw), PAYLOAD)
    except P2pandaError as error:
        assert isinstance(error.reason, Reason)


@given(
    log_id=st.integers(0, 2**64 - 1),
    payload=st.binary(max_size=300),
    end_of_log=st.booleans(),
    algorithm=st.sampled_from(list(HashAlgorithm)),
    length=st.integers(1, 14),
)
def test_entries_round_trip(
    log_id: int, payload: bytes, end_of_log: bool, algorithm: HashAlgorithm, length: int
) -> None:
    writer = LogWriter(KEY, log_id, algorithm=algorithm)
    for _ in range(length - 1):
        writer.append(b"earlier")
    raw = writer.append(payload, end_of_log=end_of_log)
    entry = verify_entry(raw, payload)
    assert entry.raw == raw
    assert (entry.log_id, entry.seq_num, entry.end_of_log) == (log_id, length, end_of_log)
    assert entry.hash == writer.hashes[length]
    assert entry.backlink == writer.hashes.get(length - 1)
