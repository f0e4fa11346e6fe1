"""Rows into PostgreSQL by binary COPY, once per Spark task whatever Spark retries, and
PostgreSQL read into Spark through JDBC."""
