"""Chain rules of one log: links, forks, end of log, duplicates, pending; and the
verdict never depends on the order in which entries arrive."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from p2panda_assets.errors import Reason
from p2panda_assets.protocol.entry import Entry, decode_entry, sign_entry
from p2panda_assets.protocol.hashing import HashAlgorithm
from p2panda_assets.protocol.keys import KeyPair
from p2panda_assets.protocol.log import EntryLinks, LogTip, anchors_for, validate_log
from p2panda_assets.protocol.log_writer import LogWriter

KEY = KeyPair.from_private_key(bytes(range(1, 33)))


def write_log(n: int, *, log_id: int = 1, prefix: bytes = b"m") -> tuple[LogWriter, list[Entry]]:
    writer = LogWriter(KEY, log_id)
    return writer, [decode_entry(writer.append(prefix + bytes([i]))) for i in range(n)]


def seqs(entries: list[Entry]) -> list[int]:
    return [e.seq_num for e in entries]


def test_a_complete_log_is_accepted_in_seq_order() -> None:
    _, entries = write_log(13)
    verdict = validate_log(reversed(entries))
    assert seqs(verdict.accepted) == list(range(1, 14))
    assert not verdict.rejected and not verdict.pending


def test_byte_identical_copies_are_one_entry() -> None:
    _, entries = write_log(3)
    verdict = validate_log(entries + entries)
    assert seqs(verdict.accepted) == [1, 2, 3]
    assert not verdict.rejected


def test_entries_after_a_gap_wait_for_the_missing_entry() -> None:
    _, entries = write_log(6)
    verdict = validate_log(entries[:2] + entries[3:])
    assert seqs(verdict.accepted) == [1, 2]
    assert verdict.pending == {e.hash: 3 for e in entries[3:]}


def test_backlink_mismatch() -> None:
    _, entries = write_log(3)
    wrong = HashAlgorithm.YASMF.hash(b"not entry 2")
    bad = decode_entry(sign_entry(KEY, log_id=1, seq_num=3, payload=b"x", backlink=wrong))
    verdict = validate_log([*entries[:2], bad])
    assert verdict.rejected[bad.hash].reason is Reason.BACKLINK_MISMATCH
    assert seqs(verdict.accepted) == [1, 2]


def test_lipmaa_mismatch() -> None:
    writer, entries = write_log(3)
    wrong = entries[1].hash  # seq 4 must skip to seq 1, not 2
    bad = decode_entry(
        sign_entry(
            KEY, log_id=1, seq_num=4, payload=b"x", backlink=writer.hashes[3], lipmaa_link=wrong
        )
    )
    verdict = validate_log([*entries, bad])
    assert verdict.rejected[bad.hash].reason is Reason.LIPMAA_MISMATCH


def test_a_fork_rejects_both_sides_and_everything_after() -> None:
    writer, entries = write_log(5)
    other = LogWriter(KEY, 1, hashes={1: writer.hashes[1], 2: writer.hashes[2]})
    fork_entry = decode_entry(other.append(b"a different seq 3"))
    after_fork = decode_entry(other.append(b"seq 4 on the other side"))
    verdict = validate_log([*entries, fork_entry, after_fork])
    assert seqs(verdict.accepted) == [1, 2]
    rejected = {h: r.reason for h, r in verdict.rejected.items()}
    assert rejected == {e.hash: Reason.FORK for e in [*entries[2:], fork_entry, after_fork]}


def test_entries_after_the_end_of_log_are_rejected() -> None:
    writer, entries = write_log(2)
    end = decode_entry(writer.append(b"bye", end_of_log=True))
    after = decode_entry(
        sign_entry(
            KEY,
            log_id=1,
            seq_num=4,
            payload=b"late",
            backlink=end.hash,
            lipmaa_link=entries[0].hash,
        )
    )
    verdict = validate_log([*entries, end, after])
    assert verdict.ended
    assert seqs(verdict.accepted) == [1, 2, 3]
    assert verdict.rejected[after.hash].reason is Reason.AFTER_END_OF_LOG


def test_a_log_keeps_the_hash_algorithm_of_its_first_entry() -> None:
    yasmf = LogWriter(KEY, 1)
    first = decode_entry(yasmf.append(b"one"))
    yamf_link = HashAlgorithm.YAMF.hash(first.raw)
    second = decode_entry(
        sign_entry(
            KEY,
            log_id=1,
            seq_num=2,
            payload=b"two",
            backlink=yamf_link,
            algorithm=HashAlgorithm.YAMF,
        )
    )
    verdict = validate_log([first, second])
    assert verdict.rejected[second.hash].reason is Reason.HASH_ALGORITHM_MISMATCH
    links = validate_log([EntryLinks.of(first), EntryLinks.of(second)])
    assert links.rejected == verdict.rejected
    assert [e.algorithm for e in (first, second)] == [
        EntryLinks.of(e).algorithm for e in (first, second)
    ]


@st.composite
def log_with_extras(draw: st.DrawFn) -> list[Entry]:
    """A log, maybe with a gap, a fork or an end of log, in a random arrival order."""
    writer, entries = write_log(draw(st.integers(1, 14)))
    if draw(st.booleans()) and len(entries) > 1:
        cut = draw(st.integers(1, len(entries) - 1))
        other = LogWriter(KEY, 1, hashes={s: writer.hashes[s] for s in range(1, cut + 1)})
        entries.append(decode_entry(other.append(b"fork")))
    if draw(st.booleans()):
        entries.append(decode_entry(writer.append(b"end", end_of_log=True)))
        entries.append(decode_entry(writer.append(b"after the end")))
    if draw(st.booleans()) and len(entries) > 2:
        del entries[draw(st.integers(0, len(entries) - 1))]
    return draw(st.permutations(entries))


@given(log_with_extras(), st.randoms())
def test_the_verdict_does_not_depend_on_arrival_order(entries: list[Entry], rnd) -> None:
    shuffled = list(entries)
    rnd.shuffle(shuffled)
    first, second = validate_log(entries), validate_log(shuffled)
    assert first.accepted == second.accepted
    assert first.rejected == second.rejected
    assert first.pending == second.pending
    # Every distinct entry ends in exactly one state.
    accounted = {e.hash for e in first.accepted} | set(first.rejected) | set(first.pending)
    assert accounted == {e.hash for e in entries}
    assert len(first.accepted) + len(first.rejected) + len(first.pending) == len(accounted)


@given(log_with_extras())
def test_an_entrys_links_alone_get_the_entrys_verdict(entries: list[Entry]) -> None:
    """The pipeline chains the links verification kept (`EntryLinks`), not the entries."""
    whole = validate_log(entries)
    links = validate_log([EntryLinks.of(e) for e in entries])
    assert links.accepted == [EntryLinks.of(e) for e in whole.accepted]
    assert links.rejected == whole.rejected
    assert links.pending == whole.pending


@given(log_with_extras(), st.integers(0, 20))
def test_a_clean_log_continued_from_its_tip_gets_the_whole_logs_verdict(
    entries: list[Entry], cut: int
) -> None:
    """The index step appends: the entries before `cut` were chained (all accepted), the
    rest arrive later and are chained from the tip with only the anchors it names."""
    before = [e for e in entries if e.seq_num <= cut]
    after = [e for e in entries if e.seq_num > cut]
    first = validate_log(before)
    if first.rejected or first.pending:
        return  # not clean: the index step chains such a log again, whole
    tip_seq = first.accepted[-1].seq_num if first.accepted else 0
    if after and min(e.seq_num for e in after) <= tip_seq:
        return  # an entry at or before the tip: chained again, whole
    hashes = {e.seq_num: e.hash for e in first.accepted}
    anchors = anchors_for(tip_seq, [e.seq_num for e in after])
    tip = LogTip(tip_seq, first.ended, {seq: hashes[seq] for seq in anchors})
    whole, continued = validate_log(entries), validate_log(after, tip)
    assert whole.accepted == first.accepted + continued.accepted
    assert whole.rejected == continued.rejected
    assert whole.pending == continued.pending


def test_an_entry_at_or_before_the_tip_cannot_be_continued() -> None:
    _, entries = write_log(3)
    tip = LogTip(2, False, {2: entries[1].hash})
    with pytest.raises(ValueError):
        validate_log(entries[1:], tip)
