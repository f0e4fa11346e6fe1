"""The pipeline lock across processes: a run waits for another (bounded, then `busy`),
and whoever holds the lock sweeps the staging tables that dead runs left behind."""

from __future__ import annotations

import psycopg
import pytest

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.pipeline.build.increments import layers_after
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.new_entries import entries_at_most
from p2panda_assets.store.pipeline_lock import (
    LOCK_WAIT_ENV,
    PIPELINE_LOCK,
    hold_pipeline_lock,
    release_pipeline_lock,
)
from p2panda_assets.store.pipeline_state import keep_layer_digests, layer_digests
from p2panda_assets.testing.builder import CorpusBuilder, create_field

pytestmark = pytest.mark.postgres


def test_a_run_that_finds_the_pipeline_busy_too_long_says_busy(database_url, monkeypatch) -> None:
    monkeypatch.setenv(LOCK_WAIT_ENV, "0.3")
    with (
        connect(database_url, autocommit=True) as holder,
        connect(database_url, autocommit=True) as waiter,
    ):
        ensure_schema(holder)
        holder.execute("SELECT pg_advisory_lock(%s)", (PIPELINE_LOCK,))
        with pytest.raises(P2pandaError) as raised:
            hold_pipeline_lock(waiter)
        assert raised.value.reason is Reason.BUSY
        assert waiter.execute("SHOW lock_timeout").fetchone()[0] == "0"  # reset
        holder.execute("SELECT pg_advisory_unlock(%s)", (PIPELINE_LOCK,))
        hold_pipeline_lock(waiter)  # free now: taken at once
        release_pipeline_lock(waiter)


def test_the_lock_holder_sweeps_what_dead_runs_staged_and_nothing_else(database_url) -> None:
    with connect(database_url, autocommit=True) as conn:
        ensure_schema(conn)
        for name in ("p2panda.stage_accounts_dead", "p2panda_data.stage_dead_0"):
            conn.execute(f"CREATE UNLOGGED TABLE {name} (x int)")
        conn.execute("CREATE TABLE p2panda_data.s_kept (x int)")
        conn.execute("CREATE TABLE public.stage_not_ours (x int)")
        hold_pipeline_lock(conn)
        release_pipeline_lock(conn)
        left = {
            f"{schema}.{table}"
            for schema, table in conn.execute(
                "SELECT schemaname, tablename FROM pg_tables WHERE tablename LIKE 's%%'"
                " AND schemaname IN ('p2panda', 'p2panda_data', 'public')"
            )
        }
        assert "p2panda.stage_accounts_dead" not in left
        assert "p2panda_data.stage_dead_0" not in left
        assert {"p2panda_data.s_kept", "public.stage_not_ours"} <= left
        conn.execute("DROP TABLE public.stage_not_ours")
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT 1 FROM p2panda_data.stage_dead_0")


def test_layer_sums_are_kept_exactly_and_forgotten_with_their_layers(conn) -> None:
    """Sums of hash bits pass 2**64; a layer no longer read loses its row."""
    big = 2**60 * 1_000_003
    kept = {
        "old": [("s-1", True, 1, 3, big), (None, False, 1, 1, 7)],
        "new": [],  # a layer with no message is summed too, once
    }
    keep_layer_digests(conn, kept, ["old", "new"])
    assert layer_digests(conn, ["old", "new", "unknown"]) == kept
    keep_layer_digests(conn, {"newer": [("s-1", True, 2, 1, 5)]}, ["new", "newer"])
    assert layer_digests(conn, ["old", "new", "newer"]) == {
        "new": [],
        "newer": [("s-1", True, 2, 1, 5)],
    }


def test_the_layers_after_a_batch_are_those_holding_a_newer_message(conn) -> None:
    """An increment reads only them for its new keys; a layer without kept sums may
    hold anything, so it is read too."""
    keep_layer_digests(
        conn,
        {
            "base": [("s-1", True, 1, 5, 1), ("s-2", True, 3, 2, 1)],
            "second": [(None, False, 4, 1, 1)],
            "third": [("s-1", True, 5, 1, 1)],
        },
        ["base", "second", "third"],
    )
    layers = ["base", "second", "third", "unsummed"]
    assert layers_after(conn, layers, 0) == layers
    assert layers_after(conn, layers, 3) == ["second", "third", "unsummed"]
    assert layers_after(conn, layers, 4) == ["third", "unsummed"]
    assert layers_after(conn, layers[:3], 5) == []


def test_entries_at_most_is_the_count_of_a_store_without_gaps_and_a_bound_with_them(
    database_url,
) -> None:
    builder = CorpusBuilder()
    builder.author(1).schema(1).migrate(create_field("title", "text"))
    builder.author(2).schema(2).migrate(create_field("title", "text"))
    with connect(database_url, autocommit=True) as conn:
        ensure_schema(conn)
        assert entries_at_most(conn) == 0
        ingest(conn, builder.pairs[:1])
        assert entries_at_most(conn) == 1
        conn.execute("SELECT nextval(pg_get_serial_sequence('p2panda.entries', 'ingest_seq'))")
        ingest(conn, builder.pairs[1:])  # after a gap (a failed ingest's numbers)
        count = conn.execute("SELECT count(*) FROM p2panda.entries").fetchone()[0]
        assert entries_at_most(conn) == count + 1 == len(builder.pairs) + 1
