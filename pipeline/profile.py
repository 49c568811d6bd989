"""Offline profiling of pivot candidates under a reference policy (PivotRL step (i)).

At every candidate state ``s_t`` the reference agent ``pi_0`` samples K actions;
the domain verifier scores them against the expert action, and the pivot gets::

    pivot.profile = Profile(k, rewards, mean, var, strict_mean, errors)

* ``k``: samples drawn; ``rewards``: the functional rewards of the samples the
  verifier *scored*, in sample order; ``errors``: samples whose verification
  failed (``VerifyResult.error``: judge down, sandbox crash...). Errored samples
  are kept out of every statistic, never counted as 0 or 1.
* ``mean = mean(rewards)`` and ``var = mean((r - mean)^2)`` (population
  variance, as in the paper); ``strict_mean``: mean strict-match reward of the
  same scored samples (the paper's ``r_strict`` baseline).
* ``pivot.meta["profile_strict"]``: per-sample strict rewards and
  ``pivot.meta["profile_passed"]``: per-sample functional ``passed`` flags, both
  aligned with ``rewards`` (what the miss-rate report needs);
  ``pivot.meta["profile_accepted_by"]``: per sample, what accepted it (``exact``, ``effect``,
  ``state``, ... or ``None``: :mod:`pivot_envs.verifiers.accepted_by`);
  ``pivot.meta["profile_error"]``: the first verifier error, when any;
  ``pivot.meta["profile_hack"]``: the hack monitor's counts over the pivot's accepted samples
  (:meth:`pivot_envs.verifiers.hack_monitor.HackCounts.counts`: more calls than the expert, a stop at a
  call pivot, an answer over 3x the expert's length, per ``accepted_by`` category). Every finished batch
  logs their shares (logger ``pivot_envs.pipeline``, INFO); :func:`pivot_envs.pipeline.report.profile_report`
  adds them up.
* When *every* sample errored the pivot is **unscored**: ``rewards == []``,
  ``mean = var = 0.0`` (NaN-free), ``strict_mean = None`` and
  ``pivot.meta["profile_unscored"] = True``; every filter mode drops it.

Usage::

    from pivot_envs.pipeline.profile import profile_pivots

    profiled = profile_pivots(pivots, "noisy_expert:0.5", None, k=8, seed=0,
                              checkpoint="out/profiled.jsonl.checkpoint")

Batching: the input is cut into fixed batches of ``batch_pivots`` consecutive
pivots and each batch costs ONE ``agent.sample(batch, n=k, seed=seed)`` call and
one ``verify_many`` call per verifier, so a model generates all ``k`` samples of
many pivots at once.

Seeding: every batch is sampled with the same ``seed``. ``replay`` and
``noisy_expert`` make sample ``j`` at pivot ``p`` a function of ``(seed, p.id, j)``
only; the batched ``hf`` agent seeds each ``generate`` call from the seed and the
ids of its pivots. Either way a fixed batch layout (batch ``b`` = input positions
``[b * batch_pivots, (b + 1) * batch_pivots)``) makes a resumed run and a Ray run
equal to an uninterrupted single-process run with the same ``batch_pivots``
(which the checkpoint therefore records).

Checkpointing: with ``checkpoint=PATH`` every finished batch is appended to a
JSONL sidecar (one line per batch, written in one call and flushed). A header
line records what the numbers depend on (k, seed, batch_pivots, agent,
verifiers and their versions, the pivot ids); an interrupted run called again with the same arguments loads the
finished pivots from it and samples only the others. A checkpoint whose verifier versions are not the verifiers'
of now (:mod:`pivot_envs.verifiers.versions`) is refused, naming the verifiers whose code changed. A torn last line (the
process was killed while writing) is cut off and its batch redone. The
returned pivots are in input order whatever the completion order.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from pivot_envs.agents import Agent, build_agent
from pivot_envs.types import Action, Pivot, Profile, VerifyResult, stable_hash
from pivot_envs.verifiers import Verifier, VerifierSpec, build_verifier
from pivot_envs.verifiers.accepted_by import accepted_by
from pivot_envs.verifiers.batch import VerifierResolver, verify_batch
from pivot_envs.verifiers.versions import check_versions, merged_versions
from pivot_envs.verifiers.hack_monitor import ACCEPTED, HACKS, HackCounts, hack_counts

log = logging.getLogger("pivot_envs.pipeline")

ProgressCallback = Callable[[int, int], None]
"""``progress(done, total)``: pivots profiled so far (including resumed ones) and the total."""

PROFILE_META_KEYS = ("profile_strict", "profile_passed", "profile_accepted_by", "profile_error", "profile_unscored",
                     "profile_hack")
"""``pivot.meta`` keys written by profiling (cleared on re-profiling)."""

CHECKPOINT_FORMAT = "pivot-envs-profile-checkpoint/1"


# --------------------------------------------------------------------------- statistics


def reward_stats(rewards: Sequence[float]) -> tuple[float, float]:
    """``(mean, population variance)`` of ``rewards``; ``(0.0, 0.0)`` for an empty list."""
    if not rewards:
        return 0.0, 0.0
    n = len(rewards)
    mean = math.fsum(rewards) / n
    return mean, math.fsum((r - mean) ** 2 for r in rewards) / n


@dataclass
class PivotResult:
    """The profile of one pivot, as computed by a worker and stored in a checkpoint.

    Attributes:
        index: position of the pivot in the input.
        id: the pivot's id (checked on resume).
        profile: the statistics (see the module docstring).
        strict: per-sample strict rewards aligned with ``profile.rewards`` (``None`` where the
            strict verifier itself errored).
        passed: per-sample functional ``passed`` flags aligned with ``profile.rewards``.
        accepted_by: per sample, what accepted it (:func:`pivot_envs.verifiers.accepted_by.accepted_by`:
            ``exact``, ``effect``, ``state``, ...; ``None`` where it did not pass), aligned with ``profile.rewards``.
        error: the first verifier error message among the K samples, if any.
        hack: the hack monitor's counts over the accepted samples (:meth:`HackCounts.counts`); ``None`` when the
            actions were not given (and in checkpoints written before the monitor).
    """

    index: int
    id: str
    profile: Profile
    strict: list[float | None] = field(default_factory=list)
    passed: list[bool] = field(default_factory=list)
    accepted_by: list[str | None] = field(default_factory=list)
    error: str | None = None
    hack: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        # a shallow dict: dataclasses.asdict (deep copies) was the slow part of checkpointing
        profile = {f.name: getattr(self.profile, f.name) for f in dataclasses.fields(self.profile)}
        return {"index": self.index, "id": self.id, "profile": profile, "strict": self.strict,
                "passed": self.passed, "accepted_by": self.accepted_by, "error": self.error, "hack": self.hack}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PivotResult":
        profile = Profile.from_dict(data["profile"])
        assert profile is not None
        return cls(index=int(data["index"]), id=str(data["id"]), profile=profile,
                   strict=[None if s is None else float(s) for s in data.get("strict") or []],
                   passed=[bool(p) for p in data.get("passed") or []],
                   accepted_by=list(data.get("accepted_by") or []), error=data.get("error"),
                   hack=dict(data["hack"]) if data.get("hack") is not None else None)

    def apply(self, pivot: Pivot) -> Pivot:
        """A copy of ``pivot`` carrying this profile (the input pivot is not modified)."""
        meta = {k: v for k, v in pivot.meta.items() if k not in PROFILE_META_KEYS}
        meta["profile_strict"] = list(self.strict)
        meta["profile_passed"] = list(self.passed)
        meta["profile_accepted_by"] = list(self.accepted_by)
        if self.error is not None:
            meta["profile_error"] = self.error
        if self.hack is not None:
            meta["profile_hack"] = dict(self.hack)
        if not self.profile.rewards:
            meta["profile_unscored"] = True
        return dataclasses.replace(pivot, meta=meta, profile=self.profile)


def summarize(index: int, pivot: Pivot, functional: Sequence[VerifyResult],
              strict: Sequence[VerifyResult], actions: Sequence[Action] | None = None) -> PivotResult:
    """Turn the K functional and strict verdicts at one pivot into its :class:`PivotResult` (with ``actions``,
    the K sampled actions, also the hack monitor's counts)."""
    rewards: list[float] = []
    strict_rewards: list[float | None] = []
    passed: list[bool] = []
    accepted: list[str | None] = []
    errors = 0
    first_error: str | None = None
    for f, s in zip(functional, strict, strict=True):
        if f.error is not None:
            errors += 1
            first_error = first_error or f"{f.verifier}: {f.error}"
            continue
        rewards.append(float(f.reward))
        passed.append(bool(f.passed))
        strict_rewards.append(None if s.error is not None else float(s.reward))
        accepted.append(accepted_by(f, s.error is None and s.passed))
    mean, var = reward_stats(rewards)
    scored_strict = [s for s in strict_rewards if s is not None]
    strict_mean = reward_stats(scored_strict)[0] if scored_strict else None
    profile = Profile(k=len(functional), rewards=rewards, mean=mean, var=var, strict_mean=strict_mean, errors=errors)
    hack = None
    if actions is not None:
        strict_passed = [None if s.error is not None else bool(s.passed) for s in strict]
        hack = hack_counts(actions, [pivot] * len(actions), functional, strict_passed).counts()
    return PivotResult(index=index, id=pivot.id, profile=profile, strict=strict_rewards, passed=passed,
                       accepted_by=accepted, error=first_error, hack=hack)


# --------------------------------------------------------------------------- scoring


class Scorer:
    """The functional verifier (one for all pivots, or each domain's default) and the strict baseline.

    Args:
        verifier: a verifier name, config dict or object; ``None`` = the default verifier of
            each pivot's domain.
        strict: the verifier of the strict baseline (``strict_mean``, miss rate).
    """

    def __init__(self, verifier: VerifierSpec | None = None, strict: VerifierSpec = "strict"):
        self.resolver = VerifierResolver(verifier)
        self.verifier = self.resolver.default
        self.strict = build_verifier(strict)

    def functional_for(self, domain: str) -> Verifier:
        """The functional verifier of a pivot of ``domain``."""
        return self.resolver.get(None, domain)

    def score(self, actions: Sequence[Action], owners: Sequence[Pivot]) -> tuple[list[VerifyResult], list[VerifyResult]]:
        """Functional and strict verdicts of ``actions[i]`` at ``owners[i]`` (one ``verify_many`` per verifier)."""
        return (verify_batch(actions, owners, self.resolver.for_pivot),
                verify_batch(actions, owners, self.strict))

    def config(self) -> dict[str, Any]:
        """What rebuilds this scorer (``Scorer(**config)``); also the checkpoint's record of it."""
        return {"verifier": self.resolver.config(), "strict": self.strict.config()}

    def versions(self, domains: Iterable[str]) -> dict[str, int]:
        """The versions of the verifiers that score pivots of ``domains`` (:mod:`pivot_envs.verifiers.versions`)."""
        functional = [self.verifier] if self.verifier is not None else [self.functional_for(d) for d in sorted(set(domains))]
        return merged_versions([*functional, self.strict])


def profile_batch(pivots: Sequence[Pivot], indices: Sequence[int], agent: Any, scorer: Scorer, k: int,
                  seed: int) -> list[PivotResult]:
    """Profile one batch: one ``agent.sample`` call, one ``verify_many`` per verifier."""
    groups = agent.sample(list(pivots), k, seed=seed)
    if len(groups) != len(pivots) or any(len(g) != k for g in groups):
        sizes = [len(g) for g in groups]
        raise RuntimeError(f"agent {type(agent).__name__} returned {len(groups)} groups of sizes {sizes} "
                           f"for {len(pivots)} pivots and n={k}: expected {len(pivots)} groups of {k}")
    actions = [c.action for group in groups for c in group]
    owners = [p for p in pivots for _ in range(k)]
    functional, strict = scorer.score(actions, owners)
    out = []
    for j, (index, pivot) in enumerate(zip(indices, pivots)):
        span = slice(j * k, (j + 1) * k)
        out.append(summarize(index, pivot, functional[span], strict[span], actions[span]))
    return out


def plan_batches(total: int, batch_pivots: int, done: Iterable[int] = ()) -> list[list[int]]:
    """Fixed batches of consecutive input positions, minus the positions already ``done``.

    Batch ``b`` covers positions ``[b * batch_pivots, (b + 1) * batch_pivots)``, whatever was
    done before, so a resumed run samples the same batches as an uninterrupted one.
    """
    if batch_pivots < 1:
        raise ValueError(f"batch_pivots must be >= 1, got {batch_pivots}")
    finished = set(done)
    batches = []
    for start in range(0, total, batch_pivots):
        todo = [i for i in range(start, min(start + batch_pivots, total)) if i not in finished]
        if todo:
            batches.append(todo)
    return batches


# --------------------------------------------------------------------------- checkpoint


def agent_config(agent: Any) -> dict[str, Any]:
    """``agent.config()`` or, for an agent without one, its class (recorded in checkpoints)."""
    try:
        return dict(agent.config())
    except NotImplementedError:
        cls = type(agent)
        return {"kind": getattr(agent, "kind", "?"), "class": f"{cls.__module__}.{cls.__qualname__}"}


def run_params(pivots: Sequence[Pivot], agent: dict[str, Any], scorer: Scorer, k: int, seed: int,
               batch_pivots: int) -> dict[str, Any]:
    """Everything the profile numbers depend on (the checkpoint header)."""
    return {"k": k, "seed": seed, "batch_pivots": batch_pivots, "agent": agent, "scorer": scorer.config(),
            "pivots": len(pivots), "ids": stable_hash([p.id for p in pivots]),
            "verifier_versions": scorer.versions(p.domain for p in pivots)}


class Checkpoint:
    """A JSONL sidecar of finished batches: a header line, then ``{"results": [...]}`` per batch."""

    def __init__(self, path: str | Path, params: dict[str, Any]):
        self.path = Path(path)
        self.params = json.loads(json.dumps(params))  # the JSON form, as read back on resume

    def load(self) -> dict[int, PivotResult]:
        """Finished results by input position (empty for a new checkpoint, which is created)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(json.dumps({"format": CHECKPOINT_FORMAT, "params": self.params}, sort_keys=True) + "\n")
            return {}
        done: dict[int, PivotResult] = {}
        good_bytes = 0
        with open(self.path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                if not raw.endswith(b"\n"):
                    break  # torn last line: the run was killed while writing it
                try:
                    row = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{self.path}:{number}: not JSON ({exc.msg}); the checkpoint is damaged: "
                                     "delete it to profile from scratch") from None
                if number == 1:
                    self._check_header(row)
                else:
                    for item in row["results"]:
                        result = PivotResult.from_dict(item)
                        done[result.index] = result
                good_bytes += len(raw)
        if good_bytes < self.path.stat().st_size:
            with open(self.path, "r+b") as f:
                f.truncate(good_bytes)
        return done

    def _check_header(self, row: Any) -> None:
        if not isinstance(row, dict) or row.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{self.path}:1: not a pivot-envs profile checkpoint; move it away or choose "
                             "another output path")
        old = row.get("params", {})
        check_versions(old.get("verifier_versions"), self.params["verifier_versions"], where=f"{self.path} (a profile "
                       "checkpoint)", fix="Delete the checkpoint (CLI: --fresh) to profile afresh with the verifiers "
                       "of now, or write to another output path")
        diff = [key for key in sorted(set(old) | set(self.params)) if old.get(key) != self.params.get(key)]
        if diff:
            shown = ", ".join(f"{key}: checkpoint {old.get(key)!r} vs now {self.params.get(key)!r}" for key in diff)
            raise ValueError(f"{self.path}: checkpoint of an interrupted run with other settings ({shown}); "
                             "resume with the same pivots, agent, verifier, k, seed and batch size, or delete "
                             "the checkpoint (CLI: --fresh) to start over")

    def append(self, results: Sequence[PivotResult]) -> None:
        """Append one finished batch, in one write, flushed."""
        line = json.dumps({"results": [r.to_dict() for r in results]}) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()


# --------------------------------------------------------------------------- drivers


def batch_hacks(results: Sequence[PivotResult]) -> HackCounts | None:
    """The hack monitor's counts of one batch (``None`` when no result carries them)."""
    counts = [HackCounts.from_counts(r.hack) for r in results if r.hack is not None]
    return sum(counts, HackCounts()) if counts else None


def log_batch_hacks(results: Sequence[PivotResult]) -> None:
    """Log a finished batch's hack shares (logger ``pivot_envs.pipeline``, INFO)."""
    counts = batch_hacks(results)
    if counts is None or not log.isEnabledFor(logging.INFO):
        return
    first = min(r.index for r in results)
    if not counts.accepted:
        log.info("profile batch at position %d: no accepted sample", first)
        return
    shares = ", ".join(f"{k} {v:.3f}" for k, v in counts.metrics().items()
                       if k in HACKS or (k != ACCEPTED and v))  # the hacks, and the categories that accepted some
    log.info("profile batch at position %d: %d accepted samples; %s", first, counts.accepted, shares)


BatchRunner = Callable[[list[list[int]]], Iterator[list[PivotResult]]]
"""Runs the given batches (lists of input positions) and yields each batch's results as it finishes."""


def run_profiling(pivots: Sequence[Pivot], run_batches: BatchRunner, params: dict[str, Any], *,
                  batch_pivots: int, checkpoint: str | Path | None = None,
                  progress: ProgressCallback | None = None) -> list[Pivot]:
    """The driver shared by the single-process and the Ray profiler: plan, resume, checkpoint, assemble."""
    pivots = list(pivots)
    ckpt = Checkpoint(checkpoint, params) if checkpoint is not None else None
    done = ckpt.load() if ckpt is not None else {}
    for index, result in done.items():
        if index >= len(pivots) or pivots[index].id != result.id:  # the header's id hash makes this rare
            raise ValueError(f"{checkpoint}: result for position {index} belongs to pivot {result.id!r}, not to "
                             "this input; delete the checkpoint to start over")
    if progress is not None:
        progress(len(done), len(pivots))
    for results in run_batches(plan_batches(len(pivots), batch_pivots, done)):
        if ckpt is not None:
            ckpt.append(results)
        log_batch_hacks(results)
        for result in results:
            done[result.index] = result
        if progress is not None:
            progress(len(done), len(pivots))
    return [done[i].apply(p) for i, p in enumerate(pivots)]


def profile_pivots(
    pivots: Sequence[Pivot],
    agent: Any,
    verifier: VerifierSpec | None = None,
    k: int = 8,
    *,
    seed: int = 0,
    batch_pivots: int = 16,
    checkpoint: str | Path | None = None,
    progress: ProgressCallback | None = None,
    strict_verifier: VerifierSpec = "strict",
) -> list[Pivot]:
    """Profile ``pivots`` under ``agent``: copies of the pivots with ``profile`` set, in input order.

    Args:
        pivots: the candidates (not modified).
        agent: an :class:`~pivot_envs.agents.Agent`, a spec string (``noisy_expert:0.5``,
            ``hf:DIR``...) or a config dict; one built here is closed at the end.
        verifier: the functional verifier (name, config or object); ``None`` = each
            pivot's domain default.
        k: samples per pivot.
        seed: sampling seed, passed to every ``agent.sample`` call.
        batch_pivots: pivots per ``agent.sample`` call.
        checkpoint: a JSONL sidecar; finished batches are appended to it and an
            interrupted run resumes from it (see the module docstring).
        progress: ``progress(done, total)``, called at the start and after each batch.
        strict_verifier: the strict baseline (``strict_mean`` and the miss rate).
    """
    if k < 1:
        raise ValueError(f"k (samples per pivot) must be >= 1, got {k}")
    pivots = list(pivots)
    owned = not isinstance(agent, Agent)
    agent_obj = build_agent(agent)
    scorer = Scorer(verifier, strict_verifier)
    params = run_params(pivots, agent_config(agent_obj), scorer, k, seed, batch_pivots)

    def run_batches(batches: list[list[int]]) -> Iterator[list[PivotResult]]:
        for batch in batches:
            yield profile_batch([pivots[i] for i in batch], batch, agent_obj, scorer, k, seed)

    try:
        return run_profiling(pivots, run_batches, params, batch_pivots=batch_pivots, checkpoint=checkpoint,
                             progress=progress)
    finally:
        if owned:
            agent_obj.close()
