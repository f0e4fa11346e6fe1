"""Each registered schema is one dynamic partition (key = schema id) of the asset family."""

from __future__ import annotations

import dagster as dg

schemas = dg.DynamicPartitionsDefinition(name="schemas")
