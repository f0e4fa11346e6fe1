"""Materializing tables from the chained layers: which schemas build and in what order
(`planning`), reduction, first and incremental builds, cascades (`building`), and what is
written to PostgreSQL (`writing`). `paths` picks Spark or the driver path for an increment."""
