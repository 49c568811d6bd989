"""Golden verdicts: fixed (pivot, action, verifier) cases and the verdicts the verifiers gave them.

``tests/data/golden_verdicts.json`` holds every case's pivot and action *inline* (a change to the bundled data
cannot pass for a verdict change), its verifier spec, the verdict (``passed``, ``reward``, the deciding
``verifier``) and the versions of the verifiers of its spec (:func:`pivot_envs.verifiers.versions.verifier_versions`).
``tests/verifiers/test_golden_verdicts.py`` recomputes every verdict: a verdict that changed while its versions did not is a
code change that needs a version bump; versions that changed need the file regenerated::

    python tests/verifiers/golden_verdicts.py            # compare, print what changed (exit 1 when anything did)
    python tests/verifiers/golden_verdicts.py --write    # regenerate the verdicts of the recorded cases
    python tests/verifiers/golden_verdicts.py --write --rebuild   # pick the cases again from the bundled data

``--write`` refuses to record a changed verdict whose versions did not change (bump the ``version`` of the verifier
whose code changed first), so regenerating cannot skip the bump. A domain's cases are scored by the domain's default
verifier of now: when the default changes (its config, not a verifier's code), ``--write`` records the new spec and
its verdicts as new inputs.

The cases: in each built-in domain a deterministic sample of the bundled test pivots (call turns and, where the
domain has them, answer turns), each with the expert's own action, a recorded alternative, a refusal, ``Done.`` and
another pivot's action, scored by the domain's default verifier; and the standalone verifiers (strict, tool_call,
fuzzy, schema, exec, coverage, facts, tool_name, retrieves, world_exec and the combinators) on some of them.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from pivot_envs.types import Pivot, stable_hash

DATA = Path(__file__).resolve().parents[1] / "data" / "golden_verdicts.json"
FORMAT = "pivot-envs-golden-verdicts/1"
COMMAND = "python tests/verifiers/golden_verdicts.py --write"
"""The command that regenerates the file (quoted in every failure)."""

DOMAINS = ("terminal", "tool_use", "search", "swe")
CALL_PIVOTS = 4
TEXT_PIVOTS = 2
REFUSAL = "I'm sorry, but I can't help with that request."
DONE = "Done."

SANDBOXED = ("terminal", "exec")
"""Groups whose verifiers run commands in the sandbox (skipped where bubblewrap does not work)."""

STANDALONE: tuple[tuple[str, Any, str, str], ...] = (
    # (group, spec, domain of the pivots, which turns: call / text / any)
    ("strict", "strict", "tool_use", "any"),
    ("tool_call", "tool_call", "tool_use", "any"),
    ("tool_call", {"name": "tool_call", "normalizers": ["strip", "lower"], "coerce": "lenient"}, "tool_use", "call"),
    ("fuzzy", {"name": "fuzzy", "target": "content"}, "tool_use", "text"),
    ("fuzzy", {"name": "fuzzy", "target": "argument:query", "scorer": "token_set_ratio", "threshold": 80}, "search",
     "call"),
    ("schema", "schema", "tool_use", "call"),
    ("coverage", "coverage", "tool_use", "text"),
    ("facts", "facts", "tool_use", "text"),
    ("tool_name", "tool_name", "swe", "call"),
    ("tool_name", {"name": "tool_name", "aliases": "swe", "same_target": True}, "swe", "call"),
    ("retrieves", "retrieves", "search", "call"),
    ("world_exec", {"name": "world_exec", "world": "tool_use"}, "tool_use", "call"),
    ("combinators", {"name": "any", "verifiers": ["strict", "tool_call"]}, "tool_use", "any"),
    ("combinators", {"name": "all", "verifiers": ["schema", "tool_call"]}, "tool_use", "call"),
    ("combinators", {"name": "weighted", "verifiers": ["strict", "tool_call"], "weights": [1, 3], "threshold": 0.7},
     "tool_use", "any"),
    ("exec", "exec", "terminal", "call"),
    ("exec", {"name": "exec", "output": "information", "compare_exit_code": False}, "terminal", "call"),
)
"""Standalone verifiers and the pivots they score."""


# --------------------------------------------------------------------------- the cases


def sample_pivots(domain: str) -> list[Pivot]:
    """A deterministic sample of the domain's bundled test pivots: call turns, then answer turns."""
    from pivot_envs.envs_data import load_pivots

    pivots = sorted(load_pivots(domain, "test"), key=lambda p: p.id)
    rng = random.Random(f"golden-{domain}")
    calls = [p for p in pivots if p.expert.get("tool_calls")]
    texts = [p for p in pivots if not p.expert.get("tool_calls")]
    return rng.sample(calls, min(CALL_PIVOTS, len(calls))) + rng.sample(texts, min(TEXT_PIVOTS, len(texts)))


def pivot_actions(pivot: Pivot, other: Pivot) -> list[tuple[str, Any]]:
    """The actions scored at ``pivot``: its expert's, a recorded alternative, a refusal, ``Done.``, another's."""
    actions: list[tuple[str, Any]] = [("expert", pivot.expert)]
    alternatives = [a for a in pivot.meta.get("alternatives") or [] if a != pivot.expert]
    if alternatives:
        actions.append(("alternative", alternatives[0]))
    actions += [("refusal", REFUSAL), ("done", DONE), ("other", other.expert)]
    return actions


def build_cases() -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The pivots (by id) and the cases, picked afresh from the bundled data (verdicts not computed)."""
    from pivot_envs.verifiers.defaults import default_verifier_spec

    pivots: dict[str, dict[str, Any]] = {}
    cases: list[dict[str, Any]] = []
    sampled = {d: sample_pivots(d) for d in DOMAINS}
    for domain, chosen in sampled.items():
        spec = default_verifier_spec(domain)
        for i, pivot in enumerate(chosen):
            pivots[pivot.id] = pivot.to_dict()
            for kind, action in pivot_actions(pivot, chosen[(i + 1) % len(chosen)]):
                cases.append(case(domain, f"{domain}/{pivot.id}/{kind}", spec, pivot.id, action))
    for group, spec, domain, turns in STANDALONE:
        chosen = [p for p in sampled[domain] if turns == "any" or (turns == "call") == bool(p.expert.get("tool_calls"))]
        label = spec if isinstance(spec, str) else stable_hash(spec, length=6)
        for i, pivot in enumerate(chosen[:3]):
            for kind, action in pivot_actions(pivot, chosen[(i + 1) % len(chosen)]):
                cases.append(case(group, f"{group}:{label}/{pivot.id}/{kind}", spec, pivot.id, action))
    return pivots, cases


def case(group: str, case_id: str, spec: Any, pivot_id: str, action: Any) -> dict[str, Any]:
    return {"id": case_id, "group": group, "spec": json.loads(json.dumps(spec)), "pivot": pivot_id, "action": action}


def current_spec(item: dict[str, Any]) -> Any:
    """The spec a case is scored with now: a domain case's is its domain's default verifier of now (a change to the
    default is a change of the case's inputs, not of a verifier's code), a standalone case's its own."""
    if item["group"] in DOMAINS:
        from pivot_envs.verifiers.defaults import default_verifier_spec

        return json.loads(json.dumps(default_verifier_spec(item["group"])))
    return item["spec"]


def outdated_specs(cases: Iterable[dict[str, Any]]) -> list[str]:
    """The domain cases recorded with another spec than their domain's default verifier of now."""
    return [f"{c['id']}: the default verifier of {c['group']} changed" for c in cases if c["spec"] != current_spec(c)]


def inputs_key(item: dict[str, Any], pivots: dict[str, dict[str, Any]]) -> str:
    """A hash of what a case scores (its spec, pivot and action): equal keys, comparable verdicts."""
    return stable_hash(item["spec"], pivots[item["pivot"]], item["action"])


# --------------------------------------------------------------------------- verdicts


def verdict_of(result: Any) -> dict[str, Any]:
    """What is recorded of a :class:`~pivot_envs.types.VerifyResult` (an error is never a verdict)."""
    if result.error is not None:
        raise RuntimeError(f"verifier {result.verifier} errored: {result.error}")
    return {"passed": bool(result.passed), "reward": round(float(result.reward), 9), "verifier": result.verifier}


def compute(cases: list[dict[str, Any]], pivots: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Case id -> ``{"verdict": ..., "versions": ...}`` under the code of now (one ``verify_many`` per spec)."""
    from pivot_envs.verifiers import build_verifier
    from pivot_envs.verifiers.versions import verifier_versions

    by_spec: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in cases:
        by_spec[json.dumps(item["spec"], sort_keys=True)].append(item)
    loaded = {pid: Pivot.from_dict(p) for pid, p in pivots.items()}
    out: dict[str, dict[str, Any]] = {}
    for items in by_spec.values():
        verifier = build_verifier(items[0]["spec"])
        versions = verifier_versions(verifier)
        results = verifier.verify_many([i["action"] for i in items], [loaded[i["pivot"]] for i in items])
        for item, result in zip(items, results):
            try:
                out[item["id"]] = {"verdict": verdict_of(result), "versions": versions}
            except RuntimeError as exc:
                raise RuntimeError(f"golden case {item['id']}: {exc}") from None
    return out


def same_verdict(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a["passed"] == b["passed"] and a["verifier"] == b["verifier"]
            and math.isclose(a["reward"], b["reward"], rel_tol=0, abs_tol=1e-9))


def shown(verdict: dict[str, Any]) -> str:
    return f"{'pass' if verdict['passed'] else 'fail'} {verdict['reward']:g} by {verdict['verifier']}"


def compare(recorded: Iterable[dict[str, Any]], now: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
    """``(unbumped, stale)``: cases whose verdict changed under the same versions (a missing version bump), and
    cases whose versions changed (the file needs regenerating); each a line naming the case."""
    unbumped, stale = [], []
    for item in recorded:
        new = now[item["id"]]
        if new["versions"] != item["versions"]:
            changed = sorted(k for k in set(new["versions"]) | set(item["versions"])
                             if new["versions"].get(k) != item["versions"].get(k))
            stale.append(f"{item['id']}: versions of {', '.join(changed)} changed "
                         f"({ {k: item['versions'].get(k) for k in changed} } -> { {k: new['versions'].get(k) for k in changed} })")
        elif not same_verdict(item["verdict"], new["verdict"]):
            unbumped.append(f"{item['id']}: {shown(item['verdict'])} -> {shown(new['verdict'])} "
                            f"(verifiers {', '.join(f'{k} {v}' for k, v in item['versions'].items())})")
    return unbumped, stale


def unbumped_message(lines: list[str]) -> str:
    return (f"{len(lines)} golden verdict(s) changed while the versions of their verifiers did not:\n  "
            + "\n  ".join(lines) + f"\nbump the `version` of the verifier whose code changed, then regenerate with "
            f"`{COMMAND}`")


def stale_message(lines: list[str]) -> str:
    return (f"{len(lines)} golden case(s) were recorded under other verifier versions or another default "
            f"verifier:\n  " + "\n  ".join(lines)
            + f"\nregenerate with `{COMMAND}`")


# --------------------------------------------------------------------------- the file


def read(path: Path = DATA) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a golden-verdicts file of format {FORMAT!r}; regenerate with `{COMMAND}`")
    return data


def write(path: Path, pivots: dict[str, dict[str, Any]], cases: list[dict[str, Any]]) -> None:
    """One pivot and one case per line: a changed verdict is a one-line diff."""
    lines = ["{", f' "format": {json.dumps(FORMAT)},', f' "regenerate": {json.dumps(COMMAND)},', ' "pivots": {']
    used = sorted({c["pivot"] for c in cases})
    lines += [f"  {json.dumps(pid)}: {json.dumps(pivots[pid], sort_keys=True)}" + ("," if i < len(used) - 1 else "")
              for i, pid in enumerate(used)]
    lines += [" },", ' "cases": [']
    lines += [f"  {json.dumps(c, sort_keys=True)}" + ("," if i < len(cases) - 1 else "") for i, c in enumerate(cases)]
    lines += [" ]", "}"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def regenerate(path: Path, rebuild: bool, out: Any = sys.stdout) -> int:
    """Recompute the verdicts (of the recorded cases, or of cases picked afresh) and write them, unless a verdict
    changed under unchanged versions (then nothing is written). Prints what changed; returns an exit status."""
    old = read(path) if path.exists() else {"pivots": {}, "cases": []}
    pivots, cases = build_cases() if rebuild or not old["cases"] else (old["pivots"], old["cases"])
    cases = [{k: v for k, v in {**c, "spec": current_spec(c)}.items() if k not in ("verdict", "versions")}
             for c in cases]
    now = compute(cases, pivots)
    before = {c["id"]: c for c in old["cases"] if c["pivot"] in old["pivots"]}
    comparable = [before[c["id"]] for c in cases
                  if c["id"] in before and inputs_key(before[c["id"]], old["pivots"]) == inputs_key(c, pivots)]
    unbumped, stale = compare(comparable, now)
    new_ids = [c["id"] for c in cases if c["id"] not in {b["id"] for b in comparable}]
    gone = sorted(set(before) - {c["id"] for c in cases})
    changed = [f"{c['id']}: {shown(c['verdict'])} -> {shown(now[c['id']]['verdict'])}" for c in comparable
               if c["versions"] != now[c["id"]]["versions"] and not same_verdict(c["verdict"], now[c["id"]]["verdict"])]
    for title, lines in (("verdicts changed with a version bump", changed), ("versions changed", stale),
                         ("new or changed inputs", new_ids), ("cases no longer made", gone)):
        if lines:
            print(f"{title} ({len(lines)}):", file=out)
            for line in lines:
                print(f"  {line}", file=out)
    if unbumped:
        print(f"refused: {unbumped_message(unbumped)}".replace(f", then regenerate with `{COMMAND}`",
                                                              ", then run this again"), file=out)
        return 1
    records = [{**c, **now[c["id"]]} for c in cases]
    write(path, pivots, records)
    print(f"wrote {path} ({len(records)} cases, {len({c['pivot'] for c in records})} pivots)", file=out)
    return 0


def check(path: Path, out: Any = sys.stdout) -> int:
    """Compare the recorded verdicts with the code of now; print the differences; 1 when there are any."""
    data = read(path)
    unbumped, stale = compare(data["cases"], compute(data["cases"], data["pivots"]))
    stale += outdated_specs(data["cases"])
    if unbumped:
        print(unbumped_message(unbumped), file=out)
    if stale:
        print(stale_message(stale), file=out)
    if not (unbumped or stale):
        print(f"{len(data['cases'])} golden verdicts unchanged", file=out)
    return 1 if unbumped or stale else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="regenerate the file (refused when a verdict changed "
                        "without a version bump)")
    parser.add_argument("--rebuild", action="store_true", help="with --write: pick the cases again from the bundled "
                        "data (new pivots or actions)")
    parser.add_argument("--file", type=Path, default=DATA, help="the golden file (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.rebuild and not args.write:
        parser.error("--rebuild goes with --write")
    return regenerate(args.file, args.rebuild) if args.write else check(args.file)


if __name__ == "__main__":
    sys.exit(main())
