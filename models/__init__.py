"""Small local models built offline: the tiny-model builder and the per-domain reference policies."""
