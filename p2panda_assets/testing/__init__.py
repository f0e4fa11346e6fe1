"""Helpers for tests and benchmarks, not part of the product's semantics: `builder`
writes corpora in code (authors publishing schema and instance messages as signed
entries). Nothing under `engine/`, `pipeline/` or `defs/` imports this package."""
