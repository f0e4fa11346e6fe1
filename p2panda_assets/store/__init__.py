"""PostgreSQL: the entry store, the registry, the accounting and the materialized tables."""
