"""Task success of a whole episode: one function per rule, combined per domain by :func:`task_success`.

Rules (:data:`RULES`):

``state``
    The world's digest at the end equals the digest the expert trajectory reached (its tool calls
    replayed in a fresh world: :func:`pivot_envs.episode_env.expert_outcome`).
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

import difflib
import json
import re
import warnings
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Iterable, Sequence

from pivot_envs.domains import find_domain
from pivot_envs.types import Message, Trajectory, content_text

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

_MONTH_NAMES = ["january", "february", "march", "april", "may", "june", "july", "august", "september",
                "october", "november", "december"]
_MONTHS: dict[str, int] = {}
for _i, _name in enumerate(_MONTH_NAMES, start=1):
    _MONTHS[_name] = _i
    _MONTHS[_name[:3]] = _i
_MONTHS["sept"] = 9
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))

_DATE_ISO = re.compile(r"(?<![\w-])(\d{4})-(\d{2})-(\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?(?![\w-])")
_DATE_MD = re.compile(rf"\b({_MONTH_RE})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}}\b)?", re.IGNORECASE)
_DATE_DM = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_RE})\b\.?(?:,?\s+\d{{4}}\b)?", re.IGNORECASE)
_DATE_SLASH = re.compile(r"(?<![\w/])(\d{1,2})/(\d{1,2})(?:/(?:\d{4}|\d{2}))?(?![\w/])")
_TIME = re.compile(r"(?<![\w:])(\d{1,2}):(\d{2})(?::\d{2})?(?:\s*([ap])\.?\s?m\b\.?)?(?![\w:])|\b(\d{1,2})\s*([ap])\.?\s?m\b\.?",
                   re.IGNORECASE)
_GROUPED = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w,]|\.\d)")
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[-_./:@+][A-Za-z0-9]+)*")
_NUMBER = re.compile(r"^(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")
_NAME = re.compile(r"^[A-Z][A-Za-z'&.-]*(?:\s+[A-Za-z'&.-]+){1,5}$")


def _number(text: str) -> str:
    value = float(text.replace(",", ""))
    return "num:" + (f"{value:.6f}".rstrip("0").rstrip("."))


def _date(month: int, day: int) -> str | None:
    if 1 <= month <= 12 and 1 <= day <= 31:
        return f"date:{month:02d}-{day:02d}"
    return None


def _time(hour: int, minute: int, half: str | None) -> str | None:
    if half:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if half.lower() == "p" else 0)
    if 0 <= hour <= 23 and 0 <= minute <= 59:
        return f"time:{hour:02d}:{minute:02d}"
    return None


def typed_values(text: str) -> set[str]:
    """The dates, times, numbers and IDs in ``text``, normalised (see the module docstring)."""
    out: set[str] = set()
    if not text:
        return out

    def take(pattern: re.Pattern[str], make: Any, source: str) -> str:
        def sub(m: re.Match[str]) -> str:
            value = make(m)
            if value is None:
                return m.group(0)
            out.add(value)
            return " "
        return pattern.sub(sub, source)

    text = take(_DATE_ISO, lambda m: _date(int(m.group(2)), int(m.group(3))), text)
    text = take(_DATE_MD, lambda m: _date(_MONTHS[m.group(1).lower()], int(m.group(2))), text)
    text = take(_DATE_DM, lambda m: _date(_MONTHS[m.group(2).lower()], int(m.group(1))), text)
    text = take(_DATE_SLASH, lambda m: _date(int(m.group(1)), int(m.group(2))), text)
    text = take(_TIME, lambda m: (_time(int(m.group(1)), int(m.group(2)), m.group(3)) if m.group(1) is not None
                                  else _time(int(m.group(4)), 0, m.group(5))), text)
    text = take(_GROUPED, lambda m: _number(m.group(0)), text)
    for token in _TOKEN.findall(text):
        if _NUMBER.match(token):
            out.add(_number(token))
        elif any(c.isdigit() for c in token):
            out.add("id:" + token.lower())
    return out


def _fold(text: str) -> str:
    return " ".join(text.lower().split())


def _contains(haystack: str, needle: str) -> bool:
    """``needle`` occurs in ``haystack`` as whole words (both already folded)."""
    return bool(needle) and re.search(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", haystack) is not None


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def tool_values(content: Any) -> tuple[set[str], set[str]]:
    """``(typed values, names)`` of one tool result: its JSON leaves, or its text."""
    text = content_text(content)
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return typed_values(text), set()
    typed: set[str] = set()
    names: set[str] = set()
    for leaf in _leaves(data):
        if isinstance(leaf, bool) or leaf is None:
            continue
        if isinstance(leaf, (int, float)):
            typed.add(_number(repr(float(leaf))) if not isinstance(leaf, int) else _number(str(leaf)))
            continue
        leaf = str(leaf)
        typed |= typed_values(leaf)
        stripped = " ".join(leaf.split())
        if len(stripped) <= 80 and _NAME.match(stripped):
            names.add(_fold(stripped))
    return typed, names


def _given(messages: Sequence[Message]) -> tuple[set[str], str]:
    """The typed values and the folded text that the task itself gives (system and user messages)."""
    text = " ".join(content_text(m.get("content")) for m in messages if m.get("role") in ("system", "user"))
    return typed_values(text), _fold(text)


def _stated(text: str, seen_typed: set[str], seen_names: set[str], given: set[str], given_text: str) -> set[str]:
    """The facts ``text`` states: tool-result values it repeats that the task did not give."""
    facts = (typed_values(text) & seen_typed) - given
    folded = _fold(text)
    return facts | {"name:" + n for n in seen_names if _contains(folded, n) and not _contains(given_text, n)}


def _absorb(message: Message, typed: set[str], names: set[str]) -> None:
    """Add the values of ``message`` to ``typed`` and ``names`` when it is a tool result."""
    if message.get("role") == "tool":
        t, n = tool_values(message.get("content"))
        typed |= t
        names |= n


def _tool_values_before(messages: Sequence[Message]) -> tuple[set[str], set[str]]:
    typed: set[str] = set()
    names: set[str] = set()
    for m in messages:
        _absorb(m, typed, names)
    return typed, names


def expert_facts(messages: Sequence[Message]) -> list[str]:
    """The facts the expert gave in ``messages`` (a whole trajectory): sorted ``kind:value`` strings,
    names as ``name:<folded text>`` (see the module docstring)."""
    given, given_text = _given(messages)
    seen_typed: set[str] = set()
    seen_names: set[str] = set()
    facts: set[str] = set()
    for m in messages:
        _absorb(m, seen_typed, seen_names)
        if m.get("role") == "assistant" and content_text(m.get("content")):
            facts |= _stated(content_text(m.get("content")), seen_typed, seen_names, given, given_text)
    return sorted(facts)


def answer_facts(context: Sequence[Message], answer: str) -> list[str]:
    """The facts that ``answer`` (one assistant text) states after the conversation ``context``: the
    same rule as :func:`expert_facts`, for one turn (a final-turn pivot's expert answer)."""
    return sorted(_stated(answer, *_tool_values_before(context), *_given(context))) if answer else []


def agent_answer(messages: Sequence[Message]) -> str:
    """The agent's answer for the ``facts`` rule: the text of every assistant message, joined."""
    return "\n".join(content_text(m.get("content")) for m in messages if m.get("role") == "assistant" and content_text(m.get("content")))


def facts_given(answer: str, facts: Sequence[str], min_recall: float = 1.0) -> tuple[bool, list[str]]:
    """Whether ``answer`` carries at least ``min_recall`` of ``facts``; returns ``(passed, missing facts)``."""
    if not facts:
        return True, []
    typed = typed_values(answer)
    folded = _fold(answer)
    missing = [f for f in facts if not (_contains(folded, f[5:]) if f.startswith("name:") else f in typed)]
    recall = 1.0 - len(missing) / len(facts)
    return recall >= min_recall - 1e-9, missing


def _calls(messages: Sequence[Message], skip_failed: bool) -> list[tuple[str, str]]:
    """``(name, canonical arguments)`` of the assistant tool calls in ``messages``."""
    failed: set[str] = set()
    if skip_failed:
        failed = {str(m.get("tool_call_id")) for m in messages
                  if m.get("role") == "tool" and content_text(m.get("content")).lstrip().startswith("Error")}
    out = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for call in m.get("tool_calls") or []:
            if str(call.get("id")) in failed:
                continue
            fn = call.get("function") or {}
            args = fn.get("arguments") or "{}"
            try:
                args = json.dumps(json.loads(args) if isinstance(args, str) else args, sort_keys=True)
            except (json.JSONDecodeError, TypeError):
                args = str(args)
            out.append((str(fn.get("name", "")), args))
    return out


def calls_made(messages: Sequence[Message], expert_messages: Sequence[Message]) -> tuple[bool, list[str]]:
    """Whether the agent (``messages``) made every tool call the expert made that did not fail;
    returns ``(passed, the missing calls as NAME(ARGS))``."""
    made = set(_calls(messages, skip_failed=False))
    missing = [f"{name}({args})" for name, args in dict.fromkeys(_calls(expert_messages, skip_failed=True))
               if (name, args) not in made]
    return not missing, missing


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
    from pivot_envs.actions import parse_action
    from pivot_envs.types import Pivot
    from pivot_envs.verifiers import build_verifier
    from pivot_envs.verifiers.defaults import ANSWER_FUZZY

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
_RULE_PLUGINS_LOADED: list[bool] = []


def register_success_rule(rule: Any, name: str | None = None, *, replace: bool = False) -> Any:
    """Register a success rule (an object with ``check(outcome) -> RuleVerdict | None`` and a ``name``) under
    ``name`` (default: ``rule.name``); a name that is taken raises unless ``replace``."""
    key = name or getattr(rule, "name", None)
    if not isinstance(key, str) or not key:
        raise ValueError(f"register_success_rule: {rule!r} has no name; give the rule a name attribute or pass name=")
    if not callable(getattr(rule, "check", None)):
        raise TypeError(f"register_success_rule({key!r}): the rule needs a check(outcome) method; "
                        f"got {type(rule).__name__}")
    if key in _SUCCESS_RULES and not replace:
        raise ValueError(f"success rule {key!r} is already registered; pass replace=True to override it")
    _SUCCESS_RULES[key] = rule
    return rule


def success_rule_names() -> list[str]:
    _load_rule_plugins()
    return sorted(_SUCCESS_RULES)


def success_rules(specs: Iterable[Any]) -> list[Any]:
    """Rule objects from names (registered rules) or rule objects; an unknown name raises, naming the known ones."""
    out = []
    for spec in specs:
        if isinstance(spec, str):
            _load_rule_plugins()
            if spec not in _SUCCESS_RULES:
                close = difflib.get_close_matches(spec, list(_SUCCESS_RULES), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"unknown success rule {spec!r}{hint}; rules: {', '.join(success_rule_names())} "
                                 "(register your own with pivot_envs.success.register_success_rule)")
            out.append(_SUCCESS_RULES[spec])
        elif isinstance(spec, type) and callable(getattr(spec, "check", None)):
            out.append(spec())  # a rule class: its instance
        elif callable(getattr(spec, "check", None)):
            out.append(spec)
        else:
            raise TypeError(f"a success rule is a registered name or an object with check(outcome); got {spec!r}")
    return out


def rule_name(rule: Any) -> str:
    return str(getattr(rule, "name", type(rule).__name__))


def _load_rule_plugins() -> None:
    """Register the rules published by installed packages (entry-point group ``pivot_envs.success_rules``)."""
    if _RULE_PLUGINS_LOADED:
        return
    _RULE_PLUGINS_LOADED.append(True)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()  # a rule object, a rule class, or a zero-argument factory
            rule = obj() if isinstance(obj, type) or not callable(getattr(obj, "check", None)) else obj
            if ep.name not in _SUCCESS_RULES:
                register_success_rule(rule, ep.name)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the library
            warnings.warn(f"pivot_envs: could not load success rule plugin {ep.name!r} ({ep.value}): {exc}", stacklevel=2)


for _rule in (StateRule(), FactsRule(), AnswerRule(), TestsRule()):
    register_success_rule(_rule)
RULES = tuple(_SUCCESS_RULES)
"""The built-in rules' names."""
