"""A key-value store world, its domain and tasks: a user's plugin (see ../README.md)."""
