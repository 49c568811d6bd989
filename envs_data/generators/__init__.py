"""Generators of the bundled expert-trajectory data, one module per domain."""
