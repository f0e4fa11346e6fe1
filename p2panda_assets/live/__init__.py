"""The live path: new entries reach a run without waiting for the sensor loop.

- `store/notify.sql`: a statement-level trigger on `p2panda.entries` that notifies the
  channel `p2panda_entries` at commit, whoever writes (a COPY of 10,000 entries: one);
- `listener`: a thread in the Dagster daemon that `LISTEN`s and, at each notification,
  decides what to request with the entries sensor's own logic (`entries_tick`, on a
  cursor of its own) and submits those runs to the instance's run queue at once;
- `coordinator.LiveRunCoordinator`: Dagster's queued run coordinator, which starts the
  listener from the daemon's run queue loop (the hook: see its docstring);
- `coverage`: the tag by which the sensor knows which entries a run that left the queue
  reads already, so the sensor and the listener never request the same work twice.

Modules are imported where used: the entries sensor imports `coverage` only.
"""
