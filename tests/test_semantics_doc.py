"""docs/semantics.md stays true, both ways: every function it names (under `code:` and
`also:`) exists and cites its rule id in its docstring, every test it names exists, rule
ids are unique, and every rule id the code cites is defined there."""

from __future__ import annotations

import importlib
import inspect
import io
import re
import tokenize
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "semantics.md"
AREAS = "ACEILMPRST"  # the area letters the doc's scheme defines
RULE_ID = re.compile(rf"\b[{AREAS}]-[A-Z][A-Z0-9]+(?:-[A-Z0-9]+)*\b")
HEADING = re.compile(rf"^### ([{AREAS}]-[A-Z][A-Z0-9]+(?:-[A-Z0-9]+)*):", re.MULTILINE)
CODE = re.compile(r"^- code: `([\w.]+)`$", re.MULTILINE)
TESTS = re.compile(r"^- tests: (.+)$", re.MULTILINE)
# `- also: `module.function` (what it is); kept equal by `test_a`, `test_b``: another
# implementation of the rule, and the tests that keep it equal to the `code:` function.
ALSO = re.compile(r"^- also: (.+)$", re.MULTILINE)
DOTTED = re.compile(r"`(\w+(?:\.\w+)+)`")
TEST_NAME = re.compile(r"`(test_\w+)`")


class Rule(NamedTuple):
    code: list[str]  # the function under `code:`
    tests: list[str]  # the tests under `tests:`
    also: list[tuple[list[str], list[str]]]  # each `also:` line: (functions, its tests)

    @property
    def functions(self) -> list[str]:
        """Every function the rule names, under `code:` and `also:`."""
        return [*self.code, *(f for functions, _ in self.also for f in functions)]

    @property
    def all_tests(self) -> list[str]:
        return [*self.tests, *(t for _, tests in self.also for t in tests)]


def rules() -> dict[str, Rule]:
    """Rule id -> what its section names."""
    text = DOC.read_text(encoding="utf-8")
    found: dict[str, Rule] = {}
    sections = HEADING.split(text)[1:]
    for rule_id, body in zip(sections[::2], sections[1::2], strict=True):
        tests = [t for line in TESTS.findall(body) for t in re.findall(r"`(\w+)`", line)]
        also = [(DOTTED.findall(line), TEST_NAME.findall(line)) for line in ALSO.findall(body)]
        found[rule_id] = Rule(CODE.findall(body), tests, also)
    return found


def resolve(dotted: str) -> object:
    """`module.function` (or `module.Class.method`) under `p2panda_assets`."""
    return _resolve(dotted)[1]


def _resolve(dotted: str) -> tuple[str, object]:
    """(the file of the module that holds it, relative to the repository; the object)."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module("p2panda_assets." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        target: object = module
        for name in parts[cut:]:
            target = getattr(target, name)
        path = Path(inspect.getfile(module)).resolve().relative_to(ROOT)
        return str(path), target
    raise ModuleNotFoundError(dotted)


def named_functions() -> list[tuple[str, str]]:
    """(rule id, function) for every function the doc names, under `code:` and `also:`."""
    return [(rule_id, f) for rule_id, rule in rules().items() for f in rule.functions]


def cites(dotted: str, rule_id: str) -> bool:
    """Whether the docstring of `dotted` cites `rule_id` (a property's: its getter's)."""
    doc = getattr(resolve(dotted), "__doc__", None) or ""
    return rule_id in RULE_ID.findall(doc)


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
    for rule_id, rule in rules().items():
        assert len(rule.code) == 1, f"{rule_id} names {len(rule.code)} functions"
        assert rule.tests, f"{rule_id} names no test"


def test_every_also_line_names_an_implementation_and_the_tests_that_keep_it_equal() -> None:
    for rule_id, rule in rules().items():
        for functions, tests in rule.also:
            assert functions, f"{rule_id}: an `also:` line names no function"
            assert tests, f"{rule_id}: an `also:` line names no test keeping {functions} equal"
            assert not set(functions) & set(rule.code), f"{rule_id}: `also:` repeats `code:`"


@pytest.mark.parametrize("rule_id", sorted(rules()))
def test_the_function_a_rule_names_exists(rule_id: str) -> None:
    for dotted in rules()[rule_id].functions:
        assert callable(resolve(dotted)) or isinstance(resolve(dotted), property), dotted


def test_every_function_the_doc_names_cites_its_rule_id() -> None:
    silent = sorted(
        (_resolve(dotted)[0], dotted, rule_id)
        for rule_id, dotted in named_functions()
        if not cites(dotted, rule_id)
    )
    assert silent == [], "cite the rule id in these docstrings"


def test_every_test_the_doc_names_exists() -> None:
    defined = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        defined.update(re.findall(r"^\s*def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
    missing = {
        (rule_id, test)
        for rule_id, rule in rules().items()
        for test in rule.all_tests
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
    """Neither the code nor the documents cite the contract or the design documents the
    product was made from, which live beside the repository, not in it."""
    outside = re.compile(r"\bSPEC\b|\b[Tt]he seeds\b|\bMentat\b")
    cited = {
        str(path.relative_to(ROOT))
        for path in python_files()
        if path.name != "test_semantics_doc.py" and outside.search(comment_and_string_text(path))
    }
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    cited |= {str(doc.relative_to(ROOT)) for doc in documents if outside.search(doc.read_text())}
    assert sorted(cited) == []
