"""The PySpark pipeline: the engine's stages run over Spark partitions, PostgreSQL in and out."""
