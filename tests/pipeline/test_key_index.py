"""A chained layer's key index (`pipeline.columnar.key_index`), fast: a read of some
keys' messages through it keeps, after the rule, exactly what a read of the whole layer
keeps, whatever the layer's row groups, files and schemas, keys sharing a tag, short
keys and messages naming none; and it reads fewer row groups where the keys are few."""

from __future__ import annotations

import secrets
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2panda_assets.pipeline.columnar.arrow_io import (
    LAYER_ARROW,
    SCHEMA_PARTITIONING,
    layers_dataset,
)
from p2panda_assets.pipeline.columnar.key_index import (
    INDEX_FILE,
    index_layer,
    key_tags,
    lacks_index,
    located,
    opened_layer,
)
from p2panda_assets.pipeline.kernels.declared import MESSAGE_KEY, In, expression
from p2panda_assets.testing.warehouse import write_layer_locally
from p2panda_assets.tuning import tuned, tuning

SHARED_TAIL = secrets.token_bytes(8)
KEYS = [
    b"\x00\x20" + secrets.token_bytes(32),
    b"\x00\x20" + secrets.token_bytes(32),
    b"\x00\x20" + secrets.token_bytes(24) + SHARED_TAIL,  # these two share their tag
    b"\x00\x20" + secrets.token_bytes(24) + SHARED_TAIL,
    b"k",  # shorter than a tag
    b"",
]
SCHEMAS = ["a-1", "b-2", "c-3"]


def message(seq: int, schema: str, kind: str | None, instance: bytes | None, own: bytes) -> dict:
    return {
        "author": b"author",
        "log_id": Decimal(1),
        "seq": Decimal(seq),
        "hash": own,
        "batch": 1,
        "is_schema_log": False,
        "kind": kind,
        "schema_version": None,
        "error": None,
        "payload": None,
        "message": None,
        "instance": instance,
        "assignment": "assigned",
        "schema": schema,
    }


@st.composite
def layers(draw: st.DrawFn) -> list[dict]:
    """Messages of a layer: creates keyed by their own hash (one of `KEYS` or another),
    updates and deletes naming a key, and messages naming none."""
    rows = []
    for seq in range(draw(st.integers(1, 60))):
        schema = draw(st.sampled_from(SCHEMAS))
        kind = draw(st.sampled_from(["create", "update", "delete", None]))
        own = draw(st.sampled_from([*KEYS, b"other-" + bytes([seq])]))
        named = draw(st.one_of(st.none(), st.sampled_from(KEYS)))
        instance = None if kind == "create" else named
        rows.append(message(seq, schema, kind, instance, own))
    return rows


def write_layer(root: Path, rows: list[dict], files: int) -> None:
    """`rows` as a layer at `root`, written by `files` tasks."""
    table = pa.Table.from_pylist(rows, LAYER_ARROW)
    write_layer_locally(table, root, files, tuning().layer_group_rows)


def kept(dataset: ds.Dataset, keys: list[bytes], schemas: list[str] | None) -> list[int]:
    """The seqs of the messages of `schemas` (None: any) that create or name `keys`."""
    rule = expression(In(MESSAGE_KEY, tuple(keys)))
    if schemas is not None:
        rule = rule & pc.field("schema").isin(pa.array(schemas, pa.string()))
    return sorted(int(seq) for seq in dataset.to_table(filter=rule)["seq"].to_pylist())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=layers(),
    group_rows=st.integers(1, 7),
    files=st.integers(1, 3),
    keys=st.lists(st.sampled_from([*KEYS, b"unknown"]), max_size=4),
    schemas=st.one_of(st.none(), st.lists(st.sampled_from(SCHEMAS), max_size=3)),
)
def test_a_read_by_the_index_keeps_what_a_read_of_the_layer_keeps(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[dict],
    group_rows: int,
    files: int,
    keys: list[bytes],
    schemas: list[str] | None,
) -> None:
    root = tmp_path_factory.mktemp("layer") / "run"
    with tuned(replace(tuning(), layer_group_rows=group_rows, key_index_messages=0)):
        write_layer(root, rows, files)
        assert index_layer(str(root))
    whole = layers_dataset([str(root)])
    assert whole is not None
    assert kept(located(str(root), keys, schemas), keys, schemas) == kept(whole, keys, schemas)


def test_few_keys_read_the_row_groups_that_hold_them(tmp_path: Path) -> None:
    rows = [
        message(seq, SCHEMAS[seq % 2], "create", None, b"\x00\x20" + secrets.token_bytes(32))
        for seq in range(400)
    ]
    with tuned(replace(tuning(), layer_group_rows=10, key_index_messages=0)):
        write_layer(tmp_path, rows, 2)
        assert index_layer(str(tmp_path))
    wanted = [rows[7]["hash"], rows[250]["hash"]]
    fragments = list(located(str(tmp_path), wanted, None).get_fragments())
    assert sum(len(f.row_groups) for f in fragments) == 2  # of 40
    assert kept(located(str(tmp_path), wanted, None), wanted, None) == [7, 250]
    # most of a schema's row groups named: its files are read whole
    many = [row["hash"] for row in rows[::2]]  # every message of the first schema
    first = list(located(str(tmp_path), many, [SCHEMAS[0]]).get_fragments())
    assert len(first) == 2 and all(f.row_groups is None or len(f.row_groups) == 10 for f in first)


def test_a_small_layer_gets_no_index_and_is_read_whole(tmp_path: Path) -> None:
    rows = [message(seq, SCHEMAS[0], "create", None, KEYS[seq % 2]) for seq in range(20)]
    with tuned(replace(tuning(), key_index_messages=21)):
        write_layer(tmp_path, rows, 1)
        assert not index_layer(str(tmp_path))
    assert not (tmp_path / INDEX_FILE).exists()
    assert opened_layer(str(tmp_path)).index is None
    assert kept(located(str(tmp_path), [KEYS[0]], None), [KEYS[0]], None) == list(range(0, 20, 2))


def test_an_index_of_other_files_is_not_used(tmp_path: Path) -> None:
    """A layer's files that the index does not list (never so for a committed layer):
    the layer is read whole, not by an index that would miss them."""
    rows = [message(seq, SCHEMAS[0], "create", None, KEYS[seq % 2]) for seq in range(20)]
    with tuned(replace(tuning(), layer_group_rows=2, key_index_messages=0)):
        write_layer(tmp_path / "run", rows[:10], 1)
        assert index_layer(str(tmp_path / "run"))
        ds.write_dataset(
            pa.Table.from_pylist(rows[10:], LAYER_ARROW),
            str(tmp_path / "run"),
            format="parquet",
            partitioning=SCHEMA_PARTITIONING,
            basename_template="part-late-{i}.parquet",
            existing_data_behavior="overwrite_or_ignore",
        )
    assert opened_layer(str(tmp_path / "run")).index is None
    found = kept(located(str(tmp_path / "run"), [KEYS[0]], None), [KEYS[0]], None)
    assert found == list(range(0, 20, 2))


def test_the_index_is_invisible_to_the_layers_other_readers(tmp_path: Path) -> None:
    rows = [message(seq, SCHEMAS[seq % 3], "create", None, KEYS[0]) for seq in range(30)]
    with tuned(replace(tuning(), key_index_messages=0)):
        write_layer(tmp_path, rows, 1)
        assert index_layer(str(tmp_path))
    assert (tmp_path / INDEX_FILE).exists()
    whole = layers_dataset([str(tmp_path)])
    assert whole is not None and whole.count_rows() == 30


def test_a_tag_is_the_last_eight_bytes_of_a_key() -> None:
    tags = key_tags(pa.array([KEYS[2], KEYS[3], b"k", b"", KEYS[0]], pa.binary()))
    assert tags[0] == tags[1] == int.from_bytes(SHARED_TAIL, "big", signed=True)
    assert tags[2] == ord("k") and tags[3] == 0
    assert tags[4] == int.from_bytes(KEYS[0][-8:], "big", signed=True)


def test_a_layer_whose_messages_name_no_instance_has_an_index_that_finds_none(
    tmp_path: Path,
) -> None:
    """Schema messages, undecodable payloads: no key. The layer still has its index (so
    the index step does not chain every log again for want of one), and it finds none."""
    rows = [message(seq, SCHEMAS[0], None, None, KEYS[0]) for seq in range(30)]
    with tuned(replace(tuning(), key_index_messages=0)):
        write_layer(tmp_path, rows, 2)
        assert index_layer(str(tmp_path))
        assert not lacks_index(str(tmp_path))
    assert opened_layer(str(tmp_path)).index is not None
    assert kept(located(str(tmp_path), [KEYS[0]], None), [KEYS[0]], None) == []
    assert list(located(str(tmp_path), [KEYS[0]], None).get_fragments()) == []
