"""Quickstart 1: verify a (expert, candidate) pair with a functional verifier, no env needed.

    python examples/quickstart_verify.py

A verifier rewards actions that are *functionally equivalent* to the expert's, not only the
expert's exact string: here the candidate reorders the arguments, writes the amount as 5.0 (the
parameter is a ``number``) and uses Hermes ``<tool_call>`` syntax, and still passes ``tool_call``; the
``strict`` baseline fails it. (The amount as the text "5.0" would fail: ``tool_call`` converts no type
unless told, ``coerce: "strict"``, as a backend that takes JSON values as they come sees another call.)
"""

from pivot_envs import Pivot, parse_action
from pivot_envs.verifiers import build_verifier

TOOLS = [{"type": "function", "function": {"name": "refund", "parameters": {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_id", "amount"]}}}]

pivot = Pivot(
    id="p1", domain="tool_use", tools=TOOLS,
    context=[{"role": "user", "content": "refund 5 dollars on A1"}],
    expert=parse_action('{"name": "refund", "arguments": {"order_id": "A1", "amount": 5}}').message,
)
candidate = parse_action('<tool_call>{"name": "refund", "arguments": {"amount": 5.0, "order_id": "A1"}}</tool_call>')

functional = build_verifier("tool_call")(candidate, pivot)  # or build_verifier({"name": "tool_call", **params})
strict = build_verifier("strict")(candidate, pivot)
print(functional)  # VerifyResult(reward=1.0, passed=True, verifier='tool_call', reason=..., error=None)
print("strict passed:", strict.passed)  # False: the string differs
assert functional.passed and not strict.passed

# a wrong argument value fails; a verifier failure (sandbox crash, judge down) would be `error`, never a silent 0
wrong = build_verifier("tool_call")(parse_action('{"name": "refund", "arguments": {"order_id": "A2", "amount": 5}}'), pivot)
print("wrong order id:", wrong.reward, wrong.reason)
assert not wrong.passed and wrong.error is None
