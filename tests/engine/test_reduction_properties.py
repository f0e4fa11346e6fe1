"""Properties of the reduction on random corpora (hypothesis)."""

from __future__ import annotations

import math
from random import Random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2panda_assets.engine.corpus import Corpus, reduce_corpus
from tests.strategies import corpora

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def snapshot(result: Corpus) -> tuple:
    """Everything observable: tables (values compared with NaN == NaN), accounts, waiting."""

    def same(value: object) -> object:
        return "NaN" if isinstance(value, float) and math.isnan(value) else value

    tables = {
        schema_id: [
            (r.instance_id, r.author, r.version, r.seq, {k: same(v) for k, v in r.values.items()})
            for r in table.rows
        ]
        for schema_id, table in result.tables.items()
    }
    return tables, result.accounts, result.waiting


def interleave(pairs: list[tuple[bytes, bytes]], rnd: Random) -> list[tuple[bytes, bytes]]:
    """A random interleaving of the logs that keeps each log's own order."""
    by_log: dict[bytes, list[tuple[bytes, bytes]]] = {}
    for pair in pairs:
        by_log.setdefault(pair[0][1:34], []).append(pair)  # author and first log id byte
    queues = [list(q) for q in by_log.values()]
    out = []
    while queues:
        queue = rnd.choice(queues)
        out.append(queue.pop(0))
        if not queue:
            queues.remove(queue)
    return out


@SETTINGS
@given(corpora(), st.randoms(use_true_random=False))
def test_reduction_does_not_depend_on_how_logs_interleave(corpus, rnd: Random) -> None:
    assert snapshot(reduce_corpus(corpus.pairs)) == snapshot(
        reduce_corpus(interleave(corpus.pairs, rnd))
    )


@SETTINGS
@given(corpora(), st.randoms(use_true_random=False))
def test_reduction_does_not_depend_on_arrival_order_at_all(corpus, rnd: Random) -> None:
    shuffled = list(corpus.pairs)
    rnd.shuffle(shuffled)
    assert snapshot(reduce_corpus(corpus.pairs)) == snapshot(reduce_corpus(shuffled))


@SETTINGS
@given(corpora(), st.randoms(use_true_random=False))
def test_one_entry_at_a_time_every_stored_entry_is_accounted_for(corpus, rnd: Random) -> None:
    """Entries arriving one by one: after each arrival every distinct entry has exactly
    one state, and the last state equals reducing everything at once."""
    arrivals = interleave(corpus.pairs, rnd)
    for end in range(1, len(arrivals) + 1):
        result = reduce_corpus(arrivals[:end])
        distinct_entries = {raw for raw, _ in arrivals[:end]}
        assert len(result.accounts) == len(distinct_entries)
        attributed = sum(sum(result.counts(s).values()) for s in result.histories)
        unattributed = sum(1 for a in result.accounts.values() if a.schema_id is None)
        instance_only = sum(
            1
            for a in result.accounts.values()
            if a.schema_id is not None and a.schema_id not in result.histories
        )
        assert attributed + unattributed + instance_only == len(result.accounts)
    assert snapshot(reduce_corpus(arrivals)) == snapshot(reduce_corpus(corpus.pairs))
