"""Partition keys (`defs.partitions`): `<registered name>.<schema id>`, the bare id without
a name. Every name a registration accepts (1..64 printable ASCII characters) makes a key
that reads back to its schema id, that Dagster accepts as a dynamic partition, and that
the UI's partition selection reads as one key. No database, no Spark."""

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
    partition_changes,
    partition_key,
    schema_id_of,
    schemas,
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
