"""The standing red-team benchmark (issue 48): every built-in domain's default verifier and the tau2 presets' cascade,
attacked with the families of :mod:`pivot_envs.redteam` (wrong actions a policy finds) and fed the right spellings
they must keep crediting.

    python benchmarks/reward_hacks.py                                # every domain -> benchmarks/results/reward_hacks/
    python benchmarks/reward_hacks.py --domains terminal --limit 40  # one domain, 40 pivots (not the frozen counts)
    python benchmarks/reward_hacks.py --before OLD/figures.json      # a before column from an earlier run
    python benchmarks/reward_hacks.py --freeze                       # write the case counts (only when families change)

Every built-in domain's bundled test split (all pivots) and 30 pivots of each tau2 preset (their expected actions).
Labels come from each family's rule and the domain's world (:mod:`pivot_envs.redteam.oracle`), never from a
verifier. The case counts per domain, family and label are frozen in ``counts.json``: a run over all pivots whose
counts differ fails (the families, or the data, changed; ``--freeze`` after a deliberate change).

Also printed: the stop-language rule on real texts from other projects (``../shared/data``, skipped when absent):
the closing messages of gpt-4o's successful tau-bench airline conversations (right stops) and tldr's shell
commands pasted as text (wrong stops).

Targets: wrong accepted <= 1 % per domain and <= 3 % per family; right accepted >= 95 %.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pivot_envs.redteam import red_team
from pivot_envs.redteam.run import pct, Row

DOMAINS = ("terminal", "tool_use", "search", "swe", "tau2-airline", "tau2-retail")
TAU2_LIMIT = 30
RESULTS = Path(__file__).resolve().parent / "results" / "reward_hacks"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def run_domain(domain: str, limit: int | None) -> dict[str, Any]:
    if limit is None and domain.startswith("tau2-"):
        limit = TAU2_LIMIT
    report = red_team(domain, limit=limit, progress=True)
    return {**report.to_dict(), "counts": report.counts(), "table": report.table()}


def real_texts() -> dict[str, Any] | None:
    """The stop-language rule on real closings and real shell commands (``None`` when ../shared/data is absent)."""
    from pivot_envs.stop_language import reads_as_stop

    closings_file, commands_file = SHARED / "tau-bench" / "gpt-4o-airline.jsonl", SHARED / "tldr" / "commands.jsonl"
    if not closings_file.exists() or not commands_file.exists():
        return None
    closings = []
    for line in closings_file.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        last = next((m for m in reversed(row["messages"]) if m.get("role") == "assistant"), None)
        if row.get("reward") == 1 and last and not last.get("tool_calls") and (last.get("content") or "").strip():
            closings.append(last["content"])
    commands = [json.loads(line)["command"] for line in commands_file.read_text(encoding="utf-8").splitlines()]
    commands = [c.replace("{{", "").replace("}}", "") for c in commands[::20]]
    ok_closings = sum(reads_as_stop(c)[0] for c in closings)
    ok_commands = sum(reads_as_stop(c)[0] for c in commands)
    return {"closings": {"n": len(closings), "accepted": ok_closings},
            "commands": {"n": len(commands), "accepted": ok_commands}}


def table(figures: dict[str, Any], before: dict[str, Any] | None) -> str:
    head = "| domain | family | label | cases | " + ("before | " if before else "") + "accepted | verifier errors |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for domain, fig in figures["domains"].items():
        old = {f"{r['family']}/{r['label']}": r for r in (before or {}).get("domains", {}).get(domain, {}).get("families", [])}
        old_totals = (before or {}).get("domains", {}).get(domain, {}).get("totals", {})
        for r in fig["families"]:
            cells = [domain, r["family"], r["label"], str(r["n"])]
            if before:
                cells.append(_pct(old.get(f"{r['family']}/{r['label']}")))
            cells += [_pct(r), str(r["errors"])]
            lines.append("| " + " | ".join(cells) + " |")
        for label in ("wrong", "right"):
            t = fig["totals"][label]
            cells = [f"**{domain}**", f"**all {label}**", label, str(t["n"])]
            if before:
                cells.append(_pct(old_totals.get(label)))
            cells += [f"**{_pct(t)}**", str(t["errors"])]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pct(row: dict[str, Any] | None) -> str:
    if not row or not row.get("n"):
        return "-"
    return pct(Row(row.get("family", ""), row.get("label", ""), row["n"], row["accepted"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domains", default=",".join(DOMAINS), help="comma-separated (default: all six)")
    ap.add_argument("--limit", type=int, default=None, help="pivots per domain (default: all; tau2: 30)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="results folder (default: %(default)s)")
    ap.add_argument("--before", type=Path, default=None, help="an earlier figures.json: print a before column")
    ap.add_argument("--freeze", action="store_true", help="write the case counts to OUT/counts.json")
    ap.add_argument("--workers", type=int, default=2, help="domains run in parallel (default: %(default)s)")
    ap.add_argument("--no-real-texts", action="store_true",
                    help="leave out the stop-language rule on ../shared/data's texts (a 'before' run: no such rule)")
    args = ap.parse_args(argv)
    domains = [d.strip() for d in args.domains.split(",") if d.strip()]
    unknown = sorted(set(domains) - set(DOMAINS))
    if unknown:
        ap.error(f"unknown domains {unknown}; known: {', '.join(DOMAINS)}")
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        done = dict(zip(domains, pool.map(run_domain, domains, [args.limit] * len(domains))))
    figures: dict[str, Any] = {"domains": {d: done[d] for d in domains},
                               "real_texts": None if args.no_real_texts else real_texts(),
                               "seconds": round(time.perf_counter() - t0, 1), "limit": args.limit}
    before = json.loads(args.before.read_text(encoding="utf-8")) if args.before else None
    out = table(figures, before)
    print(out)
    print(f"\nreal texts (stop-language rule): {json.dumps(figures['real_texts'])}")
    misses = [m for fig in figures["domains"].values() for m in fig["misses"]]
    print("\ntargets missed:\n" + ("\n".join(f"- {m}" for m in misses) if misses else "- none"))
    args.out.mkdir(parents=True, exist_ok=True)
    counts = {d: figures["domains"][d]["counts"] for d in domains}
    frozen_file = args.out / "counts.json"
    status = 0
    if args.limit is None:
        if args.freeze or not frozen_file.exists():
            frozen_file.write_text(json.dumps(counts, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        else:
            frozen = json.loads(frozen_file.read_text(encoding="utf-8"))
            changed = {d: c for d, c in counts.items() if d in frozen and frozen[d] != c}
            if changed:
                print(f"\nthe case counts differ from {frozen_file} for {sorted(changed)}: the families or the data "
                      "changed (--freeze after a deliberate change)", file=sys.stderr)
                status = 1
        (args.out / "figures.json").write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
        (args.out / "table.md").write_text(out + "\n", encoding="utf-8")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
