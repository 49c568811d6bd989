"""Imports every built-in verifier module so that each registers its name.

``strict``, ``tool_call``, ``schema``, ``fuzzy``, ``tool_name`` and the
combinators (``cascade``, ``all``, ``any``, ``weighted``, ``by_tool``) always;
``exec`` and ``judge`` when their modules are part of this install (a module
that exists but fails to import raises: a broken verifier is never hidden).
"""

from __future__ import annotations

import importlib
import importlib.util

from pivot_envs.verifiers import compose, coverage, final_turn, fuzzy, schema, strict, swe_calls, tool_call, tool_name  # noqa: F401

OPTIONAL_MODULES = ("exec", "judge", "world_exec", "retrieves")
"""Built-in verifier modules imported only when present."""


def _import_optional() -> list[str]:
    loaded = []
    for module in OPTIONAL_MODULES:
        qualified = f"pivot_envs.verifiers.{module}"
        if importlib.util.find_spec(qualified) is not None:
            importlib.import_module(qualified)
            loaded.append(module)
    return loaded


LOADED_OPTIONAL = tuple(_import_optional())
"""The optional modules that were found and imported."""
