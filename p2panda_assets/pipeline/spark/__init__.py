"""The Spark runtime: the session and its settings, the driver's address and class
archive, per-group Python jobs, the watchdog, and JVM failures named."""
