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


CALL_VARIANT_KINDS = ("key_order", "number_spelling", "id_case", "enum_case", "free_text_case", "changed_value",
                      "other_tool")
"""The kinds of :func:`call_variants`: the first five change only how a call is written (the world may or
may not read them the same: that is what executing them tells), the last two change what it asks."""


def call_variants(name: str, arguments: dict[str, Any], parameters: dict[str, Any] | None, tools: list[str],
                  rng: random.Random) -> list[tuple[str, str, dict[str, Any]]]:
    """Variants of one tool call ``name(arguments)``: ``[(kind, name, arguments), ...]``, at most one per kind.

    ``parameters`` is the tool's JSON schema (enums and types come from it), ``tools`` the other
    tool names. ``id_case`` changes the letter case of an identifier-like string (an argument named
    ``*_id``/``id`` or a value with digits and no spaces), ``enum_case`` of a schema enum value,
    ``free_text_case`` of any other string; ``number_spelling`` writes an integer as a float (5 -> 5.0)
    or a float as a string; kinds that have no argument to act on are left out.
    """
    props = (parameters or {}).get("properties", {}) if isinstance(parameters, dict) else {}
    out: list[tuple[str, str, dict[str, Any]]] = []
    if len(arguments) > 1:
        out.append(("key_order", name, dict(reversed(list(arguments.items())))))
    numbers = [k for k, v in arguments.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if numbers:
        key = rng.choice(numbers)
        value = arguments[key]
        out.append(("number_spelling", name, {**arguments, key: float(value) if isinstance(value, int) else str(value)}))
    strings = [k for k, v in arguments.items() if isinstance(v, str) and v and v.swapcase() != v]
    enums = [k for k in strings if "enum" in (props.get(k) or {})]
    ids = [k for k in strings if k not in enums and _looks_like_id(k, arguments[k])]
    texts = [k for k in strings if k not in enums and k not in ids]
    for kind, keys in (("id_case", ids), ("enum_case", enums), ("free_text_case", texts)):
        if keys:
            key = rng.choice(keys)
            value = arguments[key]
            out.append((kind, name, {**arguments, key: value.lower() if value != value.lower() else value.upper()}))
    if arguments:
        key = rng.choice(sorted(arguments))
        out.append(("changed_value", name, {**arguments, key: _change(arguments[key], rng)}))
    others = sorted(t for t in tools if t != name)
    if others:
        out.append(("other_tool", rng.choice(others), dict(arguments)))
    return out


def _looks_like_id(key: str, value: str) -> bool:
    return key == "id" or key.endswith("_id") or (" " not in value and any(c.isdigit() for c in value))


SPELLING_VARIANT_KINDS = ("id_trailing_space", "text_trailing_space", "integer_as_string", "digits_as_number",
                          "array_as_json_text")
"""The kinds of :func:`spelling_variants`: the same value written another way, which lenient string rules may
read as the same call while a backend that takes JSON values as they come (tau2's servers, plain Python tool
functions) does not."""


def spelling_variants(name: str, arguments: dict[str, Any],
                      rng: random.Random) -> list[tuple[str, str, dict[str, Any]]]:
    """Other spellings of the values of one tool call ``name(arguments)``: ``[(kind, name, arguments), ...]``,
    at most one per kind of :data:`SPELLING_VARIANT_KINDS` (a kind with no argument to act on is left out).

    ``id_trailing_space`` appends a space to an identifier-like string (as :func:`call_variants` tells them),
    ``text_trailing_space`` to any other string; ``integer_as_string`` writes an integer as its text
    (``2`` -> ``"2"``), ``digits_as_number`` a string of digits as the number (``"19122"`` -> ``19122``),
    ``array_as_json_text`` an array as its JSON text (``["a"]`` -> ``'["a"]'``).
    """
    out: list[tuple[str, str, dict[str, Any]]] = []
    strings = [k for k, v in arguments.items() if isinstance(v, str) and v]
    ids = [k for k in strings if _looks_like_id(k, arguments[k])]
    texts = [k for k in strings if k not in ids]
    for kind, keys in (("id_trailing_space", ids), ("text_trailing_space", texts)):
        if keys:
            key = rng.choice(keys)
            out.append((kind, name, {**arguments, key: arguments[key] + " "}))
    ints = [k for k, v in arguments.items() if type(v) is int]
    if ints:
        key = rng.choice(ints)
        out.append(("integer_as_string", name, {**arguments, key: str(arguments[key])}))
    digits = [k for k in strings if arguments[k].isdigit() and not arguments[k].startswith("0")]
    if digits:
        key = rng.choice(digits)
        out.append(("digits_as_number", name, {**arguments, key: int(arguments[key])}))
    arrays = [k for k, v in arguments.items() if isinstance(v, list)]
    if arrays:
        key = rng.choice(arrays)
        out.append(("array_as_json_text", name, {**arguments, key: json.dumps(arguments[key])}))
    return out
