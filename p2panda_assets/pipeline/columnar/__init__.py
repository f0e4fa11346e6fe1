"""The columnar store (the warehouse): where it is, its chained layers, and reading and
writing it with pyarrow for the driver path."""
