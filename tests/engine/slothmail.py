"""The slothmail schema the reduction tests start from, and how they read rows back."""

from __future__ import annotations

from p2panda_assets.engine.corpus import Corpus
from p2panda_assets.testing.builder import CorpusBuilder, SchemaAuthor, create_field


def slothmail(corpus: CorpusBuilder) -> SchemaAuthor:
    schema = corpus.author(1).schema(12, "slothmail")
    schema.migrate(create_field("subject", "text"), create_field("body", "text"))  # 2
    return schema


def rows(result: Corpus, schema: SchemaAuthor) -> dict[bytes, dict]:
    return {r.instance_id: r.values for r in result.tables[schema.schema_id].rows}
