"""What accepted an action: the mechanism behind a passing verdict, for reports of how functional a reward is.

A sample the strict verifier passes is the expert's exact action (``exact``). Any other passing sample is named by
the verifier that decided it (a composition reports the deciding child's name), and reported under the category
that verifier declared (``register_verifier(name, accepted_by=...)``, :mod:`pivot_envs.verifiers.declaration`; the
docs' verifier table lists them):

==============  ====================================================================
category        what accepted it
==============  ====================================================================
``exact``       the strict verifier passed it too: the expert's own string
``arguments``   the same call, arguments equal by meaning
``similarity``  similar text or argument (a query reworded, a command respelled)
``effect``      the same effects when executed (a search that retrieves the document the expert needed)
``state``       a stop where the world already holds the task's final state
``facts``       an answer that carries the expert's facts
``judge``       an LLM judge
``tool name``   the same tool (or alias category), and for some its content
``other``       a verifier that declared no category (a user's own, a combinator's own verdict)
==============  ====================================================================
"""

from __future__ import annotations

from pivot_envs.types import VerifyResult
from pivot_envs.verifiers.declaration import declared


def category(verifier: str) -> str:
    """The category the verifier (or verdict) named ``verifier`` declared; ``other`` where it declared none."""
    declaration = declared(verifier)
    return declaration.accepted_by if declaration is not None else "other"


def accepted_by(result: VerifyResult, strict_passed: bool | None) -> str | None:
    """The category that accepted ``result`` (see the module table), or ``None`` when it did not pass."""
    if not result.passed or result.error is not None:
        return None
    if strict_passed:
        return "exact"
    return category(result.verifier)
