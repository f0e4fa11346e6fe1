"""p2panda-assets: signed p2panda bamboo logs turned into evolving PostgreSQL tables."""

__version__ = "0.1.0"
