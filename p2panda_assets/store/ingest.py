"""`panda ingest`: put (entry, payload) pairs into the entry store, fast.

Ingest does only what one entry alone can tell without a signature check: the entry
bytes decode, and the payload is the one the entry names. Signatures are verified later,
once, by the pipeline. Entries that fail here are stored anyway, with their reason as
`verdict`, so that nothing that reached the store is silently dropped (rule A-ONCE,
docs/semantics.md).

Work goes in batches: checked in Python, COPYed into a temporary staging table, then
merged into `p2panda.entries` by one INSERT ... ON CONFLICT, committed per batch. `panda
ingest` merges two batches at once, on two connections: the merge costs PostgreSQL more
than the check costs Python (bench/ingest.py).

Counting follows the entries one by one, in order, whatever the batch boundaries (rule
L-DUPLICATE, docs/semantics.md):
- a new entry hash is `accepted` (no verdict) or `rejected` (stored with a verdict);
- a copy of a stored entry (stored before, or earlier in the input) replaces it when the
  stored copy's payload was wrong or missing and this one's is right, or wrong with the
  smaller verdict (the good copy wins whatever the order): `accepted`, or `rejected`
  (stored with its verdict);
- else a copy with the stored payload, or with none, is a `duplicate`; a copy with
  another payload is `rejected` as `payload-conflict` and not stored (`Conflict`: the
  caller says so, as nothing in the store records it);
- a line that is not an entry at all (`BadLine`) is `rejected` and not stored.

An item may name where it was read (`Sourced`: the id of its file in
`p2panda.ingest_sources`, and its line): the stored copy keeps them, so that a rejection
found later can name its `file:line`.

Copies of one entry within a batch are merged one after the other, in input order
(`rounds`): the second copy of each entry after the first copies of all, and so on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice

import psycopg

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.jsonlines import BadLine
from p2panda_assets.protocol.entry import check_payload, decode_entry
from p2panda_assets.protocol.hashing import DEFAULT_ALGORITHM
from p2panda_assets.store import accounts, message_index

BATCH_SIZE = 10_000
# Held (shared) by every ingest transaction, taken exclusively for a moment by the
# pipeline to read how far the store is committed: no entry below that bound can
# still be on its way (`store.new_entries.committed_bound`).
INGEST_LOCK = 0x70326E67
# Verdicts about the payload, not the entry: a later copy with the right payload fixes them.
PAYLOAD_VERDICTS = (
    Reason.PAYLOAD_HASH_MISMATCH.value,
    Reason.PAYLOAD_SIZE_MISMATCH.value,
    Reason.MISSING_PAYLOAD.value,
)

# One row of the store: hash, entry, payload, author, log_id, seq_num, verdict, message,
# source_id, source_line.
Row = tuple[
    bytes,
    bytes,
    bytes | None,
    bytes | None,
    int | None,
    int | None,
    str | None,
    str | None,
    int | None,
    int | None,
]
# (entry, payload, the id of its file in p2panda.ingest_sources, its line in that file)
Sourced = tuple[bytes, bytes | None, int, int]
Item = tuple[bytes, bytes | None] | Sourced | BadLine

_STAGING = "p2panda_ingest_staging"
_CREATE_STAGING = f"""
CREATE TEMPORARY TABLE IF NOT EXISTS {_STAGING} (
    hash bytea, entry bytea, payload bytea, author bytea, log_id numeric(20, 0),
    seq_num numeric(20, 0), verdict text, verdict_message text, source_id bigint,
    source_line integer
) ON COMMIT DELETE ROWS
"""
_COPY_STAGING = f"COPY {_STAGING} FROM STDIN"
# Ordered by hash so that concurrent ingests of overlapping data cannot deadlock. A
# replaced copy gets a fresh ingest_seq (it is news to the pipeline), and the merge names
# the replaced entries, whose accounts and index rows `store_round` then drops: the entry
# waits for verification like a new one. A copy with a wrong payload replaces one too, if
# its (verdict, message) sorts first in the "C" collation, by code point: as the engine
# keeps the smallest rejection, so which copy the store holds does not depend on the
# order the copies arrived in. A replacing copy brings its own source and line.
_MERGE = f"""
WITH written AS (
    INSERT INTO p2panda.entries AS e
        (hash, entry, payload, author, log_id, seq_num, verdict, verdict_message, source_id,
         source_line)
    SELECT hash, entry, payload, author, log_id, seq_num, verdict, verdict_message, source_id,
        source_line
    FROM {_STAGING} ORDER BY hash
    ON CONFLICT (hash) DO UPDATE SET
        payload = EXCLUDED.payload, verdict = EXCLUDED.verdict,
        verdict_message = EXCLUDED.verdict_message, source_id = EXCLUDED.source_id,
        source_line = EXCLUDED.source_line,
        ingest_seq = nextval(pg_get_serial_sequence('p2panda.entries', 'ingest_seq')),
        received_at = now()
    WHERE e.verdict = ANY(%(payload_verdicts)s) AND (
        EXCLUDED.verdict IS NULL
        OR (EXCLUDED.verdict COLLATE "C", EXCLUDED.verdict_message COLLATE "C")
            < (e.verdict COLLATE "C", e.verdict_message COLLATE "C")
    )
    RETURNING e.hash, e.xmax = 0 AS inserted, e.verdict
)
SELECT count(*) FILTER (WHERE verdict IS NULL), count(*) FILTER (WHERE verdict IS NOT NULL),
    array_agg(hash) FILTER (WHERE NOT inserted)
FROM written
"""
# After the merge, the staged copies that were not written and whose payload is not the
# stored one (a written copy's is). A copy without a payload conflicts with nothing.
_CONFLICTS = f"""
SELECT s.hash, s.verdict, e.verdict, e.payload IS NULL
FROM {_STAGING} s JOIN p2panda.entries e ON e.hash = s.hash
WHERE s.payload IS NOT NULL AND e.payload IS DISTINCT FROM s.payload
ORDER BY s.hash
"""


@dataclass(frozen=True, slots=True)
class IngestCounts:
    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0

    def __add__(self, other: IngestCounts) -> IngestCounts:
        return IngestCounts(
            self.accepted + other.accepted,
            self.duplicate + other.duplicate,
            self.rejected + other.rejected,
        )

    @property
    def total(self) -> int:
        return self.accepted + self.duplicate + self.rejected


@dataclass(frozen=True, slots=True)
class Conflict:
    """A copy of a stored entry with another payload: rejected, not stored."""

    position: int  # of its item in the input, from 0 (bad lines count)
    hash: bytes
    verdict: str | None  # what ingest says of the copy itself (its payload's mismatch)
    stored_verdict: str | None  # of the stored copy: None if its payload is right
    stored_without_payload: bool

    @property
    def message(self) -> str:
        """Why the copy is not stored, in a line's words."""
        if self.stored_without_payload:
            stored = "without a payload"
        elif self.stored_verdict is None:
            stored = "with the payload it names"
        else:
            stored = f"with another payload ({self.stored_verdict})"
        own = f" ({self.verdict})" if self.verdict else ""
        return f"entry {self.hash.hex()} is stored {stored}; this copy's differs{own}: not stored"


@dataclass(frozen=True, slots=True)
class Round:
    """At most one copy of each entry of a batch, as COPY text, with their positions."""

    copy_text: str
    rows: list[Row]
    positions: list[int]  # of each row's item in the input

    def positions_by_hash(self) -> dict[bytes, int]:
        return {row[0]: position for row, position in zip(self.rows, self.positions, strict=True)}


@dataclass(frozen=True, slots=True)
class StagedBatch:
    """One batch, checked and rendered as COPY text, ready for the database."""

    rounds: list[Round]  # the first copy of each entry, then the second ones, ...
    bad_lines: int
    hashes: frozenset[bytes]  # of the entries it stores


@dataclass(frozen=True, slots=True)
class Merged:
    """What merging one batch did."""

    counts: IngestCounts
    conflicts: list[Conflict]


def ingest(
    conn: psycopg.Connection,
    items: Iterable[Item],
    *,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[IngestCounts], None] | None = None,
    spare: psycopg.Connection | None = None,
    conflict: Callable[[Conflict], None] | None = None,
) -> IngestCounts:
    """Store `items` (what `jsonlines.read_entry_lines` yields); the counts.

    Each batch is committed on its own (when `conn` has no transaction open), so a long
    ingest keeps what it stored if it is interrupted; running it again counts those
    entries as duplicates. While the database merges one batch, the next is decoded and
    checked in this thread: the two overlap on two cores. With a `spare` connection
    (autocommit, like `conn`), two batches merge at once, in two backends: the merge is
    the larger half of the work. After each batch, `conflict` is called with each of
    its copies counted as `payload-conflict`, in input order, then `progress` with the
    running totals.
    """
    connections = [conn] if spare is None else [conn, spare]
    counts = IngestCounts()
    merging: deque[tuple[Future[Merged], frozenset[bytes]]] = deque()

    def report(merged: Merged) -> IngestCounts:
        for found in merged.conflicts:
            if conflict is not None:
                conflict(found)
        return _report(counts + merged.counts, progress)

    with ThreadPoolExecutor(len(connections), thread_name_prefix="p2panda-ingest") as database:
        for number, batch in enumerate(_batches(items, batch_size)):
            staged = stage_batch(batch, start=number * batch_size)
            while merging and (len(merging) == len(connections) or _overlaps(staged, merging)):
                counts = report(merging.popleft()[0].result())
            # The batches still merging are the ones just before this: their
            # connections are not this one's.
            on = connections[number % len(connections)]
            merging.append((database.submit(store_batch, on, staged), staged.hashes))
        while merging:
            counts = report(merging.popleft()[0].result())
    return counts


def _overlaps(
    staged: StagedBatch, merging: Iterable[tuple[Future[Merged], frozenset[bytes]]]
) -> bool:
    """Whether a batch shares an entry with one still merging. It then waits for that
    one: batches that merge at once share no entry, so the counts are those of merging
    the batches one by one, in order (a good copy replacing a bad one is `accepted`
    only after the bad one is stored)."""
    return any(not staged.hashes.isdisjoint(hashes) for _, hashes in merging)


def _report(counts: IngestCounts, progress: Callable[[IngestCounts], None] | None) -> IngestCounts:
    if progress is not None:
        progress(counts)
    return counts


def stage_batch(batch: list[Item], start: int = 0) -> StagedBatch:
    """Check every entry of a batch and cut it into rounds (`rounds`); `start` is the
    position of the batch's first item in the input."""
    located = [
        (start + index, check_entry(*item))
        for index, item in enumerate(batch)
        if not isinstance(item, BadLine)
    ]
    rounds = [
        Round("".join(map(_copy_line, rows)), rows, positions)
        for positions, rows in rounds_of(located)
    ]
    return StagedBatch(
        rounds=rounds,
        bad_lines=len(batch) - len(located),
        hashes=frozenset(row[0] for row in rounds[0].rows) if rounds else frozenset(),
    )


def rounds_of(located: list[tuple[int, Row]]) -> list[tuple[list[int], list[Row]]]:
    """The copies of a batch in rounds: round k holds the (k+1)-th copy of each entry,
    so that merging the rounds in order merges every entry's copies in input order (the
    merge of one statement takes one row per entry). Nearly every batch is one round."""
    rounds: list[tuple[list[int], list[Row]]] = []
    copies: dict[bytes, int] = {}
    for position, row in located:
        number = copies.get(row[0], 0)
        copies[row[0]] = number + 1
        if number == len(rounds):
            rounds.append(([], []))
        rounds[number][0].append(position)
        rounds[number][1].append(row)
    return rounds


def store_batch(conn: psycopg.Connection, staged: StagedBatch) -> Merged:
    """COPY a staged batch and merge it into the store, round by round, in one
    transaction."""
    counts = IngestCounts(rejected=staged.bad_lines)
    conflicts: list[Conflict] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (INGEST_LOCK,))
        conn.execute(_CREATE_STAGING)  # a no-op but for the first batch of a session
        for number, round_ in enumerate(staged.rounds):
            if number:
                conn.execute(f"TRUNCATE {_STAGING}")
            merged = store_round(conn, round_)
            counts, conflicts = counts + merged.counts, conflicts + merged.conflicts
    return Merged(counts, sorted(conflicts, key=lambda found: found.position))


def store_round(conn: psycopg.Connection, round_: Round) -> Merged:
    """Merge one round, and count its copies (rule L-DUPLICATE): written (new, or replacing a
    stored copy with a wrong payload) `accepted` or `rejected` by their verdict; not
    written, `rejected` as conflicts if their payload is another, else `duplicate`. What
    verification derived from a replaced copy (its account, its index row) goes with it."""
    with conn.cursor() as cursor:
        with cursor.copy(_COPY_STAGING) as copy:
            copy.write(round_.copy_text)
        cursor.execute(_MERGE, {"payload_verdicts": list(PAYLOAD_VERDICTS)})
        good, bad, replaced = cursor.fetchone() or (0, 0, None)
        if replaced:
            accounts.forget_replaced_entries(conn, replaced)
            message_index.forget_replaced_entries(conn, replaced)
        found = []
        if good + bad < len(round_.rows):  # a copy not written: it may conflict
            found = cursor.execute(_CONFLICTS).fetchall()
    positions = round_.positions_by_hash() if found else {}
    conflicts = [
        Conflict(positions[bytes(hash_)], bytes(hash_), verdict, stored, bare)
        for hash_, verdict, stored, bare in found
    ]
    duplicate = len(round_.rows) - good - bad - len(conflicts)
    return Merged(IngestCounts(good, duplicate, bad + len(conflicts)), conflicts)


def check_entry(
    entry: bytes, payload: bytes | None, source_id: int | None = None, line: int | None = None
) -> Row:
    """The row for one (entry, payload) pair, with a verdict where ingest can give one,
    and where it was read if the caller says."""
    try:
        decoded = decode_entry(entry)
    except P2pandaError as error:
        hash_ = DEFAULT_ALGORITHM.hash(entry)
        reason, why = error.reason.value, error.message
        return (hash_, entry, payload, None, None, None, reason, why, source_id, line)
    verdict = message = None
    try:
        check_payload(decoded, payload)
    except P2pandaError as error:
        verdict, message = error.reason.value, error.message
    return (
        decoded.hash,
        entry,
        payload,
        decoded.author,
        decoded.log_id,
        decoded.seq_num,
        verdict,
        message,
        source_id,
        line,
    )


def _copy_line(row: Row) -> str:
    """One row in COPY's text format; hex and str.join do the work in C, several times
    faster than adapting each value (binary COPY measured no faster end to end)."""
    hash_, entry, payload, author, log_id, seq_num, verdict, message, source_id, line = row
    return (
        f"\\\\x{hash_.hex()}\t\\\\x{entry.hex()}\t{_bytea(payload)}\t{_bytea(author)}\t"
        f"{_null(log_id)}\t{_null(seq_num)}\t{_text(verdict)}\t{_text(message)}\t"
        f"{_null(source_id)}\t{_null(line)}\n"
    )


def _bytea(value: bytes | None) -> str:
    return "\\N" if value is None else f"\\\\x{value.hex()}"


def _null(value: int | None) -> str:
    return "\\N" if value is None else str(value)


_TEXT_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _text(value: str | None) -> str:
    return "\\N" if value is None else value.translate(_TEXT_ESCAPES)


def _batches(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
