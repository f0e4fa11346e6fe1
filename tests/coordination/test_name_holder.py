"""Rule T-VIEW for names: a name two registered schemas are known by (own names read
after their registration) is its holder's, for `panda check`, `ensure`, `materialize`,
`unregister` and `status --rejected` as for its view. Without a database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from p2panda_assets.coordination import name_holder, registered_names, resolve_schema_id
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.store.registry import RegistryRow


def registry_row(schema_id: str, registered: str | None, own: str, at: int) -> RegistryRow:
    """A registry row as `registered_schemas` reads it, with what `name_holder` reads."""
    author, log_id = schema_id.rsplit("-", 1)
    return RegistryRow(
        schema_id, bytes.fromhex(author), int(log_id), own, registered, None, None,
        f"p2panda_data.s_{schema_id}", "registered", None, None, [],
        datetime(2026, 1, at, tzinfo=UTC), None, None, None, None, {}, {}, None,
    )  # fmt: skip


def test_a_shared_name_resolves_to_its_holder_as_its_view_does() -> None:
    """Registered name first, then the schema registered first: `view_holder`'s rule."""
    a, b, c = (f"{n * 32}-1" for n in ("aa", "bb", "cc"))
    early_own = registry_row(a, None, "note", at=1)
    late_registered = registry_row(b, "note", "other", at=2)
    later_own = registry_row(c, None, "note", at=3)
    rows = [later_own, early_own, late_registered]
    assert name_holder(rows).schema_id == b
    assert name_holder([later_own, early_own]).schema_id == a
    names = registered_names(rows)
    assert resolve_schema_id("note", names, "is registered", holders=True) == b
    with pytest.raises(P2pandaError) as refused:  # without the registry's order: refused
        resolve_schema_id("note", names, "is in the input")
    assert refused.value.reason is Reason.BAD_INPUT
