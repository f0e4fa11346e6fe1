"""The `panda` command: thin over the protocol, engine, store and Dagster layers."""
