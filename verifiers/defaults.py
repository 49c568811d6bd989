"""Each domain's default verifier, and the verifier configs that several domains' recipes are made of.

A domain owns its default verifier (:attr:`pivot_envs.domains.Domain.default_verifier`: a fixed spec, or a
recipe ``recipe(judge=None) -> spec``); :func:`default_verifier_spec` asks the domain. The built-in
recipes, and the configs only one of them uses, are defined in their domain folders
(``pivot_envs/envs_data/<domain>/domain.py``):

=========  ==============================================================
domain     default
=========  ==============================================================
tool_use   ``final_turn``: calls -> ``tool_call``; answers -> ``facts``
           (an answer stating no fact: ``fuzzy``)
terminal   ``final_turn``: calls -> ``cascade``: ``schema`` gate ->
           the same command's canonical spelling (``fuzzy`` 100 over
           ``shell_words``) accept -> ``exec`` with ``output:
           information`` (the same file changes, what the expert's output
           showed, no dump, not typed in) -> judge (when configured); a
           turn whose calls do not match one to one -> its whole effect
           (``exec``); answers -> ``facts``
swe        ``final_turn`` (no stops) over ``swe_call``: the SWE alias
           categories, each call judged by its content (edits by
           similarity or effect, reads of the expert's file in the
           repository, test runs that run the tests)
search     ``final_turn``: ``search`` calls -> ``retrieves`` (the document
           the expert needed among the results); ``open`` ->
           ``tool_call`` (the doc id, stripped); other calls ->
           ``tool_call``; answers -> ``facts`` (+ judge)
other      the domain's own ``default_verifier``; an unknown name:
           ``tool_call``
=========  ==============================================================

``final_turn`` scores the decision to stop (:mod:`pivot_envs.verifiers.final_turn`): where the
expert answered, another tool call is 0 and an answer must carry the facts the expert's answer
carries (the episode success rule's fact recall); where the expert made a call, stopping is judged by
the world's state (:mod:`pivot_envs.verifiers.stop`): right where the task is already done, 0 where
work is left. With a judge, ``facts`` accepts early and the judge decides the answers it does not accept.

In the terminal cascade the last stage decides; ``exec`` is an early accept
when a judge follows it (a judge may still accept a command whose effects
differ only in ways ``exec`` cannot see), else it decides.
"""

from __future__ import annotations

from typing import Any

from pivot_envs.domains import find_domain

EXACT_NORMALIZED: dict[str, Any] = {
    "name": "tool_call",
    "normalizers": ["strip", "collapse_whitespace"],
    "text_verifier": {"name": "fuzzy", "target": "content", "threshold": 100,
                      "normalizers": ["strip", "collapse_whitespace"]},
}
"""Normalised exact match: tool calls by meaning, strings with whitespace collapsed; text exactly. Not safe for
shell commands (``echo "a  b"`` is not ``echo "a b"``): the terminal cascade uses the same command's canonical
spelling (``SHELL_SAME`` in the terminal folder's ``domain.py``)."""


Judge = dict[str, Any] | None
"""A judge verifier config (``{"name": "judge", ...}``; the name may be left out), or ``None``: no judge."""


def judge_spec(judge: dict[str, Any]) -> dict[str, Any]:
    """A judge verifier config from ``judge`` (its ``name`` may be left out)."""
    if not isinstance(judge, dict):
        raise TypeError(f"judge must be a judge verifier config dict, got {type(judge).__name__}")
    return {"name": "judge", **judge} if "name" not in judge else dict(judge)


ANSWER_FUZZY: dict[str, Any] = {"name": "fuzzy", "target": "content", "scorer": "token_set_ratio", "threshold": 85,
                                "normalizers": ["lower", "strip_punctuation", "collapse_whitespace"]}
"""Fuzzy check of a short final answer: the answer's words may come with or without framing ("Answer: X")."""


COVERAGE: dict[str, Any] = {"name": "coverage", "min_share": 0.6}
"""An answer whose expert answer reports no fact: 60 % of the expert answer's content words."""


def answer_spec(judge: Judge, otherwise: dict[str, Any] | None = None) -> dict[str, Any]:
    """How a domain decides a turn where the expert stopped and answered: the answer's facts
    (:class:`pivot_envs.verifiers.facts.FactsVerifier`), the judge deciding what they do not accept."""
    facts: dict[str, Any] = {"name": "facts", "otherwise": dict(COVERAGE) if otherwise is None else otherwise}
    if judge is None:
        return facts
    return {"name": "cascade", "stages": [{"role": "accept", "verifier": facts},
                                          {"role": "decide", "verifier": judge_spec(judge)}]}


def default_verifier_spec(domain: str, *, judge: dict[str, Any] | None = None) -> Any:
    """The default verifier config of the registered domain ``domain`` (see the module table).

    The domain decides (:meth:`pivot_envs.domains.Domain.verifier_spec`). ``judge`` is a judge
    verifier config (``{"name": "judge", ...}``; the name may be left out); a domain whose default is
    a recipe adds it as the recipe's last resort, a fixed spec is used as it is. A verifier name comes
    back as ``{"name": NAME}``. An unknown domain gets ``tool_call``.
    """
    found = find_domain(domain)
    if found is None:
        return {"name": "tool_call"}
    spec = found.verifier_spec(judge=judge)
    return {"name": spec} if isinstance(spec, str) else spec
