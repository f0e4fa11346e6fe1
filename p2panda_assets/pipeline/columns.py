"""Column types of a materialized table (SPEC section 4, Registry), in PostgreSQL and in
Spark, and values converted for Spark.

In Spark and in staging tables, field columns are named `f0`, `f1`, ... in lens order:
Spark's JDBC writer does not escape quotes in column names, and a field name is data,
never SQL. The real names are set with `psycopg.sql.Identifier` when a table is swapped in.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import types as T

from p2panda_assets.engine.lens import Lens, Value
from p2panda_assets.protocol.fieldtypes import BaseType, FieldType

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

SYSTEM_COLUMNS_PG = (
    ("_instance_id", "text PRIMARY KEY"),
    ("_author", "text NOT NULL"),
    ("_version", "bigint NOT NULL"),
    ("_seq", "numeric(20, 0) NOT NULL"),
    ("_entry", "text NOT NULL"),  # hash (hex) of the entry that last wrote the row
)


def column_type(definition: str) -> str:
    """The type of a column definition, without its constraints."""
    return definition.split(" PRIMARY KEY")[0].split(" NOT NULL")[0]


def pg_type(ftype: FieldType) -> str:
    base = PG_TYPES[ftype.base]
    return f"{base}[]" if ftype.is_array else base


def spark_type(ftype: FieldType) -> T.DataType:
    base = SPARK_TYPES[ftype.base]
    return T.ArrayType(base, containsNull=False) if ftype.is_array else base


def field_columns(lens: Lens) -> list[tuple[str, str, FieldType]]:
    """(internal column name, field name, type) per field, in lens order."""
    return [(f"f{i}", name, spec.type) for i, (name, spec) in enumerate(lens.items())]


def spark_value(value: Value, ftype: FieldType) -> object:
    """A canonical engine value as Spark takes it (arrays as lists)."""
    if value is None:
        return None
    return list(value) if ftype.is_array else value  # type: ignore[arg-type]


def rows_frame(rows: list[dict[str, object]], columns: list[str]) -> pd.DataFrame:
    """A pandas frame for Spark from row dicts: absent values are None (a column pandas
    fills with NaN would not convert to an Arrow string or binary column)."""
    values = [[row.get(c) for c in columns] for row in rows]
    return pd.DataFrame(values, columns=columns, dtype=object)


def column_names(spark_schema: str) -> list[str]:
    """The names in a DDL-style schema string (`"a binary, b string"`)."""
    return [part.split()[0] for part in spark_schema.split(", ")]
