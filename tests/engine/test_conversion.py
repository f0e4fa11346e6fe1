"""Conversion is total, never guesses, and matches its documented table."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2panda_assets.engine.conversion import (
    SCALAR_RULES,
    ConversionFailed,
    convert,
    convert_raw,
    convert_scalar,
    is_lossless,
    render_conversion_table,
)
from p2panda_assets.engine.values import interpret, to_raw
from p2panda_assets.protocol.fieldtypes import INTEGER_MAX, INTEGER_MIN, BaseType, FieldType
from p2panda_assets.protocol.hashing import HashAlgorithm

DOC = Path(__file__).resolve().parents[2] / "docs" / "conversion.md"
YASMF = HashAlgorithm.YASMF.hash(b"an entry")
YAMF = HashAlgorithm.YAMF.hash(b"an entry")
MOMENT = datetime(2020, 5, 22, 11, 58, 50, tzinfo=UTC)
EPOCH_SECONDS = 1590148730  # MOMENT

V, T, INT, F = BaseType.VARCHAR, BaseType.TEXT, BaseType.INTEGER, BaseType.FLOAT
B, BO, TS, R = BaseType.BLOB, BaseType.BOOLEAN, BaseType.TIMESTAMP, BaseType.RELATION
ALL_PAIRS = [(s, t) for s in BaseType for t in BaseType]


def ft(text: str) -> FieldType:
    return FieldType.parse(text)


def same(a: object, b: object) -> bool:
    """Value identity: same type, NaN equals NaN, -0.0 differs from 0.0."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


# --- one success per listed pair ------------------------------------------------------

SUCCESS: dict[tuple[BaseType, BaseType], tuple[object, object]] = {
    (V, V): ("a", "a"),
    (V, T): ("a", "a"),
    (V, INT): ("-42", -42),
    (V, F): ("2.5", 2.5),
    (V, B): ("00Ff", b"\x00\xff"),
    (V, BO): ("true", True),
    (V, TS): ("2020-05-22T11:58:50+0000", MOMENT),
    (V, R): (YASMF.hex().upper(), YASMF.hex()),
    (T, V): ("x" * 255, "x" * 255),
    (T, T): ("a", "a"),
    (T, INT): ("+007", 7),
    (T, F): ("1e+20", 1e20),
    (T, B): ("", b""),
    (T, BO): ("false", False),
    (T, TS): ("2020-05-22T13:58:50+02:00", MOMENT),
    (T, R): (YAMF.hex(), YAMF.hex()),
    (INT, V): (-42, "-42"),
    (INT, T): (INTEGER_MIN, str(INTEGER_MIN)),
    (INT, INT): (5, 5),
    (INT, F): (2**53, float(2**53)),
    (INT, BO): (1, True),
    (INT, TS): (EPOCH_SECONDS, MOMENT),
    (F, V): (4.5, "4.5"),
    (F, T): (math.inf, "Infinity"),
    (F, INT): (-3.0, -3),
    (F, F): (0.5, 0.5),
    (B, V): (b"\x00\xff", "00ff"),
    (B, T): (b"\xab", "ab"),
    (B, B): (b"x", b"x"),
    (B, R): (YASMF, YASMF.hex()),
    (BO, V): (True, "true"),
    (BO, T): (False, "false"),
    (BO, INT): (True, 1),
    (BO, BO): (True, True),
    (TS, V): (MOMENT, "2020-05-22T11:58:50Z"),
    (TS, T): (MOMENT.replace(microsecond=5), "2020-05-22T11:58:50.000005Z"),
    (TS, INT): (MOMENT, EPOCH_SECONDS),
    (TS, TS): (MOMENT, MOMENT),
    (R, V): (YAMF.hex(), YAMF.hex()),
    (R, T): (YASMF.hex(), YASMF.hex()),
    (R, B): (YASMF.hex(), YASMF),
    (R, R): (YASMF.hex(), YASMF.hex()),
}

# --- failures: at least one for every pair that is not lossless -----------------------

FAILURE: dict[tuple[BaseType, BaseType], list[object]] = {
    (V, INT): ["12abc", " 12", "12 ", "1_000", "١٢", "", "+", "1.0", "9223372036854775808"],
    (V, F): ["nan", "inf", "1e400", "1e-400", " 1.5", "1_0.5", "0x1p3", "", "."],
    (V, B): ["abc", "0x00", "zz", "00 ff"],
    (V, BO): ["True", "1", "yes", " true"],
    (V, TS): ["2020-05-22T11:58:50", "yesterday"],
    (V, R): ["00", YASMF.hex() + "00", "xyz"],
    (T, V): ["x" * 256],
    (T, INT): ["12abc", " 12", "-9223372036854775809", "0" * 30 + "9" * 20],
    (T, F): ["NAN", "Inf", "-nan", "1e999999"],
    (T, B): ["0"],
    (T, BO): ["TRUE"],
    (T, TS): ["2020-05-22"],
    (T, R): [YASMF.hex()[:-2]],
    (INT, F): [2**53 + 1, INTEGER_MAX],
    (INT, BO): [2, -1],
    (INT, TS): [2**62, -(2**62), 253402300800],
    (F, INT): [2.5, math.nan, math.inf, -math.inf, 2.0**63, -(2.0**64)],
    (B, V): [b"\x00" * 128],
    (B, R): [b"", b"\x00\x20", YASMF + b"\x00"],
    (TS, INT): [MOMENT.replace(microsecond=1)],
}


def test_examples_cover_every_pair_of_the_table() -> None:
    assert set(SUCCESS) == set(SCALAR_RULES)
    conditional = {pair for pair, rule in SCALAR_RULES.items() if not rule.lossless}
    assert conditional <= set(FAILURE) <= set(SCALAR_RULES)


@pytest.mark.parametrize("pair", list(SUCCESS), ids=lambda p: f"{p[0]}->{p[1]}")
def test_every_listed_pair_converts_by_its_rule(pair: tuple[BaseType, BaseType]) -> None:
    value, expected = SUCCESS[pair]
    assert same(convert_scalar(value, *pair), expected)


FAILURE_CASES = [(pair, value) for pair, values in FAILURE.items() for value in values]


@pytest.mark.parametrize(("pair", "value"), FAILURE_CASES)
def test_conditional_pairs_fail_outside_their_rule(
    pair: tuple[BaseType, BaseType], value: object
) -> None:
    with pytest.raises(ConversionFailed):
        convert_scalar(value, *pair)


SAMPLES: dict[BaseType, object] = {
    V: "1",
    T: "1",
    INT: 1,
    F: 1.0,
    B: YASMF,
    BO: True,
    TS: MOMENT,
    R: YASMF.hex(),
}
UNLISTED = [pair for pair in ALL_PAIRS if pair not in SCALAR_RULES]


@pytest.mark.parametrize("pair", UNLISTED, ids=lambda p: f"{p[0]}->{p[1]}")
def test_pairs_the_table_does_not_list_always_fail(pair: tuple[BaseType, BaseType]) -> None:
    with pytest.raises(ConversionFailed):
        convert_scalar(SAMPLES[pair[0]], *pair)


# --- specific rules -------------------------------------------------------------------


def test_text_to_integer_parses_the_whole_string_only() -> None:
    assert convert("12", ft("text"), ft("integer")) == 12
    assert convert("-0", ft("text"), ft("integer")) == 0
    assert convert("0" * 40 + "12", ft("text"), ft("integer")) == 12
    for text in ("12abc", " 12", "12\n", "1 2"):
        with pytest.raises(ConversionFailed):
            convert(text, ft("text"), ft("integer"))


def test_float_to_integer_only_when_integral() -> None:
    assert convert(2.0, ft("float"), ft("integer")) == 2
    assert convert(-0.0, ft("float"), ft("integer")) == 0
    with pytest.raises(ConversionFailed):
        convert(2.5, ft("float"), ft("integer"))


def test_text_longer_than_255_characters_fails_to_convert_to_varchar() -> None:
    assert convert("ä" * 255, ft("text"), ft("varchar")) == "ä" * 255
    with pytest.raises(ConversionFailed):
        convert("ä" * 256, ft("text"), ft("varchar"))


def test_text_to_float_reads_its_own_non_finite_forms_and_zero_literals() -> None:
    assert math.isnan(convert("NaN", ft("text"), ft("float")))
    assert convert("-Infinity", ft("text"), ft("float")) == -math.inf
    assert convert("0e-400", ft("text"), ft("float")) == 0.0
    assert convert("1.", ft("text"), ft("float")) == 1.0


def test_null_converts_to_null_between_any_types() -> None:
    for source, target in ALL_PAIRS:
        for s_array in (False, True):
            assert convert(None, FieldType(source, s_array), FieldType(target, True)) is None


# --- arrays ---------------------------------------------------------------------------


def test_scalar_to_array_wraps_the_converted_value() -> None:
    assert convert(5, ft("integer"), ft("text[]")) == ("5",)
    assert convert("a", ft("text"), ft("text[]")) == ("a",)


def test_array_to_scalar_converts_a_one_element_array_only() -> None:
    assert convert(("5",), ft("text[]"), ft("integer")) == 5
    for value in ((), ("1", "2")):
        with pytest.raises(ConversionFailed):
            convert(value, ft("text[]"), ft("integer"))


def test_array_to_array_converts_element_wise_and_fails_as_a_whole() -> None:
    assert convert((1, 2), ft("integer[]"), ft("text[]")) == ("1", "2")
    assert convert((), ft("integer[]"), ft("boolean[]")) == ()
    with pytest.raises(ConversionFailed):
        convert((1, 2), ft("integer[]"), ft("boolean[]"))


def test_array_element_failing_the_scalar_rule_fails_the_array() -> None:
    with pytest.raises(ConversionFailed):
        convert(("x" * 256,), ft("text[]"), ft("varchar[]"))


# --- raw values (migration defaults) --------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "target", "expected"),
    [
        (None, "integer", None),
        (5, "text", "5"),
        (5, "float", 5.0),
        ("2020-05-22T11:58:50Z", "timestamp", MOMENT),
        (YASMF, "relation", YASMF.hex()),
        ("<Subject>", "varchar[]", ("<Subject>",)),
        ([1, 0], "boolean[]", (True, False)),
        ([], "relation[]", ()),
    ],
)
def test_convert_raw_reads_a_default_at_its_natural_type(
    raw: object, target: str, expected: object
) -> None:
    assert same(convert_raw(raw, ft(target)), expected)


@pytest.mark.parametrize("raw", [{"a": 1}, [1, "a"], [None], "x" * 256, 2**64, "a\x00"])
def test_convert_raw_fails_for_values_without_a_fitting_conversion(raw: object) -> None:
    target = ft("varchar") if isinstance(raw, str) else ft("text")
    with pytest.raises(ConversionFailed):
        convert_raw(raw, target)


# --- properties -----------------------------------------------------------------------

_TEXT_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")


def _relation_ids() -> st.SearchStrategy[str]:
    return st.sampled_from(list(HashAlgorithm)).flatmap(
        lambda alg: st.binary(min_size=alg.digest_size, max_size=alg.digest_size).map(
            lambda digest: (alg.value + digest).hex()
        )
    )


STRATEGIES: dict[BaseType, st.SearchStrategy[object]] = {
    V: st.text(_TEXT_CHARS, max_size=255),
    T: st.text(_TEXT_CHARS, max_size=300)
    | st.integers(INTEGER_MIN, INTEGER_MAX).map(str)
    | st.sampled_from(["true", "false", "NaN", "2020-05-22T11:58:50+0000", YASMF.hex()]),
    INT: st.integers(INTEGER_MIN, INTEGER_MAX) | st.sampled_from([0, 1, EPOCH_SECONDS]),
    F: st.floats().map(lambda x: math.nan if math.isnan(x) else x),
    B: st.binary(max_size=200) | st.just(YAMF),
    BO: st.booleans(),
    TS: st.datetimes(timezones=st.just(UTC)),
    R: _relation_ids(),
}


def values_of(ftype: FieldType) -> st.SearchStrategy[object]:
    element = STRATEGIES[ftype.base]
    return st.lists(element, max_size=3).map(tuple) if ftype.is_array else element


LOSSLESS = [
    (FieldType(s, s_array), FieldType(t, t_array))
    for (s, t), rule in SCALAR_RULES.items()
    if rule.lossless
    for s_array, t_array in ((False, False), (False, True), (True, True))
]


@pytest.mark.parametrize(("source", "target"), LOSSLESS, ids=lambda x: str(x))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_lossless_pairs_convert_there_and_back_unchanged(
    source: FieldType, target: FieldType, data: st.DataObject
) -> None:
    assert is_lossless(source, target)
    value = data.draw(values_of(source))
    assert same(convert(convert(value, source, target), target, source), value)


def test_is_lossless_never_holds_for_array_to_scalar_or_conditional_pairs() -> None:
    assert not is_lossless(ft("text[]"), ft("text"))
    assert not is_lossless(ft("text"), ft("varchar"))
    assert not is_lossless(ft("integer"), ft("float[]"))
    assert not is_lossless(ft("float"), ft("boolean"))
    assert is_lossless(ft("varchar"), ft("text[]"))


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=lambda p: f"{p[0]}->{p[1]}")
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_conversion_is_total_and_yields_valid_values(
    pair: tuple[BaseType, BaseType], data: st.DataObject
) -> None:
    source, target = (FieldType(base) for base in pair)
    value = data.draw(values_of(source))
    try:
        result = convert(value, source, target)
    except ConversionFailed:
        return
    assert same(interpret(to_raw(result, target), target), result)


# --- the documentation ----------------------------------------------------------------


def test_docs_conversion_table_matches_the_code() -> None:
    assert DOC.read_text(encoding="utf-8") == render_conversion_table(), (
        "docs/conversion.md is stale: run "
        "`python -m p2panda_assets.engine.conversion > docs/conversion.md`"
    )


def test_docs_list_every_pair_once_with_its_rule() -> None:
    rows = [line for line in render_conversion_table().splitlines() if line.count("|") == 5]
    pairs = {tuple(cell.strip() for cell in row.split("|")[1:3]) for row in rows[2:]}
    assert pairs == {(s.value, t.value) for s, t in ALL_PAIRS}
