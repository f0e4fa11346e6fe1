"""What verification records of a message so that no later step decodes a payload just
to find out where it belongs: its kind, the schema version it names, and the instance;
or, for a payload that does not decode, why (its reason code)."""

from __future__ import annotations

from p2panda_assets.errors import P2pandaError
from p2panda_assets.protocol.messages import (
    Message,
    SchemaHashRef,
    SchemaVersionRef,
    decode_message,
)

# (kind, schema id, version, schema hash, instance); all None where the payload does not
# decode as a message.
MessageIndex = tuple[str | None, str | None, int | None, bytes | None, bytes | None]
NOT_A_MESSAGE: MessageIndex = (None, None, None, None, None)


def message_index(payload: bytes) -> MessageIndex:
    return indexed_message(payload)[0]


def indexed_message(payload: bytes) -> tuple[MessageIndex, str | None]:
    """The message's index and None; or, if the payload does not decode, `NOT_A_MESSAGE`
    and the reason code."""
    index, error, _ = decoded_and_indexed(payload)
    return index, error


def decoded_and_indexed(payload: bytes) -> tuple[MessageIndex, str | None, Message | None]:
    """`indexed_message`, and the message itself (None where the payload does not
    decode)."""
    try:
        message = decode_message(payload)
    except P2pandaError as error:
        return NOT_A_MESSAGE, str(error.reason), None
    return index_of(message), None, message


def index_of(message: Message) -> MessageIndex:
    """What the index keeps of a decoded message."""
    ref = getattr(message, "schema", None)
    schema_id = version = schema_hash = None
    if isinstance(ref, SchemaVersionRef):
        schema_id, version = ref.schema_id, ref.version
    elif isinstance(ref, SchemaHashRef):
        schema_hash = ref.hash
    return (message.kind, schema_id, version, schema_hash, getattr(message, "instance", None))
