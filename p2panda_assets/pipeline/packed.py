"""Instance messages as verification decoded them, kept beside their payloads in the
columnar store, so that no later step decodes a payload again (issue 12: each entry
decoded once).

A packed message is a pickle of plain values: (0, schema, fields) for a create, (1,
schema, instance, fields) for an update, (2, instance, schema) for a delete, a schema
being (author, log id, version) or a hash. Pickle, not marshal: its format is stable
across Python versions, and a columnar store outlives them. On the bench's messages,
unpacking took 2.5 us against 13.3 us for `decode_message` (and packing 1.5 us).

Schema messages are not packed (there are few, and the catalog decodes them from the
entry store); neither are payloads that do not decode. Their `message` is NULL, as it
is in batches verified before it was kept: readers decode those payloads
(`message_of`)."""

from __future__ import annotations

import pickle

from p2panda_assets.errors import P2pandaError
from p2panda_assets.protocol.messages import (
    Create,
    Delete,
    Message,
    SchemaHashRef,
    SchemaVersionRef,
    Update,
    VersionedSchema,
    decode_message,
)

_CREATE, _UPDATE, _DELETE = 0, 1, 2
_PickledRef = tuple[bytes, int, int] | bytes | None


def pack_message(message: Message) -> bytes | None:
    """The packed form of an instance message; None for a schema message."""
    if isinstance(message, Create):
        value: tuple[object, ...] = (_CREATE, _ref(message.schema), message.fields)
    elif isinstance(message, Delete):
        value = (_DELETE, message.instance, _ref(message.schema))
    elif isinstance(message, Update):
        value = (_UPDATE, _ref(message.schema), message.instance, message.fields)
    else:
        return None
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def unpack_message(packed: bytes) -> Message:
    """The message `pack_message` packed."""
    value = pickle.loads(packed)
    kind = value[0]
    if kind == _CREATE:
        return Create(_unref(value[1]), value[2])  # type: ignore[arg-type]
    if kind == _UPDATE:
        return Update(_unref(value[1]), value[2], value[3])  # type: ignore[arg-type]
    return Delete(value[1], _unref(value[2]))


def message_of(packed: bytes | None, payload: bytes) -> Message | P2pandaError:
    """A stored message: unpacked if verification packed it, else decoded from its
    payload (or why that payload does not decode)."""
    if packed is not None:
        return unpack_message(packed)
    try:
        return decode_message(payload)
    except P2pandaError as error:
        return error


def _ref(ref: VersionedSchema | None) -> _PickledRef:
    if isinstance(ref, SchemaVersionRef):
        return (ref.author, ref.log_id, ref.version)
    if isinstance(ref, SchemaHashRef):
        return ref.hash
    return None


def _unref(value: _PickledRef) -> VersionedSchema | None:
    if type(value) is tuple:
        return SchemaVersionRef(*value)
    if value is None:
        return None
    return SchemaHashRef(value)  # type: ignore[arg-type]
