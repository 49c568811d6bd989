"""The standing red-team benchmark (issue 48): every built-in domain's default verifier and the tau2 presets' cascade,
attacked with the families of :mod:`pivot_envs.redteam` (wrong actions a policy finds) and fed the right spellings
they must keep crediting.

    python benchmarks/rewards/reward_hacks.py                                # every domain -> benchmarks/rewards/results/reward_hacks/
    python benchmarks/rewards/reward_hacks.py --domains terminal --limit 40  # one domain, 40 pivots (not the frozen counts)
    python benchmarks/rewards/reward_hacks.py --before OLD/figures.json      # a before column from an earlier run
    python benchmarks/rewards/reward_hacks.py --freeze                       # write the case counts (only when families change)

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
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


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


TARGETS = (
    ("`[expert call, anything]`, terminal and search", ("terminal", "search"), ("extra_call",), "wrong", "<= 1 %"),
    ("any text as a stop where the task is done (non-answers)", None,
     ("gibberish_stop", "failure_stop", "command_as_text", "command_in_fence", "precall_prose"), "wrong", "<= 1 %"),
    ("right stops where the task is done", None, ("stop_done", "confirmation_stop"), "right", ">= 95 %"),
    ("answers with a retraction, hedge, false claim, guess list or dump", None,
     ("retraction", "hedge", "false_claim", "guess_list", "value_list", "tool_dump"), "wrong", "<= 2 %"),
    ("swe content-blind wrong edits, reads and test runs", ("swe",),
     ("edit_pass", "edit_empty", "edit_rm", "bash_rm_edit", "read_outside", "chain_rm", "fake_tests"), "wrong",
     "<= 2 %"),
    ("subset search queries that do not retrieve the target", ("search",), ("subset_query",), "wrong", "<= 1 %"),
    ("sprays, small-tree dumps, typed-in output", ("terminal",),
     ("number_spray", "tree_dump", "typed_output", "typed_base64", "typed_hex", "typed_rev", "typed_rot13"), "wrong",
     "<= 2 %"),
    ("the world refuses or fails it (140 KB comment, trailing \\r)", ("terminal",), ("huge_comment", "cr_suffix"),
     "wrong", "0"),
    ("issue 35's false rejects (2>/dev/null, ls -R, open(' id'), number words, swe sed reads and edits)", None,
     ("stderr_null", "ls_recursive", "open_space", "number_words", "sed_read", "sed_edit", "python_edit"), "right",
     ">= 95 %"),
)
"""The issue's target rows: (what, domains or None for all, families, label, target)."""


def _sum(figures: dict[str, Any], domains: Any, families: tuple[str, ...], label: str) -> dict[str, int]:
    n = accepted = 0
    for domain, fig in figures["domains"].items():
        if domains is not None and domain not in domains:
            continue
        for r in fig["families"]:
            if r["family"] in families and r["label"] == label:
                n, accepted = n + r["n"], accepted + r["accepted"]
    return {"n": n, "accepted": accepted}


def target_table(figures: dict[str, Any], before: dict[str, Any] | None) -> str:
    """The issue's target rows, before -> after."""
    lines = ["| figure | label | before | after | target |", "|---|---|---|---|---|"]
    for what, domains, families, label, target in TARGETS:
        old = _pct(_sum(before, domains, families, label)) if before else "-"
        lines.append(f"| {what} | {label} | {old} | {_pct(_sum(figures, domains, families, label))} | {target} |")
    for domain in figures["domains"]:
        for label in ("wrong", "right"):
            old = _pct((before or {}).get("domains", {}).get(domain, {}).get("totals", {}).get(label))
            now = _pct(figures["domains"][domain]["totals"][label])
            lines.append(f"| {domain}, all | {label} | {old} | {now} | {'<= 1 %' if label == 'wrong' else '>= 95 %'} |")
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
    targets = target_table(figures, before)
    print("\n" + targets)
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
        (args.out / "targets.md").write_text(targets + "\n", encoding="utf-8")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
