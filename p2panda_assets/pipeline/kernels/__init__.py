"""The rules both paths of a step call, Spark's and the driver path's, over Python rows or
Arrow batches: no module here imports pyspark (tests/test_import_graph.py holds it)."""
