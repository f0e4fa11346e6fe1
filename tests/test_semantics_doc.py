"""docs/semantics.md stays true: every function it names exists, every test it names
exists, rule ids are unique, and every rule id the code cites is defined there."""

from __future__ import annotations

import importlib
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "semantics.md"
AREAS = "ACEILMPRST"  # the area letters the doc's scheme defines
RULE_ID = re.compile(rf"\b[{AREAS}]-[A-Z][A-Z0-9]+(?:-[A-Z0-9]+)*\b")
HEADING = re.compile(rf"^### ([{AREAS}]-[A-Z][A-Z0-9]+(?:-[A-Z0-9]+)*):", re.MULTILINE)
CODE = re.compile(r"^- code: `([\w.]+)`$", re.MULTILINE)
TESTS = re.compile(r"^- tests: (.+)$", re.MULTILINE)


def rules() -> dict[str, tuple[list[str], list[str]]]:
    """Rule id -> (functions under `code:`, tests under `tests:`)."""
    text = DOC.read_text(encoding="utf-8")
    found: dict[str, tuple[list[str], list[str]]] = {}
    sections = HEADING.split(text)[1:]
    for rule_id, body in zip(sections[::2], sections[1::2], strict=True):
        tests = [t for line in TESTS.findall(body) for t in re.findall(r"`(\w+)`", line)]
        found[rule_id] = (CODE.findall(body), tests)
    return found


def resolve(dotted: str) -> object:
    """`module.function` (or `module.Class.method`) under `p2panda_assets`."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            target: object = importlib.import_module("p2panda_assets." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name)
        return target
    raise ModuleNotFoundError(dotted)


def python_files() -> list[Path]:
    return sorted([*(ROOT / "p2panda_assets").rglob("*.py"), *(ROOT / "tests").rglob("*.py")])


def comment_and_string_text(path: Path) -> str:
    """The comments and string literals (docstrings among them) of a Python file."""
    source = path.read_text(encoding="utf-8")
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return "\n".join(t.string for t in tokens if t.type in (tokenize.COMMENT, tokenize.STRING))


def test_rule_ids_are_unique_and_follow_the_scheme() -> None:
    headings = HEADING.findall(DOC.read_text(encoding="utf-8"))
    assert headings, "no rule found in docs/semantics.md"
    duplicates = sorted({r for r in headings if headings.count(r) > 1})
    assert duplicates == []


def test_every_rule_names_one_function_and_its_tests() -> None:
    for rule_id, (functions, tests) in rules().items():
        assert len(functions) == 1, f"{rule_id} names {len(functions)} functions"
        assert tests, f"{rule_id} names no test"


@pytest.mark.parametrize("rule_id", sorted(rules()))
def test_the_function_a_rule_names_exists(rule_id: str) -> None:
    for dotted in rules()[rule_id][0]:
        assert callable(resolve(dotted)) or isinstance(resolve(dotted), property), dotted


def test_every_test_the_doc_names_exists() -> None:
    defined = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        defined.update(re.findall(r"^\s*def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
    missing = {
        (rule_id, test)
        for rule_id, (_, tests) in rules().items()
        for test in tests
        if test not in defined
    }
    assert sorted(missing) == []


def test_every_rule_id_cited_in_the_code_is_defined_in_the_doc() -> None:
    defined = set(rules())
    undefined = {
        (str(path.relative_to(ROOT)), cited)
        for path in python_files()
        if path.name != "test_semantics_doc.py"  # its own patterns are no citations
        for cited in RULE_ID.findall(comment_and_string_text(path))
        if cited not in defined
    }
    assert sorted(undefined) == []


def test_the_code_cites_no_document_the_repository_does_not_hold() -> None:
    outside = re.compile(r"SPEC section|\b[Tt]he seeds\b|\bMentat\b")
    cited = {
        str(path.relative_to(ROOT))
        for path in python_files()
        if path.name != "test_semantics_doc.py" and outside.search(comment_and_string_text(path))
    }
    assert sorted(cited) == []
