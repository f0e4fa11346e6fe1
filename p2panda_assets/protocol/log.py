"""Chain rules of one bamboo log (author, log id), decided from the set of its entries.

The verdict depends only on *which* entries arrived, never on their order, so any
interleaving of deliveries gives the same log. Per seq num, walking up from 1:

- an entry whose links point at the accepted predecessors is a *candidate*;
  one whose links do not is rejected (`backlink-mismatch` / `lipmaa-mismatch`), as is
  one in another hash algorithm than the log's first entry (`hash-algorithm-mismatch`);
- one candidate: accepted; if it ends the log, every later entry is `after-end-of-log`;
- two or more different candidates: a fork; the log stays valid up to the seq before,
  and every entry from the fork on is rejected with `fork`;
- no candidate: the walk stops, and every later entry is pending, `awaiting-entry`.

Byte-identical copies of an entry are one entry; the store counts them as duplicates.
Entries given here have already passed `entry.verify_entry` (signature and payload).

A log whose entries so far were all accepted can be continued from its tip (`LogTip`):
the walk starts after it, with the hashes the new entries may link to. The verdict on
the new entries is the one the whole log would get, as long as every new entry lies
after the tip (`LogTip.precedes`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from p2panda_assets.errors import Reason, Rejection
from p2panda_assets.protocol.entry import Entry
from p2panda_assets.protocol.hashing import BY_HEADER, HashAlgorithm, hash_algorithm
from p2panda_assets.protocol.lipmaa import has_lipmaa_link, lipmaa


class Linked(Protocol):
    """What the chain rules read of an entry: an `Entry`, or its `EntryLinks`."""

    @property
    def seq_num(self) -> int: ...
    @property
    def hash(self) -> bytes: ...
    @property
    def backlink(self) -> bytes | None: ...
    @property
    def lipmaa_link(self) -> bytes | None: ...
    @property
    def end_of_log(self) -> bool: ...
    @property
    def algorithm(self) -> HashAlgorithm: ...


@dataclass(frozen=True, slots=True)
class EntryLinks:
    """The part of a verified entry the chain rules read, as the columnar store keeps it
    (`pipeline.index.verify`): chaining needs neither the entry's bytes nor a second decode."""

    seq_num: int
    hash: bytes
    backlink: bytes | None
    lipmaa_link: bytes | None
    end_of_log: bool

    @property
    def algorithm(self) -> HashAlgorithm:
        """The entry's hash is in its log's algorithm (`entry.decode_entry`)."""
        return BY_HEADER[self.hash[:2]]

    @classmethod
    def of(cls, entry: Entry) -> EntryLinks:
        return cls(entry.seq_num, entry.hash, entry.backlink, entry.lipmaa_link, entry.end_of_log)


E = TypeVar("E", bound=Linked)


@dataclass(slots=True)
class LogVerdict(Generic[E]):
    """What the chain rules make of one log's entries (keyed by entry hash)."""

    accepted: list[E] = field(default_factory=list)  # in seq order, contiguous from 1
    rejected: dict[bytes, Rejection] = field(default_factory=dict)
    pending: dict[bytes, int] = field(default_factory=dict)  # entry hash -> seq it awaits

    @property
    def ended(self) -> bool:
        return bool(self.accepted) and self.accepted[-1].end_of_log


@dataclass(frozen=True, slots=True)
class LogTip:
    """Where a log whose entries were all accepted stands: its last seq, whether that
    entry ended the log, and the hashes of the accepted entries that later entries may
    link to (at least the tip's own; `anchors_for` says which)."""

    seq: int = 0  # 0: an empty log
    ended: bool = False
    hashes: dict[int, bytes] = field(default_factory=dict)

    @property
    def algorithm(self) -> HashAlgorithm | None:
        return hash_algorithm(self.hashes[self.seq]) if self.seq else None

    def precedes(self, seq: int) -> bool:
        return seq > self.seq


def anchors_for(tip_seq: int, seqs: Iterable[int]) -> set[int]:
    """The accepted seqs at or below `tip_seq` that entries at `seqs` (after it) may link
    to: the tip itself, and their lipmaa links that fall at or below it."""
    wanted = {tip_seq} if tip_seq else set()
    for seq in seqs:
        if has_lipmaa_link(seq) and lipmaa(seq) <= tip_seq:
            wanted.add(lipmaa(seq))
    return wanted


def validate_log(entries: Iterable[E], tip: LogTip | None = None) -> LogVerdict[E]:
    """Apply the chain rules to all received entries of one log, or to the entries that
    arrived after `tip` (then the verdict lists only those).
    Rules L-ALGORITHM, L-END, L-FORK, L-PENDING (docs/semantics.md)."""
    tip = tip or LogTip()
    by_seq: dict[int, dict[bytes, E]] = defaultdict(dict)
    for entry in entries:
        if not tip.precedes(entry.seq_num):
            raise ValueError(f"entry at seq {entry.seq_num} is not after the tip {tip.seq}")
        by_seq[entry.seq_num][entry.hash] = entry
    verdict: LogVerdict[E] = LogVerdict()
    hashes = dict(tip.hashes)  # seq -> hash of the accepted entry
    algorithm = tip.algorithm
    seq = tip.seq + 1
    if tip.ended:
        _reject_from(by_seq, seq, verdict, Reason.AFTER_END_OF_LOG, f"log ended at {tip.seq}")
        return verdict
    while seq in by_seq:
        candidates: list[tuple[bytes, E]] = []
        for entry_hash, entry in by_seq[seq].items():
            if algorithm is not None and entry.algorithm is not algorithm:
                verdict.rejected[entry_hash] = Rejection(
                    Reason.HASH_ALGORITHM_MISMATCH,
                    f"log uses {algorithm.name}, entry uses {entry.algorithm.name}",
                )
                continue
            rejection = _link_rejection(entry, hashes)
            if rejection is None:
                candidates.append((entry_hash, entry))
            else:
                verdict.rejected[entry_hash] = rejection
        if len(candidates) > 1:
            _reject_from(by_seq, seq, verdict, Reason.FORK, f"the log forks at seq {seq}")
            return verdict
        if not candidates:
            break
        entry_hash, entry = candidates[0]
        verdict.accepted.append(entry)
        hashes[seq] = entry_hash
        algorithm = entry.algorithm
        if entry.end_of_log:
            _reject_from(by_seq, seq + 1, verdict, Reason.AFTER_END_OF_LOG, f"log ended at {seq}")
            return verdict
        seq += 1
    for later in by_seq:
        if later > seq:
            for entry_hash in by_seq[later]:
                verdict.pending[entry_hash] = seq
    return verdict


def _link_rejection(entry: Linked, hashes: dict[int, bytes]) -> Rejection | None:
    """Why the entry's backlink or lipmaa link is not the hash of the entry it names, if
    it is not. Rule L-LINK (docs/semantics.md)."""
    seq = entry.seq_num
    if seq > 1 and entry.backlink != hashes[seq - 1]:
        return Rejection(Reason.BACKLINK_MISMATCH, f"backlink is not the hash of seq {seq - 1}")
    if has_lipmaa_link(seq) and entry.lipmaa_link != hashes[lipmaa(seq)]:
        return Rejection(
            Reason.LIPMAA_MISMATCH, f"lipmaa link is not the hash of seq {lipmaa(seq)}"
        )
    return None


def _reject_from(
    by_seq: dict[int, dict[bytes, E]],
    first_seq: int,
    verdict: LogVerdict,
    reason: Reason,
    message: str,
) -> None:
    for seq, entries in by_seq.items():
        if seq >= first_seq:
            for entry_hash in entries:
                verdict.rejected[entry_hash] = Rejection(reason, message)
