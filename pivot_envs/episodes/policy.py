"""``SuccessPolicy``: how an episode env judges a finished episode (its ``success_policy=``).

The policy is the success rules every episode must pass (registered names or rule objects, see
:mod:`pivot_envs.success`) and the share of the expert's facts an information task's answer must give.
Without one an env takes its domain's (``Domain.success_rules``; :data:`~pivot_envs.success.DEFAULT_RULES`
without a domain)::

    EpisodeEnv(domain="tool_use", success_policy=SuccessPolicy(("state", "facts"), min_fact_recall=0.5))
    EpisodeEnv(domain="tool_use", success_policy={"rules": ["state", "polite"]})   # a config dict
    EpisodeEnv(domain="tool_use", success_rules=["state"], min_fact_recall=0.5)    # the same as keywords
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from pivot_envs.episodes.tasks import ExpertOutcome
from pivot_envs.success import SuccessResult, rule_name, rules_for, success_rules, task_success
from pivot_envs.types import Message, Trajectory

EXPERT_RULES = frozenset({"state", "facts"})
"""The rules that compare with the expert's outcome (its final state, its facts): an env with one of them
replays the task's expert at reset (:class:`~pivot_envs.episodes.tasks.ExpertOutcomes`)."""


@dataclass(frozen=True)
class SuccessPolicy:
    """The success rules of an episode env and the facts share an information task needs.

    Attributes:
        rules: rule names (registered: ``state``, ``facts``, ``answer``, ``tests``, or a plugin's) or rule
            objects; an unknown name raises ``ValueError`` here, naming the known ones.
        min_fact_recall: the share of the expert's facts an information task's answer must give, in [0, 1].
    """

    rules: Sequence[Any]  # a tuple once built
    min_fact_recall: float = 1.0
    _checks: tuple[Any, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rules = (self.rules,) if isinstance(self.rules, str) else tuple(self.rules)
        object.__setattr__(self, "rules", rules)
        if not 0.0 <= float(self.min_fact_recall) <= 1.0:
            raise ValueError(f"min_fact_recall must be in [0, 1], got {self.min_fact_recall!r}")
        object.__setattr__(self, "min_fact_recall", float(self.min_fact_recall))
        object.__setattr__(self, "_checks", tuple(success_rules(rules)))  # unknown names fail now, not at the end

    @classmethod
    def for_domain(cls, domain: str | None, *, rules: Sequence[Any] | None = None,
                   min_fact_recall: float | None = None) -> SuccessPolicy:
        """``domain``'s policy (its success rules), with ``rules`` / ``min_fact_recall`` overriding it."""
        return cls(rules_for(domain) if rules is None else rules,
                   1.0 if min_fact_recall is None else min_fact_recall)

    @classmethod
    def build(cls, spec: Any, domain: str | None = None) -> SuccessPolicy:
        """A policy from ``spec``: ``None`` (``domain``'s), a :class:`SuccessPolicy`, a list of rules, or a
        config dict ``{"rules": [...], "min_fact_recall": F}`` (a key left out: ``domain``'s)."""
        if spec is None:
            return cls.for_domain(domain)
        if isinstance(spec, SuccessPolicy):
            return spec
        if isinstance(spec, dict):
            unknown = set(spec) - {"rules", "min_fact_recall"}
            if unknown:
                raise ValueError(f"success_policy: unknown keys {sorted(unknown)}; a success policy has "
                                 "'rules' and 'min_fact_recall'")
            return cls.for_domain(domain, rules=spec.get("rules"), min_fact_recall=spec.get("min_fact_recall"))
        if isinstance(spec, (str, list, tuple)):
            return cls.for_domain(domain, rules=spec)
        raise TypeError(f"success_policy: give a SuccessPolicy, a list of success rules or a config dict, "
                        f"got {type(spec).__name__}")

    @property
    def needs_expert_outcome(self) -> bool:
        """One of the rules compares with the expert's outcome (:data:`EXPERT_RULES`)."""
        return any(rule_name(rule) in EXPERT_RULES for rule in self._checks)

    def judge(self, messages: Sequence[Message], task: Trajectory, *, world: Any, digest: str | None,
              outcome: ExpertOutcome | None, truncated: bool) -> SuccessResult:
        """The verdict on a finished episode (:func:`pivot_envs.success.task_success` with these rules)."""
        return task_success(
            None, messages, task, digest=digest,
            start_digest=outcome.start_digest if outcome else None,
            expert_digest=outcome.expert_digest if outcome else None,
            facts=list(outcome.facts) if outcome else None, world=world, truncated=truncated,
            min_fact_recall=self.min_fact_recall, rules=self._checks)

    def config(self) -> dict[str, Any]:
        """The policy as a config dict (rule objects by their names)."""
        return {"rules": [r if isinstance(r, str) else rule_name(r) for r in self.rules],
                "min_fact_recall": self.min_fact_recall}
