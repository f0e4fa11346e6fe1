"""Pointers that cannot go stale (issue 55): every backticked name in the package's
docstrings and comments and in `docs/` and the README that names code of this package
(`module.name`, `pipeline.index.step.run_index`, `Class.method`) resolves to something
that exists, and every backticked file name (`verify.py`, `pipeline/index/step.py`)
is a file of the repository. A move or rename that leaves a pointer behind fails here
naming the place.

What is not this package's code is named in the lists below, each with why; anything
else whose first part names no module of the package fails, so a pointer to a module
that was renamed away cannot pass as a foreign name."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

import p2panda_assets

PACKAGE = Path(p2panda_assets.__file__).resolve().parent
ROOT = PACKAGE.parent
DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
PATH = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:py|sql|md|yaml|toml|properties|jsonl|json|conf))`")

# First parts that name other libraries' code, SQL schemas and objects, not this package's.
FOREIGN = {
    "os", "sys", "re", "math", "secrets", "warnings", "object",  # Python's standard library
    "pyarrow", "psycopg", "sql", "conn",  # pyarrow; psycopg, its `sql` and a connection
    "dagster", "dg", "pandera", "df", "pgserver",  # Dagster, pandera (and its `df.pandera`)
    "p2panda", "p2panda_api", "p2panda_data", "p2panda_versions",  # SQL schemas' tables
    "SparkExitCode",  # Spark's own (Scala) exit codes
}  # fmt: skip
# Variables and placeholders the text names by a value's attribute (`plan.first`).
LOCALS = {"author", "by_log", "meta", "module", "plan", "result", "target", "state"}
# Spark's configuration keys, which look like dotted names.
SPARK_KEYS = ("spark.driver.", "spark.executor.", "spark.sql.")
# Files the product writes or PostgreSQL keeps, named in the text but not in the repository.
NOT_IN_THE_REPOSITORY = {
    "story.jsonl",  # the walkthrough's entries, written where it runs
    "pg_hba.conf",  # the embedded server's, under $P2PANDA_HOME
    "data/pg_hba.conf",
    "pandera/external_config.py",  # pandera's own
}


@cache
def modules() -> dict[str, object]:
    """Every module of the package, imported, by dotted name."""
    found: dict[str, object] = {"p2panda_assets": p2panda_assets}
    for info in pkgutil.walk_packages([str(PACKAGE)], "p2panda_assets."):
        found[info.name] = importlib.import_module(info.name)
    return found


@cache
def repository_files() -> frozenset[str]:
    """Every file's path from the root and from the package, and its bare name."""
    names: set[str] = set()
    for path in ROOT.rglob("*"):
        if path.is_file() and not {".git", ".venv", "__pycache__"} & set(path.parts):
            names |= {path.name, str(path.relative_to(ROOT))}
            if PACKAGE in path.parents:
                names.add(str(path.relative_to(PACKAGE)))
    return frozenset(names)


def has(obj: object, attributes: list[str]) -> bool:
    for attribute in attributes:
        if not hasattr(obj, attribute):
            return False
        obj = getattr(obj, attribute)
    return True


def resolves(dotted: str) -> bool | None:
    """Whether `dotted` names something of the package; None if it names no part of it
    (then it must be a foreign name)."""
    parts = dotted.split(".")
    if parts[0][0].isupper():  # a class, wherever the package defines it
        owners = [m for m in modules().values() if isinstance(getattr(m, parts[0], None), type)]
        return any(has(m, parts) for m in owners) if owners else None
    if parts[0] != "p2panda_assets":
        short = [name for name in modules() if name.rsplit(".", 1)[-1] == parts[0]]
        qualified = f"p2panda_assets.{parts[0]}"
        bases = [qualified] if qualified in modules() else short
        if not bases:
            return None
        return any(_resolves([*base.split("."), *parts[1:]]) for base in bases)
    return _resolves(parts)


def _resolves(parts: list[str]) -> bool:
    for cut in range(len(parts), 0, -1):
        module = modules().get(".".join(parts[:cut]))
        if module is not None:
            return has(module, parts[cut:])
    return False


def texts() -> Iterator[tuple[str, str]]:
    """(place, text) of each docstring and comment of the package, and each document."""
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        where = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    yield f"{where}:{getattr(node, 'lineno', 1)}", doc
        for number, line in enumerate(source.splitlines(), 1):
            if "#" in line:
                yield f"{where}:{number}", line.split("#", 1)[1]
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def stale(text: str) -> list[str]:
    """The pointers of `text` that do not resolve."""
    found = []
    for match in PATH.finditer(text):
        name = match.group(1)
        if name not in repository_files() and name not in NOT_IN_THE_REPOSITORY:
            found.append(name)
    files = {m.group(1) for m in PATH.finditer(text)}
    for match in DOTTED.finditer(text):
        dotted = match.group(1)
        if dotted in files or dotted.startswith(SPARK_KEYS):
            continue
        known = resolves(dotted)
        first = dotted.split(".")[0]
        if known is False or (known is None and first not in FOREIGN | LOCALS):
            found.append(dotted)
    return found


def test_every_pointer_resolves() -> None:
    broken = [f"{where}: `{name}`" for where, text in texts() for name in stale(text)]
    assert broken == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("`pipeline.index.step.run_index`", []),
        ("`index.pending_group`", ["index.pending_group"]),  # a module, not that name
        ("`accounts.pending_group`", []),  # the short name of pipeline.index.accounts
        ("`local_store.scan`", ["local_store.scan"]),  # no module of that name any more
        ("`SchemaHistory.version_state` and `SchemaHistory.nothing`", ["SchemaHistory.nothing"]),
        ("`pipeline/index/step.py`, `verify.py`", []),
        ("`pipeline/index.py`, `nowhere.py`", ["pipeline/index.py", "nowhere.py"]),
        ("`os.environ`, `spark.sql.shuffle.partitions`, `plan.first`", []),
    ],
)
def test_the_check_tells_stale_from_live(text: str, expected: list[str]) -> None:
    assert stale(text) == expected
