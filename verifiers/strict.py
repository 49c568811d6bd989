"""``strict``: exact match after whitespace normalisation (the paper's r_strict baseline)."""

from __future__ import annotations

from dataclasses import dataclass

from pivot_envs.actions import normalize_message
from pivot_envs.types import Action, Message, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier, register_verifier


def strict_key(message: Message) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Whitespace-normalised content and the calls' names and verbatim argument strings."""
    message = normalize_message(message)
    content = " ".join((message.get("content") or "").split())
    calls = tuple(
        (c["function"]["name"], " ".join(str(c["function"]["arguments"]).split()))
        for c in message.get("tool_calls") or []
    )
    if calls:
        content = ""  # the paper's strict reward compares the action: the calls when there are calls
    return content, calls


@register_verifier("strict")
@dataclass
class StrictVerifier(Verifier):
    """Exact string equality of the action with the expert action, after collapsing whitespace.

    Tool calls are compared by name and their argument string verbatim (key
    order and spacing inside values matter), in order.
    """

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        ok = strict_key(action.message) == strict_key(pivot.expert)
        reason = "exact match" if ok else "differs from the expert action"
        return VerifyResult(reward=float(ok), passed=ok, verifier=self.name, reason=reason)


