"""SQL only in `store/` (issue 55): no module outside it runs a statement on a
PostgreSQL connection (`.execute(`, `.executemany(`, a cursor's `.copy(` of a statement)
or composes one (`sql.SQL(`). The rest of the package asks `store/` by name, so every
statement on the product's tables is found in one folder. Read through each module's
syntax tree, as `test_table_writers` reads it: a call in a docstring does not count."""

from __future__ import annotations

import ast
from pathlib import Path

import p2panda_assets

PACKAGE = Path(p2panda_assets.__file__).resolve().parent
STORE = PACKAGE / "store"
RUNS = {"execute", "executemany"}


def statements(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each call that runs or composes SQL."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, node.func.value
        if name in RUNS:
            found.append((node.lineno, f".{name}("))
        elif name == "copy" and node.args:  # cursor.copy(statement); dict.copy() takes none
            found.append((node.lineno, ".copy("))
        elif name == "SQL" and isinstance(owner, ast.Name) and owner.id == "sql":
            found.append((node.lineno, "sql.SQL("))
    return found


def outside_store() -> list[str]:
    places = []
    for module in sorted(PACKAGE.rglob("*.py")):
        if STORE in module.parents:
            continue
        tree = ast.parse(module.read_text(encoding="utf-8"))
        where = module.relative_to(PACKAGE.parent)
        places += [f"{where}:{line}: {what}" for line, what in statements(tree)]
    return places


def test_no_sql_outside_the_store() -> None:
    assert outside_store() == []


def test_the_search_finds_each_form() -> None:
    tree = ast.parse(
        "conn.execute('SELECT 1')\n"
        "cur.executemany(q, rows)\n"
        "with conn.cursor().copy(statement) as copy: pass\n"
        "sql.SQL('SELECT {}').format(name)\n"
        "settings.copy()\n"
        '"""conn.execute(x) in a docstring"""\n'
    )
    assert statements(tree) == [
        (1, ".execute("),
        (2, ".executemany("),
        (3, ".copy("),
        (4, "sql.SQL("),
    ]
