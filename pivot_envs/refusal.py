"""Refusals: answers that decline the task ("Sorry, I cannot help with that.").

:func:`is_refusal` recognises the ways models decline: an apology followed by an inability ("I'm sorry,
but I can't assist with that"), an opening inability ("I cannot help with this request", "I am unable to
do that"), and a plain "I can't help with that". The final-turn ``facts`` verifier fails a refusal at
every answer turn where the expert did not refuse itself (:mod:`pivot_envs.verifiers.final_turn`).
"""

from __future__ import annotations

import re

_CANNOT = r"(?:can(?:'|’|no)?t|cannot|am\s+unable|'m\s+unable|am\s+not\s+able|'m\s+not\s+able|won(?:'|’)t|will\s+not|must\s+decline)"
_APOLOGY = r"(?:sorry|apologi[sz]e|unfortunately|i(?:'|’)m\s+afraid|i\s+am\s+afraid)"
_ACTS = r"(?:help|assist|do|comply|provide|complete|answer|perform|fulfil+|handle|process|support)"

_PATTERNS = (
    re.compile(rf"\b{_APOLOGY}\b[^.!?\n]{{0,60}}\b(?:i\s*)?{_CANNOT}\b", re.IGNORECASE),
    re.compile(rf"^\W*i\s*{_CANNOT}\s+(?:\w+\s+){{0,2}}{_ACTS}\b", re.IGNORECASE),
    re.compile(rf"\b(?:unable|not\s+able)\s+to\s+{_ACTS}\s+(?:you\s+)?with\s+(?:that|this)\b", re.IGNORECASE),
    re.compile(r"\bi\s*(?:must|have\s+to)\s+decline\b", re.IGNORECASE),
)


def is_refusal(text: str) -> bool:
    """Whether ``text`` declines the task (see the module docstring)."""
    return any(p.search(text or "") for p in _PATTERNS)
