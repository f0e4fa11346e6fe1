"""Rules that are columns and predicates, declared once (issue 55) as a small expression
tree, and built as a pyarrow Expression here (`expression`, the driver path) and as a
Spark Column in `pipeline.spark.expressions.column` (the Spark path). A rule changed
here changes on both paths; a new column is added in one place.

The tree has what these rules need and no more: a column, a literal, a byte string's
length, a text's length in characters, a regular expression's match, comparison, set
membership, null tests, and/or/not, `coalesce`, `when` (null otherwise), and whether any
element of an array holds a rule. Both builders give nulls SQL's meaning: a comparison
with null is null, and a filter drops the rows where its predicate is null; only
membership differs (pyarrow's is false for null where Spark's is null), so a rule that
negates it says what a null is. The blocking checks' rules are declared here too
(`defs.checks.decoded`, `defs.checks.table`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from p2panda_assets.statuses import Assignment

# The types a literal may be given (a typed null), by their Spark names.
ARROW_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "binary": pa.binary(),
    "long": pa.int64(),
    "decimal(20,0)": pa.decimal128(20, 0),  # log ids and seqs
}


@dataclass(frozen=True, slots=True)
class Col:
    name: str


@dataclass(frozen=True, slots=True)
class Lit:
    value: str | int | bytes | None
    type: str = "string"  # a key of ARROW_TYPES


@dataclass(frozen=True, slots=True)
class Length:
    value: Expr  # a byte string's length in bytes


@dataclass(frozen=True, slots=True)
class Chars:
    value: Expr  # a text's length in characters


@dataclass(frozen=True, slots=True)
class Matches:
    value: Expr  # a text
    pattern: str  # holds a match of it (anchor it to match the whole): RE2 and Java alike


@dataclass(frozen=True, slots=True)
class AnyElement:
    """Some element of the array `value` holds `rule`, which names the element
    `Col(ELEMENT)` (false for an empty array; null or false for a null one). Counted in
    the driver by `count_where` only, at the top of a rule: pyarrow has no Expression
    for it."""

    value: Expr
    rule: Expr


ELEMENT = "element"  # the element of an array, in an `AnyElement`'s rule


@dataclass(frozen=True, slots=True)
class Eq:
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Gt:
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class In:
    value: Expr
    among: tuple[object, ...]


@dataclass(frozen=True, slots=True)
class IsNull:
    value: Expr


@dataclass(frozen=True, slots=True)
class And:
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Or:
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Not:
    value: Expr


@dataclass(frozen=True, slots=True)
class Coalesce:
    values: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class When:
    condition: Expr
    then: Expr  # null where `condition` is false or null


Expr = (
    (Col | Lit | Length | Chars | Matches | AnyElement | Eq | Gt | In | IsNull | And | Or | Not)
    | Coalesce
    | When
)
Columns = Mapping[str, Expr]  # a projection: each column's name and expression


# --- the rules ---------------------------------------------------------------------------

# The chain step's rows (`chain.CHAIN_ARROW`): a log's summary, or an entry the chain rules
# reject or hold, which the accepted entries leave out and the index accounts for.
CHAIN_LOG = Eq(Col("row_type"), Lit("log"))
CHAIN_ACCOUNT = Eq(Col("row_type"), Lit("account"))
# The chain rules' index accounts (`paths.ACCOUNT_TARGET_COLUMNS`), of `CHAIN_ACCOUNT` rows.
CHAIN_ACCOUNTS: Columns = {
    "hash": Col("hash"),
    "schema_id": Lit(None),
    "state": Col("state"),
    "reason": Col("reason"),
    "message": Col("message"),
    "origin": Lit("chain"),
}
# A planned log (`log_plan.PLANNED_ARROW`) the step chained, whose logs row it writes;
# and one of those whose entries the index accounts for (`log_plan.waits`).
PLANNED_CHAINED = Col("touched")
PLANNED_WAITING = And(Col("touched"), Not(IsNull(Col("waits"))))
# An accepted entry whose payload does not decode, of a batch verified before the reason
# was kept: the layer's `error` is decoded again for these (`layers.with_decode_errors`).
UNEXPLAINED = And(IsNull(Col("kind")), IsNull(Col("message_error")))
# The instance a message creates or names: `instance`, or a create's own hash; null for
# none. What an increment reduces again is found by it (`increments.new_keys`).
MESSAGE_KEY = Coalesce((Col("instance"), When(Eq(Col("kind"), Lit("create")), Col("hash"))))
# A message an increment reduces for its account alone: new, naming no instance (with
# the columns `built_batch` and `key`, its `MESSAGE_KEY`).
NEW_WITHOUT_KEY = And(Gt(Col("batch"), Col("built_batch")), IsNull(Col("key")))


def touched_anew(built: Iterable[int]) -> Expr:
    """A message that may be one an increment reduces again for being new: of a batch
    after the oldest of the increments' `built` batches. With `touched_before`, a
    superset of what `MESSAGE_KEY` and `NEW_WITHOUT_KEY` keep, decided without
    `built_batch`, so that a scan drops the rest as it reads."""
    return after(min(built, default=-1))


def touched_before(keys: Iterable[bytes], built: Iterable[int]) -> Expr:
    """A message that may be one an increment reduces again, not `touched_anew`: one
    that creates or names one of `keys` (`MESSAGE_KEY`)."""
    return And(In(MESSAGE_KEY, tuple(keys)), Not(touched_anew(built)))


def after(batch: int) -> Expr:
    """A message of a batch after `batch`."""
    return Gt(Col("batch"), Lit(batch, "long"))


def assigned_to(schemas: Iterable[str]) -> Expr:
    """A message assigned to one of `schemas` (not pending, not a duplicate log's)."""
    return And(
        Eq(Col("assignment"), Lit(Assignment.ASSIGNED.value)), In(Col("schema"), (*schemas,))
    )


# --- as pyarrow ----------------------------------------------------------------------------


def expression(expr: Expr) -> pc.Expression:
    """`expr` as a pyarrow Expression (for dataset scans and table filters)."""
    match expr:
        case Col(name):
            return pc.field(name)
        case Lit(value, type_name):
            return _scalar(pa.scalar(value, ARROW_TYPES[type_name]))
        case Length(value):
            return pc.binary_length(expression(value))
        case Chars(value):
            return pc.utf8_length(expression(value))
        case Matches(value, pattern):
            return pc.match_substring_regex(expression(value), pattern)
        case Eq(left, right):
            return expression(left) == expression(right)
        case Gt(left, right):
            return expression(left) > expression(right)
        case In(value, among):
            return expression(value).isin(list(among))
        case IsNull(value):
            return expression(value).is_null()
        case And(left, right):
            return expression(left) & expression(right)
        case Or(left, right):
            return expression(left) | expression(right)
        case Not(value):
            return ~expression(value)
        case Coalesce(values):
            # pyarrow's stubs take arrays only; `coalesce` takes Expressions as well.
            return pc.coalesce(*map(expression, values))  # type: ignore[type-var]
        case When(condition, then):
            return pc.if_else(expression(condition), expression(then), _scalar(pa.nulls(1)[0]))
    raise TypeError(expr)


def _scalar(value: pa.Scalar) -> pc.Expression:
    # pyarrow's stubs take Python values only; an Arrow scalar keeps a null's type.
    return pc.scalar(value)  # type: ignore[arg-type]


def project(table: pa.Table, columns: Columns, where: Expr | None = None) -> pa.Table:
    """The rows of `table` that `where` keeps, as the `columns`, in `table`'s order (one
    thread: the callers line the result up with `table`'s rows)."""
    built = {name: expression(expr) for name, expr in columns.items()}
    return ds.dataset(table).to_table(
        columns=built, filter=None if where is None else expression(where), use_threads=False
    )


def evaluated(table: pa.Table, expr: Expr) -> pa.ChunkedArray:
    """`expr` of each row of `table`, in its order."""
    return project(table, {"value": expr})["value"]


def count_where(table: pa.Table, rule: Expr) -> int:
    """How many rows of `table` `rule` holds for (a filter's count: null is not), an
    `AnyElement` at its top counted over the array's elements, each row once."""
    if not isinstance(rule, AnyElement):
        return table.filter(expression(rule)).num_rows
    arrays = evaluated(table, rule.value).combine_chunks()
    elements = pa.table({ELEMENT: pc.list_flatten(arrays)})
    holds = evaluated(elements, rule.rule).combine_chunks()
    rows = pc.list_parent_indices(arrays).filter(holds)  # a null is dropped, as filters do
    return len(pc.unique(rows))
