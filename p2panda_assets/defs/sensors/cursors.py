"""The sensors' cursors: what each remembers between ticks, as JSON text."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Self

from p2panda_assets.store.feed import Feed, Hole, Writers

HOLE_TTL_SECONDS = 600.0  # an ingest transaction open longer than this is not waited for
MAX_HOLES = 10_000


def _loads(cursor: str | None) -> dict[str, Any]:
    return json.loads(cursor) if cursor else {}


@dataclass
class RegistrationCursor:
    issued: dict[str, str] = field(default_factory=dict)  # schema -> last run key requested
    pending: list[str] = field(default_factory=list)  # schemas not ready at the last tick
    cycles: list[str] = field(default_factory=list)  # cycles reported already
    state: str = ""  # fingerprint of everything a decision depends on

    @classmethod
    def parse(cls, text: str | None) -> Self:
        data = _loads(text)
        if "waiting" in data:  # the name of `pending` in cursors stored before
            data["pending"] = data.pop("waiting")
        return cls(**data)

    def dumps(self) -> str:
        fields = {"issued": self.issued, "pending": self.pending, "cycles": self.cycles}
        return json.dumps({**fields, "state": self.state}, sort_keys=True)


@dataclass(frozen=True)
class EntryCursor:
    """How far the entries sensor has read `p2panda.entries.ingest_seq`.

    `ingest_seq` is taken when a row is inserted, not when it commits, so concurrent
    ingests commit values out of order: after the sensor has seen 120, a transaction may
    still commit 117. The cursor keeps the highest value seen and the *holes* below it
    (ranges not seen yet, with when they were first seen), and reads both each tick. A
    hole is forgotten when it cannot fill any more: when, before the tick's snapshot, no
    transaction was writing to the entry store and the sequence had passed it (values
    burnt by duplicates or rolled back stay holes only until then), or after
    `HOLE_TTL_SECONDS`. Counting entries per log instead would need a scan of the store
    every tick; a fixed window below the maximum would lose the late rows of large
    concurrent batches.
    """

    seq: int = 0
    holes: tuple[Hole, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> Self:
        data = _loads(text)
        holes = tuple((int(lo), int(hi), float(born)) for lo, hi, born in data.get("holes", ()))
        return cls(int(data.get("seq", 0)), holes)

    def dumps(self) -> str:
        return json.dumps({"seq": self.seq, "holes": [list(h) for h in self.holes]})

    @classmethod
    def past(cls, feed: Feed, writers: Writers, now: float) -> Self:
        """The cursor past `feed`: the holes that may still fill (see above)."""
        kept = [
            (lo, hi, born)
            for lo, hi, born in feed.holes
            if now - born < HOLE_TTL_SECONDS and (writers.active or hi > writers.handed_out)
        ][-MAX_HOLES:]
        return cls(feed.top, tuple(kept))

    def union(self, other: EntryCursor) -> EntryCursor:
        """The entries seen by either cursor: a hole stays only where both have not seen
        it (the range above the lower cursor's `seq` counts as a hole of it). The live
        listener reads past what the entries sensor has read already (`store.entry_claims`)."""
        low, high = sorted((self, other), key=lambda c: c.seq)
        unseen_low = [*low.holes, *([(low.seq + 1, high.seq, 0.0)] if high.seq > low.seq else [])]
        holes = []
        for lo, hi, born in high.holes:
            for lo2, hi2, born2 in unseen_low:
                if max(lo, lo2) <= min(hi, hi2):
                    holes.append((max(lo, lo2), min(hi, hi2), max(born, born2)))
        return EntryCursor(high.seq, tuple(sorted(holes)))


@dataclass(frozen=True)
class RevertCursor:
    """The reverts handled, per schema (seqs). Reverts are found in `message_index`, which
    only the index step fills, after it verified them, so a cursor over ingest_seq could
    pass a revert before it is verified and never see it; schema logs are small, so the
    registered schemas' logs are read whole each tick instead."""

    handled: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> Self:
        return cls(_loads(text).get("handled", {}))

    def dumps(self) -> str:
        return json.dumps({"handled": self.handled}, sort_keys=True)
