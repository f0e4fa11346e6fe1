"""What the copy of a reduction derives from each batch of reduced rows.

`reduce.accounts_of`: the accounts are the engine's: an `account` row's own, each
message of an instance applied only if the instance is live and the message shapes it,
and none for the other row types. `reduce.deleted_of`: the deleted set is the
instances the cascades left deleted, and nothing else."""

from __future__ import annotations

from p2panda_assets.engine.corpus import State
from p2panda_assets.pipeline.kernels.reduce import ACCOUNTED, accounts_of, deleted_of

CREATE, UPDATE, OLD_UPDATE, DELETE = b"c", b"u", b"o", b"d"


def batch(rows: list[dict[str, object]]) -> dict[str, list[object]]:
    return {name: [row.get(name) for row in rows] for name in (*ACCOUNTED, "live")}


def rows_of_each_type() -> list[dict[str, object]]:
    instance = {
        "row_type": "instance",
        "schema": "s",
        "hash": CREATE,
        "messages": [CREATE, UPDATE, OLD_UPDATE],
        "shaping": [CREATE, UPDATE],
    }
    return [
        {**instance, "live": True},
        {**instance, "live": False, "schema": "t"},  # deleted, by a message or a cascade
        {"row_type": "account", "schema": "s", "hash": DELETE, "state": "applied", "message": ""},
        {"row_type": "account", "schema": "s", "hash": b"r", "state": "rejected",
         "reason": "not-author", "message": "why"},
        {**instance, "row_type": "before", "live": True},
        {"row_type": "error", "schema": "s", "message": "boom"},
    ]  # fmt: skip


def test_each_row_type_gives_the_engines_accounts() -> None:
    rows = rows_of_each_type()
    applied, superseded = State.APPLIED.value, State.SUPERSEDED.value
    assert list(accounts_of(batch(rows))) == [
        (CREATE, "s", applied, None, ""),
        (UPDATE, "s", applied, None, ""),
        (OLD_UPDATE, "s", superseded, None, ""),
        (CREATE, "t", superseded, None, ""),
        (UPDATE, "t", superseded, None, ""),
        (OLD_UPDATE, "t", superseded, None, ""),
        (DELETE, "s", "applied", None, ""),
        (b"r", "s", "rejected", "not-author", "why"),
    ]


def test_states_are_plain_strings() -> None:
    rows = [{"row_type": "instance", "schema": "s", "hash": CREATE, "messages": [CREATE],
             "shaping": [CREATE], "live": True}]  # fmt: skip
    (account,) = accounts_of(batch(rows))
    assert type(account[2]) is str


def test_the_deleted_set_is_the_instances_left_deleted() -> None:
    rows = rows_of_each_type()
    rows.append({"row_type": "before", "schema": "u", "hash": UPDATE, "live": False})
    assert list(deleted_of(batch(rows))) == [("t", CREATE)]
