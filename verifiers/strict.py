"""``strict``: exact match after whitespace normalisation (the paper's r_strict baseline)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pivot_envs.actions import normalize_message
from pivot_envs.types import Action, Message, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier, register_verifier
from pivot_envs.verifiers.helpers.normalize import PivotCache


def strict_key(message: Message) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Whitespace-normalised content and the calls' names and verbatim argument strings.

    When there are calls, only the calls count (the paper's strict reward compares the action).
    """
    try:  # fast path: a message already in canonical form (what parse_action produces)
        calls = tuple((c["function"]["name"], " ".join(c["function"]["arguments"].split()))
                      for c in message.get("tool_calls") or ())
    except (KeyError, TypeError, AttributeError):
        message = normalize_message(message)
        calls = tuple((c["function"]["name"], " ".join(str(c["function"]["arguments"]).split()))
                      for c in message.get("tool_calls") or ())
    if calls:
        return "", calls
    content = message.get("content")
    return " ".join(content.split()) if isinstance(content, str) else "", calls


@register_verifier("strict", accepted_by="exact")
@dataclass
class StrictVerifier(Verifier):
    """Exact string equality of the action with the expert action, after collapsing whitespace.

    Tool calls are compared by name and their argument string verbatim (key
    order and spacing inside values matter), in order.
    """

    _cache: PivotCache = field(init=False, repr=False, compare=False, default_factory=PivotCache)

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        expert_key = self._cache.get(pivot, lambda p: strict_key(p.expert))
        ok = strict_key(action.message) == expert_key
        reason = "exact match" if ok else "differs from the expert action"
        return VerifyResult(reward=float(ok), passed=ok, verifier=self.name, reason=reason)


