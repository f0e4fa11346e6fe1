"""Staging tables: unlogged `stage_*` tables a run creates for its own rows before it
commits them (`stage_table`), drops whatever happens (`drop_tables`), and that the next
holder of the pipeline lock sweeps when a run died with them (`sweep_stages`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg
from psycopg import sql


@dataclass(frozen=True, slots=True)
class Stage:
    """A staging table: `<schema>.stage_*`, created by one run for its own rows."""

    schema: str
    name: str

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)


def stage_table(conn: psycopg.Connection, like: str, token: str) -> Stage:
    """An unlogged table shaped like `p2panda.<like>` for one run's rows, named so that a
    sweep finds exactly the staging tables (`p2panda.stage_*`)."""
    stage = Stage("p2panda", f"stage_{like}_{token}")
    conn.execute(
        sql.SQL("CREATE UNLOGGED TABLE {} (LIKE {} INCLUDING DEFAULTS)").format(
            stage.identifier, sql.Identifier("p2panda", like)
        )
    )
    return stage


def drop_tables(conn: psycopg.Connection, stages: Iterable[Stage | None]) -> None:
    """Drop a run's staging tables (those it got to create)."""
    for stage in stages:
        if stage is not None:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(stage.identifier))


PRODUCT_SCHEMAS = ("p2panda", "p2panda_data", "p2panda_versions")


def sweep_stages(conn: psycopg.Connection) -> list[str]:
    """Drop every staging table (`stage_*` in the product's schemas); the caller holds
    the pipeline lock, so they are all a dead run's. Their names say what they are, and
    a swapped-in table never keeps one (its key is renamed too)."""
    rows = conn.execute(
        "SELECT schemaname, tablename FROM pg_tables"
        " WHERE schemaname = ANY(%s) AND tablename LIKE 'stage\\_%%'",
        (list(PRODUCT_SCHEMAS),),
    ).fetchall()
    for schema, table in rows:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, table)))
    return [f"{schema}.{table}" for schema, table in rows]
