"""A resident run worker: one long-lived process with a warm Spark session that executes
the runs the Dagster daemon launches, instead of a new process (and JVM) per run."""
