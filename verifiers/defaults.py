"""The default verifier of each built-in domain, as a plain config dict.

=========  ==============================================================
domain     default
=========  ==============================================================
tool_use   ``tool_call`` (text turns: ``fuzzy``; with a judge: fuzzy
           accepts early, the judge decides)
terminal   ``cascade``: ``schema`` gate -> normalised exact ``tool_call``
           accept -> ``exec`` (when registered; commands from ``bash``
           calls or fenced blocks, a text reply is not a command) -> judge
           (when configured)
swe        ``tool_name`` with the SWE alias categories
search     ``by_tool``: ``search`` calls -> fuzzy ``query``
           (token_set_ratio); ``open`` -> exact ``tool_call`` (the doc id);
           other calls -> ``tool_call``; answer text -> fuzzy
           token_set_ratio (+ judge)
other      ``tool_call``
=========  ==============================================================

In the terminal cascade the last stage decides; ``exec`` is an early accept
when a judge follows it (a judge may still accept a command whose effects
differ only in ways ``exec`` cannot see), else it decides.
"""

from __future__ import annotations

from typing import Any

from pivot_envs.verifiers import catalog  # noqa: F401  (registers every built-in)
from pivot_envs.verifiers.base import verifier_names

TEXT_FUZZY: dict[str, Any] = {"name": "fuzzy", "target": "content"}
"""Fuzzy check of the final answer text (the fuzzy verifier's default scorer and threshold)."""

EXACT_NORMALIZED: dict[str, Any] = {
    "name": "tool_call",
    "normalizers": ["strip", "collapse_whitespace"],
    "text_verifier": {"name": "fuzzy", "target": "content", "threshold": 100,
                      "normalizers": ["strip", "collapse_whitespace"]},
}
"""Normalised exact match: tool calls by meaning, strings with whitespace collapsed; text exactly."""


TOOL_USE_CASELESS: dict[str, list[str]] = {
    key: ["strip", "lower"] for key in ("email", "first_name", "last_name", "name")
}
"""Arguments the bundled customer-service tools look up case-insensitively (emails, names)."""


def _judge_spec(judge: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(judge, dict):
        raise TypeError(f"judge must be a judge verifier config dict, got {type(judge).__name__}")
    return {"name": "judge", **judge} if "name" not in judge else dict(judge)


ANSWER_FUZZY: dict[str, Any] = {"name": "fuzzy", "target": "content", "scorer": "token_set_ratio", "threshold": 85,
                                "normalizers": ["lower", "strip_punctuation", "collapse_whitespace"]}
"""Fuzzy check of a short final answer: the answer's words may come with or without framing ("Answer: X")."""


def _text_spec(judge: dict[str, Any] | None, fuzzy: dict[str, Any] = TEXT_FUZZY) -> dict[str, Any]:
    if judge is None:
        return dict(fuzzy)
    return {"name": "cascade", "stages": [
        {"role": "accept", "verifier": dict(fuzzy)},
        {"role": "decide", "verifier": _judge_spec(judge)},
    ]}


def default_verifier_spec(domain: str, *, judge: dict[str, Any] | None = None) -> dict[str, Any]:
    """The default verifier config for ``domain`` (see the module table).

    ``judge`` is a judge verifier config (``{"name": "judge", ...}``; the name
    may be left out); where given it is added as the last resort of the domain's
    recipe. An unknown domain gets ``tool_call``.
    """
    if domain == "tool_use":
        return {"name": "tool_call", "argument_normalizers": dict(TOOL_USE_CASELESS), "text_verifier": _text_spec(judge)}
    if domain == "terminal":
        stages: list[dict[str, Any]] = [
            {"role": "gate", "verifier": {"name": "schema"}},
            {"role": "accept", "verifier": dict(EXACT_NORMALIZED)},
        ]
        if "exec" in verifier_names():
            exec_spec = {"name": "exec", "command_from_content": "fenced"}  # a text reply is no command
            stages.append({"role": "accept" if judge is not None else "decide", "verifier": exec_spec})
        if judge is not None:
            stages.append({"role": "decide", "verifier": _judge_spec(judge)})
        return {"name": "cascade", "stages": stages}
    if domain == "swe":
        return {"name": "tool_name", "aliases": "swe"}
    if domain == "search":
        return {
            "name": "by_tool",
            "routes": {
                "search": {"name": "fuzzy", "target": "argument:query", "scorer": "token_set_ratio", "threshold": 85},
                "open": {"name": "tool_call"},
            },
            "text": _text_spec(judge, ANSWER_FUZZY),
            "default": {"name": "tool_call"},
        }
    return {"name": "tool_call"}
