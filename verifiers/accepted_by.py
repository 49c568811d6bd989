"""What accepted an action: the mechanism behind a passing verdict, for reports of how functional a reward is.

A sample the strict verifier passes is the expert's exact action (``exact``). Any other passing sample is named by
the verifier that decided it (a composition reports the deciding child's name):

==============  ====================================================================
category        verifiers
==============  ====================================================================
``exact``       the strict verifier passed it too: the expert's own string
``arguments``   ``tool_call``: the same call, arguments equal by meaning
``similarity``  ``fuzzy``: similar text or argument (a query reworded, a command respelled)
``effect``      ``exec`` / ``world_exec`` / ``retrieves``: the same effects when executed (a search that
                retrieves the document the expert needed)
``state``       ``stop``: a stop where the world already holds the task's final state
``facts``       ``facts`` / ``coverage``: an answer that carries the expert's facts
``judge``       ``judge``: an LLM judge
``tool name``   ``tool_name`` / ``swe_call``: the same tool (or alias category), for ``swe_call`` also its content
``other``       any other verifier (a user's own)
==============  ====================================================================
"""

from __future__ import annotations

from pivot_envs.types import VerifyResult

CATEGORIES = ("exact", "arguments", "similarity", "effect", "state", "facts", "judge", "tool name", "other")

BY_VERIFIER = {
    "strict": "exact", "tool_call": "arguments", "fuzzy": "similarity", "exec": "effect", "world_exec": "effect", "retrieves": "effect",
    "stop": "state", "facts": "facts", "coverage": "facts", "judge": "judge", "tool_name": "tool name", "swe_call": "tool name",
}


def accepted_by(result: VerifyResult, strict_passed: bool | None) -> str | None:
    """The category that accepted ``result`` (see the module table), or ``None`` when it did not pass."""
    if not result.passed or result.error is not None:
        return None
    if strict_passed:
        return "exact"
    return BY_VERIFIER.get(result.verifier, "other")
