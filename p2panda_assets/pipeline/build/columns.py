"""Column types of a materialized table (rule T-TYPE, docs/semantics.md), in PostgreSQL and in
Spark (as the table check reads a table back), and pandas frames for Spark.

When a table is read back through Spark, its field columns are named `f0`, `f1`, ... in
lens order: Spark resolves names case-insensitively and a field name is data.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from p2panda_assets.engine.lens import Lens
from p2panda_assets.protocol.fieldtypes import BaseType, FieldType
from p2panda_assets.protocol.ids import parse_schema_id

PG_TYPES = {
    BaseType.VARCHAR: "varchar(255)",
    BaseType.TEXT: "text",
    BaseType.INTEGER: "bigint",
    BaseType.FLOAT: "double precision",
    BaseType.BLOB: "bytea",
    BaseType.BOOLEAN: "boolean",
    BaseType.TIMESTAMP: "timestamptz",
    BaseType.RELATION: "text",
}

SPARK_TYPES: dict[BaseType, T.DataType] = {
    BaseType.VARCHAR: T.StringType(),
    BaseType.TEXT: T.StringType(),
    BaseType.INTEGER: T.LongType(),
    BaseType.FLOAT: T.DoubleType(),
    BaseType.BLOB: T.BinaryType(),
    BaseType.BOOLEAN: T.BooleanType(),
    BaseType.TIMESTAMP: T.TimestampType(),
    BaseType.RELATION: T.StringType(),
}


def pg_type(ftype: FieldType) -> str:
    """The column type of a field type (`PG_TYPES`; arrays are arrays). Rule T-TYPE
    (docs/semantics.md)."""
    base = PG_TYPES[ftype.base]
    return f"{base}[]" if ftype.is_array else base


def field_columns(lens: Lens) -> list[tuple[str, str, FieldType]]:
    """(internal column name, field name, type) per field, in lens order."""
    return [(f"f{i}", name, spec.type) for i, (name, spec) in enumerate(lens.items())]


def is_schema_log(schema_id: str, author: str = "author", log_id: str = "log_id") -> Column:
    """A Spark condition: the row's (`author`, `log_id`) columns are the log of `schema_id`
    (read with `protocol.ids`, so the id's format is spelled there only)."""
    key, log = parse_schema_id(schema_id)
    return (F.lower(F.hex(author)) == key.hex()) & (F.col(log_id) == log)
