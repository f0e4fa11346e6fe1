"""Partition keys (`defs.partitions`): `<registered name>.<schema id>`, the bare id without
a name. Every name a registration accepts (1..64 printable ASCII characters) makes a key
that reads back to its schema id, that Dagster accepts as a dynamic partition, and that
the UI's partition selection reads as one key; a key that changes takes its schema's
builds along. No database, no Spark."""

from __future__ import annotations

import re
import string

import dagster as dg
from dagster._core.definitions.partitions.utils.base import (
    raise_error_on_invalid_partition_key_substring,
)
from dagster._core.definitions.partitions.utils.multi import (
    INVALID_STATIC_PARTITIONS_KEY_CHARACTERS,
)
from hypothesis import given
from hypothesis import strategies as st

from p2panda_assets.defs.partitions import (
    CARRIED_FROM,
    FAMILY,
    SCHEMAS,
    carried_materializations,
    partition_changes,
    partition_key,
    schema_id_of,
    schemas,
    sync_partitions,
)
from p2panda_assets.protocol.ids import format_schema_id

SCHEMA_ID = format_schema_id(bytes(range(32)), 7)
LONGEST_ID = format_schema_id(b"\xff" * 32, 2**64 - 1)
# The UI's partition selection grammar reads these unquoted as one key (PartitionSelection.g4,
# UNQUOTED_CHAR); its dynamic-partition input joins selected keys with ", " unquoted.
UI_KEY = re.compile(r"[a-zA-Z0-9_:./@-]+")
NAMES = st.text(alphabet=string.printable[:95], min_size=1, max_size=64)  # printable ASCII


def test_a_named_schemas_key_puts_the_name_first() -> None:
    assert partition_key("slothmail", SCHEMA_ID) == f"slothmail.{SCHEMA_ID}"
    assert schema_id_of(f"slothmail.{SCHEMA_ID}") == SCHEMA_ID


def test_a_schema_without_a_name_keeps_its_bare_id() -> None:
    assert partition_key(None, SCHEMA_ID) == SCHEMA_ID
    assert partition_key("", SCHEMA_ID) == SCHEMA_ID
    assert schema_id_of(SCHEMA_ID) == SCHEMA_ID  # the keys of instances before the names


def test_names_with_dots_and_odd_characters_round_trip() -> None:
    odd = {
        "mail.v2": "mail.v2",
        "a...b": "a.b",  # `...` is the UI's range: Dagster refuses it in a key
        "x.": "x.",
        "...": ".",
        "my mail, [draft]": "my_mail___draft_",
        "a|b*c": "a_b_c",
        'say "hi"': "say__hi_",
        "ümlaut": "_mlaut",  # not a registered name (ASCII only), safe all the same
    }
    for name, shown in odd.items():
        key = partition_key(name, LONGEST_ID)
        assert key == f"{shown}.{LONGEST_ID}"
        assert schema_id_of(key) == LONGEST_ID


@given(NAMES)
def test_every_registrable_name_makes_a_key_dagster_and_the_ui_accept(name: str) -> None:
    key = partition_key(name, LONGEST_ID)
    assert schema_id_of(key) == LONGEST_ID
    raise_error_on_invalid_partition_key_substring([key])  # no "...", no control characters
    assert not INVALID_STATIC_PARTITIONS_KEY_CHARACTERS & set(key)
    assert UI_KEY.fullmatch(key)


def test_keys_are_accepted_by_a_dagster_instance() -> None:
    keys = [partition_key(n, LONGEST_ID) for n in ("a...b", "x.", "my mail, [draft]")]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("schemas", keys)
        assert sorted(instance.get_dynamic_partitions("schemas")) == sorted(keys)
        assert all(schemas.has_partition_key(k, dynamic_partitions_store=instance) for k in keys)


def test_migration_adds_the_named_keys_and_removes_the_rest_unless_in_use() -> None:
    """An instance from before the names has bare-id partitions: the named schema's key
    is added and its bare id removed; a key a run still works on stays until it ends."""
    other = format_schema_id(bytes(32), 1)
    wanted = [partition_key("mail", SCHEMA_ID), other]
    assert partition_changes([SCHEMA_ID, other], wanted) == ([wanted[0]], [SCHEMA_ID])
    assert partition_changes([SCHEMA_ID, other], wanted, {SCHEMA_ID}) == ([wanted[0]], [])
    assert partition_changes(wanted, wanted) == ([], [])


def built(instance: dg.DagsterInstance, key: str, asset: dg.AssetKey, index: str) -> None:
    """A materialization of `asset` under the partition `key`, built from `index`."""
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset, partition=key, metadata={"built_from_index": index})
    )


def latest(instance: dg.DagsterInstance, asset: dg.AssetKey, key: str) -> dict[str, object]:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[key]), limit=1
    ).records
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


def test_a_changed_key_takes_the_latest_build_of_each_asset_along() -> None:
    """A rename moves the partition: the new key shows what the old one showed last
    (not Missing), says where it came from and the name it has now; once only."""
    old, new = partition_key("letters", SCHEMA_ID), partition_key("mail", SCHEMA_ID)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(SCHEMAS, [old])
        for asset in FAMILY:
            built(instance, old, asset, "index-1")
        built(instance, old, FAMILY[-1], "index-2")
        assert sync_partitions(instance, [new], SCHEMA_ID, {SCHEMA_ID: "mail"}) == [old]
        assert instance.get_dynamic_partitions(SCHEMAS) == [new]
        carried = {"schema_name": "mail", CARRIED_FROM: old}
        assert latest(instance, FAMILY[0], new) == {"built_from_index": "index-1", **carried}
        assert latest(instance, FAMILY[-1], new) == {"built_from_index": "index-2", **carried}
        assert carried_materializations(instance, [old], new, "mail") == []


def test_a_key_with_a_newer_build_of_its_own_takes_nothing_along() -> None:
    """A name given back (`mail`, then `letters`, then `mail` again): the older key's
    builds are carried only where they are newer than the key's own."""
    old, new = partition_key("letters", SCHEMA_ID), partition_key("mail", SCHEMA_ID)
    with dg.instance_for_test() as instance:
        built(instance, old, FAMILY[-1], "index-1")
        built(instance, new, FAMILY[-1], "index-2")
        assert carried_materializations(instance, [old], new, "mail") == []
        [carried] = carried_materializations(instance, [new], old, "letters")
        assert carried.partition == old and carried.metadata[CARRIED_FROM].value == new
