"""Field types (rule M-TYPE, docs/semantics.md): a base type, optionally as an array (`text[]`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from p2panda_assets.errors import P2pandaError, Reason


class BaseType(StrEnum):
    VARCHAR = "varchar"
    TEXT = "text"
    INTEGER = "integer"
    FLOAT = "float"
    BLOB = "blob"
    BOOLEAN = "boolean"
    TIMESTAMP = "timestamp"
    RELATION = "relation"


VARCHAR_MAX_CHARS = 255
BLOB_MAX_BYTES = 512 * 1024
INTEGER_MIN = -(2**63)
INTEGER_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class FieldType:
    base: BaseType
    is_array: bool = False

    @classmethod
    def parse(cls, text: str) -> FieldType:
        """Parse `varchar`, `relation[]`, ...; anything else is `unknown-type`.
        Rule M-TYPE (docs/semantics.md)."""
        is_array = text.endswith("[]")
        name = text[:-2] if is_array else text
        try:
            return cls(BaseType(name), is_array)
        except ValueError:
            raise P2pandaError(Reason.UNKNOWN_TYPE, f"unknown field type {text!r}") from None

    @property
    def element(self) -> FieldType:
        """The scalar type of the elements (itself, for a scalar type)."""
        return FieldType(self.base, False)

    @property
    def is_relation(self) -> bool:
        return self.base is BaseType.RELATION

    def __str__(self) -> str:
        return f"{self.base.value}[]" if self.is_array else self.base.value
