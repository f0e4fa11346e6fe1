"""`panda ingest`, `panda register` and `panda status`: the entry store and the registry.
`panda status --rejected` lists the rejected entries (`cli/rejections.py`).

The store modules (and psycopg) are imported inside the commands, so that commands which
never touch the database start fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from p2panda_assets.cli import rejections
from p2panda_assets.cli.entry_cmd import parse_hex
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.jsonlines import BadLine, read_located_lines
from p2panda_assets.protocol.ids import MAX_U64

if TYPE_CHECKING:
    import psycopg

    from p2panda_assets.store.ingest import Conflict, IngestCounts, Item
    from p2panda_assets.store.registry import Registration, StatusRow, StoreTotals

CLEAR_LINE = "\r\033[K"  # back to the start of the line, and erase it
STATUS_COLUMNS = (
    "schema id",
    "name",
    "version",
    "status",
    "rows",
    "applied",
    "superseded",
    "pending",
    "rejected",
    "safe",
    "lossy",
    "fallbacks",
    "view",
)
# `panda status` without --wide: within 100 columns, with a legend.
NARROW_COLUMNS = (
    "name",
    "id",
    "ver",
    "status",
    "rows",
    "entries",
    "migrations",
    "fell back",
    "view",
)
NARROW_LEGEND = (
    "entries: applied/superseded/pending/rejected; migrations: safe/lossy (lossy: a value"
    " may fall\nback to its field's default; fell back: values that did); view: yes when"
    " named as the schema;\n--wide: every column in full, --json: for scripts"
)
# What ingest checks and what it leaves to the pipeline, said after every ingest: a
# forged signature is counted `accepted` here, and rejected only by the next build.
CHECKED_NOTE = (
    "checked here: each line holds an entry that decodes, with the payload it names;"
    " signatures and log chains are checked when the pipeline builds (panda materialize),"
    " and then `panda status --rejected` names each entry it rejected, with its file:line"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    ingest = subparsers.add_parser("ingest", help="store entries from JSON-lines files")
    ingest.add_argument("files", nargs="+", metavar="FILE", help='{"entry": HEX, "payload": HEX}')
    ingest.set_defaults(run=run_ingest)

    schema = subparsers.add_parser("register", help="register a schema for materializing")
    schema.add_argument("author", metavar="AUTHOR_HEX", help="the schema log's author key")
    schema.add_argument("log_id", metavar="LOG_ID", help="the schema log's id")
    schema.add_argument("--name", help="a name for the schema (shown by `panda status`)")
    schema.set_defaults(run=run_register)

    status = subparsers.add_parser("status", help="registered schemas and their entries")
    status.add_argument(
        "--rejected",
        nargs="?",
        const="",
        metavar="NAME|SCHEMA_ID",
        help="list each rejected entry (hash, author, log, seq, reason, file:line, message)"
        " of the schema; without one, of the whole store, with those rejected before"
        " their log had a schema",
    )
    status.add_argument(
        "--wide",
        action="store_true",
        help="every column in full: schema ids, each account and migration class apart",
    )
    status.add_argument(
        "--json", action="store_true", help="the schemas and the store's totals as JSON"
    )
    status.set_defaults(run=run_status)


def open_store() -> psycopg.Connection:
    """An autocommit connection to the product's database, its tables in place."""
    from p2panda_assets.store.database import connect, ensure_schema

    conn = connect(autocommit=True)
    ensure_schema(conn)
    return conn


# --- panda ingest ----------------------------------------------------------------------


def run_ingest(args: argparse.Namespace) -> int:
    from p2panda_assets.store.database import connect
    from p2panda_assets.store.ingest import ingest
    from p2panda_assets.store.ingest_sources import add_source

    for path in args.files:
        _check_readable(path)  # before storing anything: all files, or none
    tty = sys.stderr.isatty()
    places = Places(clear=tty)
    unreadable = UnreadableLines()
    with open_store() as conn, connect(autocommit=True) as spare:  # merges in parallel
        sources = {path: add_source(conn, path) for path in args.files}
        items = _warn_bad_lines(places.read(args.files, sources), clear=tty, seen=unreadable)

        def progress(counts: IngestCounts) -> None:
            places.reported(counts)
            if tty:
                _show_progress(counts)

        counts = ingest(conn, items, progress=progress, spare=spare, conflict=places.conflict)
    if tty:
        print(CLEAR_LINE, end="", file=sys.stderr)
    for line in ingest_summary(counts, unreadable, places.conflicts):
        print(line)
    return 0


@dataclass(slots=True)
class UnreadableLines:
    """The lines that held no entry (not JSON, not hex, ...): how many, and the first."""

    count: int = 0
    first: str | None = None  # `file:line: message`

    def add(self, line: BadLine) -> None:
        self.count += 1
        if self.first is None:
            self.first = f"{line.path}:{line.line}: {line.error.message}"


def ingest_summary(counts: IngestCounts, unreadable: UnreadableLines, conflicts: int) -> list[str]:
    """The counts, as ever on the first line (scripts read it); what the rejected ones
    were; and what was not checked yet (`CHECKED_NOTE`)."""
    lines = [
        f"accepted {counts.accepted}, duplicate {counts.duplicate}, rejected {counts.rejected}"
    ]
    if counts.rejected:
        lines.append(f"rejected here: {rejected_here(counts, unreadable, conflicts)}")
    lines.append(CHECKED_NOTE)
    return lines


def rejected_here(counts: IngestCounts, unreadable: UnreadableLines, conflicts: int) -> str:
    """The kinds of rejection ingest itself finds, the ones there were: lines without
    an entry (not stored), entries stored with their reason (they do not decode, or the
    payload is not theirs), copies with another payload (not stored)."""
    stored = counts.rejected - unreadable.count - conflicts
    parts = []
    if unreadable.count:
        parts.append(f"unreadable lines {unreadable.count} (first: {unreadable.first})")
    if stored:
        parts.append(f"stored with their reason {stored} (not an entry, or not its payload)")
    if conflicts:
        parts.append(f"payload conflicts {conflicts} (not stored)")
    return "; ".join(parts)


def _check_readable(path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise P2pandaError(Reason.UNREADABLE_FILE, f"{path}: {error.strerror}") from None


class Places:
    """Where each item of an ingest came from (file, line), kept until its batch is
    reported: a copy the store refuses (`payload-conflict`) is known only after its
    batch merged, and its warning names its line as a bad line's does. Memory holds the
    batches in flight, not the input."""

    def __init__(self, *, clear: bool) -> None:
        self._prefix = CLEAR_LINE if clear else ""
        self._places: deque[tuple[str, int]] = deque()
        self._first = 0  # the input position of `_places[0]`
        self.conflicts = 0  # copies not stored as `payload-conflict`

    def read(self, paths: Sequence[str], sources: Mapping[str, int]) -> Iterator[Item]:
        """The items of the files, each entry with its file's id in `sources` and its
        line, which the store keeps (`store.ingest.Sourced`)."""
        for path, line, item in read_located_lines(paths):
            self._places.append((path, line))
            yield item if isinstance(item, BadLine) else (*item, sources[path], line)

    def conflict(self, found: Conflict) -> None:
        """Say on stderr which line's copy was not stored, and why."""
        self.conflicts += 1
        path, line = self._places[found.position - self._first]
        print(
            f"{self._prefix}warning: {Reason.PAYLOAD_CONFLICT}: {path}:{line}: {found.message}",
            file=sys.stderr,
        )

    def reported(self, counts: IngestCounts) -> None:
        """Forget the places of the items counted so far."""
        while self._first < counts.total:
            self._places.popleft()
            self._first += 1


def _warn_bad_lines(items: Iterable[Item], *, clear: bool, seen: UnreadableLines) -> Iterator[Item]:
    """Pass every item on; say on stderr where each bad line is and why (first clearing
    the progress line, on a terminal), and count it in `seen`."""
    prefix = CLEAR_LINE if clear else ""
    for item in items:
        if isinstance(item, BadLine):
            seen.add(item)
            error = item.error
            print(
                f"{prefix}warning: {error.reason}: {item.path}:{item.line}: {error.message}",
                file=sys.stderr,
            )
        yield item


def _show_progress(counts: IngestCounts) -> None:
    print(
        f"\ringest: {counts.total} lines (accepted {counts.accepted}, "
        f"duplicate {counts.duplicate}, rejected {counts.rejected})",
        end="",
        file=sys.stderr,
        flush=True,
    )


# --- panda register --------------------------------------------------------------------


def run_register(args: argparse.Namespace) -> int:
    from p2panda_assets.store.registry import log_is_stored
    from p2panda_assets.store.registry import register as register_schema

    author = parse_hex(args.author, "AUTHOR_HEX")
    log_id = _parse_log_id(args.log_id)
    with open_store() as conn:
        registration = register_schema(conn, author, log_id, args.name)
        stored = log_is_stored(conn, author, log_id)
    from p2panda_assets.defs.orchestration import add_partition
    from p2panda_assets.defs.partitions import partition_key

    earlier = registration.earlier_registered_name
    moved_from = None if registration.created else partition_key(earlier, registration.schema_id)
    add_partition(registration.schema_id, moved_from)
    print(f"schema_id: {registration.schema_id}")
    print(f"table_name: {registration.table_name}")
    for line in name_lines(registration):
        print(line)
    if not stored:
        print(f"note: {unseen_log_note(registration.schema_id)}", file=sys.stderr)
    return 0


def name_lines(registration: Registration) -> list[str]:
    """What a registration did to the name the schema is known by, if anything: a name
    chosen for it because its own is held, or a rename (never silent: its view, its
    partition and the name commands take all follow)."""
    if registration.held_by is not None:
        return [
            f"registered as {registration.registered_name}: the name"
            f" {registration.qualified_for} is held by {registration.held_by}"
            " (register again with --name to pick another)"
        ]
    if registration.renamed:
        return [f"renamed {registration.shown_before} -> {registration.shown_name}"]
    return []


def unseen_log_note(schema_id: str) -> str:
    """A registration of a log the store holds no entry of is kept (its entries may come
    later), but a mistyped author or log id looks just like it: say which it is."""
    return (
        f"the store holds no entry of log {schema_id} yet: it is registered, and gets a"
        " table once its schema log is ingested (check the author and log id if it"
        " should be there)"
    )


def _parse_log_id(text: str) -> int:
    if not text.isdecimal() or not text.isascii():
        raise P2pandaError(Reason.BAD_VALUE, f"LOG_ID must be a decimal integer, not {text!r}")
    if len(text.lstrip("0")) > len(str(MAX_U64)):  # before int(): 4,301 digits it refuses
        raise P2pandaError(Reason.BAD_VALUE, f"LOG_ID must be at most {MAX_U64}")
    return int(text)


# --- panda status ----------------------------------------------------------------------


def run_status(args: argparse.Namespace) -> int:
    from p2panda_assets.statuses import SchemaStatus
    from p2panda_assets.store.registry import status_rows, store_totals

    if args.rejected is not None:
        if args.json:
            raise P2pandaError(Reason.BAD_USAGE, "panda status: --json goes without --rejected")
        return run_rejected(args.rejected or None, wide=args.wide)
    with open_store() as conn:
        rows = status_rows(conn)
        totals = store_totals(conn)
    if args.json:
        shown = {"schemas": [asdict(row) for row in rows], "totals": asdict(totals)}
        print(json.dumps(shown, ensure_ascii=False, default=_json_integer))
        return 0
    if args.wide:
        print(format_table(STATUS_COLUMNS, [_status_cells(row) for row in rows]))
    else:
        print(format_table(NARROW_COLUMNS, [_narrow_cells(row) for row in rows]))
        print(NARROW_LEGEND)
    for line in totals_lines(totals):
        print(line)
    for row in rows:
        if row.status in (SchemaStatus.PENDING, SchemaStatus.FAILED) and row.status_message:
            print(f"{row.status} {row.schema_id}: {row.status_message}")
        if row.view_conflict:
            print(f"no view for {row.schema_id}: {row.view_conflict}")
    return 0


def run_rejected(schema: str | None, *, wide: bool) -> int:
    """`panda status --rejected [NAME|SCHEMA_ID]`: every rejected entry of the schema,
    or of the store (those rejected before their log had a schema, too)."""
    from p2panda_assets.coordination import registered_names, resolve_schema_id
    from p2panda_assets.store.registry import registered_schemas, store_totals
    from p2panda_assets.store.rejections import rejections as rejected_entries

    with open_store() as conn:
        names = registered_names(registered_schemas(conn))
        schema_id = (
            None if schema is None else resolve_schema_id(schema, names, "is registered", True)
        )
        found = rejected_entries(conn, schema_id)
        unprocessed = store_totals(conn).unprocessed
    scope = "the store" if schema_id is None else f"schema {schema_id}"
    print(rejections.summary_line(len(found), scope))
    if found:
        print(format_table(rejections.COLUMNS, rejections.rows_of(found, names, wide=wide)))
    note = rejections.unverified_note(unprocessed)
    if note:
        print(note, file=sys.stderr)
    return 0


def _status_cells(row: StatusRow) -> list[str]:
    values = (
        row.schema_id,
        row.name,
        row.version,
        row.status,
        row.rows,
        row.applied,
        row.superseded,
        row.pending,
        row.rejected,
        row.safe,
        row.lossy,
        row.fell_back,
        row.view,
    )
    return ["-" if value is None else str(value) for value in values]


def _json_integer(value: object) -> int:
    """The numbers PostgreSQL gives as `Decimal` (versions, counts) are whole: JSON ints."""
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _narrow_cells(row: StatusRow) -> list[str]:
    """A schema's line within 100 columns: the id shortened, the accounts and the
    migration classes each in one cell, the view only where it is not named as the
    schema (`NARROW_LEGEND`)."""
    view = "-" if row.view is None else "yes" if row.view == row.name else row.view
    values = (
        row.name,
        short_schema_id(row.schema_id),
        row.version,
        row.status,
        row.rows,
        f"{row.applied}/{row.superseded}/{row.pending}/{row.rejected}",
        f"{row.safe}/{row.lossy}",
        row.fell_back,
        view,
    )
    return ["-" if value is None else str(value) for value in values]


def short_schema_id(schema_id: str) -> str:
    """`<first 8 hex digits of the author>…-<log id>`: enough to tell schemas apart on a
    terminal; `--wide` shows it whole."""
    author, _, log_id = schema_id.rpartition("-")
    return f"{author[:8]}…-{log_id}"


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned text columns, right-aligned numbers, two spaces between columns."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    numeric = [all(row[i].isdigit() or row[i] == "-" for row in rows) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = (
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(cells, widths, numeric, strict=True)
        )
        return "  ".join(parts).rstrip()

    return "\n".join(line(cells) for cells in (header, *rows))


def totals_lines(totals: StoreTotals) -> list[str]:
    lines = [f"unprocessed: {totals.unprocessed} entries not yet accounted for (pending)"]
    other = (
        totals.unregistered_applied,
        totals.unregistered_superseded,
        totals.unregistered_pending,
        totals.unregistered_rejected,
    )
    if any(other):
        applied, superseded, pending, rejected = other
        lines.append(
            f"not registered: applied {applied}, superseded {superseded}, "
            f"pending {pending}, rejected {rejected}"
        )
    return lines
