"""Forward migration of one message's values from the version it names to the latest.

A message at an older version passes through every later alive migration: `create`
gives a create message the new field's default (an update message writes only its own
fields), `update` converts the value and stores the default where it does not convert or
does not validate, `remove` hides the field.
"""

from __future__ import annotations

from p2panda_assets.engine.conversion import ConversionFailed, convert
from p2panda_assets.engine.lens import FieldSpec, Value
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.engine.validation import validates


def migrate_values(
    values: dict[str, Value], version: int, history: SchemaHistory, *, is_create: bool
) -> tuple[dict[str, Value], set[str]]:
    """Migrate `values` (written at `version`) to the latest version, through every
    later alive migration (rule I-FORWARD, docs/semantics.md); a create gets the
    defaults of the fields created since (rule S-DEFAULT-1).

    Returns the migrated values and the names of the fields whose value fell back to
    the default on the way (the measure of how lossy the migrations were)."""
    values = dict(values)
    fell_back: set[str] = set()
    for step in history.alive_after(version):
        migration = step.migration
        if migration is None:
            continue
        for change in migration.fields:
            name = change.name
            if change.action == "remove":
                values.pop(name, None)
                fell_back.discard(name)
            elif change.action == "create":
                if is_create:
                    values[name] = step.lens[name].default
            elif name in values:
                values[name], failed = convert_field(
                    values[name], step.before[name], step.lens[name]
                )
                if failed:
                    fell_back.add(name)
    return values, fell_back


def convert_field(value: Value, old: FieldSpec, new: FieldSpec) -> tuple[Value, bool]:
    """Rule C-FALLBACK (docs/semantics.md): a value across an `update` of its field:
    converted and validated, else the default. Returns (value, whether it fell back)."""
    try:
        converted = convert(value, old.type, new.type)
    except ConversionFailed:
        return new.default, True
    if not validates(converted, new.type, new.compiled_validation):
        return new.default, True
    return converted, False
