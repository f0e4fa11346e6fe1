"""The message index verification keeps: where a message belongs, or why its payload
does not decode, exactly as `decode_message` decides."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from p2panda_assets.errors import P2pandaError
from p2panda_assets.protocol.message_index import NOT_A_MESSAGE, indexed_message, message_index
from p2panda_assets.protocol.messages import (
    Create,
    Delete,
    SchemaVersionRef,
    decode_message,
    encode_message,
)

AUTHOR = bytes(range(32))
INSTANCE = bytes([0, 32]) + bytes(range(32))


def test_an_instance_message_is_indexed_by_its_schema_and_instance() -> None:
    ref = SchemaVersionRef(AUTHOR, 7, 3)
    index, error = indexed_message(encode_message(Delete(INSTANCE, ref)))
    assert error is None
    assert index == ("delete", ref.schema_id, 3, None, INSTANCE)
    created = encode_message(Create(ref, (("title", "x"),)))
    assert message_index(created) == ("create", ref.schema_id, 3, None, None)


@given(st.binary(max_size=40))
def test_any_payload_is_indexed_or_keeps_the_reason_decoding_gives(payload: bytes) -> None:
    index, error = indexed_message(payload)
    assert message_index(payload) == index
    try:
        message = decode_message(payload)
    except P2pandaError as failure:
        assert (index, error) == (NOT_A_MESSAGE, str(failure.reason))
    else:
        assert error is None and index[0] == message.kind
