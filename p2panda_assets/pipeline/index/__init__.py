"""The index step: new entries verified once, every log chained, each log's plan and
accounts decided, the messages written as a chained layer of the columnar store. `step`
runs it; `paths` picks Spark or the driver path (pyarrow, no Spark job) for it."""
