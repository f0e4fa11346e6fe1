"""`reduction.accounts_of`: the accounts in a batch of reduced rows are the engine's:
an `account` row's own, each message of an instance applied only if the instance is
live and the message shapes it, and none for the other row types."""

from __future__ import annotations

from p2panda_assets.engine.corpus import State
from p2panda_assets.pipeline.reduction import ACCOUNTED, accounts_of

CREATE, UPDATE, OLD_UPDATE, DELETE = b"c", b"u", b"o", b"d"


def batch(rows: list[dict[str, object]]) -> dict[str, list[object]]:
    return {name: [row.get(name) for row in rows] for name in (*ACCOUNTED, "live")}


def test_each_row_type_gives_the_engines_accounts() -> None:
    instance = {
        "row_type": "instance",
        "schema": "s",
        "hash": CREATE,
        "messages": [CREATE, UPDATE, OLD_UPDATE],
        "shaping": [CREATE, UPDATE],
    }
    rows = [
        {**instance, "live": True},
        {**instance, "live": False, "schema": "t"},  # deleted, by a message or a cascade
        {"row_type": "account", "schema": "s", "hash": DELETE, "state": "applied", "message": ""},
        {"row_type": "account", "schema": "s", "hash": b"r", "state": "rejected",
         "reason": "not-author", "message": "why"},
        {**instance, "row_type": "before", "live": True},
        {"row_type": "error", "schema": "s", "message": "boom"},
    ]  # fmt: skip
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
