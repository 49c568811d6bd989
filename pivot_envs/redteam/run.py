"""Build a domain's red-team cases, score them with a verifier, and report the accepted share per family.

    report = red_team("terminal", limit=40)
    print(report.table())             # per family and label: cases, accepted, verifier errors
    report.save("out/")               # table.md, report.json (figures and up to four mismatches per family)

A maker that fails at a pivot (its world raised, a bad row) is skipped there and counted in ``report.skipped``:
one bad pivot never loses the run.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.redteam import families as _families  # noqa: F401 - registers the families
from pivot_envs.redteam.case import FAMILIES, RIGHT, WRONG, Case
from pivot_envs.redteam.oracle import Oracle, expert_calls
from pivot_envs.redteam.setup import Setup, domain_setup
from pivot_envs.redteam.site import Others, Site
from pivot_envs.types import Pivot, VerifyResult, content_text
from pivot_envs.verifiers import build_verifier

EXAMPLES = 4
"""Mismatches kept per family and label (a wrong case accepted, a right one refused)."""
WRONG_PER_DOMAIN = 0.01
WRONG_PER_FAMILY = 0.03
RIGHT_MIN = 0.95
"""The targets: wrong cases accepted at most 1 % per domain and 3 % per family, right ones at least 95 %."""
SCORE_CHUNK = 256


def _others(setup: Setup) -> Others:
    others = Others()
    for pivot in setup.pivots:
        tid = str(pivot.meta.get("trajectory_id") or "")
        others.calls.setdefault(tid, []).extend(c for c in expert_calls(pivot.expert)
                                                if c not in others.calls.get(tid, []))
    for tid, task in setup.tasks.items():
        last = next((m for m in reversed(task.messages) if m.get("role") == "assistant"), None)
        if last is not None and not last.get("tool_calls"):
            others.answers[tid] = content_text(last.get("content"))
    return others


def _tool_names(pivot: Pivot) -> set[str]:
    return {str((t.get("function") or t).get("name")) for t in pivot.tools if isinstance(t, dict)}


def build_cases(setup: Setup, families: Sequence[str] | None = None, progress: bool = True
                ) -> tuple[list[Case], list[str]]:
    """Every case of ``families`` (default: all) at ``setup``'s pivots, and the makers skipped (``pivot: family:
    why``)."""
    chosen = [FAMILIES[name] for name in (families or sorted(FAMILIES))]
    oracle = Oracle(setup.world, setup.tasks, setup.task_domain)
    others = _others(setup)
    cases: list[Case] = []
    skipped: list[str] = []
    try:
        for pivot in _progress(setup.pivots, f"{setup.name}: building cases", progress):
            site = Site(pivot, oracle, others, _tool_names(pivot))
            for fam in chosen:
                if not fam.applies(pivot, site.tools):
                    continue
                try:
                    made = list(fam.maker(site))
                except Exception as exc:  # noqa: BLE001 - one bad pivot is skipped and counted, never the run
                    skipped.append(f"{pivot.id}: {fam.name}: {type(exc).__name__}: {exc}"[:300])
                    continue
                cases += [Case(pivot, fam.name, label, action, note) for label, action, note in made]
    finally:
        oracle.close()
    return cases, skipped


def score_cases(cases: Sequence[Case], verifier: Any, progress: bool = True, label: str = "scoring"
                ) -> list[VerifyResult]:
    """The verdict of ``verifier`` (a spec or a Verifier) on every case, in order (chunks of cases at one pivot
    together, so a group's expert run is shared)."""
    built = build_verifier(verifier)
    results: list[VerifyResult] = []
    chunks = [cases[i:i + SCORE_CHUNK] for i in range(0, len(cases), SCORE_CHUNK)]
    for chunk in _progress(chunks, label, progress):
        results += built.verify_many([c.action for c in chunk], [c.pivot for c in chunk])
    return results


@dataclass
class Row:
    """One family and label: cases, accepted, verifier errors, and examples of mismatches."""

    family: str
    label: str
    n: int = 0
    accepted: int = 0
    errors: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def share(self) -> float | None:
        return self.accepted / self.n if self.n else None


@dataclass
class RedTeamReport:
    """The figures of one red-team run (see the module docstring)."""

    domain: str
    verifier: Any
    pivots: int
    rows: list[Row]
    skipped: list[str]
    seconds: dict[str, float]

    def total(self, label: str) -> Row:
        row = Row("all", label)
        for r in self.rows:
            if r.label == label:
                row.n, row.accepted, row.errors = row.n + r.n, row.accepted + r.accepted, row.errors + r.errors
        return row

    def misses(self) -> list[str]:
        """The targets this run misses (empty when it meets them all)."""
        out = []
        wrong, right = self.total(WRONG), self.total(RIGHT)
        if wrong.n and wrong.accepted / wrong.n > WRONG_PER_DOMAIN:
            out.append(f"{self.domain}: wrong accepted {wrong.accepted}/{wrong.n} > {WRONG_PER_DOMAIN:.0%}")
        if right.n and right.accepted / right.n < RIGHT_MIN:
            out.append(f"{self.domain}: right accepted {right.accepted}/{right.n} < {RIGHT_MIN:.0%}")
        for r in self.rows:
            if r.label == WRONG and r.n and r.accepted / r.n > WRONG_PER_FAMILY:
                out.append(f"{self.domain}: {r.family} accepted {r.accepted}/{r.n} > {WRONG_PER_FAMILY:.0%}")
        return out

    def counts(self) -> dict[str, int]:
        """Cases per ``family/label`` (the benchmark freezes these)."""
        return {f"{r.family}/{r.label}": r.n for r in self.rows}

    def table(self) -> str:
        lines = ["| domain | family | label | cases | accepted | verifier errors |", "|---|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(f"| {self.domain} | {r.family} | {r.label} | {r.n} | {pct(r)} | {r.errors} |")
        for label in (WRONG, RIGHT):
            t = self.total(label)
            lines.append(f"| **{self.domain}** | **all {label}** | {label} | {t.n} | **{pct(t)}** | {t.errors} |")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"domain": self.domain, "verifier": self.verifier, "pivots": self.pivots, "seconds": self.seconds,
                "skipped": self.skipped, "misses": self.misses(),
                "totals": {label: _row_dict(self.total(label)) for label in (WRONG, RIGHT)},
                "families": [_row_dict(r) for r in self.rows]}

    def save(self, folder: str | Path) -> Path:
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.md").write_text(self.table() + "\n", encoding="utf-8")
        (out / "report.json").write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        return out


def pct(row: Row) -> str:
    return "-" if not row.n else f"{row.accepted / row.n:.1%} ({row.accepted}/{row.n})"


def _row_dict(row: Row) -> dict[str, Any]:
    return {"family": row.family, "label": row.label, "n": row.n, "accepted": row.accepted, "errors": row.errors,
            "share": row.share, "examples": row.examples}


def tabulate(cases: Sequence[Case], results: Sequence[VerifyResult]) -> list[Row]:
    """Rows per family and label, sorted (wrong first), with up to :data:`EXAMPLES` mismatches each."""
    rows: dict[tuple[str, str], Row] = {}
    for case, result in zip(cases, results):
        row = rows.setdefault((case.family, case.label), Row(case.family, case.label))
        row.n += 1
        row.accepted += int(result.passed)
        row.errors += int(result.error is not None)
        if (result.passed != (case.label == RIGHT) or result.error) and len(row.examples) < EXAMPLES:
            row.examples.append({"pivot": case.pivot.id, "note": case.note[:120], "action": _short(case.action),
                                 "passed": result.passed, "reason": (result.error or result.reason)[:300]})
    return [rows[k] for k in sorted(rows, key=lambda k: (k[1] != WRONG, k[0]))]


def _short(action: Any) -> str:
    message = parse_action(action).message
    calls = message.get("tool_calls") or []
    if calls:
        return " ".join(f"{c['function']['name']}({c['function']['arguments'][:160]})" for c in calls)[:300]
    return "text: " + content_text(message.get("content"))[:300]


def red_team(domain: str, *, tasks: Any = None, split: str = "test", world: Any = None, verifier: Any = None,
             families: Sequence[str] | None = None, limit: int | None = None, seed: int = 0,
             progress: bool = True) -> RedTeamReport:
    """Build ``domain``'s cases (see :func:`~pivot_envs.redteam.setup.domain_setup` for the arguments), score them
    with ``verifier`` (default: the domain's), and report."""
    if families:
        unknown = sorted(set(families) - set(FAMILIES))
        if unknown:
            raise ValueError(f"unknown families {unknown}; known: {', '.join(sorted(FAMILIES))}")
    t0 = time.perf_counter()
    setup = domain_setup(domain, tasks=tasks, split=split, world=world, verifier=verifier, limit=limit, seed=seed)
    cases, skipped = build_cases(setup, families, progress)
    t1 = time.perf_counter()
    results = score_cases(cases, setup.verifier, progress, f"{setup.name}: scoring {len(cases)} cases")
    t2 = time.perf_counter()
    return RedTeamReport(setup.name, setup.verifier, len(setup.pivots), tabulate(cases, results), skipped,
                         {"build": round(t1 - t0, 1), "score": round(t2 - t1, 1)})


def _progress(items: Sequence[Any], what: str, show: bool) -> Iterable[Any]:
    """``items``, with a progress bar on stderr when ``show`` and stderr is a terminal (a line per 10 % otherwise)."""
    if not show:
        yield from items
        return
    if sys.stderr.isatty():
        from rich.progress import track

        yield from track(items, description=what, console=None, transient=True)
        return
    step = max(1, len(items) // 10)
    for i, item in enumerate(items):
        if i % step == 0:
            print(f"{what}: {i}/{len(items)}", file=sys.stderr, flush=True)
        yield item
    print(f"{what}: {len(items)}/{len(items)}", file=sys.stderr, flush=True)

