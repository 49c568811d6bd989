"""Seeded perturbations of an expert action: plausible but wrong actions.

Used by the demo (false-positive rate of verifiers) and by noisy baselines.
A perturbation changes what the action *does*: another declared tool, a
changed argument value, a dropped required argument, or unrelated text.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from pivot_envs.types import Message, Pivot

_FILLER = [
    "I'm not sure, could you repeat that?",
    "Let me think about something else first.",
    "Done.",
    "Please contact support.",
]


def perturb_action(pivot: Pivot, rng: random.Random) -> Message:
    """A wrong variant of ``pivot.expert``: same shape, different effect."""
    expert = copy.deepcopy(pivot.expert)
    calls = expert.get("tool_calls") or []
    if not calls:
        words = str(expert.get("content") or "").split()
        rng.shuffle(words)
        text = rng.choice(_FILLER) if len(words) < 4 else " ".join(words[: max(1, len(words) // 3)])
        return {"role": "assistant", "content": text}
    call = calls[rng.randrange(len(calls))]
    fn = call["function"]
    other_tools = [t.get("function", t).get("name") for t in pivot.tools]
    other_tools = [n for n in other_tools if n and n != fn.get("name")]
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except json.JSONDecodeError:
        args = None
    if isinstance(args, dict) and args and rng.random() < 0.8:
        key = rng.choice(sorted(args))
        args[key] = _change(args[key], rng)
        fn["arguments"] = json.dumps(args)
    elif other_tools:
        fn["name"] = rng.choice(sorted(other_tools))
    else:
        fn["name"] = fn.get("name", "") + "_x"
    return expert


def _change(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + rng.choice([1, 2, 10]) if value == 0 else value * rng.choice([2, 3]) + 1
    if isinstance(value, str):
        if not value:
            return "x"
        chars = list(value)
        i = rng.randrange(len(chars))
        chars[i] = "z" if chars[i] != "z" else "q"
        return "".join(chars) + ("" if rng.random() < 0.5 else "_2")
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    if isinstance(value, dict):
        return {k: _change(v, rng) for k, v in value.items()} if value else {"x": 1}
    return "x"
