"""Task success of a whole episode: one function per rule, combined per domain by :func:`task_success`.

Rules (:data:`RULES`):

``state``
    The world's digest at the end equals the digest the expert trajectory reached (its tool calls
    replayed in a fresh world: :func:`pivot_envs.episodes.expert_outcome`).
``facts``
    Only for *information* tasks, those where the expert changed no state (start digest == expert
    digest): the agent told the user the facts the expert told. A **fact** is a value that the
    expert wrote in an assistant text and that came from a tool result, not from the task:

    * typed values found in the expert's text with :func:`typed_values` — dates (``2025-02-21``,
      ``February 21``, ``Fri, Feb 21st``, ``21 February``, ``2/21`` -> ``date:02-21``; the year is
      dropped because prose rarely repeats it), times (``14:00``, ``2 pm`` -> ``time:14:00``),
      numbers (``$1,234.50``, ``1234.5`` -> ``num:1234.5``), and IDs (any token with a digit that
      is not a plain number, compared case-insensitively: ``CL-913398``, ``1Z5940109980``,
      ``v2.3.5``) — that also occur among the values of an earlier tool result (JSON leaves, or
      the tool result's text);
    * names: a string leaf of a JSON tool result that looks like a name (2-6 words without digits,
      the first one capitalised: ``Copper Watering Can``, ``Densel River``; a lone first name is
      small talk, not a fact) and that the expert's text contains;

    minus the values the task itself gives (the system prompt and every user message of the
    trajectory): an agent that repeats the user's order id has found nothing out.
    The agent's **answer** is the text of every assistant message of the episode (a conversation
    tells the user facts over several turns); a fact counts as given when the answer holds the
    same typed value, or contains the name (case and spacing folded). The rule passes when the
    share of facts given is at least ``min_fact_recall`` (1.0: all of them). A refusal gives no
    facts, so it fails every information task that has one. An information task whose expert
    stated no fact (tau2 tasks: the expert's closing text is synthetic) falls back to the
    expert's look-ups: the agent must have made every tool call the expert made that did not fail
    (same name, arguments equal as JSON; a result starting with ``Error`` is a failed call), so a
    refusal fails there too (:func:`calls_made`).
``answer``
    The search domain's answer check: the episode's final answer (the last assistant text) passes
    the domain's fuzzy answer verifier (:data:`pivot_envs.verifiers.defaults.ANSWER_FUZZY`:
    token-set ratio >= 85 after lower-casing and stripping punctuation) against one of the task's
    accepted answers (``meta["answer_aliases"]``, else ``meta["answer"]``, else the expert's final
    text).
``tests``
    SWE: the repository's tests pass in the agent's final state (the world runs the task's
    ``test_command``: :func:`tests_passed`).

Each rule is an object with ``check(outcome) -> RuleVerdict | None`` (:class:`SuccessRule`; ``None``: the rule
does not apply to this episode, as ``facts`` on a task that changes state), registered by name
(:func:`register_success_rule`, or a package's entry point in the group ``pivot_envs.success_rules``).
A domain names its rules (``Domain.success_rules``; any other domain, MCP worlds included, gets
:data:`DEFAULT_RULES`, ``state`` + ``facts``): the built-in ``tool_use`` and ``terminal`` use ``state``,
``facts``; ``search`` ``state``, ``answer``; ``swe`` ``tests``. Every rule that applies must pass; a truncated
episode (``max_turns`` reached before the agent finished) never succeeds. A rule of one's own::

    from pivot_envs.success import RuleVerdict, register_success_rule

    class Polite:
        name = "polite"

        def check(self, outcome):
            said = " ".join(m.get("content") or "" for m in outcome.messages if m["role"] == "assistant")
            return RuleVerdict("thank" in said.lower(), "the agent never thanked the user")

    register_success_rule(Polite())
    # then Domain(..., success_rules=("state", "polite")) or EpisodeEnv(..., success_rules=["state", "polite"])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.domains import find_domain
from pivot_envs.facts import agent_answer, calls_made, expert_facts, facts_given, typed_values
from pivot_envs.registry import Registry
from pivot_envs.types import Message, Pivot, Trajectory, content_text
from pivot_envs.verifiers import build_verifier
from pivot_envs.verifiers.defaults import ANSWER_FUZZY

ENTRY_POINT_GROUP = "pivot_envs.success_rules"
"""Entry-point group of success rules published by packages (``NAME = "pkg.module:RULE"``: a rule object, or a
zero-argument callable returning one)."""

DEFAULT_RULES: tuple[str, ...] = ("state", "facts")
"""The rules of a domain that names none (and of episodes without a domain)."""


def rules_for(domain: str | None) -> tuple[Any, ...]:
    """The success rules of ``domain``: its ``Domain.success_rules``, else :data:`DEFAULT_RULES`."""
    found = find_domain(domain) if domain else None
    if found is not None and found.success_rules is not None:
        return tuple(found.success_rules)
    return DEFAULT_RULES


@dataclass
class SuccessResult:
    """The verdict on one finished episode.

    Attributes:
        success: every rule passed.
        reason: a short explanation (the first failing rule's, or what passed).
        checks: rule -> passed (only the rules that applied).
        details: what the rules looked at (missing facts, the answer checked, ...).
    """

    success: bool
    reason: str
    checks: dict[str, bool] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- rule: state


def state_reached(digest: str | None, expert_digest: str | None) -> bool:
    """The agent's final state is the state the expert reached (equal digests)."""
    return digest is not None and expert_digest is not None and digest == expert_digest


# --------------------------------------------------------------------------- rule: facts

# The facts and the functions that find them live in pivot_envs.facts (the final-turn verifier uses them too).


# --------------------------------------------------------------------------- rule: answer


def final_answer(messages: Sequence[Message]) -> str | None:
    """The episode's final answer: the content of the last assistant message without tool calls."""
    for m in reversed(messages):
        if m.get("role") == "assistant" and not m.get("tool_calls"):
            text = content_text(m.get("content")).strip()
            return text or None
    return None


def accepted_answers(task: Trajectory) -> list[str]:
    """The answers a search task accepts: ``answer_aliases``, else ``answer``, else the expert's final text."""
    aliases = task.meta.get("answer_aliases")
    if isinstance(aliases, list) and any(isinstance(a, str) and a.strip() for a in aliases):
        return [a for a in aliases if isinstance(a, str) and a.strip()]
    answer = task.meta.get("answer")
    if isinstance(answer, str) and answer.strip():
        return [answer]
    final = final_answer(task.messages)
    return [final] if final else []


def answer_correct(answer: str | None, accepted: Sequence[str]) -> bool:
    """The search domain's answer check (its fuzzy answer verifier) against any accepted answer."""
    if not answer or not accepted:
        return False
    verifier = build_verifier(dict(ANSWER_FUZZY))
    action = parse_action({"role": "assistant", "content": answer})
    for i, alias in enumerate(accepted):
        pivot = Pivot(id=f"answer-{i}", domain="search", context=[], expert={"role": "assistant", "content": alias})
        if verifier.verify(action, pivot).passed:
            return True
    return False


# --------------------------------------------------------------------------- rule: tests


def tests_passed(world: Any) -> tuple[bool, str]:
    """Run the repository's tests in ``world``'s current state; ``(passed, output)``.

    The world runs them: ``test_report()`` -> ``(passed, output)`` (the SWE world: the task's
    ``test_command``, exit status 0, the run's writes not kept), else ``tests_pass()`` -> bool.
    A world with neither raises ``TypeError``.
    """
    report = getattr(world, "test_report", None)
    if report is not None:
        passed, output = report()
        return bool(passed), str(output or "")
    check = getattr(world, "tests_pass", None)
    if check is not None:
        return bool(check()), ""
    raise TypeError(f"the {getattr(world, 'name', type(world).__name__)!r} world cannot run tests "
                    "(it has no test_report() or tests_pass())")


# --------------------------------------------------------------------------- combined


def task_success(
    domain: str | None,
    messages: Sequence[Message],
    task: Trajectory,
    *,
    digest: str | None = None,
    start_digest: str | None = None,
    expert_digest: str | None = None,
    facts: Sequence[str] | None = None,
    world: Any = None,
    truncated: bool = False,
    min_fact_recall: float = 1.0,
    rules: Sequence[str] | None = None,
) -> SuccessResult:
    """Whether a finished episode succeeded under ``domain``'s rules (see the module docstring).

    ``messages`` is the whole episode; ``task`` the expert trajectory; ``facts`` the expert facts
    (computed from ``task`` when ``None``); ``world`` the episode's world, for the ``tests`` rule.
    """
    rules = success_rules(rules if rules is not None else rules_for(domain))
    if truncated:
        return SuccessResult(False, "truncated: the agent did not finish within max_turns")
    outcome = EpisodeOutcome(messages=list(messages), task=task, digest=digest, start_digest=start_digest,
                             expert_digest=expert_digest, facts=facts, world=world, min_fact_recall=min_fact_recall)
    checks: dict[str, bool] = {}
    details: dict[str, Any] = {}
    reasons: list[str] = []
    for rule in rules:
        verdict = rule.check(outcome)
        if verdict is None:
            continue  # the rule does not apply to this episode
        if not isinstance(verdict, RuleVerdict):
            raise TypeError(f"success rule {rule_name(rule)!r}: check() returned {type(verdict).__name__}; "
                            "it must return a RuleVerdict (or None when the rule does not apply)")
        checks[verdict.check or rule_name(rule)] = bool(verdict.passed)
        details.update(verdict.details)
        if not verdict.passed:
            reasons.append(verdict.reason or f"{rule_name(rule)} failed")
    success = all(checks.values()) if checks else False
    if success:
        reason = "passed: " + ", ".join(checks)
    else:
        reason = "; ".join(reasons) or "no rule applied"
    return SuccessResult(success, reason, checks, details)


# --------------------------------------------------------------------------- rules as objects


@dataclass
class EpisodeOutcome:
    """What a success rule looks at: a finished episode and its task.

    Attributes:
        messages: the whole episode (system, user, assistant and tool messages).
        task: the expert trajectory of the task.
        digest: the world's digest at the end of the episode.
        start_digest: the digest of the task's start state.
        expert_digest: the digest the expert's tool calls reach (replayed in a fresh world).
        facts: the expert facts (``None``: computed from ``task`` when a rule needs them).
        world: the episode's world (``tests`` runs the task's tests in it).
        min_fact_recall: the share of facts an information task's answer must give.
    """

    messages: list[Message]
    task: Trajectory
    digest: str | None = None
    start_digest: str | None = None
    expert_digest: str | None = None
    facts: Sequence[str] | None = None
    world: Any = None
    min_fact_recall: float = 1.0

    @property
    def changes_state(self) -> bool:
        """The task changes the world (or its digests are unknown): the ``state`` rule decides it."""
        return self.start_digest is None or self.expert_digest is None or self.start_digest != self.expert_digest


@dataclass
class RuleVerdict:
    """One rule's verdict on one episode.

    Attributes:
        passed: the rule passed.
        reason: why it failed (shown as the episode's ``reason``).
        details: what the rule looked at (merged into the episode's ``details``).
        check: the name it is reported under in ``checks`` (``None``: the rule's name).
    """

    passed: bool
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    check: str | None = None


class StateRule:
    """``state``: the agent's final state is the state the expert reached."""

    name = "state"

    def check(self, outcome: EpisodeOutcome) -> RuleVerdict:
        return RuleVerdict(state_reached(outcome.digest, outcome.expert_digest),
                           "the final state differs from the state the expert reached")


class FactsRule:
    """``facts``: an information task's answer gives the expert's facts (or, without stated facts, the
    expert's look-ups were made); no verdict on a task that changes state."""

    name = "facts"

    def check(self, outcome: EpisodeOutcome) -> RuleVerdict | None:
        if outcome.changes_state:
            return None  # the task changes state: the state rule decides
        task_messages = outcome.task.messages
        expected = list(expert_facts(task_messages) if outcome.facts is None else outcome.facts)
        if not expected:  # nothing the expert said to check: its look-ups must have been made
            ok, missing = calls_made(outcome.messages, task_messages)
            return RuleVerdict(ok, f"information task without stated facts: {len(missing)} of the expert's "
                                   f"look-ups not made ({', '.join(missing[:3])})",
                               {"missing_calls": missing}, check="calls")
        ok, missing = facts_given(agent_answer(outcome.messages), expected, outcome.min_fact_recall)
        return RuleVerdict(ok, f"information task: {len(missing)} of {len(expected)} facts not given "
                               f"({', '.join(missing[:5])})", {"facts": expected, "missing_facts": missing})


class AnswerRule:
    """``answer``: the episode's final answer matches one of the task's accepted answers."""

    name = "answer"

    def check(self, outcome: EpisodeOutcome) -> RuleVerdict:
        answer = final_answer(outcome.messages)
        accepted = accepted_answers(outcome.task)
        return RuleVerdict(answer_correct(answer, accepted),
                           "no final answer" if answer is None else f"the final answer matches none of {accepted[:3]}",
                           {"answer": answer, "accepted_answers": accepted})


class TestsRule:
    """``tests``: the repository's tests pass in the agent's final state."""

    name = "tests"

    def check(self, outcome: EpisodeOutcome) -> RuleVerdict:
        if outcome.world is None:
            raise ValueError("the tests rule needs the episode's world")
        ok, output = tests_passed(outcome.world)
        return RuleVerdict(ok, "the tests fail", {"tests_output": output[-2000:]})


_SUCCESS_RULES: dict[str, Any] = {}
"""Name -> rule object: the store of :data:`SUCCESS_RULES`."""


def _rule_object(name: str, obj: Any) -> Any:
    """A registered rule: an object with ``check``; a rule class or a zero-argument factory (what an entry
    point may name) is called for it."""
    if isinstance(obj, type) or (callable(obj) and not callable(getattr(obj, "check", None))):
        obj = obj()
    if not callable(getattr(obj, "check", None)):
        raise TypeError(f"register_success_rule({name!r}): the rule needs a check(outcome) method; "
                        f"got {type(obj).__name__}")
    return obj


SUCCESS_RULES: Registry[Any] = Registry(
    "success rule", group=ENTRY_POINT_GROUP, entries=_SUCCESS_RULES, factories=False, check=_rule_object,
    help=" (register your own with pivot_envs.success.register_success_rule)")
"""The success rules by name: the built-ins, :func:`register_success_rule`'s and the plugins' (entry points)."""


def register_success_rule(rule: Any, name: str | None = None, *, replace: bool = False) -> Any:
    """Register a success rule (an object with ``check(outcome) -> RuleVerdict | None`` and a ``name``) under
    ``name`` (default: ``rule.name``); a name that is taken raises unless ``replace``."""
    key = name or getattr(rule, "name", None)
    if not isinstance(key, str) or not key:
        raise ValueError(f"register_success_rule: {rule!r} has no name; give the rule a name attribute or pass name=")
    return SUCCESS_RULES.register(key, rule, replace=replace)


def success_rule_names() -> list[str]:
    return SUCCESS_RULES.names()


def success_rules(specs: Iterable[Any]) -> list[Any]:
    """Rule objects from names (registered rules) or rule objects; an unknown name raises, naming the known ones."""
    out = []
    for spec in specs:
        if isinstance(spec, str):
            out.append(SUCCESS_RULES.get(spec))
        elif isinstance(spec, type) and callable(getattr(spec, "check", None)):
            out.append(spec())  # a rule class: its instance
        elif callable(getattr(spec, "check", None)):
            out.append(spec)
        else:
            raise TypeError(f"a success rule is a registered name or an object with check(outcome); got {spec!r}")
    return out


def rule_name(rule: Any) -> str:
    return str(getattr(rule, "name", type(rule).__name__))


for _rule in (StateRule(), FactsRule(), AnswerRule(), TestsRule()):
    register_success_rule(_rule)
RULES = tuple(_SUCCESS_RULES)
"""The built-in rules' names."""
