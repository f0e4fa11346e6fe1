"""The compatibility class of a migration: can any existing value fall back to a default?

A migration is *safe* when no value an instance holds can fall back to a default: it
adds a field, widens a type (every value converts and back unchanged:
`conversion.is_lossless`), or weakens validation (drops it, or keeps the very same
pattern on a field whose values were already checked against it). Anything else is
*lossy*: it narrows a type (some value may not convert), tightens or changes validation
(some value may not validate), or removes a field (its values are hidden; a revert shows
them again, since instances are re-projected from their messages).

The class is decided from the lenses alone, so it holds for every store: a lossy
migration may still make nothing fall back in a given store. How many values did fall
back is a count over instances: `predict_fallbacks` before publishing, `table_fallbacks`
after (`Table.fallbacks`, kept by the reduction).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from p2panda_assets.engine.conversion import SCALAR_RULES, is_lossless
from p2panda_assets.engine.corpus import Table
from p2panda_assets.engine.lens import FieldSpec, Lens
from p2panda_assets.engine.migrate import migrate_values
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.engine.validation import VALIDATED_BASES
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.protocol.messages import FieldChange, SchemaMigration


class Kind(StrEnum):
    """A migration is safe or lossy; a revert is breaking or a no-op (`revert_kind`)."""

    SAFE = "safe"
    LOSSY = "lossy"
    BREAKING = "breaking"
    NO_OP = "no-op"


@dataclass(frozen=True, slots=True)
class ChangeClass:
    """The class of one field change, and why (`widens integer -> text (lossless)`)."""

    name: str
    action: str
    kind: Kind
    reason: str

    @property
    def line(self) -> str:
        return f"{self.name}: {self.kind}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Compatibility:
    """The class of a whole migration: lossy when any of its field changes is."""

    kind: Kind
    changes: tuple[ChangeClass, ...]

    @property
    def lossy(self) -> tuple[ChangeClass, ...]:
        return tuple(c for c in self.changes if c.kind is Kind.LOSSY)


def classify(before: Lens, migration: SchemaMigration, after: Lens) -> Compatibility:
    """The class of `migration`, which turned lens `before` into lens `after`."""
    changes = tuple(_classify_change(change, before, after) for change in migration.fields)
    lossy = any(c.kind is Kind.LOSSY for c in changes)
    return Compatibility(Kind.LOSSY if lossy else Kind.SAFE, changes)


def history_compatibility(history: SchemaHistory) -> dict[int, Compatibility]:
    """The class of every migration version of a folded schema log (dead ones too: a
    revert does not change what a migration was). Meta and revert versions have none."""
    return {
        seq: classify(version.before, version.migration, version.lens)
        for seq, version in sorted(history.versions.items())
        if version.migration is not None
    }


def revert_kind(before: SchemaHistory, after: SchemaHistory) -> Kind:
    """The class of the revert that turned `before` into `after` (rule S-REVERT-1):
    *breaking* when it kills a version that was alive, since every create and update
    written at it is then rejected (`reverted-version`), however few the store holds;
    a *no-op* when it kills none and leaves the lens as it is (its target is the
    latest version, or an earlier revert makes it ignored, rule S-REVERT-2)."""
    if killed_versions(before, after):
        return Kind.BREAKING
    return Kind.NO_OP if after.lens == before.lens else Kind.SAFE


def killed_versions(before: SchemaHistory, after: SchemaHistory) -> list[int]:
    """The versions alive in `before` that are dead in `after`."""
    return sorted(seq for seq in before.versions if seq not in before.dead and seq in after.dead)


def _classify_change(change: FieldChange, before: Lens, after: Lens) -> ChangeClass:
    if change.action == "create":
        return ChangeClass(change.name, change.action, Kind.SAFE, "adds a field")
    if change.action == "remove":
        return ChangeClass(
            change.name, change.action, Kind.LOSSY, "removes a field (a revert shows it again)"
        )
    old, new = before[change.name], after[change.name]
    parts = [_type_part(old.type, new.type), _validation_part(old, new), _relation_part(old, new)]
    found = [p for p in parts if p is not None]
    if not found:
        found = [(Kind.SAFE, "keeps its type and validation")]
    kind = Kind.LOSSY if any(k is Kind.LOSSY for k, _ in found) else Kind.SAFE
    return ChangeClass(change.name, change.action, kind, "; ".join(text for _, text in found))


def _type_part(old: FieldType, new: FieldType) -> tuple[Kind, str] | None:
    """Widening is `is_lossless` for every value; any other change may fail to convert."""
    if old == new:
        return None
    if is_lossless(old, new):
        return Kind.SAFE, f"widens {old} -> {new} (lossless)"
    if (old.base, new.base) not in SCALAR_RULES:
        return Kind.LOSSY, f"narrows {old} -> {new} (no value converts)"
    return Kind.LOSSY, f"narrows {old} -> {new}"


def _checks(ftype: FieldType, pattern: str | None) -> str | None:
    """The pattern that values of `ftype` are really checked against: validation only
    applies to varchar and text (and their arrays)."""
    return pattern if ftype.base in VALIDATED_BASES else None


def _validation_part(old: FieldSpec, new: FieldSpec) -> tuple[Kind, str] | None:
    """Weakening is safe: no validation after, or the same pattern the values already
    passed (a lossless type change leaves text unchanged). A changed pattern is lossy
    unless it is removed: whether every text one RE2 pattern matches is matched by
    another is language inclusion, which is not decided here in general (so
    `^a` -> `^a|^b`, though in fact weaker, is reported lossy: an honest over-estimate)."""
    was, now = _checks(old.type, old.validation), _checks(new.type, new.validation)
    if now is None:
        if was is not None:
            return Kind.SAFE, f"weakens validation (drops {_shown(was)})"
        if new.validation is not None:
            return Kind.SAFE, f"validation {_shown(new.validation)} does not apply to {new.type}"
        return None
    if was == now:
        return Kind.SAFE, f"keeps validation {_shown(now)}"
    if was is None:
        return Kind.LOSSY, f"tightens validation (adds {_shown(now)})"
    return Kind.LOSSY, f"tightens validation (changes {_shown(was)} -> {_shown(now)})"


def _shown(pattern: str) -> str:
    """A pattern as its author wrote it (backslashes single), quoted so spaces show."""
    return f"`{pattern}`" if pattern.isprintable() else repr(pattern)


def _relation_part(old: FieldSpec, new: FieldSpec) -> tuple[Kind, str] | None:
    """A relation's target or cascade changes no value (the ids stay as written)."""
    if not (old.type.is_relation and new.type.is_relation):
        return None
    if old.relation != new.relation:
        return Kind.SAFE, "points at another schema (ids kept as written)"
    if old.cascade != new.cascade:
        return Kind.SAFE, f"cascade {'on' if new.cascade else 'off'}"
    return None


# --- how many values did fall back --------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldFallbacks:
    """A field of a table: live rows whose value is a fallback, out of all live rows,
    and the alive lossy updates of the field that can have put it there."""

    name: str
    rows: int
    of: int
    versions: tuple[int, ...]

    @property
    def line(self) -> str:
        at = ", ".join(str(v) for v in self.versions) or "none"
        return f"{self.name}: {self.rows} of {self.of} rows fell back (lossy at version {at})"


def table_fallbacks(table: Table) -> dict[str, FieldFallbacks]:
    """Per field of the current lens changed by a lossy update since it was created,
    or holding a fallback: how many live rows hold a fallback (`Table.fallbacks`).

    `Table.fallbacks` counts rows, not migrations: a value that fell back at two lossy
    updates of its field is one row. So the count is given per field, with the
    versions of those updates."""
    lens = table.history.lens
    lossy: dict[str, list[int]] = {name: [] for name in lens}
    for seq, version in sorted(table.history.versions.items()):
        if seq in table.history.dead or version.migration is None:
            continue
        for change in classify(version.before, version.migration, version.lens).lossy:
            spec = lens.get(change.name)
            if change.action == "update" and spec is not None and seq > spec.created_at:
                lossy[change.name].append(seq)
    return {
        name: FieldFallbacks(name, table.fallbacks.get(name, 0), len(table.rows), tuple(seqs))
        for name, seqs in lossy.items()
        if seqs or table.fallbacks.get(name, 0)
    }


def predict_fallbacks(table: Table, history: SchemaHistory) -> dict[str, int]:
    """Per field, how many live rows of `table` fall back to a default on the migrations
    `history` has after the table's version: each row's values go through the engine's
    own `migrate_values`, as the value of the message that last wrote each field would.
    (Every migration step is a function of the value before it, so the row's current
    value stands for that message's.) Fields no row falls back on count 0."""
    latest = table.history.latest
    assert latest is not None, "a table has a schema version"
    counts: dict[str, int] = {}
    for step in history.alive_after(latest.seq):
        if step.migration is not None:
            counts.update((c.name, 0) for c in step.migration.fields if c.action == "update")
    for row in table.rows:
        _, fell_back = migrate_values(row.values, latest.seq, history, is_create=False)
        for name in fell_back:
            counts[name] = counts.get(name, 0) + 1
    return counts


def hidden_values(table: Table, removed: Iterable[str]) -> dict[str, int]:
    """Per removed field, how many live rows hold a value (not null) that it hides."""
    return {name: sum(row.values.get(name) is not None for row in table.rows) for name in removed}
