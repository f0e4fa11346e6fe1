"""`checks.Tally` counts every check of a pandera model in one aggregation; a column the
frame lacks must cost only the checks that read it."""

from __future__ import annotations

import pandera.pyspark as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from p2panda_assets.defs.checks import ROWS, Tally, summarize, validate

pytestmark = pytest.mark.spark


def test_a_missing_column_leaves_the_other_checks_counted(spark) -> None:
    frame = spark.createDataFrame([("a",), ("b",)], "y string")
    tally = Tally()
    model = pa.DataFrameSchema(
        {
            name: pa.Column(
                T.StringType(),
                checks=[tally.column(name, f"{name}_is_a", "is a", lambda c: c != "a")],
            )
            for name in ("x", "y")
        },
        checks=[tally.rows("x_or_y", "x or y", F.col("x").isNull(), ("x",))],
    )
    lines = summarize(validate(frame, model))
    assert "x: column_in_dataframe (COLUMN_NOT_IN_DATAFRAME)" in lines
    assert "y: y_is_a: is a (DATAFRAME_CHECK)" in lines
    assert tally.findings == {"y: y_is_a": 1}
    assert tally.count(frame, ROWS) == 2
    with pytest.raises(KeyError):
        tally.count(frame, "x: x_is_a")  # never aggregated: its column is missing
