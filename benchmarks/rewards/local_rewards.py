"""Local rewards against labelled actions, every domain (issue 35): what each domain's default verifier accepts
of actions that do what the expert's did, and of actions that do not.

    python benchmarks/rewards/local_rewards.py                                  # every domain, the table
    python benchmarks/rewards/local_rewards.py --domains terminal --limit 40    # one domain, 40 pivots
    python benchmarks/rewards/local_rewards.py --json OUT.json                  # ... and the figures as JSON
    python benchmarks/rewards/local_rewards.py --before BEFORE.json             # before -> after, from an earlier --json

At each test pivot of the built-in domains (``tool_use``, ``terminal``, ``search``, ``swe``: the bundled test
split) and of the tau2 presets (``tau2-airline``, ``tau2-retail``: the expected actions of tau2-bench's tasks,
``--limit`` pivots, 30 by default), :mod:`local_actions` makes labelled actions (interchangeable and wrong, by
kind) and the domain's default verifier scores them (tau2: the documented cascade, ``tool_call`` with BFCL's
string convention as a cheap reject, ``tool_call`` as an accept, ``world_exec`` deciding, inside ``final_turn``
on the preset's world). Where a stop is right is read off the world with the episode API: the world at the pivot
against the state the expert's calls reach.

Targets: terminal interchangeable actions accepted >= 90 % (100 % after issue 35); wrong actions accepted <= 2 % in
every domain; ``stop_done`` (a stop where the task's state is already the expert's final one) accepted >= 95 %.
``--labels old`` builds issue 35's stop labels, ``--labels new`` (default) issue 48's: a stop before the values the
user asked for are known is wrong, another task's answer is wrong everywhere, and "Done." where it is right is built
as ``confirmation`` (:func:`local_actions.stop_actions`).

"Before" figures come from the same script run on the code before issue 35 (a wheel of that commit in a venv of
its own: ``benchmarks/rewards/results/local_rewards/README.md`` says how).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import local_actions as la  # noqa: E402

from pivot_envs.envs_data import load_pivots, load_trajectories  # noqa: E402
from pivot_envs.episodes.tasks import replay_expert, world_task  # noqa: E402
from pivot_envs.facts import answer_facts  # noqa: E402
from pivot_envs.types import Pivot, Trajectory, content_text  # noqa: E402
from pivot_envs.verifiers import build_verifier  # noqa: E402
from pivot_envs.verifiers.defaults import default_verifier_spec  # noqa: E402
from pivot_envs.verifiers.tool_name import ToolNameVerifier  # noqa: E402
from pivot_envs.worlds import build_world  # noqa: E402

BUILT_IN = ("terminal", "tool_use", "search", "swe")
SWE_KINDS = ToolNameVerifier(aliases="swe")
"""swe's alias categories (read, search, edit, run, submit): another tool of the same one is no wrong action."""
TAU2 = ("tau2-airline", "tau2-retail")
RESULTS = Path(__file__).resolve().parent / "results" / "local_rewards"
EXAMPLES = 4
"""Mismatches kept per kind (a wrong action accepted, a right one refused) for the report."""


# --------------------------------------------------------------------------- pivots and verifiers


def tau2_verifier(world: str) -> dict[str, Any]:
    """The tau2 presets' local verifier: the documented cascade inside ``final_turn`` on the preset's world (the
    code before issue 35 has no ``world`` on ``final_turn``: it is left out there)."""
    from pivot_envs.verifiers.final_turn import FinalTurnVerifier

    calls = {"name": "cascade", "stages": [
        {"role": "gate", "verifier": {"name": "tool_call", "normalizers": ["bfcl"], "coerce": "lenient"}},
        {"role": "accept", "verifier": "tool_call"},
        {"role": "decide", "verifier": {"name": "world_exec", "world": world}}]}
    spec: dict[str, Any] = {"name": "final_turn", "calls": calls}
    if "world" in FinalTurnVerifier.__dataclass_fields__:
        spec["world"] = world
    return spec


def domain_setup(domain: str, limit: int | None) -> tuple[list[Pivot], dict[str, Trajectory], Any, Any, str | None]:
    """``(pivots, tasks by id, verifier spec, world spec, task domain)`` of a benchmark domain."""
    if domain in TAU2:
        from pivot_envs.formats.tau2_tasks import read_tau2_tasks, tau2_pivots

        trajs = read_tau2_tasks(domain=domain.split("-", 1)[1])
        pivots = tau2_pivots(trajs)
        pivots = random.Random(0).sample(pivots, min(limit or 30, len(pivots)))
        return pivots, {t.id: t for t in trajs}, tau2_verifier(domain), domain, None
    trajs = load_trajectories(domain, "test")
    pivots = load_pivots(domain, "test")
    if limit:
        pivots = random.Random(0).sample(pivots, min(limit, len(pivots)))
    world = {"tool_use": "tool_use", "terminal": "terminal", "search": "search", "swe": "swe"}[domain]
    return pivots, {t.id: t for t in trajs}, default_verifier_spec(domain), world, domain


# --------------------------------------------------------------------------- where a task stands


def final_answer(task: Trajectory) -> tuple[str | None, int]:
    """The expert's final answer (its last turn, when that made no call) and that turn's index."""
    last = max(i for i, m in enumerate(task.messages) if m.get("role") == "assistant")
    message = task.messages[last]
    return (None if message.get("tool_calls") else content_text(message.get("content"))), last


class Oracle:
    """Where each task stands at a pivot, read off a world of its own with the episode API."""

    def __init__(self, world_spec: Any, domain: str | None) -> None:
        self.world = build_world(world_spec)
        self.domain = domain
        self._outcomes: dict[str, Any] = {}

    def where(self, pivot: Pivot, task: Trajectory) -> la.Where:
        if task.id not in self._outcomes:
            self._outcomes[task.id] = replay_expert(self.world, task, self.domain)
        outcome = self._outcomes[task.id]
        self.world.at_pivot(world_task(task, self.domain), pivot.context)
        final, last = final_answer(task)
        facts = answer_facts(task.messages[:last], final) if final else []
        found = set(answer_facts(pivot.context, final)) if final else set()
        own = None if pivot.expert.get("tool_calls") else content_text(pivot.expert.get("content"))
        returned = bool(answer_facts(pivot.context, own)) if own is not None else bool(found)
        return la.Where(changes_state=not outcome.read_only, done=self.world.digest() == outcome.expert_digest,
                        final=final, final_has_facts=bool(facts), facts_found=all(f in found for f in facts),
                        facts_returned=returned)

    def tree(self, pivot: Pivot, task: Trajectory) -> dict[str, str | None]:
        """The terminal work tree's files at the pivot (path -> text; ``None`` for binary files)."""
        self.world.at_pivot(world_task(task, self.domain), pivot.context)
        out: dict[str, str | None] = {}
        for path, data in sorted(self.world.files().items()):  # type: ignore[attr-defined]
            try:
                out[path] = data.decode("utf-8")
            except UnicodeDecodeError:
                out[path] = None
        return out

    def differs(self, pivot: Pivot, task: Trajectory, command: str) -> bool:
        """Whether ``command`` at the pivot shows or leaves something else than the expert's command there."""
        runs = []
        for cmd in (la.expert_call(pivot)[1]["command"], command):  # type: ignore[index]
            self.world.at_pivot(world_task(task, self.domain), pivot.context)
            runs.append((self.world.call("bash", {"command": cmd}).content, self.world.digest()))
        return runs[0] != runs[1]

    def close(self) -> None:
        self.world.close()


# --------------------------------------------------------------------------- the labelled actions of a domain


def _recorded_result(task: Trajectory, turn: int) -> str:
    results = [content_text(m.get("content")) for m in task.messages[turn + 1:] if m.get("role") == "tool"][:1]
    return results[0] if results else ""


def _last_call_before(task: Trajectory, turn: int) -> dict[str, Any] | None:
    calls = [m for m in task.messages[:turn] if m.get("role") == "assistant" and m.get("tool_calls")]
    return calls[-1] if calls else None


def labelled(domain: str, pivots: list[Pivot], tasks: dict[str, Trajectory], oracle: Oracle,
             labels: str = "new") -> list[tuple[Pivot, str, str, dict]]:
    """Every ``(pivot, kind, label, action)`` of a domain."""
    rng = random.Random(0)
    by_task: dict[str, list] = defaultdict(list)
    for p in pivots:
        found = la.expert_call(p)
        if found is not None:
            by_task[p.meta["trajectory_id"]].append(found)
    answers = {tid: final_answer(t)[0] for tid, t in tasks.items()}
    docs = sorted({a.get("doc_id") for calls in by_task.values() for n, a in calls if n == "open" and a.get("doc_id")})
    out = []
    for p in pivots:
        tid = p.meta["trajectory_id"]
        task = tasks[tid]
        others = [c for t, calls in by_task.items() if t != tid for c in calls]
        actions: la.Labelled = []
        if p.expert.get("tool_calls"):
            if domain == "terminal":
                result = _recorded_result(task, p.meta["turn"])
                others_cmd = [a["command"] for n, a in others if isinstance(a.get("command"), str)]
                actions += la.terminal_actions(p, others_cmd, oracle.tree(p, task), rng, "[exit code:" not in result,
                                               len(result.splitlines()), lambda cmd: oracle.differs(p, task, cmd))
            elif domain == "search":
                actions += la.search_actions(p, others, rng, docs)
            elif domain == "swe":
                actions += la.call_actions(p, others, rng, (), lambda name: SWE_KINDS.key(name, "{}"))
            else:
                caseless = ("email", "first_name", "last_name", "name") if domain == "tool_use" else ()
                actions += la.call_actions(p, others, rng, caseless)
        if domain != "swe":
            where = oracle.where(p, task)
            other_answers = [a for t, a in answers.items() if t != tid and a]
            last = _last_call_before(task, p.meta["turn"]) if not p.expert.get("tool_calls") else None
            actions += la.stop_actions(p, where, other_answers, rng, last, labels)
        else:
            actions.append(("refusal", "wrong", la.text(la.REFUSAL)))
            actions.append(("done_text", "wrong", la.text("Done.")))
        out += [(p, kind, label, message) for kind, label, message in actions]
    return out


# --------------------------------------------------------------------------- scoring and the table


def score(domain: str, limit: int | None, labels: str = "new") -> dict[str, Any]:
    """The figures of one domain: per kind, its label, count, accepted and verifier errors, and examples."""
    t0 = time.perf_counter()
    pivots, tasks, spec, world, task_domain = domain_setup(domain, limit)
    oracle = Oracle(world, task_domain)
    try:
        rows = labelled(domain, pivots, tasks, oracle, labels)
    finally:
        oracle.close()
    verifier = build_verifier(spec)
    results = verifier.verify_many([a for _, _, _, a in rows], [p for p, _, _, _ in rows])
    kinds: dict[str, dict[str, Any]] = {}
    for (pivot, kind, label, action), result in zip(rows, results):
        row = kinds.setdefault(kind, {"label": label, "n": 0, "accepted": 0, "errors": 0, "examples": []})
        row["n"] += 1
        row["accepted"] += int(result.passed)
        row["errors"] += int(result.error is not None)
        wrong_verdict = result.passed != (label == "right")
        if (wrong_verdict or result.error) and len(row["examples"]) < EXAMPLES:
            row["examples"].append({"pivot": pivot.id, "expert": _short(pivot.expert), "action": _short(action),
                                    "passed": result.passed, "reason": (result.error or result.reason)[:300]})
    return {"pivots": len(pivots), "kinds": kinds, "seconds": round(time.perf_counter() - t0, 1),
            **{label: _share(kinds, label) for label in ("right", "wrong")}}


def _share(kinds: dict[str, dict[str, Any]], label: str) -> dict[str, Any]:
    n = sum(k["n"] for k in kinds.values() if k["label"] == label)
    accepted = sum(k["accepted"] for k in kinds.values() if k["label"] == label)
    return {"n": n, "accepted": accepted, "share": accepted / n if n else None}


def _short(message: dict[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    if calls:
        return " ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in calls)[:200]
    return f"text: {content_text(message.get('content'))[:200]}"


def _pct(row: dict[str, Any] | None) -> str:
    if not row or not row.get("n"):
        return "-"
    return f"{row['accepted'] / row['n']:.1%} ({row['accepted']}/{row['n']})"


def table(figures: dict[str, Any], before: dict[str, Any] | None) -> str:
    """The per-domain, per-kind table (with a before column when given)."""
    head = "| domain | kind | label | " + ("before | " if before else "") + "accepted | verifier errors |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for domain, fig in figures["domains"].items():
        old = (before or {}).get("domains", {}).get(domain, {})
        for kind, row in sorted(fig["kinds"].items(), key=lambda kv: (kv[1]["label"], kv[0])):
            cells = [domain, kind, row["label"]]
            if before:
                cells.append(_pct(old.get("kinds", {}).get(kind)))
            cells += [_pct(row), str(row["errors"])]
            lines.append("| " + " | ".join(cells) + " |")
        for label in ("right", "wrong"):
            cells = [f"**{domain}**", f"**all {'interchangeable' if label == 'right' else 'wrong'}**", label]
            if before:
                cells.append(_pct(old.get(label)))
            cells += [f"**{_pct(fig[label])}**", ""]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domains", default=",".join(BUILT_IN + TAU2), help="comma-separated (default: all six)")
    ap.add_argument("--limit", type=int, default=None, help="pivots per domain (tau2 default 30; built-in: all)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--before", type=Path, default=None, help="an earlier --json: print before -> after")
    ap.add_argument("--labels", choices=("new", "old"), default="new",
                    help="the stop labels: issue 48's rule (new, default) or issue 35's (old)")
    args = ap.parse_args(argv)
    figures: dict[str, Any] = {"domains": {}, "labels": args.labels}
    for domain in [d.strip() for d in args.domains.split(",") if d.strip()]:
        if domain not in BUILT_IN + TAU2:
            ap.error(f"unknown domain {domain!r}; known: {', '.join(BUILT_IN + TAU2)}")
        print(f"scoring {domain} ...", file=sys.stderr, flush=True)
        figures["domains"][domain] = score(domain, args.limit, args.labels)
        print(f"  {domain}: {figures['domains'][domain]['seconds']} s", file=sys.stderr, flush=True)
    before = json.loads(args.before.read_text(encoding="utf-8")) if args.before else None
    print(table(figures, before))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
