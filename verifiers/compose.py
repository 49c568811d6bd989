"""Composition of verifiers: ``cascade``, ``all``, ``any``, ``weighted`` and ``by_tool``.

Children are verifier specs (a name, a config dict or a Verifier), so a whole
recipe is one JSON config. Execution decides what strings cannot::

    {"name": "cascade", "stages": [
        {"role": "gate",   "verifier": {"name": "tool_call", "normalizers": ["bfcl"], "coerce": "lenient"}},
        {"role": "accept", "verifier": "tool_call"},
        {"role": "decide", "verifier": {"name": "world_exec", "world": "tau2-airline"}}]}

The first stage is a cheap reject: a call that differs from the expert's even when case,
spaces, punctuation and number spellings are ignored (another tool, another value) fails without
running anything. The second accepts, without running anything, what ``tool_call``'s defaults call
the same: the same JSON values up to key order, number tolerance and schema defaults (on tau2's
airline and retail databases they accepted no call that executes differently). What is left
(``"abc123"`` for ``"ABC123"``, ``" ABC123"``, ``1.0`` for ``1``, ``"5"`` for ``5``) only the
world can tell, and ``world_exec`` decides it. An *accept* stage must be no more lenient than
the decider: ``{"role": "accept", "verifier": {"name": "tool_call", "normalizers": ["strip"]}}``
in front of ``world_exec`` would accept ``" ABC123 "``, which the world may reject.
(``benchmarks/rewards/world_exec_tau2.py`` scores this cascade against executing the calls on tau2's
airline database.)

``cascade`` runs its stages in order; each stage has a *role*:

- ``gate``: a fail stops the cascade with that (failing) result; a pass goes on;
- ``accept``: a pass stops the cascade with that (passing) result; a fail goes on;
- ``decide``: stops the cascade with its result, pass or fail.

A stage written as a bare spec (``"schema"`` or ``{"name": ...}``) is a
``gate``. When the stages run out, the last result stands (so a cascade of
gates is a short-circuit AND, and a failing final ``accept`` fails).

Errors (a result with ``error`` set) are never turned into a silent 0 or 1:

- a ``gate`` or ``decide`` stage that errors stops the cascade; the result carries the error;
- an ``accept`` stage that errors cannot accept, so the cascade goes on; a later
  pass stands (the erroring stage could only have accepted), a final *fail*
  carries the accept stage's error (it might have accepted).

``all`` passes when every child passes (reward: the minimum), ``any`` when one
does (reward: the maximum); both short-circuit by default (``all`` stops at the
first clean fail, ``any`` at the first clean pass) and an error decides only
when no clean child result decides: ``all`` with one clean fail is a clean
fail, otherwise an erroring child makes the result an error. ``weighted`` is
the weighted mean of its children's rewards, passing at ``threshold``; any
child error makes it an error. ``by_tool`` routes on the expert's tool name
(e.g. search calls -> fuzzy query, ``open`` -> exact doc id, text -> fuzzy).

Batches: every combinator runs each child once on the whole sub-batch that
reaches it (``verify_many``/``averify_many``), so children that batch or
parallelise (execution, judges) keep doing so inside a composition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Generator, Sequence

from pivot_envs.types import Action, Message, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier, VerifierSpec, broadcast, build_verifier, register_verifier

ROLES = ("gate", "accept", "decide")

Plan = Generator[tuple[Verifier, list[int]], list[VerifyResult], list[VerifyResult]]


def build_child(spec: VerifierSpec) -> Verifier:
    """Build a nested verifier. Every built-in is registered by then: importing any module of
    ``pivot_envs.verifiers`` runs the package's ``__init__``, which imports :mod:`.catalog`."""
    return build_verifier(spec)


class PicklesByConfig:
    """Mixin: pickle a verifier as its config, rebuilt with :func:`build_child` on load.

    Derived state (compiled validators, normaliser closures, caches) is never
    shipped; a worker rebuilds it from the small config.
    """

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        return (build_child, (self.config(),))  # type: ignore[attr-defined]  # a mixin: its verifier has config()


def run_child(child: Verifier, actions: list, pivots: list[Pivot]) -> list[VerifyResult]:
    """``child``'s results on a sub-batch; a failure of the whole batch is an error per item, not a crash."""
    try:
        results = child.verify_many(actions, pivots)
    except Exception as exc:  # noqa: BLE001 - a child's batch failure is an error per item, not a crash
        return [VerifyResult.failure(child.name, f"{type(exc).__name__}: {exc}") for _ in actions]
    return list(results)


async def arun_child(child: Verifier, actions: list, pivots: list[Pivot]) -> list[VerifyResult]:
    """The async form of :func:`run_child`."""
    try:
        results = await child.averify_many(actions, pivots)
    except Exception as exc:  # noqa: BLE001
        return [VerifyResult.failure(child.name, f"{type(exc).__name__}: {exc}") for _ in actions]
    return list(results)


class Composite(PicklesByConfig, Verifier):
    """Base of the combinators: subclasses write :meth:`_plan`, a generator that asks for
    ``(child, item indices)`` runs, receives their results, and returns the final results."""

    def _plan(self, n: int, pivots: list[Pivot]) -> Plan:  # pragma: no cover - abstract
        raise NotImplementedError

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        return self.verify_many([action], [pivot])[0]

    def verify_many(self, actions: Sequence[Action | str | Message], pivots: Sequence[Pivot] | Pivot) -> list[VerifyResult]:
        pivot_list = broadcast(pivots, len(actions))
        actions = list(actions)
        plan = self._plan(len(actions), pivot_list)
        try:
            child, idx = next(plan)
            while True:
                results = run_child(child, [actions[i] for i in idx], [pivot_list[i] for i in idx]) if idx else []
                child, idx = plan.send(results)
        except StopIteration as stop:
            return stop.value

    async def averify(self, action: Action, pivot: Pivot) -> VerifyResult:
        return (await self.averify_many([action], [pivot]))[0]

    async def averify_many(self, actions: Sequence[Action | str | Message], pivots: Sequence[Pivot] | Pivot) -> list[VerifyResult]:
        pivot_list = broadcast(pivots, len(actions))
        actions = list(actions)
        plan = self._plan(len(actions), pivot_list)
        try:
            child, idx = next(plan)
            while True:
                if idx:
                    results = await arun_child(child, [actions[i] for i in idx], [pivot_list[i] for i in idx])
                else:
                    results = []
                child, idx = plan.send(results)
        except StopIteration as stop:
            return stop.value


def _tag(result: VerifyResult) -> str:
    if result.error is not None:
        return "error"
    return "pass" if result.passed else "fail"


# --------------------------------------------------------------------------- cascade


@dataclass
class _Stage:
    verifier: Verifier
    role: str


@dataclass
class _CascadeState:
    done: VerifyResult | None = None
    last: VerifyResult | None = None
    accept_error: str | None = None
    trail: list[str] = field(default_factory=list)


def _parse_stage(spec: Any, index: int) -> _Stage:
    if isinstance(spec, dict) and "name" not in spec:
        unknown = set(spec) - {"verifier", "role"}
        if "verifier" not in spec or unknown:
            raise ValueError(
                f"cascade stage {index}: write a verifier spec or {{'role': 'gate'|'accept'|'decide', "
                f"'verifier': <spec>}}; got keys {sorted(spec)}"
            )
        role = spec.get("role", "gate")
        if role not in ROLES:
            raise ValueError(f"cascade stage {index}: role must be one of {ROLES}, got {role!r}")
        return _Stage(build_child(spec["verifier"]), role)
    return _Stage(build_child(spec), "gate")


@register_verifier("cascade")
@dataclass
class CascadeVerifier(Composite):
    """Stages in order, each a gate, an early accept or a decider (see the module docstring)."""

    stages: list[Any] = field(default_factory=list)
    """Stage specs: ``{"role": "gate"|"accept"|"decide", "verifier": <spec>}`` or a bare spec (a gate)."""

    _stages: list[_Stage] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.stages, list) or not self.stages:
            raise ValueError("cascade needs a non-empty list 'stages'")
        self._stages = [_parse_stage(s, i) for i, s in enumerate(self.stages)]

    def _plan(self, n: int, pivots: list[Pivot]) -> Plan:
        states = [_CascadeState() for _ in range(n)]
        for k, stage in enumerate(self._stages):
            idx = [i for i in range(n) if states[i].done is None]
            if not idx:
                break
            results = yield stage.verifier, idx
            for i, result in zip(idx, results):
                _advance(states[i], k, stage, result)
        return [_final(s) for s in states]


def _advance(state: _CascadeState, k: int, stage: _Stage, result: VerifyResult) -> None:
    state.trail.append(f"{k + 1}.{result.verifier} {stage.role}: {_tag(result)} ({result.reason})")
    state.last = result
    if result.error is not None:
        if stage.role == "accept":
            state.accept_error = state.accept_error or f"{result.verifier}: {result.error}"
        else:
            state.done = result
    elif stage.role == "decide" or (stage.role == "gate") != result.passed:
        state.done = result


def _final(state: _CascadeState) -> VerifyResult:
    result = state.done or state.last
    assert result is not None
    error = result.error
    if error is None and not result.passed and state.accept_error is not None:
        error = f"an accept stage errored, so this fail is not certain: {state.accept_error}"
    return VerifyResult(
        reward=0.0 if error is not None else result.reward,
        passed=False if error is not None else result.passed,
        verifier=result.verifier,
        reason=" | ".join(state.trail),
        error=error,
    )


# --------------------------------------------------------------------------- all / any / weighted


def _children(specs: Any, who: str) -> list[Verifier]:
    if not isinstance(specs, list) or not specs:
        raise ValueError(f"{who} needs a non-empty list 'verifiers'")
    return [build_child(s) for s in specs]


@dataclass
class _BoolComposite(Composite):
    verifiers: list[Any] = field(default_factory=list)
    """Child verifier specs, run in order."""
    short_circuit: bool = True
    """Stop at the first clean result that decides (a fail for ``all``, a pass for ``any``)."""

    _children: list[Verifier] = field(init=False, repr=False, compare=False)

    _deciding_pass: ClassVar[bool] = False
    """The clean outcome that decides: a fail (False) for ``all``, a pass (True) for ``any``."""

    def __post_init__(self) -> None:
        self._children = _children(self.verifiers, self.name)

    def _plan(self, n: int, pivots: list[Pivot]) -> Plan:
        decider = self._deciding_pass
        got: list[list[VerifyResult]] = [[] for _ in range(n)]
        decided = [False] * n
        for child in self._children:
            idx = [i for i in range(n) if not (self.short_circuit and decided[i])]
            if not idx:
                break
            results = yield child, idx
            for i, result in zip(idx, results):
                got[i].append(result)
                if result.error is None and result.passed == decider:
                    decided[i] = True
        return [self._combine(results) for results in got]

    def _combine(self, results: list[VerifyResult]) -> VerifyResult:
        decider = self._deciding_pass
        clean = [r for r in results if r.error is None]
        errors = [f"{r.verifier}: {r.error}" for r in results if r.error is not None]
        trail = " | ".join(f"{r.verifier}: {_tag(r)} ({r.reason})" for r in results)
        deciding = [r for r in clean if r.passed == decider]
        if deciding:
            pick = max if decider else min
            reward = pick(r.reward for r in deciding)
            return VerifyResult(reward, decider, deciding[0].verifier, trail)
        if errors:
            return VerifyResult(0.0, False, self.name, trail, error="; ".join(errors))
        pick = min if not decider else max
        reward = pick(r.reward for r in clean)
        return VerifyResult(reward, not decider, self.name, trail)


@register_verifier("all")
@dataclass
class AllVerifier(_BoolComposite):
    """Passes when every child passes; reward = the lowest child reward."""

    _deciding_pass: ClassVar[bool] = False


@register_verifier("any")
@dataclass
class AnyVerifier(_BoolComposite):
    """Passes when some child passes; reward = the highest passing reward."""

    _deciding_pass: ClassVar[bool] = True


@register_verifier("weighted")
@dataclass
class WeightedVerifier(Composite):
    """Weighted mean of the children's rewards; passes when it reaches ``threshold``."""

    verifiers: list[Any] = field(default_factory=list)
    """Child verifier specs."""
    weights: list[float] | None = None
    """One non-negative weight per child (default: equal weights)."""
    threshold: float = 0.5
    """Pass when the weighted mean reward is at least this."""

    _children: list[Verifier] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._children = _children(self.verifiers, "weighted")
        if self.weights is not None:
            if len(self.weights) != len(self._children):
                raise ValueError(f"weighted: {len(self.weights)} weights for {len(self._children)} verifiers")
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError(f"weighted: weights must be >= 0 with a positive sum, got {self.weights}")

    def _plan(self, n: int, pivots: list[Pivot]) -> Plan:
        weights = self.weights or [1.0] * len(self._children)
        total = float(sum(weights))
        got: list[list[VerifyResult]] = [[] for _ in range(n)]
        for child in self._children:
            results = yield child, list(range(n))
            for i, result in enumerate(results):
                got[i].append(result)
        out = []
        for results in got:
            trail = " | ".join(f"{r.verifier}: {_tag(r)} ({r.reason})" for r in results)
            errors = [f"{r.verifier}: {r.error}" for r in results if r.error is not None]
            if errors:
                out.append(VerifyResult(0.0, False, self.name, trail, error="; ".join(errors)))
                continue
            reward = sum(w * r.reward for w, r in zip(weights, results)) / total
            out.append(VerifyResult(reward, reward >= self.threshold, self.name, f"mean {reward:.3f}: {trail}"))
        return out


# --------------------------------------------------------------------------- by_tool


@register_verifier("by_tool")
@dataclass
class ByToolVerifier(Composite):
    """Routes each pivot to a child by the expert's tool name.

    The route is ``routes[name]`` when every expert call is to ``name`` (or
    to tools sharing that route), ``text`` when the expert made no call, and
    ``default`` otherwise.
    """

    routes: dict[str, Any] = field(default_factory=dict)
    """Tool name -> verifier spec for turns where the expert calls that tool."""
    text: Any = "fuzzy"
    """Verifier spec for turns where the expert made no tool call."""
    default: Any = "tool_call"
    """Verifier spec for every other turn."""

    _routes: dict[str, Verifier] = field(init=False, repr=False, compare=False)
    _text: Verifier = field(init=False, repr=False, compare=False)
    _default: Verifier = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._routes = {str(k): build_child(v) for k, v in self.routes.items()}
        self._text = build_child(self.text)
        self._default = build_child(self.default)

    def route(self, pivot: Pivot) -> Verifier:
        """The child that decides at ``pivot``."""
        calls = pivot.expert.get("tool_calls") or []
        if not calls:
            return self._text
        chosen = None
        for call in calls:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            child = self._routes.get(str(fn.get("name") if isinstance(fn, dict) else ""))
            if child is None or (chosen is not None and child is not chosen):
                return self._default
            chosen = child
        return chosen or self._default

    def _plan(self, n: int, pivots: list[Pivot]) -> Plan:
        groups: dict[int, list[int]] = {}
        children: dict[int, Verifier] = {}
        for i, pivot in enumerate(pivots):
            child = self.route(pivot)
            groups.setdefault(id(child), []).append(i)
            children[id(child)] = child
        out: list[VerifyResult | None] = [None] * n
        for key, idx in groups.items():
            results = yield children[key], idx
            for i, result in zip(idx, results):
                out[i] = result
        return [r for r in out if r is not None]


__all__ = [
    "ROLES",
    "AllVerifier",
    "AnyVerifier",
    "ByToolVerifier",
    "CascadeVerifier",
    "Composite",
    "PicklesByConfig",
    "WeightedVerifier",
    "arun_child",
    "build_child",
    "run_child",
]
