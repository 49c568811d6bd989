"""Scoring many (action, pivot) pairs at once: which verifier scores a pivot, and one routine that scores.

Every caller that scores more than one action (the env's ``step_many``, profiling, evaluation, the
trainer, ``pivot-envs verify``) goes through :func:`verify_batch`::

    from pivot_envs.verifiers.batch import VerifierResolver, verify_batch

    resolver = VerifierResolver()                  # each pivot's domain default (or VerifierResolver("exec"))
    results = verify_batch(actions, pivots, resolver.for_pivot)

* pairs that share a verifier go to it in ONE ``verify_many`` call, in input order, so verifiers
  that parallelise (LLM judge, sandboxed execution) see the whole batch;
* a verifier whose ``verify_many`` raises, returns the wrong number of results, something that is
  not a :class:`~pivot_envs.types.VerifyResult`, or a reward outside [0, 1] yields error results for
  its pairs (``VerifyResult.error``): the batch goes on, and no failure is ever a silent 0 or 1.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence, cast

from pivot_envs.domains import get_domain
from pivot_envs.types import Action, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier, VerifierSpec, build_verifier


class VerifierResolver:
    """The functional verifier of a pivot, built once per distinct spec.

    Args:
        default: the verifier for every pivot (name, config or object); ``None``: each pivot's
            domain default (``get_domain(pivot.domain).verifier_spec()``).
        fallback: the verifier of a pivot that has no domain when ``default`` is ``None``;
            ``None``: such a pivot is an error (``ValueError`` naming the fix).
    """

    def __init__(self, default: VerifierSpec | None = None, fallback: VerifierSpec | None = None):
        self.default = None if default is None else build_verifier(default)
        self.fallback = fallback
        self._cache: dict[str, Verifier] = {}
        self._by_domain: dict[str, Verifier] = {}  # the hot path: one lookup per scored sample

    def for_pivot(self, pivot: Pivot) -> Verifier:
        if self.default is not None:
            return self.default
        verifier = self._by_domain.get(pivot.domain)
        if verifier is None:
            verifier = self._by_domain[pivot.domain] = self.get(None, pivot.domain)
        return verifier

    def get(self, spec: VerifierSpec | None = None, domain: str = "") -> Verifier:
        """The verifier of ``spec`` (a row's own), else the default, else ``domain``'s default."""
        if spec is None:
            if self.default is not None:
                return self.default
            spec = self._domain_spec(domain)
        if isinstance(spec, Verifier):
            return spec
        key = json.dumps(spec, sort_keys=True, default=str)
        if key not in self._cache:
            self._cache[key] = build_verifier(spec)
        return self._cache[key]

    def _domain_spec(self, domain: str) -> VerifierSpec:
        if domain:
            return get_domain(domain).verifier_spec()
        if self.fallback is not None:
            return self.fallback
        raise ValueError("a pivot has no 'domain', so it has no default verifier: "
                         "give a verifier (CLI: --verifier NAME or --config FILE)")

    def config(self) -> dict[str, Any] | None:
        """The default verifier's config (``None``: per-domain defaults)."""
        return None if self.default is None else self.default.config()


VerifierOf = Callable[[Pivot], Verifier]


def verify_batch(actions: Sequence[Action], pivots: Sequence[Pivot],
                 verifier: Verifier | VerifierOf | Sequence[Verifier]) -> list[VerifyResult]:
    """Score ``actions[i]`` at ``pivots[i]``.

    ``verifier`` is one verifier for all pairs, a function pivot -> verifier, or a list with one
    verifier per pair. One ``verify_many`` call per distinct verifier; results in input order.
    """
    if len(actions) != len(pivots):
        raise ValueError(f"verify_batch got {len(actions)} actions but {len(pivots)} pivots")
    if isinstance(verifier, Verifier):
        return safe_verify_many(verifier, list(actions), list(pivots))
    chosen = [verifier(p) for p in pivots] if callable(verifier) else list(verifier)
    if len(chosen) != len(actions):
        raise ValueError(f"verify_batch got {len(chosen)} verifiers for {len(actions)} actions")
    groups: dict[int, tuple[Verifier, list[int]]] = {}
    for i, v in enumerate(chosen):
        groups.setdefault(id(v), (v, []))[1].append(i)
    out: list[VerifyResult | None] = [None] * len(actions)
    for v, positions in groups.values():
        results = safe_verify_many(v, [actions[i] for i in positions], [pivots[i] for i in positions])
        for i, result in zip(positions, results):
            out[i] = result
    return cast(list[VerifyResult], out)  # every position is in one group


def safe_verify_many(verifier: Verifier, actions: list[Action], pivots: list[Pivot]) -> list[VerifyResult]:
    """``verifier.verify_many`` that never raises and always returns one valid result per action."""
    if not actions:
        return []
    name = getattr(verifier, "name", type(verifier).__name__)
    try:
        results = list(verifier.verify_many(actions, pivots))
    except Exception as exc:  # noqa: BLE001 - a verifier bug masks its pairs, it does not end the batch
        return [VerifyResult.failure(name, f"verify_many raised {type(exc).__name__}: {exc}")] * len(actions)
    if len(results) != len(actions):
        error = f"verify_many returned {len(results)} results for {len(actions)} actions"
        return [VerifyResult.failure(name, error)] * len(actions)
    for k, r in enumerate(results):
        if not isinstance(r, VerifyResult):
            results[k] = VerifyResult.failure(name, f"verify_many returned {type(r).__name__}, not a VerifyResult")
        elif r.error is None and not 0.0 <= float(r.reward) <= 1.0:
            results[k] = VerifyResult.failure(name, f"reward {r.reward!r} is outside [0, 1]")
    return results
