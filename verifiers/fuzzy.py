"""``fuzzy``: rapidfuzz similarity between the action and the expert action, above a threshold.

What is compared (``target``):

- ``"content"``: the text content of the turn;
- ``"arguments"``: the tool calls as canonical JSON (names and arguments, sorted
  keys, calls sorted so their order does not matter);
- ``"argument:<name>"``: one argument, e.g. ``"argument:query"``: the value in
  the expert's first call that has it, against the action's first call *to the
  same tool* that has it (an action without such a call scores 0); at a
  turn where no expert call has that argument, falls back to ``"auto"``;
- ``"auto"`` (default): ``"arguments"`` when the expert made tool calls, else ``"content"``.

Both texts go through the ``normalizers`` pipeline (see
:mod:`pivot_envs.verifiers.helpers.normalize`), then ``scorer`` gives a score in
[0, 100]; equal normalised texts always score 100 (also two empty ones).
``passed = score >= threshold``; the reward is ``passed`` (``binary=True``) or
``score / 100``.

Example::

    build_verifier({"name": "fuzzy", "target": "argument:query",
                    "scorer": "token_set_ratio", "threshold": 85})
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from rapidfuzz import fuzz
from rapidfuzz.distance import Indel, JaroWinkler, Levenshtein

from pivot_envs.types import Action, Message, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier, register_verifier
from pivot_envs.verifiers.compose import PicklesByConfig
from pivot_envs.verifiers.helpers.normalize import (
    BadArguments,
    PivotCache,
    canonical_calls,
    check_normalizers,
    message_calls,
    message_content,
    normalizer_pipeline,
    parse_arguments,
)

Scorer = Callable[[str, str], float]

SCORERS: dict[str, Scorer] = {
    "ratio": fuzz.ratio,
    "partial_ratio": fuzz.partial_ratio,
    "token_sort_ratio": fuzz.token_sort_ratio,
    "token_set_ratio": fuzz.token_set_ratio,
    "token_ratio": fuzz.token_ratio,
    "partial_token_sort_ratio": fuzz.partial_token_sort_ratio,
    "partial_token_set_ratio": fuzz.partial_token_set_ratio,
    "partial_token_ratio": fuzz.partial_token_ratio,
    "WRatio": fuzz.WRatio,
    "QRatio": fuzz.QRatio,
    "levenshtein": lambda a, b: 100.0 * Levenshtein.normalized_similarity(a, b),
    "indel": lambda a, b: 100.0 * Indel.normalized_similarity(a, b),
    "jaro_winkler": lambda a, b: 100.0 * JaroWinkler.normalized_similarity(a, b),
}
"""rapidfuzz scorers by name, each returning a similarity in [0, 100]."""

DEFAULT_NORMALIZERS = ["lower", "strip_punctuation", "collapse_whitespace"]


def get_scorer(name: str, field_name: str = "scorer") -> Scorer:
    """The scorer called ``name``; ValueError listing the known names otherwise."""
    try:
        return SCORERS[name]
    except KeyError:
        raise ValueError(f"{field_name}: unknown scorer {name!r}; known: {', '.join(sorted(SCORERS))}") from None


def similarity(scorer: Scorer, a: str, b: str) -> float:
    """``scorer(a, b)`` with equal texts (including two empty ones) scoring 100."""
    if a == b:
        return 100.0
    if not a or not b:
        return 0.0
    return float(scorer(a, b))


@register_verifier("fuzzy", accepted_by="similarity")
@dataclass
class FuzzyVerifier(PicklesByConfig, Verifier):
    """Fuzzy string similarity of the action with the expert action (see the module docstring)."""

    scorer: str = "token_sort_ratio"
    """Name of the rapidfuzz scorer (a key of :data:`SCORERS`)."""
    threshold: float = 80.0
    """Pass when the score (0..100) is at least this."""
    normalizers: list[str] = field(default_factory=lambda: list(DEFAULT_NORMALIZERS))
    """Normalisers applied to both texts before scoring, in order."""
    target: str = "auto"
    """What to compare: ``content``, ``arguments``, ``argument:<name>`` or ``auto``."""
    binary: bool = True
    """Reward 1/0 by the threshold (True) or the continuous ``score / 100`` (False)."""

    _score: Scorer = field(init=False, repr=False, compare=False)
    _norm: Callable[[str], str] = field(init=False, repr=False, compare=False)
    _cache: PivotCache = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._score = get_scorer(self.scorer)
        self.normalizers = check_normalizers(self.normalizers)
        self._norm = normalizer_pipeline(self.normalizers)
        if not 0 <= float(self.threshold) <= 100:
            raise ValueError(f"threshold must be in [0, 100], got {self.threshold!r}")
        if self.target not in ("auto", "content", "arguments") and not (
            self.target.startswith("argument:") and len(self.target) > len("argument:")
        ):
            raise ValueError(
                f"target must be 'auto', 'content', 'arguments' or 'argument:<name>', got {self.target!r}"
            )
        self._cache = PivotCache()

    def _expert_text(self, pivot: Pivot) -> tuple[str, str | None, str]:
        """(what was compared, tool name for ``argument:``, normalised expert text)."""
        target = self.target
        expert = pivot.expert
        if target == "auto":
            target = "arguments" if expert.get("tool_calls") else "content"
        if target == "content":
            return "content", None, self._norm(message_content(expert))
        if target == "arguments":
            return "arguments", None, self._norm(canonical_calls(expert))
        arg = target[len("argument:"):]
        for name, raw in message_calls(expert):
            args = parse_arguments(raw)
            if not isinstance(args, BadArguments) and arg in args:
                return target, name, self._norm(_as_text(args[arg]))
        if expert.get("tool_calls"):  # no call has the argument: compare the calls as a whole
            return "arguments", None, self._norm(canonical_calls(expert))
        return "content", None, self._norm(message_content(expert))

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        what, tool, expected = self._cache.get(pivot, self._expert_text)
        if what == "content":
            got = self._norm(message_content(action.message))
        elif what == "arguments":
            got = self._norm(canonical_calls(action.message))
        else:
            arg = what[len("argument:"):]
            found = _argument_of(action.message, tool or "", arg)
            if found is None:
                return VerifyResult(0.0, False, self.name, f"no {tool!r} call with argument {arg!r}")
            got = self._norm(found)
        score = similarity(self._score, got, expected)
        passed = score >= self.threshold
        reward = (1.0 if passed else 0.0) if self.binary else score / 100.0
        verdict = ">=" if passed else "<"
        return VerifyResult(reward, passed, self.name, f"{what}: {self.scorer} {score:.1f} {verdict} {self.threshold:g}")


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _argument_of(message: Message, tool: str, arg: str) -> str | None:
    for name, raw in message_calls(message):
        if name != tool:
            continue
        args = parse_arguments(raw)
        if not isinstance(args, BadArguments) and arg in args:
            return _as_text(args[arg])
    return None
