"""Verification checks what ingest left unchecked, and agrees with the engine's full
check (`check_record`) on every record ingest lets through without a verdict: the same
key, log, entry and rejection, for good entries, forged signatures, flipped bytes and
other payloads."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from p2panda_assets.engine.corpus import check_ingested, check_record
from p2panda_assets.protocol.keys import KeyPair
from p2panda_assets.protocol.log_writer import LogWriter
from p2panda_assets.store.ingest import check_entry

KEY = KeyPair.from_private_key(bytes(range(32)))


@st.composite
def records(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    """An entry of a log of 1-5 entries, maybe with one byte flipped (in the entry or
    its payload), maybe with another payload or none."""
    writer = LogWriter(KEY, draw(st.integers(1, 300)))
    payloads = draw(st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=5))
    entries = [writer.append(payload) for payload in payloads]
    index = draw(st.integers(0, len(entries) - 1))
    raw, payload = bytearray(entries[index]), payloads[index]
    if draw(st.booleans()):
        raw[draw(st.integers(0, len(raw) - 1))] ^= draw(st.integers(1, 255))
    given_payload: bytes | None = draw(st.sampled_from([payload, None, payload + b"!"]))
    return bytes(raw), given_payload


@settings(max_examples=400, deadline=None)
@given(records())
def test_the_same_verdict_as_the_full_check_for_what_ingest_passed(
    record: tuple[bytes, bytes | None],
) -> None:
    raw, payload = record
    stored_hash, *_, verdict, _message, _source, _line = check_entry(raw, payload)
    full = check_record(raw, payload)
    if verdict is None:
        assert check_ingested(raw, stored_hash) == full
    else:  # ingest rejected it: the full check rejects it for the same reason
        assert full.rejection is not None and full.rejection.reason == verdict


def test_a_forged_signature_is_rejected() -> None:
    raw = bytearray(LogWriter(KEY, 1).append(b"payload"))
    raw[-1] ^= 1
    stored_hash = check_entry(bytes(raw), b"payload")[0]
    checked = check_ingested(bytes(raw), stored_hash)
    assert checked.entry is None and checked.rejection is not None
    assert checked.rejection.reason == "bad-signature"
