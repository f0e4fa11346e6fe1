"""The product's status words, each list in one place.

"Pending" is the one word for something that cannot be applied or built yet because
something it needs has not arrived: a message (its account state), a log (its
assignment), a schema (its registry status). The reason codes that say what it waits for
(`awaiting-*`) stay as they are.
"""

from __future__ import annotations

from enum import StrEnum


class SchemaStatus(StrEnum):
    """`p2panda.schemas.status`: where a registered schema's table stands."""

    REGISTERED = "registered"  # registered, never built
    MATERIALIZED = "materialized"  # its table holds the current lens's rows
    DROPPED = "dropped"  # the current lens has no field: no table
    PENDING = "pending"  # cannot be built yet (upstream schema missing, or a relation cycle)
    FAILED = "failed"  # its last build failed; it keeps its old table


# The statuses of a schema whose table step ran: a dropped schema was built too (its lens
# has no fields left, so it has no table).
BUILT = (SchemaStatus.MATERIALIZED, SchemaStatus.DROPPED)


class BuildStatus(StrEnum):
    """What one build did to a schema: a registry status, or nothing to do."""

    MATERIALIZED = "materialized"
    DROPPED = "dropped"
    PENDING = "pending"
    FAILED = "failed"
    UNCHANGED = "unchanged"  # built from the same index already: nothing written


class BuildPath(StrEnum):
    """Where a build's data work ran (`pipeline.build.paths`)."""

    SPARK = "spark"  # Spark jobs: whole builds, large increments
    DRIVER = "driver"  # the process running the build, with pyarrow: small increments


class Assignment(StrEnum):
    """`p2panda.logs.assignment`: how the index step assigned a log to a schema."""

    SCHEMA = "schema"  # the log is a schema's own log
    ASSIGNED = "assigned"  # an instance log of the schema its messages name
    PENDING = "pending"  # its schema is not known yet
    DUPLICATE = "duplicate"  # an author's second log for the same schema
