"""What a new schema version does to a schema's data, before it is published: the
engine reduces the stored entries as they are and with the new schema entries
appended, and the two tables are compared row by row (`data_effect`). The counts are
the ones the next build will give, not an estimate: it runs the same reduction.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from p2panda_assets.engine.corpus import Corpus, Row, Table
from p2panda_assets.engine.lens import Value

DROPPED = "dropped"  # the new version leaves no field: the table goes (rule S-DROP)
GONE = "gone"  # a row that left for no rejection of its own (a cascade, say)


@dataclass(frozen=True, slots=True)
class DataEffect:
    """Live rows before (`instances`), rows that leave the table by why (`rejected`,
    keyed by reason code), rows kept whose values change, rows that appear."""

    instances: int
    rejected: dict[str, int]
    changed: int
    appeared: int = 0

    @property
    def rejects(self) -> int:
        return sum(self.rejected.values())

    @property
    def kept(self) -> int:
        return self.instances - self.rejects

    @property
    def text(self) -> str:
        """`4 of 5 instances would be rejected (reverted-version), 1 kept; 0 rows change
        values`: the clause the authoring commands print."""
        why = ", ".join(
            f"{n} {reason}" if n != self.rejects else reason
            for reason, n in sorted(self.rejected.items())
        )
        rejected = f" ({why})" if why else ""
        text = (
            f"{self.rejects} of {self.instances} instances would be rejected{rejected}, "
            f"{self.kept} kept; {self.changed} rows change values"
        )
        return text + (f"; {self.appeared} rows appear" if self.appeared else "")


def data_effect(before: Table, after: Corpus) -> DataEffect:
    """Compare `before` with the same schema's table in `after`. A row that leaves is
    counted under the reason its create entry is rejected for in `after`; a row kept
    changes when a field both lenses have holds another value (a field shown or hidden
    is a column change, which the lens says, not a value change)."""
    table = after.tables.get(before.schema_id)
    new = {} if table is None or table.dropped else {r.instance_id: r for r in table.rows}
    old = {r.instance_id: r for r in before.rows}
    rejected: Counter[str] = Counter(
        _why_gone(after, instance_id, table) for instance_id in old.keys() - new.keys()
    )
    changed = sum(_values_differ(old[i], new[i]) for i in old.keys() & new.keys())
    return DataEffect(len(old), dict(rejected), changed, len(new.keys() - old.keys()))


def _why_gone(after: Corpus, instance_id: bytes, table: Table | None) -> str:
    if table is None or table.dropped:
        return DROPPED
    account = after.accounts.get(instance_id)
    if account is None or account.reason is None:
        return GONE
    return str(account.reason)


def _values_differ(old: Row, new: Row) -> bool:
    common = old.values.keys() & new.values.keys()
    return any(not _same(old.values[name], new.values[name]) for name in common)


def _same(a: Value, b: Value) -> bool:
    """Equal, or both NaN (alone or in an array): a NaN kept as it was is no change,
    though NaN != NaN."""
    return a == b or repr(a) == repr(b)
