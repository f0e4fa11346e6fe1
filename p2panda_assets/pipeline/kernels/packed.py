"""Instance messages as verification decoded them, kept in the columnar store instead
of their payloads, so that no later step decodes a payload again (issue 12: each entry
decoded once). The entry store keeps every payload.

A packed message is a pickle of plain values: (0, schema, fields) for a create, (1,
schema, instance, fields) for an update, (2, instance, schema) for a delete, a schema
being (author, log id, version) or a hash. Pickle, not marshal: its format is stable
across Python versions, and a columnar store outlives them. It is read by an unpickler
that makes no object but plain values and UTC datetimes (`_ValuesOnly`): a columnar
store on shared storage must not be a way to run code on the workers. On 20,000
instance messages of the bench's corpus, unpacking took 2.1 us a message (0.75 us of it
for the restricted unpickler) against 7.9 us for `decode_message`; packing 0.85 us.

Schema messages are not packed (there are few, and the catalog decodes them from the
entry store); neither are payloads that do not decode. Their `message` is NULL and their
payload kept, as in batches verified before messages were packed: readers decode those
payloads (`message_of`)."""

from __future__ import annotations

import io
import pickle
from datetime import datetime, timedelta, timezone

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


# The only classes a packed message names: those of a UTC datetime.
_DATETIME_CLASSES: dict[tuple[str, str], type] = {
    ("datetime", "datetime"): datetime,
    ("datetime", "timezone"): timezone,
    ("datetime", "timedelta"): timedelta,
}


class _ValuesOnly(pickle.Unpickler):
    """Unpickles plain values and UTC datetimes, nothing else."""

    def find_class(self, module: str, name: str) -> type:
        try:
            return _DATETIME_CLASSES[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"a packed message holds no {module}.{name}") from None


def unpack_message(packed: bytes) -> Message:
    """The message `pack_message` packed."""
    value = _ValuesOnly(io.BytesIO(packed)).load()
    kind = value[0]
    if kind == _CREATE:
        return Create(_unref(value[1]), value[2])  # type: ignore[arg-type]
    if kind == _UPDATE:
        return Update(_unref(value[1]), value[2], value[3])  # type: ignore[arg-type]
    return Delete(value[1], _unref(value[2]))


def message_of(packed: bytes | None, payload: bytes | None) -> Message | P2pandaError:
    """A stored message: unpacked if verification packed it, else decoded from its
    payload (or why that payload does not decode)."""
    if packed is not None:
        return unpack_message(packed)
    assert payload is not None, "the columnar store keeps each message in one form or the other"
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
