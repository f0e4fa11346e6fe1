"""Dagster definitions of the product: partitions, resources, the asset family, sensors."""
