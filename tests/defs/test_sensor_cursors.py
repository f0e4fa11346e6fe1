"""The sensors' cursors without a database: what they keep between ticks."""

from __future__ import annotations

import json

from p2panda_assets.defs.sensors import HOLE_TTL_SECONDS, EntryCursor, RegistrationCursor
from p2panda_assets.store.feed import Feed, Writers


def test_a_registration_cursor_stored_before_the_rename_reads_its_waiting_as_pending() -> None:
    old = json.dumps({"issued": {"a-1": "k"}, "waiting": ["a-1"], "cycles": [], "state": "s"})
    cursor = RegistrationCursor.parse(old)
    assert cursor.pending == ["a-1"] and cursor.issued == {"a-1": "k"}
    assert json.loads(cursor.dumps())["pending"] == ["a-1"]
    assert RegistrationCursor.parse(cursor.dumps()) == cursor


def test_a_hole_is_kept_while_a_writer_may_still_fill_it() -> None:
    feed = Feed(top=20, holes=[(5, 6, 100.0)], logs=[])
    kept = EntryCursor.past(feed, Writers(active=1, handed_out=20), now=101.0)
    assert kept == EntryCursor(20, ((5, 6, 100.0),))
    assert EntryCursor.parse(kept.dumps()) == kept


def test_a_hole_no_writer_can_fill_any_more_is_forgotten() -> None:
    feed = Feed(top=20, holes=[(5, 6, 100.0), (21, 22, 100.0)], logs=[])
    moved = EntryCursor.past(feed, Writers(active=0, handed_out=20), now=101.0)
    assert moved.holes == ((21, 22, 100.0),)  # above what was handed out: may still come


def test_a_hole_older_than_its_time_to_live_is_forgotten() -> None:
    feed = Feed(top=20, holes=[(5, 6, 0.0)], logs=[])
    moved = EntryCursor.past(feed, Writers(active=3, handed_out=20), now=HOLE_TTL_SECONDS)
    assert moved.holes == ()


def seen(cursor: EntryCursor, upto: int) -> set[int]:
    """The ingest_seq values up to `upto` the cursor has read."""
    holes = {n for lo, hi, _born in cursor.holes for n in range(lo, hi + 1)}
    return {n for n in range(1, upto + 1) if n <= cursor.seq and n not in holes}


def test_the_union_of_two_cursors_has_seen_what_either_has() -> None:
    """The listener reads on from the entries sensor's cursor (store.entry_claims): a
    hole stays only where neither has read, with the later of its two births."""
    sensor = EntryCursor(30, ((5, 9, 100.0), (20, 24, 101.0)))
    listener = EntryCursor(22, ((3, 6, 50.0), (8, 12, 60.0)))
    union = sensor.union(listener)
    assert union == listener.union(sensor)
    assert seen(union, 40) == seen(sensor, 40) | seen(listener, 40)
    assert union == EntryCursor(30, ((5, 6, 100.0), (8, 9, 100.0), (23, 24, 101.0)))
    assert EntryCursor(7).union(EntryCursor()) == EntryCursor(7)
