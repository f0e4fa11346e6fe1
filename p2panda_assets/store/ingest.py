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

Counting follows the entries one by one, in order, whatever the batch boundaries:
- a new entry hash is `accepted` (no verdict) or `rejected` (stored with a verdict);
- a hash already stored, or seen earlier in the input, is a `duplicate`, except that a
  good copy replaces a stored copy whose payload was wrong or missing (the good copy wins
  whatever the order): then it counts as `accepted`;
- a line that is not an entry at all (`BadLine`) is `rejected` and not stored.
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

BATCH_SIZE = 10_000
# Held (shared) by every ingest transaction, taken exclusively for a moment by the
# pipeline to read how far the store is committed: no entry below that bound can
# still be on its way (`store.pipeline_state.committed_bound`).
INGEST_LOCK = 0x70326E67
# Verdicts about the payload, not the entry: a later copy with the right payload fixes them.
PAYLOAD_VERDICTS = (
    Reason.PAYLOAD_HASH_MISMATCH.value,
    Reason.PAYLOAD_SIZE_MISMATCH.value,
    Reason.MISSING_PAYLOAD.value,
)

# One row of the store: hash, entry, payload, author, log_id, seq_num, verdict, message.
Row = tuple[
    bytes, bytes, bytes | None, bytes | None, int | None, int | None, str | None, str | None
]
Item = tuple[bytes, bytes | None] | BadLine

_STAGING = "p2panda_ingest_staging"
_CREATE_STAGING = f"""
CREATE TEMPORARY TABLE IF NOT EXISTS {_STAGING} (
    hash bytea, entry bytea, payload bytea, author bytea, log_id numeric(20, 0),
    seq_num numeric(20, 0), verdict text, verdict_message text
) ON COMMIT DELETE ROWS
"""
_COPY_STAGING = f"COPY {_STAGING} FROM STDIN"
# Ordered by hash so that concurrent ingests of overlapping data cannot deadlock. A
# replaced copy gets a fresh ingest_seq (it is news to the pipeline), and any accounting
# of the bad copy is dropped: the entry now waits for verification like a new one. A copy
# with a wrong payload replaces one too, if its verdict is the smaller (`smaller_verdict`).
_MERGE = f"""
WITH written AS (
    INSERT INTO p2panda.entries AS e
        (hash, entry, payload, author, log_id, seq_num, verdict, verdict_message)
    SELECT hash, entry, payload, author, log_id, seq_num, verdict, verdict_message
    FROM {_STAGING} ORDER BY hash
    ON CONFLICT (hash) DO UPDATE SET
        payload = EXCLUDED.payload, verdict = EXCLUDED.verdict,
        verdict_message = EXCLUDED.verdict_message,
        ingest_seq = nextval(pg_get_serial_sequence('p2panda.entries', 'ingest_seq')),
        received_at = now()
    WHERE e.verdict = ANY(%(payload_verdicts)s) AND (
        EXCLUDED.verdict IS NULL
        OR (EXCLUDED.verdict COLLATE "C", EXCLUDED.verdict_message COLLATE "C")
            < (e.verdict COLLATE "C", e.verdict_message COLLATE "C")
    )
    RETURNING e.hash, e.xmax = 0 AS inserted, e.verdict
), unaccounted AS (
    DELETE FROM p2panda.accounts
    WHERE hash IN (SELECT hash FROM written WHERE NOT inserted)
), unindexed AS (
    DELETE FROM p2panda.message_index
    WHERE hash IN (SELECT hash FROM written WHERE NOT inserted)
)
SELECT
    count(*) FILTER (WHERE inserted AND verdict IS NULL),
    count(*) FILTER (WHERE inserted AND verdict IS NOT NULL),
    count(*) FILTER (WHERE NOT inserted AND verdict IS NULL),
    count(*) FILTER (WHERE inserted AND hash = ANY(%(first_bad)s))
FROM written
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
class StagedBatch:
    """One batch, checked and rendered as COPY text, ready for the database."""

    copy_text: str
    first_bad: list[bytes]  # hashes whose first copy had a payload verdict, then a good one
    entries: int  # (entry, payload) pairs in the batch, copies included
    bad_lines: int
    hashes: frozenset[bytes]  # of the entries it stores


def ingest(
    conn: psycopg.Connection,
    items: Iterable[Item],
    *,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[IngestCounts], None] | None = None,
    spare: psycopg.Connection | None = None,
) -> IngestCounts:
    """Store `items` (what `jsonlines.read_entry_lines` yields); the counts.

    Each batch is committed on its own (when `conn` has no transaction open), so a long
    ingest keeps what it stored if it is interrupted; running it again counts those
    entries as duplicates. While the database merges one batch, the next is decoded and
    checked in this thread: the two overlap on two cores. With a `spare` connection
    (autocommit, like `conn`), two batches merge at once, in two backends: the merge is
    the larger half of the work. `progress` is called with the running totals after each
    batch.
    """
    connections = [conn] if spare is None else [conn, spare]
    counts = IngestCounts()
    merging: deque[tuple[Future[IngestCounts], frozenset[bytes]]] = deque()
    with ThreadPoolExecutor(len(connections), thread_name_prefix="p2panda-ingest") as database:
        for number, batch in enumerate(_batches(items, batch_size)):
            staged = stage_batch(batch)
            while merging and (len(merging) == len(connections) or _overlaps(staged, merging)):
                counts = _report(counts + merging.popleft()[0].result(), progress)
            # The batches still merging are the ones just before this: their
            # connections are not this one's.
            on = connections[number % len(connections)]
            merging.append((database.submit(store_batch, on, staged), staged.hashes))
        while merging:
            counts = _report(counts + merging.popleft()[0].result(), progress)
    return counts


def _overlaps(
    staged: StagedBatch, merging: Iterable[tuple[Future[IngestCounts], frozenset[bytes]]]
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


def stage_batch(batch: list[Item]) -> StagedBatch:
    """Check every entry of a batch and render the distinct ones as COPY text."""
    rows = [check_entry(*item) for item in batch if not isinstance(item, BadLine)]
    kept, first_bad = collapse_copies(rows)
    return StagedBatch(
        copy_text="".join(map(_copy_line, kept)),
        first_bad=list(first_bad),
        entries=len(rows),
        bad_lines=len(batch) - len(rows),
        hashes=frozenset(row[0] for row in kept),
    )


def store_batch(conn: psycopg.Connection, staged: StagedBatch) -> IngestCounts:
    """COPY a staged batch and merge it into the store, in one transaction."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (INGEST_LOCK,))
        conn.execute(_CREATE_STAGING)  # a no-op but for the first batch of a session
        with conn.cursor() as cursor:
            with cursor.copy(_COPY_STAGING) as copy:
                copy.write(staged.copy_text)
            cursor.execute(
                _MERGE,
                {"payload_verdicts": list(PAYLOAD_VERDICTS), "first_bad": staged.first_bad},
            )
            new_good, new_bad, replaced, first_bad_new = cursor.fetchone() or (0, 0, 0, 0)
    accepted = new_good + replaced
    rejected = new_bad + first_bad_new  # a bad first copy, then a good one: both count
    duplicate = staged.entries - accepted - rejected
    return IngestCounts(accepted, duplicate, rejected + staged.bad_lines)


def check_entry(entry: bytes, payload: bytes | None) -> Row:
    """The row for one (entry, payload) pair, with a verdict where ingest can give one."""
    try:
        decoded = decode_entry(entry)
    except P2pandaError as error:
        hash_ = DEFAULT_ALGORITHM.hash(entry)
        return (hash_, entry, payload, None, None, None, error.reason.value, error.message)
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
    )


def collapse_copies(rows: list[Row]) -> tuple[list[Row], set[bytes]]:
    """One row per entry hash: the first copy, or the first good one after a first copy
    with a payload verdict, or else the copy with the `smaller_verdict`. Also the hashes
    whose first copy was such a bad one, then a good one came (they count as rejected
    and then accepted, if new to the store)."""
    kept: dict[bytes, Row] = {}
    first_bad: set[bytes] = set()
    for row in rows:
        hash_ = row[0]
        previous = kept.get(hash_)
        if previous is None:
            kept[hash_] = row
        elif previous[6] in PAYLOAD_VERDICTS and row[6] is None:
            kept[hash_] = row
            first_bad.add(hash_)
        elif previous[6] in PAYLOAD_VERDICTS and smaller_verdict(row, previous):
            kept[hash_] = row
    return list(kept.values()), first_bad


def smaller_verdict(row: Row, than: Row) -> bool:
    """Of two copies of an entry with wrong payloads, the one whose (verdict, message)
    sorts first is kept, as the engine keeps the smallest rejection: which the store
    holds does not depend on the order the copies arrived in (`_MERGE` compares them
    in the "C" collation, by code point as here)."""
    return row[6] is not None and (row[6], row[7] or "") < (than[6] or "", than[7] or "")


def _copy_line(row: Row) -> str:
    """One row in COPY's text format; hex and str.join do the work in C, several times
    faster than adapting each value (binary COPY measured no faster end to end)."""
    hash_, entry, payload, author, log_id, seq_num, verdict, message = row
    return (
        f"\\\\x{hash_.hex()}\t\\\\x{entry.hex()}\t{_bytea(payload)}\t{_bytea(author)}\t"
        f"{_null(log_id)}\t{_null(seq_num)}\t{_text(verdict)}\t{_text(message)}\n"
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
