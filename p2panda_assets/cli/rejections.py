"""`panda status --rejected`: each rejected entry, by name (issue 56). The counts of
`panda status` say how many were rejected; this says which entry, why, and the
`file:line` it was ingested from, so that whoever sent it can be told."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from p2panda_assets.store.rejections import Rejection

COLUMNS = ("schema", "hash", "author", "log", "seq", "reason", "from", "message")
SHORT_HEX = 8  # hex digits of an author (or a schema id's author) shown without --wide
NO_SCHEMA = "no schema"  # rejected before its log could be given one (a bad signature)


def rejection_cells(
    rejection: Rejection, names: Mapping[str, str | None], *, wide: bool
) -> list[str]:
    """One line of the listing. The hash is always whole (it is what to search for);
    the author and schema id are shortened unless `wide`."""
    values = (
        schema_label(rejection.schema_id, names, wide=wide),
        rejection.hash.hex(),
        _hex_or_dash(rejection.author, wide=wide),
        rejection.log_id,
        rejection.seq_num,
        rejection.reason,
        rejection.place,
        rejection.message,
    )
    return ["-" if value is None else str(value) for value in values]


def schema_label(schema_id: str | None, names: Mapping[str, str | None], *, wide: bool) -> str:
    """A schema as people know it: its name if it has one, else its id (shortened
    unless `wide`); `no schema` for an entry rejected before its log had one."""
    if schema_id is None:
        return NO_SCHEMA
    name = names.get(schema_id)
    if name and not wide:
        return name
    return schema_id if wide else shorten(schema_id)


def shorten(text: str) -> str:
    """The first `SHORT_HEX` digits of a hex key, with what follows the key (a schema
    id's `-<log id>`) kept."""
    key, dash, rest = text.partition("-")
    if len(key) <= SHORT_HEX:
        return text
    return f"{key[:SHORT_HEX]}…{dash}{rest}"


def _hex_or_dash(value: bytes | None, *, wide: bool) -> str | None:
    if value is None:
        return None
    return value.hex() if wide else shorten(value.hex())


def summary_line(total: int, scope: str) -> str:
    """What the listing holds, said first (`scope`: "the store", "schema <id>")."""
    if not total:
        return f"no rejected entries in {scope}"
    return f"rejected entries in {scope}: {total}"


def unverified_note(unprocessed: int) -> str | None:
    """Entries ingested since the last build have no account yet: a bad signature
    among them shows only after `panda materialize` (or the daemon's next run)."""
    if not unprocessed:
        return None
    return (
        f"note: {unprocessed} entries are not verified yet; a build (`panda materialize`)"
        " checks their signatures and logs"
    )


def rows_of(
    found: Sequence[Rejection], names: Mapping[str, str | None], *, wide: bool
) -> list[list[str]]:
    return [rejection_cells(rejection, names, wide=wide) for rejection in found]
