"""The PySpark pipeline: entries verified and chained into the columnar store (`index/`),
tables built from it into PostgreSQL (`build/`), over the shared rules in `kernels/`, the
columnar store's files (`columnar/`), PostgreSQL I/O (`postgres/`) and the Spark runtime
(`spark/`). docs/architecture.md walks the data through them."""
