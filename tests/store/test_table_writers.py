"""Each `p2panda.*` table is written from one module of the store, named after it, as
aquadoggo's `db/stores` (issue 48): a statement that writes a table (INSERT INTO, UPDATE,
DELETE FROM, MERGE INTO, TRUNCATE, COPY ... FROM) anywhere else in the package fails
here, with both places named. Transactions that change several tables call the writers.

The package's Python source is read as text, the way `grep` reads it, but through its
syntax tree: every string literal (multi-line strings, `sql.SQL` text, f-strings with
their placeholders, literals joined by `+`) is searched; docstrings, which only describe,
are not. A table named through `sql.Identifier("p2panda", ...)` would hide a write from
the search, so the tables are named in the SQL text. `ddl.sql` (schema and migrations)
is not Python and not searched."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path

import p2panda_assets

PACKAGE = Path(p2panda_assets.__file__).resolve().parent
ROOT = PACKAGE.parent
DDL = PACKAGE / "store" / "ddl.sql"

# Table (in schema p2panda) -> the one module that writes it.
WRITERS = {
    "accounts": "p2panda_assets/store/accounts.py",
    "checked_layers": "p2panda_assets/store/checked_layers.py",
    "checked_tables": "p2panda_assets/store/checked_tables.py",
    "deleted_instances": "p2panda_assets/store/deleted_instances.py",
    "entries": "p2panda_assets/store/ingest.py",
    "index_state": "p2panda_assets/store/index_state.py",
    "ingest_sources": "p2panda_assets/store/ingest_sources.py",
    "layer_digests": "p2panda_assets/store/layer_digests.py",
    "logs": "p2panda_assets/store/logs.py",
    "message_index": "p2panda_assets/store/message_index.py",
    "pipeline_lock_holder": "p2panda_assets/store/pipeline_lock.py",
    "entries_claim": "p2panda_assets/store/entry_claims.py",
    "pipeline_state": "p2panda_assets/store/pipeline_state.py",
    "schema_versions": "p2panda_assets/store/schema_versions.py",
    "schemas": "p2panda_assets/store/schemas.py",
}

# `p2panda.<table>`, the names quoted or not; `{` stands for a name filled in later.
_TABLE = r'(?:ONLY\s+)?"?p2panda"?\s*\.\s*(?:"?(\w+)"?|(\{))'
_WRITE = re.compile(
    rf"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|MERGE\s+INTO)\s+{_TABLE}"
    rf"|\bCOPY\s+{_TABLE}\s*(?:\([^)]*\)\s*)?FROM\b",
    re.IGNORECASE,
)
_TRUNCATE = re.compile(rf"\bTRUNCATE\s+(?:TABLE\s+)?((?:{_TABLE}\s*,\s*)*{_TABLE})", re.IGNORECASE)
_NAMED = re.compile(_TABLE, re.IGNORECASE)

Place = tuple[str, int]  # module path (from the repository's root), line


def written_tables(text: str) -> list[str]:
    """The `p2panda.*` tables a piece of SQL writes (`{` for one named by a placeholder)."""
    found = [m.group(1) or m.group(2) or m.group(3) or m.group(4) for m in _WRITE.finditer(text)]
    for statement in _TRUNCATE.finditer(text):
        found += [n.group(1) or n.group(2) for n in _NAMED.finditer(statement.group(1))]
    return [table.lower() for table in found]


def string_texts(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """(text, line) of each string literal of a module but its docstrings: constants,
    f-strings (each placeholder as `{}`), and literals joined with `+`."""
    described = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in described:
                yield node.value, node.lineno
        elif isinstance(node, ast.JoinedStr):
            yield _joined(node), node.lineno
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            text = _literal_sum(node)
            if text is not None:
                yield text, node.lineno


def _joined(node: ast.JoinedStr) -> str:
    return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)


def _literal_sum(node: ast.expr) -> str | None:
    """The text of `a + b + ...` when every term is a string literal, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return _joined(node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_sum(node.left), _literal_sum(node.right)
        return None if left is None or right is None else left + right
    return None


def writes_in(sources: Mapping[str, str]) -> dict[str, set[Place]]:
    """Table -> where it is written, over `sources` (module path -> its text)."""
    found: dict[str, set[Place]] = defaultdict(set)
    for path, source in sources.items():
        for text, line in string_texts(ast.parse(source)):
            for table in written_tables(text):
                found[table].add((path, line))
    return dict(found)


def misplaced(found: Mapping[str, set[Place]], writers: Mapping[str, str]) -> list[str]:
    """What breaks the rule, a line each: a table written from a module not its
    writer's, or written with no writer named here."""
    problems = []
    for table, places in sorted(found.items()):
        writer = writers.get(table)
        others = sorted((path, line) for path, line in places if path != writer)
        if not others:
            continue
        where = ", ".join(f"{path}:{line}" for path, line in others)
        if writer is None:
            problems.append(f"p2panda.{table} is written from {where}, and WRITERS names none")
        else:
            problems.append(
                f"p2panda.{table} is written from {where}, not only from its writer {writer}:"
                " call a function of the writer instead"
            )
    return problems


def package_sources() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_each_table_is_written_from_its_one_module() -> None:
    assert misplaced(writes_in(package_sources()), WRITERS) == []


def test_each_writer_writes_its_table() -> None:
    found = writes_in(package_sources())
    stale = {
        table: path
        for table, path in WRITERS.items()
        if path not in {where for where, _ in found.get(table, set())}
    }
    assert stale == {}, "these modules no longer write the table WRITERS gives them"


def test_the_writers_are_of_tables_the_schema_creates() -> None:
    created = set(re.findall(r"CREATE TABLE IF NOT EXISTS p2panda\.(\w+)", DDL.read_text()))
    assert set(WRITERS) <= created


def test_no_product_table_is_named_through_an_identifier() -> None:
    """`sql.Identifier("p2panda", "<table>")` in a statement is not found by the search
    above (nor by grep): name the table in the SQL text."""
    named = []
    for path, source in package_sources().items():
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and _callee(node) == "Identifier"):
                continue
            literals = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if (literals[:1] == ["p2panda"] and len(literals) > 1) or any(
                isinstance(v, str) and v.startswith("p2panda.") for v in literals
            ):
                named.append(f"{path}:{node.lineno}")
    assert named == []


def _callee(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return node.func.id if isinstance(node.func, ast.Name) else None


# The search itself, on sources made up for it: it must find a write in every form the
# package writes one, and nothing else.

ELSEWHERE = '''
"""A module's docstring: it may say UPDATE p2panda.logs, which writes nothing."""
from psycopg import sql

A = """
    INSERT INTO p2panda.accounts AS a
        (hash, origin)
"""
B = sql.SQL("DELETE FROM p2panda.deleted_instances WHERE schema_id = {}").format(x)
C = f"""WITH w AS (UPDATE "p2panda"."schemas" SET x = 1 FROM {STAGE}) SELECT 1"""
D = "COPY p2panda.logs (author, log_id) " + "FROM STDIN"
E = "merge into p2panda.entries e USING s ON true"
F = "TRUNCATE TABLE p2panda.index_state, ONLY p2panda.layer_digests"
G = f"DELETE FROM p2panda.{table}"
READS = [
    "COPY (SELECT hash FROM p2panda.entries) TO STDOUT",
    "COPY p2panda.logs TO STDOUT",
    "SELECT * FROM p2panda.schemas WHERE schema_id = %s FOR UPDATE",
    "INSERT INTO p2panda_data.s_1 SELECT * FROM p2panda.accounts",
    "ON CONFLICT (id) DO UPDATE SET batch = EXCLUDED.batch",
]
'''


def test_the_search_finds_a_write_in_every_form() -> None:
    found = writes_in({"p2panda_assets/elsewhere.py": ELSEWHERE})
    assert {table: sorted(line for _, line in places) for table, places in found.items()} == {
        "accounts": [5],
        "deleted_instances": [9],
        "schemas": [10],
        "logs": [11],
        "entries": [12],
        "index_state": [13],
        "layer_digests": [13],
        "{": [14],
    }


def test_a_write_outside_its_writer_names_both_places() -> None:
    found = {table: {(path, 1)} for table, path in WRITERS.items()}
    found["accounts"].add(("p2panda_assets/store/tables.py", 200))
    assert misplaced(found, WRITERS) == [
        "p2panda.accounts is written from p2panda_assets/store/tables.py:200, not only from"
        " its writer p2panda_assets/store/accounts.py: call a function of the writer instead"
    ]
    found["stage_x"] = {("p2panda_assets/pipeline/postgres/copy.py", 9)}
    assert misplaced(found, WRITERS)[1:] == [
        "p2panda.stage_x is written from p2panda_assets/pipeline/postgres/copy.py:9,"
        " and WRITERS names none"
    ]
