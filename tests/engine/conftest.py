"""The engine tests' empty corpus to write into."""

from __future__ import annotations

import pytest

from p2panda_assets.testing.builder import CorpusBuilder


@pytest.fixture
def corpus() -> CorpusBuilder:
    return CorpusBuilder()
