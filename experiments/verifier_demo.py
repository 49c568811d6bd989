"""The verifier demo: extract -> env -> verify on the bundled data, with a summary (`pivot-envs demo` before the trainer; now a section of it).

For each built-in domain: extract pivot candidates from the bundled training
trajectories, make the gymnasium env, and score three kinds of actions at a
sample of pivots with ``step_many``: the expert's own action, the recorded
*alternatives* (functionally equivalent actions written differently), and
seeded *perturbations* (wrong actions). The summary shows how often the
domain's verifier and the strict baseline accept each kind: the miss rate
``P[strict = 0 | functional = 1]`` on alternatives and the false-accept rate on
perturbations. Verifier errors (``info["error"]``: a sandbox that failed, an
expert command that did not complete) are counted apart (``errors``) and left
out of every rate, as trainers mask them: a rate is over scored results only.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import InitVar, asdict, dataclass, field
from pathlib import Path
from typing import Callable

import gymnasium

from pivot_envs.actions import message_text
from pivot_envs.domains import get_domain
from pivot_envs.envs_data import load_trajectories
from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots
from pivot_envs.perturb import perturb_action

DEMO_DOMAINS = ("tool_use", "terminal", "swe", "search")


@dataclass
class DomainSummary:
    """Demo figures of one domain. Rates are over scored results (``errors`` left out); NaN when none was scored."""

    domain: str
    env_id: str
    verifier: str
    trajectories: int
    candidates: int
    skipped: dict[str, int]
    pivots_scored: int
    expert_pass: float
    alternatives: int
    alt_functional_pass: float
    alt_strict_pass: float
    miss_rate: float
    perturbed_functional_pass: float
    seconds: float
    errors: int = 0
    examples: list[dict] = field(default_factory=list)
    verifier_errors: InitVar[int | None] = None  # the name of ``errors`` in reports written before

    def __post_init__(self, verifier_errors: int | None) -> None:
        if verifier_errors is not None:
            self.errors = verifier_errors


def _rate(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def run_domain(domain: str, n_pivots: int, seed: int) -> DomainSummary:
    """Extract, make the env and score expert / alternative / perturbed actions at ``n_pivots`` pivots."""
    start = time.perf_counter()
    dom = get_domain(domain)
    trajs = load_trajectories(domain, "train")
    pivots, audit = extract_pivots(trajs, dom, ExtractOptions(min_reward=1.0))
    env = gymnasium.make(dom.env_id, pivots=pivots)
    core = env.unwrapped
    rng = random.Random(seed)
    sample = rng.sample(range(len(pivots)), min(n_pivots, len(pivots)))
    expert_ok, alt_f, alt_s, pert_f, miss = [], [], [], [], []
    errors = n_alternatives = 0
    examples: list[dict] = []
    for index in sample:
        env.reset(seed=seed, options={"index": index})
        pivot = core.pivot
        alternatives = pivot.meta.get("alternatives") or []
        perturbed = perturb_action(pivot, rng)
        actions = [message_text(pivot.expert), *alternatives, perturbed]
        scored = core.step_many(actions)
        errors += sum(1 for _, info in scored if info["error"])
        n_alternatives += len(alternatives)
        expert_ok += [reward for reward, info in scored[:1] if not info["error"]]
        for reward, info in scored[1:-1]:
            if info["error"]:
                continue
            alt_f.append(reward)
            alt_s.append(info["strict_reward"])
            if reward >= 1.0:
                miss.append(float(info["strict_reward"] < 1.0))
        pert_f += [reward for reward, info in scored[-1:] if not info["error"]]
        if len(examples) < 2 and len(scored) > 2:
            examples.append({"pivot_id": pivot.id, "alternative": scored[1][1], "perturbed": scored[-1][1]})
    env.close()
    spec = dom.verifier_spec()
    return DomainSummary(
        domain=domain, env_id=dom.env_id, verifier=spec if isinstance(spec, str) else spec.get("name", "?"),
        trajectories=len(trajs), candidates=audit.candidates, skipped=dict(audit.skipped),
        pivots_scored=len(sample), expert_pass=_rate(expert_ok), alternatives=n_alternatives,
        alt_functional_pass=_rate(alt_f), alt_strict_pass=_rate(alt_s), miss_rate=_rate(miss),
        perturbed_functional_pass=_rate(pert_f), errors=errors,
        seconds=time.perf_counter() - start, examples=examples,
    )


def run_demo(
    out_dir: Path,
    n_pivots: int = 150,
    seed: int = 0,
    domains: tuple[str, ...] = DEMO_DOMAINS,
    on_domain: Callable[[str], None] | None = None,
) -> dict:
    """Run the demo on every domain; writes ``report.json`` and ``report.md`` into ``out_dir``."""
    start = time.perf_counter()
    summaries = []
    for domain in domains:
        if on_domain:
            on_domain(domain)
        summaries.append(run_domain(domain, n_pivots, seed))
    report = {"seed": seed, "wall_seconds": time.perf_counter() - start,
              "domains": {s.domain: asdict(s) for s in summaries}}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(markdown_report(summaries, report["wall_seconds"], seed), encoding="utf-8")
    return report


def markdown_report(summaries: list[DomainSummary], wall: float, seed: int) -> str:
    lines = [
        "# pivot-envs demo: extract -> env -> verify",
        "",
        f"seed {seed}, wall time {wall:.1f} s",
        "",
        "| domain | verifier | candidates | scored | expert pass | alternatives | functional pass (alt) "
        "| strict pass (alt) | miss rate | perturbed accepted | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        lines.append(
            f"| {s.domain} | {s.verifier} | {s.candidates} | {s.pivots_scored} | {s.expert_pass:.2f} | {s.alternatives} "
            f"| {s.alt_functional_pass:.2f} | {s.alt_strict_pass:.2f} | {s.miss_rate:.2f} "
            f"| {s.perturbed_functional_pass:.2f} | {s.errors} |"
        )
    lines += ["", "miss rate = P[strict = 0 | functional = 1] over the alternatives; "
              "perturbed accepted = how often a deliberately wrong action passed the functional verifier; "
              "errors = results the verifier could not score (all kinds), left out of every rate.", ""]
    return "\n".join(lines)
