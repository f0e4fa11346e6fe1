"""Authoring: publishing schema and instance messages on the local author's own logs."""
