"""The driver path's scans read a batch at a time (`arrow_io.scan_batches`): over files of
many row groups, what they keep is what one filter over the whole table keeps, in no
empty batch, and `scan` is their concatenation."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from p2panda_assets.pipeline.columnar.arrow_io import scan, scan_batches


def test_a_scan_a_batch_at_a_time_keeps_what_one_filter_keeps(tmp_path: Path) -> None:
    rows = [{"n": n, "payload": bytes([n % 256]) * 50, "kind": "create" if n % 7 else None}
            for n in range(1_000)]  # fmt: skip
    table = pa.Table.from_pylist(rows)
    for part in range(3):  # three files of many small row groups
        pq.write_table(table.slice(part * 400, 400), tmp_path / f"part-{part}.parquet",
                       row_group_size=16)  # fmt: skip
    dataset = ds.dataset(str(tmp_path), format="parquet")
    wanted = (pc.field("n") > 555) & pc.field("kind").is_valid()
    batches = list(scan_batches(dataset, ["n", "payload"], wanted))
    expected = table.filter(wanted).select(["n", "payload"])
    assert len(batches) > 1 and all(b.num_rows for b in batches)
    assert sorted(pa.concat_tables(batches).to_pylist(), key=lambda r: r["n"]) == (
        expected.to_pylist()
    )
    assert sorted(scan(dataset, ["n", "payload"], wanted).to_pylist(), key=lambda r: r["n"]) == (
        expected.to_pylist()
    )
    assert list(scan_batches(dataset, ["n"], pc.field("n") < 0)) == []


def test_an_increment_of_schemas_without_messages_touches_none(tmp_path: Path) -> None:
    """No batch to keep rows of: the touched table is empty, with the columns the
    reduction reads and `built_batch`, typed as the layers type them."""
    from p2panda_assets.pipeline.build.driver_path import READ, touched_locally
    from p2panda_assets.pipeline.columnar.arrow_io import LAYER_ARROW

    (tmp_path / "schema=s1").mkdir()
    stored = pa.schema([f for f in LAYER_ARROW if f.name != "schema"])
    pq.write_table(stored.empty_table(), tmp_path / "schema=s1" / "part-0.parquet")
    touched = touched_locally([str(tmp_path)], {"another schema": 1}, {b"key"})
    assert touched.num_rows == 0
    assert touched.schema.names == [*READ, "built_batch"]
    assert touched.schema.field("seq").type == LAYER_ARROW.field("seq").type
