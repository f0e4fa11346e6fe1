"""A lens: the fields a schema version shows, with type, validation and default.

Instances are immutable items; a table is their projection through the current lens
(Registers RFC). A field removed by a migration is hidden, not destroyed: the item keeps
it, and a revert that cuts the removal out of the history shows it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

from p2panda_assets.engine.validation import Validation, compile_validation
from p2panda_assets.engine.values import Value as Value  # re-exported
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.protocol.messages import SchemaRef


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a lens. `created_at` is the version that created this incarnation of
    the field: a field created again after its removal is a new field that starts afresh."""

    name: str
    type: FieldType
    validation: str | None
    default: Value
    relation: SchemaRef | None
    cascade: bool
    created_at: int

    @property
    def compiled_validation(self) -> Validation | None:
        return None if self.validation is None else compile_validation(self.validation)


class _FrozenFields(dict[str, FieldSpec]):
    """A dict nobody may change in place (versions share lenses), and which, unlike a
    mappingproxy, pickles: Spark ships lenses to its workers and Dagster stores plans."""

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a lens is read-only; build a new one with lens_from")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    def __reduce__(self) -> tuple[type, tuple[dict[str, FieldSpec]]]:
        return (type(self), (dict(self),))


Lens = Mapping[str, FieldSpec]
EMPTY_LENS: Lens = _FrozenFields()


def lens_from(fields: dict[str, FieldSpec]) -> Lens:
    """A read-only lens."""
    return _FrozenFields(fields)
