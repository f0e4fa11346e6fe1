"""Field values as users write them (command-line text, YAML/TOML/JSON data) turned into
the raw CBOR values messages carry, and checked the way the engine will check them.

With a field type known, a value goes through the engine's own conversion table (rule
C-CONVERT, docs/semantics.md): command-line text converts from `text` (`3` to an
integer, an ISO 8601 text to a timestamp, hex to a relation), file data converts from
its natural type (a YAML timestamp or TOML datetime to a timestamp, a hex string to a
relation or blob). Then
`values.to_raw` gives the raw form, so authoring never invents rules of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date, datetime, time

import yaml

from p2panda_assets.engine.conversion import ConversionFailed, convert, convert_raw
from p2panda_assets.engine.instances import typed_values
from p2panda_assets.engine.lens import Lens
from p2panda_assets.engine.values import to_raw
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.fieldtypes import BaseType, FieldType
from p2panda_assets.protocol.messages import FieldValue

TEXT = FieldType(BaseType.TEXT)


def raw_from_text(text: str, ftype: FieldType, name: str) -> FieldValue:
    """A `--field name=TEXT` value at its field's type. An array field takes a JSON array
    (`["a","b"]`); a plain text there is one element, as conversion wraps a scalar."""
    try:
        if ftype.is_array and text.lstrip().startswith("["):
            value = convert_raw(_json_array(text, name), ftype)
        else:
            value = convert(text, TEXT, ftype)
    except ConversionFailed as error:
        raise P2pandaError(
            Reason.INVALID_VALUE, f"field {name!r}: {text[:60]!r} is not a {ftype} ({error})"
        ) from None
    return freeze(to_raw(value, ftype))


def raw_from_data(data: object, ftype: FieldType, where: str) -> FieldValue:
    """A typed value from a YAML/TOML/JSON file at a field type (values and defaults)."""
    try:
        value = convert_raw(data, ftype)
    except ConversionFailed as error:
        raise P2pandaError(
            Reason.INVALID_VALUE, f"{where}: {data!r:.60} is not a {ftype} ({error})"
        ) from None
    return freeze(to_raw(value, ftype))


def raw_without_type(text: str) -> FieldValue:
    """A `--field` value for a schema whose lens is unknown: read as a YAML scalar
    (`3`, `true`, `1.5`), and kept as text when YAML reads it as anything else."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if data is None or isinstance(data, dict | list | date | time):
        return text
    if isinstance(data, datetime) and data.utcoffset() is None:
        return text
    return freeze(data)


def freeze(raw: object) -> FieldValue:
    """Arrays as tuples, as the message dataclasses hold them."""
    return tuple(raw) if isinstance(raw, list) else raw  # type: ignore[return-value]


def check_fields(fields: Mapping[str, object], lens: Lens, version: int) -> None:
    """Refuse what the engine would reject, with the engine's own check."""
    typed_values(fields.items(), lens, version)


def _json_array(text: str, name: str) -> list[object]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise P2pandaError(
            Reason.INVALID_VALUE, f"field {name!r}: {text[:60]!r} is not a JSON array"
        ) from None
    if not isinstance(data, list):
        raise P2pandaError(Reason.INVALID_VALUE, f"field {name!r}: expected a JSON array")
    return data
