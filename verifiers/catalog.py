"""Imports every built-in verifier module so that each registers its name.

``strict``, ``tool_call``, ``schema``, ``fuzzy``, ``tool_name``, ``exec``, ``judge``, ``world_exec``,
``retrieves`` and the combinators (``cascade``, ``all``, ``any``, ``weighted``, ``by_tool``): every module
ships, and one that fails to import raises (a broken verifier is never hidden).
"""

from __future__ import annotations

from pivot_envs.verifiers import (compose, coverage, exec, final_turn, fuzzy, judge, retrieves, schema,  # noqa: F401
                                  strict, swe_calls, tool_call, tool_name, world_exec)
