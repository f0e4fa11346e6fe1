"""RE2 validation: search semantics, untrusted patterns, never backtracking."""

from __future__ import annotations

import pickle
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2panda_assets.engine import validation as validation_module
from p2panda_assets.engine.validation import Validation, compile_validation, validates
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.fieldtypes import FieldType

SLOTHMAIL = r"^[^#\r\n].*$"


def ft(text: str) -> FieldType:
    return FieldType.parse(text)


def test_slothmail_multi_line_subject_fails_and_single_line_passes() -> None:
    subject = compile_validation(SLOTHMAIL)
    assert not validates("Hello!\n...friend", ft("varchar"), subject)
    assert validates("Hello! ...friend", ft("varchar"), subject)
    assert not validates("# Hello", ft("text"), subject)


def test_validation_is_search_anchored_only_by_the_pattern() -> None:
    assert compile_validation("b").matches("abc")
    assert not compile_validation("^b").matches("abc")
    assert not compile_validation("b$").matches("abc")
    assert compile_validation("^abc$").matches("abc")


def test_caret_and_dollar_anchor_the_whole_text_unless_multi_line() -> None:
    assert not compile_validation("^b$").matches("a\nb\nc")
    assert compile_validation("(?m)^b$").matches("a\nb\nc")
    assert not compile_validation("a$").matches("a\n")  # unlike Python's `re`


def test_dot_does_not_match_newline_unless_dot_all() -> None:
    assert not compile_validation("^a.b$").matches("a\nb")
    assert compile_validation("(?s)^a.b$").matches("a\nb")


def test_dot_and_counts_are_code_points_not_bytes() -> None:
    assert compile_validation("^.{3}$").matches("äöü")
    assert compile_validation(r"^\p{L}+$").matches("Faultier")


@pytest.mark.parametrize(
    "pattern",
    ["(", "[a-", "a{1001}", "(a{100}){100}", "(?=a)", "(?!a)", r"\1", "\ud800", r"[\p{L}]{1000}"],
)
def test_invalid_or_oversized_patterns_are_bad_validation(pattern: str) -> None:
    with pytest.raises(P2pandaError) as caught:
        compile_validation(pattern)
    assert caught.value.reason is Reason.BAD_VALIDATION


def test_a_pattern_that_is_not_text_is_bad_validation() -> None:
    with pytest.raises(P2pandaError) as caught:
        compile_validation(b"a")  # type: ignore[arg-type]
    assert caught.value.reason is Reason.BAD_VALIDATION


def test_bad_patterns_are_not_logged_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(P2pandaError):
        compile_validation("(unclosed")
    assert capfd.readouterr().err == ""


@settings(max_examples=200, deadline=None)
@given(pattern=st.text(max_size=30))
def test_any_text_pattern_compiles_or_is_bad_validation(pattern: str) -> None:
    try:
        compiled = compile_validation(pattern)
    except P2pandaError as error:
        assert error.reason is Reason.BAD_VALIDATION
    else:
        compiled.matches("some text\nand more")


def test_catastrophic_backtracking_pattern_runs_in_linear_time() -> None:
    compiled = compile_validation("(a+)+$")
    started = time.perf_counter()
    assert compiled.matches("a" * 50_000 + "b") is False
    assert time.perf_counter() - started < 1.0


def test_author_patterns_never_reach_pythons_backtracking_re() -> None:
    assert "re" not in vars(validation_module)


def test_compiled_patterns_are_cached() -> None:
    assert compile_validation("^cached$") is compile_validation("^cached$")


def test_compiled_validation_pickles_as_its_pattern() -> None:
    compiled = compile_validation(SLOTHMAIL)
    restored = pickle.loads(pickle.dumps(compiled))
    assert isinstance(restored, Validation)
    assert restored == compiled
    assert not restored.matches("a\nb")


def test_null_and_missing_validation_pass() -> None:
    subject = compile_validation("^x$")
    assert validates(None, ft("text"), subject)
    assert validates("anything", ft("text"), None)


@pytest.mark.parametrize(
    ("value", "ftype"),
    [(5, "integer"), (b"x", "blob"), (True, "boolean"), ("ab" * 33, "relation"), ((1,), "float[]")],
)
def test_types_other_than_varchar_and_text_always_pass(value: object, ftype: str) -> None:
    assert validates(value, ft(ftype), compile_validation("^never$"))


def test_every_array_element_must_validate() -> None:
    digits = compile_validation("^[0-9]+$")
    assert validates(("1", "22"), ft("text[]"), digits)
    assert not validates(("1", "x"), ft("varchar[]"), digits)
    assert validates((), ft("text[]"), digits)
