"""Asset checks: what each partition's data must look like, whatever wrote it.

- `decoded_messages_match_their_model` (`decoded`, blocking): a pandera model of the
  decoded Parquet; a bad decoded set stops before the plan and the table.
- `table_matches_the_current_lens` (`table`, blocking): a pandera model derived from the
  migration plan's current lens (`table_model`), over the PostgreSQL table's rows a run
  wrote (or all of them), plus the table's column types as PostgreSQL declares them
  (Spark reads varchar and text alike).
- `entries_are_accounted` (`accounting`): applied + superseded + pending + rejected = the
  stored entries of the schema's logs, each accounted exactly once (rule A-ONCE).

The pandera building blocks (`Tally`, `ArrowTally`, findings as lines) are in `tally`;
the SQL the checks run is in `store.accounting`, `store.columns` and
`store.checked_tables`.
"""

import warnings

from dagster import PreviewWarning

# The checks are partitioned like their assets, which Dagster calls a preview and warns of
# at each check's definition, in every process that loads the code location (twice in
# `dagster dev`): the product chose it, and the warning tells whoever runs it nothing.
# Only that warning, set here, just before the checks are defined (this package's
# `__init__` runs before any of its modules): a filter set at an earlier import inside
# `warnings.catch_warnings` (as pytest's) would be gone by then.
warnings.filterwarnings(
    "ignore",
    message="Specifying a partitions_def on an AssetCheckSpec",
    category=PreviewWarning,
)

from p2panda_assets.defs.checks.accounting import accounting, entries_are_accounted  # noqa: E402
from p2panda_assets.defs.checks.decoded import (  # noqa: E402
    KINDS,
    decoded_messages_match_their_model,
)
from p2panda_assets.defs.checks.table import (  # noqa: E402
    declaration_problems,
    expected_pg_types,
    table_matches_the_current_lens,
)
from p2panda_assets.defs.checks.tally import (  # noqa: E402
    ROWS,
    Tally,
    check_result,
    summarize,
    validate,
)

checks = [decoded_messages_match_their_model, table_matches_the_current_lens, entries_are_accounted]

__all__ = [
    "KINDS",
    "ROWS",
    "Tally",
    "accounting",
    "check_result",
    "checks",
    "declaration_problems",
    "decoded_messages_match_their_model",
    "entries_are_accounted",
    "expected_pg_types",
    "summarize",
    "table_matches_the_current_lens",
    "validate",
]
