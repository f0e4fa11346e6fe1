"""Field validation: RE2 *search* over the text of varchar and text values.

Patterns come from schema authors and are untrusted, so they only ever reach RE2
(google-re2), whose matching time is linear in the text; never a backtracking engine.
Semantics (rule C-VALIDATE), RE2's defaults: a value validates when the pattern matches
anywhere in it; `^` and `$` anchor at the start and end of the whole text (per line
only with `(?m)`); `.` does not match `\\n` (it does with `(?s)`). Each element of a
varchar[] or text[] array must validate; null and the other types always pass.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

from p2panda_assets.engine.values import Value
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.fieldtypes import BaseType, FieldType

# The types whose values a validation checks (rule C-VALIDATE); those of every other
# type pass. The one set: compatibility.py asks it which patterns really apply.
VALIDATED_BASES = frozenset({BaseType.VARCHAR, BaseType.TEXT})


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a bad pattern is reported as bad-validation, not on stderr
    options.never_capture = True  # a yes/no answer needs no submatches (much faster)
    return options


_OPTIONS = _options()


class Validation:
    """A compiled validation pattern. Pickles as its pattern (Spark ships it)."""

    __slots__ = ("_regexp", "pattern")

    def __init__(self, pattern: str, regexp: Any) -> None:
        self.pattern = pattern
        self._regexp = regexp

    def matches(self, text: str) -> bool:
        """True when the pattern matches anywhere in `text` (RE2 search)."""
        # Bytes skip google-re2's per-match offset translation; the pattern is UTF-8.
        return self._regexp.search(text.encode("utf-8", "surrogatepass")) is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Validation) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"Validation({self.pattern!r})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (compile_validation, (self.pattern,))


def compile_validation(pattern: str) -> Validation:
    """Compile an author's pattern, or raise `P2pandaError(bad-validation)` (rule S-RE2,
    docs/semantics.md).

    RE2 itself rejects what it cannot run in linear time and bounded memory:
    backreferences and look-around, repetition counts above 1000, and programs larger
    than its 8 MiB memory budget.
    """
    if not isinstance(pattern, str):
        raise P2pandaError(Reason.BAD_VALIDATION, "a validation must be a text string")
    return _compile(pattern)


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> Validation:
    try:
        regexp = re2.compile(pattern, _OPTIONS)
    except re2.error as error:
        raise P2pandaError(Reason.BAD_VALIDATION, f"not valid RE2: {_describe(error)}") from None
    except UnicodeError:
        raise P2pandaError(Reason.BAD_VALIDATION, "pattern is not valid Unicode") from None
    return Validation(pattern, regexp)


def _describe(error: Exception) -> str:
    detail = error.args[0] if error.args else ""
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    return str(detail)


def validates(value: Value, ftype: FieldType, validation: Validation | None) -> bool:
    """Rule C-VALIDATE (docs/semantics.md): whether a canonical value passes its field's
    validation (None: no validation)."""
    if validation is None or value is None or ftype.base not in VALIDATED_BASES:
        return True
    if ftype.is_array:
        assert isinstance(value, tuple)
        for item in value:
            assert isinstance(item, str)  # canonical elements of a text type
            if not validation.matches(item):
                return False
        return True
    assert isinstance(value, str)
    return validation.matches(value)
