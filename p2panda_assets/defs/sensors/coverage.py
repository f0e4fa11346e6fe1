"""Which new entries a run will read: the tags the listener puts on runs, read by the
entries sensor (and the listener) so that no work is requested twice.

A run reads every entry committed before it leaves the queue (its index step reads the
store when it starts); the sensors rely on that for runs still QUEUED. Once a run has
started, whether it reads an entry depends on when that entry committed, which the
sensor cannot tell. So the listener writes it down: `p2panda/entries-through=N` on a run
says that every entry with `ingest_seq <= N` had committed before the run left the queue.
The listener sets it on the runs it submits (N: what it saw before creating them) and
raises it on every run still queued after it read the store; the entries sensor sets it
on the runs it requests (N: what its tick read). Both skip new entries of a schema
when an unfinished or succeeded run of that schema's whole family carries a bound at or
past them (`entries_covered`): that run reads them. Which of the two requests an entry's
run at all is `store.entry_claims`'s lock and claim.
"""

from __future__ import annotations

import dagster as dg

from p2panda_assets.defs.assets import THROUGH_TAG
from p2panda_assets.defs.partitions import PARTITION_TAG, schema_id_of
from p2panda_assets.defs.sensors.requests import FAMILY, QUEUED, UNFINISHED

TRIGGER_TAG = "p2panda/trigger"  # what started the run: "notify" for the listener's runs
NOTIFY = "notify"


def prefix_bound(seq: int, holes: tuple[tuple[int, int, float], ...]) -> int:
    """The highest `ingest_seq` up to which a read of the store saw every entry (an
    `EntryCursor`'s `seq` and its holes: below a hole, values not committed yet)."""
    return min([seq, *(lo - 1 for lo, _hi, _born in holes)])


def _covers_family(run: dg.DagsterRun) -> bool:
    return run.asset_selection is None or run.asset_selection >= frozenset(FAMILY)


def entries_covered(instance: dg.DagsterInstance) -> dict[str, int]:
    """Per schema, the highest `THROUGH_TAG` bound of its unfinished or succeeded runs of
    the whole family: its new entries up to that bound are read by one of them (a run
    that succeeded read them even where its table says nothing of it: one left pending)."""
    statuses = [*UNFINISHED, dg.DagsterRunStatus.SUCCESS]
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=statuses), limit=1000)
    covered: dict[str, int] = {}
    for run in runs:
        key, through = run.tags.get(PARTITION_TAG), run.tags.get(THROUGH_TAG, "")
        if key and through.isdigit() and _covers_family(run):
            sid = schema_id_of(key)
            covered[sid] = max(covered.get(sid, 0), int(through))
    return covered


def raise_queued_bounds(instance: dg.DagsterInstance, bound: int) -> int:
    """Raise `THROUGH_TAG` to `bound` on every run of the pipeline still queued now, after
    a read of the store that saw every entry up to `bound`: each starts later, so it
    reads them. How many runs were tagged."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=QUEUED), limit=1000)
    tagged = 0
    for run in runs:
        through = run.tags.get(THROUGH_TAG, "")
        if PARTITION_TAG in run.tags and (not through.isdigit() or int(through) < bound):
            instance.add_run_tags(run.run_id, {THROUGH_TAG: str(bound)})
            tagged += 1
    return tagged
