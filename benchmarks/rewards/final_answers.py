"""Final answers: what the default verifiers wrongly accept, and what they rightly pass (issue 29).

    python benchmarks/rewards/final_answers.py                       # the table for the code as it is
    python benchmarks/rewards/final_answers.py --json OUT.json       # ... and the figures as JSON
    python benchmarks/rewards/final_answers.py --before BEFORE.json  # before -> after, from an earlier --json

At every final-answer pivot (the expert wrote an answer, no tool call) of each built-in domain's test
split, and of a user's world written outside the project (``tests/user_worlds/pivot_kvstore``, registered
in-process), the domain's default verifier scores:

* wrong answers a model really gives: three refusals, ``Done.``, and the expert answers of three other
  tasks (**false accepts**: target <= 2 % of final-answer pivots for each);
* right ones: the expert's own answer, and three rewordings of it made by templates: clauses in reverse
  order, other connecting words, numbers written with units (**passes**: target >= 95 %).

``bare`` counts the pivots whose expert answer reports nothing a tool returned (a confirmation after
writes). ``done`` counts those of them where the world at the pivot already holds the expert's final state of
a state-changing task (read off a world of its own with the episode API, as ``local_rewards.py`` does): there
issue 35 makes any stop but a refusal right, ``Done.`` and another task's words included (the episode ends in
success; the verifier's reason says so). ``Done.`` and another task's answer are counted as false accepts at
the other pivots only; what the verifier does at the ``done`` pivots is printed in rows of its own.
``swe`` has no final-answer pivots (its episodes end with ``submit``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
USER_WORLDS = ROOT / "tests" / "user_worlds"

BUILT_IN = ("tool_use", "terminal", "search")
REFUSALS = ("Sorry, I cannot help with that.", "I'm sorry, but I can't assist with that request.",
            "I am unable to help with this.")
OTHERS = 3


# --------------------------------------------------------------------------- rewordings


def reorder(answer: str) -> str:
    """The answer's clauses (split at sentence ends, semicolons and commas) in reverse order."""
    protected = re.sub(r"\b(Co|Inc|Ltd|St|Dr|Mr|Ms|Jr|Sr)\. ", "\\1.<sp>", answer.strip())  # abbreviations end no clause
    splits = r"(?<=[.;!?])\s+|;\s+|,\s+(?=\D)"
    parts = [p.strip().rstrip(".;,").replace("<sp>", " ") for p in re.split(splits, protected) if p.strip()]
    return "; ".join(reversed(parts)) + "." if len(parts) > 1 else f"To sum up: {answer.strip()}"


CONNECTORS = ((r"\band\b", "as well as"), (r"\bin total\b", "altogether"), (r"^The answer is\b", "It is"),
              (r"^Answer:\s*", "It is "), (r"\bnow\b", "at this point"), (r"\bfrom\b", "out of"), (r"\bto\b", "into"))


def connect(answer: str) -> str:
    """Other connecting words, and a lead-in."""
    out = answer.strip()
    for pattern, replacement in CONNECTORS:
        out = re.sub(pattern, replacement, out)
    return "Here is what I found. " + out


def with_units(answer: str) -> str:
    """Amounts in words (``$36.00`` -> ``36.00 dollars``) and bare numbers with a unit (``96.`` -> ``96 units.``)."""
    out = re.sub(r"\$(\d[\d,]*(?:\.\d+)?)", r"\1 dollars", answer.strip())
    return re.sub(r"(?<![\w.,/:$@-])(\d+(?:\.\d+)?)(?=[.;)]?(?:\s|$))(?![.;)]?\s+[A-Za-z])", r"\1 units", out)


REWORDINGS: dict[str, Callable[[str], str]] = {"reordered": reorder, "connectors": connect, "units": with_units}


# --------------------------------------------------------------------------- the pivots


def answer_pivots(domain: str) -> list[Any]:
    """The final-answer pivots of a domain's bundled test split (the user world: 100 generated tasks)."""
    from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots
    from pivot_envs.sources import resolve_pivots

    if domain == "kvstore":
        from pivot_kvstore.tasks import make_tasks
        from pivot_envs.types import Trajectory

        pivots, _ = extract_pivots([Trajectory.from_dict(t) for t in make_tasks(100, seed=7)], "kvstore",
                                   ExtractOptions(min_reward=None))
    else:
        pivots = resolve_pivots(f"bundled:{domain}:test")
    return [p for p in pivots if not p.expert.get("tool_calls")]


def answer_tasks(domain: str) -> dict[str, Any]:
    """The domain's test tasks by id (the pivots' ``trajectory_id``)."""
    from pivot_envs.envs_data import load_trajectories
    from pivot_envs.types import Trajectory

    if domain == "kvstore":
        from pivot_kvstore.tasks import make_tasks

        return {t.id: t for t in (Trajectory.from_dict(d) for d in make_tasks(100, seed=7))}
    return {t.id: t for t in load_trajectories(domain, "test")}


def done_pivots(domain: str, pivots: list[Any]) -> list[bool]:
    """Per pivot: a state-changing task whose world already holds the expert's final state, and whose expert
    answer reports nothing a tool returned (issue 35: any stop but a refusal is right there)."""
    from local_rewards import Oracle

    tasks = answer_tasks(domain)
    oracle = Oracle(domain, domain)
    try:
        out = []
        for p in pivots:
            where = oracle.where(p, tasks[p.meta["trajectory_id"]])
            out.append(where.changes_state and where.done and not where.facts_returned)
        return out
    finally:
        oracle.close()


def register_user_world() -> None:
    """The user's key-value store world and domain, registered in-process (what its entry points do)."""
    sys.path.insert(0, str(USER_WORLDS))
    from pivot_kvstore.domain import DOMAIN
    from pivot_kvstore.world import KVStoreWorld

    from pivot_envs.domains import register_domain
    from pivot_envs.worlds import register_world

    register_world("kvstore", KVStoreWorld, replace=True)
    register_domain(DOMAIN, replace=True)


def other_answers(pivots: list[Any], i: int) -> list[str]:
    """The expert answers of ``OTHERS`` other tasks (evenly spaced through the list; never this task's, nor one
    word for word the same as this pivot's)."""
    own = pivots[i].meta.get("trajectory_id")
    mine = " ".join(str(pivots[i].expert.get("content") or "").lower().split())
    out: list[str] = []
    step = max(1, len(pivots) // (OTHERS + 1))
    j = i
    for _ in range(len(pivots)):
        j = (j + step) % len(pivots)
        p = pivots[j]
        text = str(p.expert.get("content") or "")
        # another task's answer that is word for word this one's (a templated reply) is this answer, not a wrong one
        if p.meta.get("trajectory_id") != own and text and text not in out and " ".join(text.lower().split()) != mine:
            out.append(text)
        if len(out) == OTHERS:
            break
    return out


# --------------------------------------------------------------------------- the measurement


def measure(domain: str) -> dict[str, Any]:
    from pivot_envs.facts import answer_facts
    from pivot_envs.types import content_text
    from pivot_envs.verifiers import build_verifier
    from pivot_envs.verifiers.defaults import default_verifier_spec

    pivots = answer_pivots(domain)
    spec = default_verifier_spec(domain)
    verifier = build_verifier(spec)

    done = done_pivots(domain, pivots)

    def rate(answers: list[list[str]], where: Callable[[int], bool] = lambda i: True) -> dict[str, Any]:
        """Share of (pivot, answer) pairs passed; ``answers[i]``: the answers tried at pivot ``i``, at the
        pivots ``where`` keeps."""
        actions, targets = [], []
        for i, (p, texts) in enumerate(zip(pivots, answers)):
            if not where(i):
                continue
            for text in texts:
                actions.append(text)
                targets.append(p)
        results = verifier.verify_many(actions, targets)
        errors = [r.error for r in results if r.error]
        if errors:
            raise RuntimeError(f"{domain}: {len(errors)} verifier errors, e.g. {errors[0]}")
        passed = sum(bool(r.passed) for r in results)
        return {"passed": passed, "n": len(results), "rate": passed / len(results) if results else float("nan")}

    expert = [content_text(p.expert.get("content")) for p in pivots]
    out: dict[str, Any] = {"pivots": len(pivots), "verifier": spec if isinstance(spec, str) else spec.get("name"),
                           "bare": sum(not answer_facts(p.context, e) for p, e in zip(pivots, expert)),
                           "state_done": sum(done)}
    others = [other_answers(pivots, i) for i in range(len(pivots))]
    out["refusal"] = rate([list(REFUSALS) for _ in pivots])
    out["done"] = rate([["Done."] for _ in pivots], lambda i: not done[i])
    out["other_task"] = rate(others, lambda i: not done[i])
    out["refusal_at_done"] = rate([list(REFUSALS) for _ in pivots], lambda i: done[i])
    out["done_at_done"] = rate([["Done."] for _ in pivots], lambda i: done[i])
    out["other_task_at_done"] = rate(others, lambda i: done[i])
    out["expert"] = rate([[e] for e in expert])
    for name, fn in REWORDINGS.items():
        out[name] = rate([[fn(e)] for e in expert])
    return out


WRONG = (("refusal", "refusal"), ("done", '"Done." (not at `done` pivots)'),
         ("other_task", "another task's answer (not at `done` pivots)"))
AT_DONE = (("refusal_at_done", "refusal (wrong)"), ("done_at_done", '"Done." (right)'),
           ("other_task_at_done", "another task's answer (right unless it states values the conversation never gave)"))
RIGHT = (("expert", "expert's answer"), ("reordered", "clauses reordered"), ("connectors", "other connectors"),
         ("units", "numbers with units"))


def cell(now: dict[str, Any] | None, before: dict[str, Any] | None) -> str:
    if now is None:
        return "-"
    text = f"{now['rate']:.1%} ({now['passed']}/{now['n']})" if now["n"] else "- (0 pivots)"
    if before is not None:
        text = f"{before['rate']:.1%} -> " + text
    return text


def print_table(results: dict[str, Any], before: dict[str, Any] | None) -> None:
    domains = list(results)
    print("| | " + " | ".join(f"{d} ({results[d]['pivots']} pivots, {results[d]['bare']} bare, "
                               f"{results[d].get('state_done', '?')} done)" for d in domains) + " |")
    print("|---" * (len(domains) + 1) + "|")
    for title, rows in (("false accepts (target <= 2 %)", WRONG), ("passes (target >= 95 %)", RIGHT),
                        ("at the `done` pivots (issue 35: any stop but a refusal is right)", AT_DONE)):
        print(f"| **{title}** |" + " |" * len(domains))
        for key, label in rows:
            cells = [cell(results[d].get(key), (before or {}).get(d, {}).get(key)) for d in domains]
            print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--before", type=Path, help="an earlier --json: print before -> after")
    args = parser.parse_args()
    register_user_world()
    start = time.time()
    results = {d: measure(d) for d in (*BUILT_IN, "kvstore")}
    before = json.loads(args.before.read_text()) if args.before else None
    print_table(results, before)
    print(f"\n{time.time() - start:.1f} s; kvstore: the user world of tests/user_worlds (100 generated tasks, seed 7)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
