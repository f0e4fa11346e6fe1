"""Every per-type table covers every field type (issue 48; docs/adding-a-field-type.md).

The one list of field types is `protocol.fieldtypes.BaseType` (rule M-TYPE). A type
added there but missed in one table fails far from here (a KeyError in a Spark worker,
a COPY psycopg cannot dump); this test names the table instead. It reads the real
tables, imported, and finds them by reading the package's source: any mapping or set
keyed by field types in a module is one of `CHECKED`, so a new table cannot be missed
by this test either.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.pq import Format

import p2panda_assets
from p2panda_assets.engine import conversion, validation, values
from p2panda_assets.pipeline.build.columns import PG_TYPES, SPARK_TYPES, pg_type
from p2panda_assets.protocol.fieldtypes import BaseType, FieldType
from p2panda_assets.store.columns import format_type_spelling
from p2panda_assets.store.copying import copy_type

PACKAGE = Path(p2panda_assets.__file__).resolve().parent
DOCS = PACKAGE.parent / "docs"
EVERY_TYPE = [FieldType(base, is_array) for base in BaseType for is_array in (False, True)]
TEXT = BaseType.TEXT


def covers_every_type(table: object) -> list[str]:
    """A mapping keyed by base type: the types it lacks."""
    assert isinstance(table, dict)
    return [str(base) for base in BaseType if base not in table]


def converts_through_text(table: object) -> list[str]:
    """`conversion.SCALAR_RULES`: each type converts to itself, to text (rule C-CONVERT:
    anything has a canonical text), and from text (how `panda publish --field` and the
    definitions' text values reach every type: authoring/values.py)."""
    assert isinstance(table, dict)
    needed = [(base, other) for base in BaseType for other in {base, TEXT}]
    needed += [(TEXT, base) for base in BaseType]
    return [f"{source} -> {target}" for source, target in needed if (source, target) not in table]


def some_of_the_types(table: object) -> list[str]:
    """A set of some base types by design (`validation.VALIDATED_BASES`: the text types
    a pattern searches); it must still name only real ones."""
    assert isinstance(table, frozenset) and table
    return [str(base) for base in table if base not in set(BaseType)]


# Every per-type table of the package, by dotted name, with what it must hold.
CHECKED: dict[str, Callable[[object], list[str]]] = {
    "p2panda_assets.engine.values._INTERPRETERS": covers_every_type,  # raw -> value
    "p2panda_assets.engine.values._JSON": covers_every_type,  # `panda preview`
    "p2panda_assets.engine.conversion.SCALAR_RULES": converts_through_text,
    "p2panda_assets.engine.validation.VALIDATED_BASES": some_of_the_types,
    "p2panda_assets.pipeline.build.columns.PG_TYPES": covers_every_type,
    "p2panda_assets.pipeline.build.columns.SPARK_TYPES": covers_every_type,  # the table checks
}


def imported(dotted: str) -> object:
    """The object at `module.NAME`, from the imported module."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("dotted", sorted(CHECKED))
def test_every_per_type_table_covers_every_field_type(dotted: str) -> None:
    missing = CHECKED[dotted](imported(dotted))
    assert missing == [], f"{dotted} lacks {', '.join(missing)} (docs/adding-a-field-type.md)"


def test_the_checked_tables_are_the_ones_the_tests_import() -> None:
    """The names in `CHECKED` are the very objects this file imports: a table renamed
    or moved fails here, not silently."""
    assert imported("p2panda_assets.engine.conversion.SCALAR_RULES") is conversion.SCALAR_RULES
    assert imported("p2panda_assets.engine.validation.VALIDATED_BASES") is (
        validation.VALIDATED_BASES
    )
    assert imported("p2panda_assets.engine.values._JSON") is values._JSON
    assert imported("p2panda_assets.pipeline.build.columns.PG_TYPES") is PG_TYPES
    assert imported("p2panda_assets.pipeline.build.columns.SPARK_TYPES") is SPARK_TYPES


# --- finding the tables in the source ------------------------------------------------


def base_type_aliases(tree: ast.Module) -> set[str]:
    """Module-level names bound to a member (`VARCHAR = BaseType.VARCHAR`)."""
    return {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign) and names_a_base_type(node.value, set())
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def names_a_base_type(node: ast.AST, aliases: set[str]) -> bool:
    """`BaseType.X`, `BaseType` itself (iterated), or an alias of a member."""
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id == "BaseType"
    return isinstance(node, ast.Name) and (node.id == "BaseType" or node.id in aliases)


def keys_of(node: ast.AST) -> list[ast.AST]:
    """What a dict, set or their comprehensions are keyed by (a `**` entry's dict too)."""
    if isinstance(node, ast.Dict):
        return [
            key if key is not None else value
            for key, value in zip(node.keys, node.values, strict=True)
        ]
    if isinstance(node, ast.DictComp):
        return [node.key, *node.generators]
    if isinstance(node, ast.Set):
        return list(node.elts)
    if isinstance(node, ast.SetComp):
        return [node.elt, *node.generators]
    return []


def is_keyed_by_field_type(node: ast.AST, aliases: set[str]) -> bool:
    return any(names_a_base_type(part, aliases) for key in keys_of(node) for part in ast.walk(key))


def per_type_tables(source: str, module: str) -> Iterator[str]:
    """The dotted names of the module-level tables keyed by field type in `source`; one
    anywhere else (in a function, or not bound to one name) as `module:line`."""
    tree = ast.parse(source)
    aliases = base_type_aliases(tree)
    for statement in tree.body:
        found = [
            n
            for n in ast.walk(statement)
            if isinstance(n, ast.expr) and is_keyed_by_field_type(n, aliases)
        ]
        if not found:
            continue
        targets = (
            statement.targets
            if isinstance(statement, ast.Assign)
            else [statement.target]
            if isinstance(statement, ast.AnnAssign)
            else []
        )
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            yield f"{module}.{targets[0].id}"
        else:
            yield from (f"{module}:{node.lineno}" for node in found)


def package_tables() -> set[str]:
    """Every table keyed by field type in the package's source."""
    found: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.update(per_type_tables(path.read_text(encoding="utf-8"), module))
    return found


def test_every_table_keyed_by_field_type_is_checked_here() -> None:
    unchecked = package_tables() - set(CHECKED)
    assert unchecked == set(), f"add to CHECKED in {Path(__file__).name}: {sorted(unchecked)}"
    assert set(CHECKED) <= package_tables(), "CHECKED names a table the package lacks"


def test_the_table_finder_sees_the_forms_tables_take() -> None:
    source = """
ALIAS = BaseType.BLOB
DIRECT = {BaseType.TEXT: 1}
PAIRS = {**{(b, b): 0 for b in BaseType}, (ALIAS, ALIAS): 1}
SOME: frozenset = frozenset({BaseType.TEXT})
OTHER = {"text": 1}
def later():
    return {BaseType.TEXT: 2}
"""
    assert sorted(per_type_tables(source, "m")) == ["m.DIRECT", "m.PAIRS", "m.SOME", "m:8"]


# --- what the tables feed: PostgreSQL's side, the parser, the docs -----------------------


@pytest.mark.parametrize("ftype", EVERY_TYPE, ids=str)
def test_psycopg_can_copy_every_type_in_binary(ftype: FieldType) -> None:
    """store/copying.py names each column's type to psycopg's binary COPY as
    `copy_type` spells it: psycopg must know the name and dump it in binary."""
    oid = psycopg.adapters.types.get_oid(copy_type(pg_type(ftype)))
    assert psycopg.adapters.get_dumper_by_oid(oid, Format.BINARY) is not None


@pytest.mark.parametrize("ftype", EVERY_TYPE, ids=str)
def test_every_column_type_is_compared_in_format_types_spelling(ftype: FieldType) -> None:
    """store/columns.py compares declared columns in `format_type`'s spelling (the table
    checks); PostgreSQL's name for the type, as psycopg records it, must be that."""
    spelled = format_type_spelling(pg_type(ftype))
    name = re.sub(r"\(.*\)", "", spelled.removesuffix("[]"))
    info = psycopg.adapters.types.get(copy_type(pg_type(ftype)))
    assert info is not None and name == info.regtype
    assert spelled.endswith("[]") == ftype.is_array


@pytest.mark.parametrize("ftype", EVERY_TYPE, ids=str)
def test_messages_accept_every_type(ftype: FieldType) -> None:
    assert FieldType.parse(str(ftype)) == ftype


def section(text: str, heading: str) -> str:
    """The text of a `### ` section of docs/semantics.md, up to the next heading, on one
    line (the doc wraps its lines anywhere)."""
    start = text.index(f"### {heading}")
    end = text.find("\n#", start + 1)
    return " ".join(text[start : end if end != -1 else None].split())


def test_the_docs_list_every_type() -> None:
    semantics = (DOCS / "semantics.md").read_text(encoding="utf-8")
    listed = re.findall(r"`(\w+)`", section(semantics, "M-TYPE").split(" - code:")[0])
    assert listed == [str(base) for base in BaseType]
    column_types = dict(re.findall(r"(\w+) -> `([^`]+)`", section(semantics, "T-TYPE")))
    assert column_types == {str(base): pg for base, pg in PG_TYPES.items()}
    definitions = (DOCS / "definitions.md").read_text(encoding="utf-8")
    type_row = next(line for line in definitions.splitlines() if line.startswith("| `type` |"))
    named = re.findall(r"`(\w+)`", type_row.split("|")[2].split(". ")[0])  # its first sentence
    assert named == [str(base) for base in BaseType]
