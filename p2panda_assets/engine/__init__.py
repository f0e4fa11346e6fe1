"""Pure schema engine: versions as lenses, conversion, migration and reduction to rows."""
