"""The offline pivot filter (PivotRL): profiled candidates D_cand -> training pivots.

Modes (``FilterConfig.mode``):

* ``adv`` — the paper's D_adv: keep a pivot when its profiled reward variance is
  *strictly* greater than ``min_var`` and its mean *strictly* below ``max_mean``
  (``lambda_diff``): ``var > min_var and mean < max_mean``.
* ``random`` — the D_cand ablation: ``n`` candidates drawn uniformly (seeded)
  from *all* candidates, profiled or not; ``n`` defaults to the size D_adv would
  have with the same ``min_var``/``max_mean``, so both arms train on as many states.
* ``pvpo`` — keep states of accuracy ``0 < mean < 1`` and also the states of
  accuracy 0, flagged ``pivot.meta["inject_expert"] = True`` (the trainer puts the
  expert action into their all-zero groups); states of accuracy 1 are dropped.
  ``min_var``/``max_mean`` are not used.

``dedup_actions`` (any mode but ``pvpo``) keeps one pivot per expert action, compared in a canonical form (the
same tool calls with arguments as canonical JSON, shell commands in their canonical spelling: ``ls``, ``ls`` and
``ls `` are one action): the one with the lowest profiled mean (the hardest), ties to the first. The paper trains
on D_adv "with commands de-duplicated": a common look-up (``ls``, ``cat README.md``) met at a hundred states is one
lesson, not a hundred.

Pivots keep their input order. Unscored pivots (every profiling sample hit a
verifier error: ``meta["profile_unscored"]``) and unprofiled ones are dropped by
``adv`` and ``pvpo`` and counted in the :class:`FilterAudit`.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from typing import Any, Sequence

from pivot_envs.types import Pivot
from pivot_envs.verifiers.helpers.shell_words import shell_words

MODES = ("adv", "random", "pvpo")


@dataclass
class FilterConfig:
    """How to choose training pivots from profiled candidates.

    Attributes:
        mode: ``adv`` (D_adv), ``random`` (uniform D_cand ablation) or ``pvpo``.
        min_var: ``adv``: keep only ``var > min_var`` (strictly); the paper uses 0.
        max_mean: ``adv``: keep only ``mean < max_mean`` (strictly): the paper's ``lambda_diff``.
        n: ``random``: how many candidates to draw; ``None`` = as many as ``adv`` keeps.
        seed: ``random``: the sampling seed.
        dedup_actions: keep one pivot per expert action (see the module docstring); ``duplicates`` in the audit.
    """

    mode: str = "adv"
    min_var: float = 0.0
    max_mean: float = 1.0
    n: int | None = None
    seed: int = 0
    dedup_actions: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"filter mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.n is not None and self.n < 0:
            raise ValueError(f"n must be >= 0, got {self.n}")


@dataclass
class FilterAudit:
    """What the filter kept and why the rest went.

    Attributes:
        mode: the filter mode.
        candidates: input pivots.
        unprofiled: pivots without a profile (``adv``/``pvpo`` drop them).
        unscored: pivots whose K samples all hit verifier errors (dropped).
        zero_var: scored pivots with ``var <= min_var`` (``adv``'s first cut).
        too_easy: pivots with ``var > min_var`` but ``mean >= max_mean`` (``adv``'s second cut).
        solved: ``pvpo``: accuracy 1 (dropped).
        kept: output pivots.
        inject_expert: ``pvpo``: kept pivots of accuracy 0 flagged for expert injection.
        duplicates: pivots dropped because another kept pivot has the same expert action (``dedup_actions``).
        params: the config used.
    """

    mode: str
    candidates: int = 0
    unprofiled: int = 0
    unscored: int = 0
    zero_var: int = 0
    too_easy: int = 0
    solved: int = 0
    kept: int = 0
    inject_expert: int = 0
    duplicates: int = 0
    params: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """``(label, value)`` rows for printing."""
        p = self.params
        rows = [("candidates", str(self.candidates))]
        if self.unprofiled:
            rows.append(("unprofiled (dropped)" if self.mode != "random" else "unprofiled", str(self.unprofiled)))
        if self.unscored:
            rows.append(("unscored: all samples errored" + (" (dropped)" if self.mode != "random" else ""),
                         str(self.unscored)))
        if self.mode in ("adv", "random"):
            suffix = "" if self.mode == "adv" else " (in D_adv terms)"
            rows.append((f"var <= {p['min_var']:g}{suffix}", str(self.zero_var)))
            rows.append((f"var > {p['min_var']:g} but mean >= {p['max_mean']:g}{suffix}", str(self.too_easy)))
        if self.mode == "pvpo":
            rows.append(("accuracy 1 (dropped)", str(self.solved)))
            rows.append(("accuracy 0 (kept, inject_expert)", str(self.inject_expert)))
        if self.duplicates:
            rows.append(("the same expert action as a kept pivot (dropped)", str(self.duplicates)))
        share = f" ({self.kept / self.candidates:.1%})" if self.candidates else ""
        label = {"adv": "kept: D_adv", "random": f"kept: uniform sample (seed {p['seed']})", "pvpo": "kept"}[self.mode]
        rows.append((label, f"{self.kept}{share}"))
        return rows


def is_scored(pivot: Pivot) -> bool:
    """Whether the pivot has a profile with at least one scored sample."""
    return pivot.profile is not None and bool(pivot.profile.rewards) and not pivot.meta.get("profile_unscored")


def filter_pivots(pivots: Sequence[Pivot], config: FilterConfig | None = None) -> tuple[list[Pivot], FilterAudit]:
    """Apply the filter; returns the kept pivots (input order) and the audit. Inputs are not modified."""
    cfg = config or FilterConfig()
    pivots = list(pivots)
    audit = FilterAudit(mode=cfg.mode, candidates=len(pivots), params=dataclasses.asdict(cfg))
    adv_keep = []
    for i, p in enumerate(pivots):
        if p.profile is None:
            audit.unprofiled += 1
        elif not is_scored(p):
            audit.unscored += 1
        elif p.profile.var <= cfg.min_var:
            audit.zero_var += 1
        elif p.profile.mean >= cfg.max_mean:
            audit.too_easy += 1
        else:
            adv_keep.append(i)
    if cfg.mode == "adv":
        kept = [pivots[i] for i in _distinct(pivots, adv_keep, audit)] if cfg.dedup_actions else [pivots[i] for i in adv_keep]
    elif cfg.mode == "random":
        n = len(adv_keep) if cfg.n is None else cfg.n
        if cfg.n is None and audit.unprofiled == len(pivots) and pivots:
            raise ValueError("mode 'random' without n draws as many pivots as D_adv, which needs profiles: "
                             "profile the pivots first or give n (CLI: --n N)")
        if n > len(pivots):
            raise ValueError(f"cannot draw n={n} pivots from {len(pivots)} candidates: give n <= {len(pivots)}")
        pool = _distinct(pivots, range(len(pivots)), audit) if cfg.dedup_actions else list(range(len(pivots)))
        if n > len(pool):
            raise ValueError(f"cannot draw n={n} pivots from {len(pool)} distinct candidates: give n <= {len(pool)}")
        chosen = sorted(random.Random(cfg.seed).sample(pool, n))
        kept = [pivots[i] for i in chosen]
    else:
        kept = []
        for p in pivots:
            if not is_scored(p):
                continue
            mean = p.profile.mean  # type: ignore[union-attr]
            if mean >= 1.0:
                audit.solved += 1
                continue
            meta = {key: v for key, v in p.meta.items() if key != "inject_expert"}
            if mean <= 0.0:
                meta["inject_expert"] = True
                audit.inject_expert += 1
            kept.append(dataclasses.replace(p, meta=meta))
    audit.kept = len(kept)
    return kept, audit


def action_key(pivot: Pivot) -> str:
    """The expert action of ``pivot`` in a canonical form: tool names with canonical JSON arguments, shell commands
    (a ``command`` argument) in their canonical spelling, text with whitespace collapsed."""
    calls = []
    for call in pivot.expert.get("tool_calls") or []:
        fn = call.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except (json.JSONDecodeError, TypeError):
            args = fn.get("arguments")
        if isinstance(args, dict) and isinstance(args.get("command"), str):
            args = {**args, "command": shell_words(args["command"])}
        calls.append([fn.get("name"), args])
    if calls:
        return json.dumps(calls, sort_keys=True)
    return " ".join(str(pivot.expert.get("content") or "").split())


def _profiled_mean(pivot: Pivot) -> float:
    return pivot.profile.mean if pivot.profile is not None else 0.0


def _distinct(pivots: Sequence[Pivot], indices: Any, audit: FilterAudit) -> list[int]:
    """Of ``indices``, one per expert action: the lowest profiled mean, ties to the first (input order kept)."""
    indices = list(indices)
    best: dict[str, int] = {}
    for i in indices:
        key = action_key(pivots[i])
        mean = _profiled_mean(pivots[i])
        j = best.get(key)
        if j is None or mean < _profiled_mean(pivots[j]):
            best[key] = i
    keep = sorted(best.values())
    audit.duplicates += len(indices) - len(keep)
    return keep
