"""Offline pivot profiling (PivotRL step (i)): statistics, error masking, batching, checkpoint/resume
with a killed CLI process, the filter modes and their boundaries, the report, and Ray."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import pytest
import typer
from typer.testing import CliRunner

from pivot_envs.actions import parse_action
from pivot_envs.agents import Agent, Completion
from pivot_envs.agents.baselines import NoisyExpertAgent
from pivot_envs.cli.profile_cmd import register
from pivot_envs.envs_data import generator
from pivot_envs.pipeline.extract import extract_pivots
from pivot_envs.formats import read_pivots, write_pivots
from pivot_envs.pipeline.filter import FilterConfig, filter_pivots
from pivot_envs.pipeline.profile import profile_pivots, reward_stats
from pivot_envs.pipeline.report import profile_report
from pivot_envs.types import Message, Pivot, Profile, VerifyResult
from pivot_envs.verifiers import Verifier
from pivot_envs.verifiers.base import register_verifier

from tests.conftest import scaled

ROOT = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=4)
def _candidates(episodes: int) -> tuple[Pivot, ...]:
    pivots, _ = extract_pivots(generator("tool_use").generate(episodes, 0), "tool_use")
    return tuple(pivots)


def candidates(episodes: int = 6) -> list[Pivot]:
    return list(_candidates(episodes))


def app() -> typer.Typer:
    cli = typer.Typer(pretty_exceptions_enable=False)
    register(cli)
    return cli


def call(name: str, arguments: str) -> Message:
    fn = {"name": name, "arguments": arguments}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": fn}]}


class ScriptedAgent(Agent):
    """Returns, at each pivot, the actions listed for its id (a real Agent, deterministic)."""

    kind = "scripted"

    def __init__(self, script: dict[str, list[Message | str]]):
        self.script = script

    def sample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        out = []
        for p in pivots:
            actions = self.script[p.id][:n]
            out.append([Completion(text=str(a), action=parse_action(a)) for a in actions])
        return out


class CountingAgent(NoisyExpertAgent):
    """``noisy_expert`` that records the size of every ``sample`` call."""

    def __init__(self, p: float = 0.5):
        super().__init__(p)
        self.calls: list[tuple[int, int]] = []

    def sample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        self.calls.append((len(pivots), n))
        return super().sample(pivots, n, seed=seed)


@register_verifier("test_profile_flaky")
@dataclass
class FlakyVerifier(Verifier):
    """Exact content match, but an infrastructure error for any action saying BOOM."""

    def verify(self, action, pivot) -> VerifyResult:
        if "BOOM" in action.content:
            return VerifyResult.failure(self.name, "judge endpoint down")
        ok = action.content == pivot.expert.get("content")
        return VerifyResult(float(ok), ok, self.name, "match" if ok else "differs")


def text_pivot(pid: str, content: str = "yes") -> Pivot:
    return Pivot(id=pid, domain="tool_use", context=[{"role": "user", "content": "ok?"}],
                 expert={"role": "assistant", "content": content})


# --------------------------------------------------------------------------- statistics


def test_statistics_match_hand_numbers():
    tools = [{"type": "function", "function": {"name": "get_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}, "verbose": {"type": "boolean"}}}}}]
    exact = call("get_order", '{"order_id": "A1", "verbose": false}')
    reordered = call("get_order", '{"verbose": false, "order_id": "A1"}')  # functional yes, strict no
    wrong = call("get_order", '{"order_id": "A2", "verbose": false}')
    pivot = Pivot(id="p1", domain="tool_use", context=[{"role": "user", "content": "where is A1?"}],
                  expert=exact, tools=tools, meta={"profile_error": "stale", "keep": 1})
    agent = ScriptedAgent({"p1": [exact, wrong, reordered, wrong, exact, wrong, wrong, wrong]})
    [out] = profile_pivots([pivot], agent, "tool_call", k=8, seed=0)
    prof = out.profile
    assert prof.k == 8 and prof.errors == 0
    assert prof.rewards == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert prof.mean == 3 / 8
    assert prof.var == pytest.approx(3 / 8 * 5 / 8, abs=1e-15)  # population variance p(1-p)
    assert prof.strict_mean == 2 / 8
    assert out.meta["profile_strict"] == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert out.meta["profile_passed"] == [True, False, True, False, True, False, False, False]
    assert "profile_error" not in out.meta and out.meta["keep"] == 1  # stale keys cleared, others kept
    assert pivot.profile is None  # the input pivot is not modified
    assert reward_stats([0.5, 1.0, 0.0]) == (0.5, pytest.approx(1 / 6))
    assert reward_stats([]) == (0.0, 0.0)


def test_verifier_errors_are_counted_and_kept_out_of_the_statistics():
    pivots = [text_pivot("a"), text_pivot("b")]
    agent = ScriptedAgent({"a": ["yes", "BOOM", "no", "yes"], "b": ["BOOM"] * 4})
    a, b = profile_pivots(pivots, agent, "test_profile_flaky", k=4, seed=0)
    assert a.profile.k == 4 and a.profile.errors == 1
    assert a.profile.rewards == [1.0, 0.0, 1.0]
    assert a.profile.mean == pytest.approx(2 / 3) and a.profile.var == pytest.approx(2 / 9)
    assert len(a.meta["profile_strict"]) == len(a.meta["profile_passed"]) == 3
    assert "judge endpoint down" in a.meta["profile_error"] and "profile_unscored" not in a.meta
    # all samples errored: NaN-free zeros, flagged, and dropped by every profile-based filter
    assert b.profile.k == 4 and b.profile.errors == 4 and b.profile.rewards == []
    assert (b.profile.mean, b.profile.var, b.profile.strict_mean) == (0.0, 0.0, None)
    assert b.meta["profile_unscored"] is True
    for mode in ("adv", "pvpo"):
        kept, audit = filter_pivots([a, b], FilterConfig(mode=mode, max_mean=1.0))
        assert [p.id for p in kept] == ["a"] and audit.unscored == 1
        assert not any(p.meta.get("inject_expert") for p in kept)
    rep = profile_report([a, b])
    assert (rep.scored, rep.unscored, rep.samples, rep.errors) == (1, 1, 8, 5)


def test_all_k_samples_of_many_pivots_go_in_few_sample_calls():
    pivots = candidates()[:23]
    agent = CountingAgent(0.5)
    batched = profile_pivots(pivots, agent, None, k=8, seed=5, batch_pivots=10)
    assert agent.calls == [(10, 8), (10, 8), (3, 8)]
    # noisy_expert seeds per (seed, pivot id, sample): batch composition does not change the numbers
    single = profile_pivots(pivots, NoisyExpertAgent(0.5), None, k=8, seed=5, batch_pivots=1)
    assert [p.to_dict() for p in batched] == [p.to_dict() for p in single]
    assert [p.id for p in batched] == [p.id for p in pivots]
    means = {p.profile.mean for p in batched}
    assert len(means) > 2 and all(p.profile.k == 8 for p in batched)  # mixed outcomes, real profiles
    other_seed = profile_pivots(pivots, NoisyExpertAgent(0.5), None, k=8, seed=6, batch_pivots=10)
    assert [p.profile.rewards for p in other_seed] != [p.profile.rewards for p in batched]


def test_checkpoint_records_its_settings(tmp_path):
    pivots = candidates()[:5]
    ckpt = tmp_path / "run.checkpoint"
    profile_pivots(pivots, "noisy_expert:0.5", None, k=4, seed=0, batch_pivots=2, checkpoint=ckpt)
    lines = ckpt.read_text().splitlines()
    assert len(lines) == 1 + 3  # header + one line per batch
    with pytest.raises(ValueError, match=r"run.checkpoint.*k: checkpoint 4 vs now 8"):
        profile_pivots(pivots, "noisy_expert:0.5", None, k=8, seed=0, batch_pivots=2, checkpoint=ckpt)
    with pytest.raises(ValueError, match="ids"):
        profile_pivots(pivots[::-1], "noisy_expert:0.5", None, k=4, seed=0, batch_pivots=2, checkpoint=ckpt)


# --------------------------------------------------------------------------- checkpoint / resume

SLOW_CLI = textwrap.dedent(
    """
    import os, sys, time
    import typer
    from pivot_envs.agents import register_agent
    from pivot_envs.agents.baselines import NoisyExpertAgent
    from pivot_envs.cli.profile_cmd import register

    @register_agent("slow_noisy")
    class SlowNoisy(NoisyExpertAgent):
        kind = "slow_noisy"

        def __init__(self, p=0.5, delay=0.0):
            super().__init__(p)
            self.delay = delay
            self.calls = 0

        def sample(self, pivots, n, *, seed=None):
            with open(os.environ["SAMPLED_LOG"], "a") as f:
                f.write("".join(p.id + "\\n" for p in pivots))
            self.calls += 1
            if self.calls > int(os.environ.get("STALL_AFTER") or 1_000_000):
                time.sleep(600)  # held here until the test kills the run: no race with a finishing run
            time.sleep(self.delay)
            return super().sample(pivots, n, seed=seed)

        def config(self):
            return {"kind": self.kind, "p": self.p, "delay": self.delay}

    app = typer.Typer(pretty_exceptions_enable=False)
    register(app)
    app(sys.argv[1:])
    """
)


def _cli(script: Path, args: list[str], log: Path, stall_after: int | None = None) -> subprocess.Popen:
    """The profile CLI with the slow agent; with ``stall_after``, its sampling hangs after that many batches."""
    env = {**os.environ, "SAMPLED_LOG": str(log)}
    if stall_after is not None:
        env["STALL_AFTER"] = str(stall_after)
    return subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_killed_profile_run_resumes_to_the_uninterrupted_result(tmp_path):
    pivots = candidates()[:24]
    cand = tmp_path / "cand.jsonl"
    write_pivots(pivots, cand)
    script = tmp_path / "slow_cli.py"
    script.write_text(SLOW_CLI)
    out = tmp_path / "prof.jsonl"
    ckpt = tmp_path / "prof.jsonl.checkpoint"
    slow = '{"kind": "slow_noisy", "p": 0.5, "delay": 0.25}'
    args = ["profile", "--pivots", str(cand), "-k", "4", "--batch-pivots", "3", "--seed", "7"]

    proc = _cli(script, [*args, "--agent", slow, "-o", str(out)], tmp_path / "first.log", stall_after=2)
    deadline = time.monotonic() + scaled(60)
    while time.monotonic() < deadline and proc.poll() is None:
        if ckpt.exists() and len(ckpt.read_text().splitlines()) >= 3:  # header + 2 finished batches
            break
        time.sleep(0.02)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    finished = {r["id"] for line in ckpt.read_text().splitlines()[1:] for r in json.loads(line)["results"]}
    assert 6 <= len(finished) < len(pivots)
    with ckpt.open("a") as f:  # as if the kill had struck in the middle of writing a batch
        f.write('{"results": [{"index": 21, "id": "tor')

    resumed = _cli(script, [*args, "--agent", slow, "-o", str(out)], tmp_path / "resume.log")
    stdout, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stderr
    assert "resuming from" in stderr and "wrote 24 profiled pivots" in stdout
    redone = set((tmp_path / "resume.log").read_text().split())
    assert redone and not redone & finished  # finished pivots were not sampled again
    assert redone | finished == {p.id for p in pivots}
    assert not ckpt.exists()

    fast = '{"kind": "slow_noisy", "p": 0.5, "delay": 0.0}'
    full_out = tmp_path / "full.jsonl"
    full = _cli(script, [*args, "--agent", fast, "-o", str(full_out)], tmp_path / "full.log")
    assert full.wait(timeout=120) == 0
    assert out.read_bytes() == full_out.read_bytes()
    assert len({p.profile.mean for p in read_pivots(out)}) > 2


# --------------------------------------------------------------------------- filter


def profiled(pid: str, rewards: list[float], strict: list[float] | None = None, k: int | None = None,
             errors: int = 0) -> Pivot:
    mean, var = reward_stats(rewards)
    strict = strict if strict is not None else [0.0] * len(rewards)
    p = text_pivot(pid)
    p.profile = Profile(k=k or len(rewards) + errors, rewards=rewards, mean=mean, var=var,
                        strict_mean=reward_stats(strict)[0] if rewards else None, errors=errors)
    p.meta = {"profile_strict": strict, "profile_passed": [r >= 1.0 for r in rewards]}
    if not rewards:
        p.meta["profile_unscored"] = True
    return p


def filter_fixture() -> list[Pivot]:
    return [
        profiled("zero", [0, 0, 0, 0]),           # var 0, mean 0
        profiled("one", [1, 1, 1, 1]),            # var 0, mean 1
        profiled("q", [1, 0, 0, 0]),              # mean .25, var .1875
        profiled("half", [1, 1, 0, 0]),           # mean .5,  var .25
        profiled("three", [1, 1, 1, 0]),          # mean .75, var .1875
        profiled("errs", [], k=4, errors=4),      # unscored
        text_pivot("unprofiled"),
    ]


def test_adv_filter_boundaries_are_strict():
    pivots = filter_fixture()
    kept, audit = filter_pivots(pivots, FilterConfig(mode="adv", min_var=0.0, max_mean=0.75))
    assert [p.id for p in kept] == ["q", "half"]  # mean == 0.75 is not < 0.75
    assert (audit.candidates, audit.unprofiled, audit.unscored, audit.zero_var, audit.too_easy, audit.kept) == (
        7, 1, 1, 2, 1, 2)
    kept, _ = filter_pivots(pivots, FilterConfig(mode="adv", min_var=0.0, max_mean=0.7500001))
    assert [p.id for p in kept] == ["q", "half", "three"]
    kept, _ = filter_pivots(pivots, FilterConfig(mode="adv", min_var=0.1875, max_mean=1.0))
    assert [p.id for p in kept] == ["half"]  # var == min_var is not > min_var
    kept, _ = filter_pivots(pivots, FilterConfig(mode="adv", min_var=0.0, max_mean=0.25))
    assert kept == []


def test_random_filter_draws_as_many_as_adv_uniformly_and_reproducibly():
    pivots = [profiled(f"p{i}", [1, 0] if i % 3 else [0, 0]) for i in range(30)]
    adv, _ = filter_pivots(pivots, FilterConfig(mode="adv", max_mean=0.75))
    a, audit = filter_pivots(pivots, FilterConfig(mode="random", max_mean=0.75, seed=1))
    b, _ = filter_pivots(pivots, FilterConfig(mode="random", max_mean=0.75, seed=1))
    c, _ = filter_pivots(pivots, FilterConfig(mode="random", max_mean=0.75, seed=2))
    assert len(a) == len(adv) == 20 == audit.kept
    assert [p.id for p in a] == [p.id for p in b] != [p.id for p in c]
    order = [p.id for p in pivots]
    assert [order.index(p.id) for p in a] == sorted(order.index(p.id) for p in a)  # input order
    assert any(p.profile.var == 0 for p in a)  # drawn from all candidates, not from D_adv
    n5, _ = filter_pivots(pivots, FilterConfig(mode="random", n=5, seed=1))
    assert len(n5) == 5
    with pytest.raises(ValueError, match="n <= 30"):
        filter_pivots(pivots, FilterConfig(mode="random", n=31))
    # over many seeds every candidate is drawn about equally often (uniform, not biased to D_adv)
    counts = {p.id: 0 for p in pivots}
    for seed in range(300):
        for p in filter_pivots(pivots, FilterConfig(mode="random", n=10, seed=seed))[0]:
            counts[p.id] += 1
    assert min(counts.values()) > 60 and max(counts.values()) < 140  # expected 100 each


def test_pvpo_filter_keeps_partial_accuracy_and_flags_all_zero_states():
    pivots = filter_fixture()
    pivots[2].meta["inject_expert"] = True  # stale flag from an earlier run must go
    kept, audit = filter_pivots(pivots, FilterConfig(mode="pvpo"))
    assert [p.id for p in kept] == ["zero", "q", "half", "three"]
    assert [p.meta.get("inject_expert", False) for p in kept] == [True, False, False, False]
    assert (audit.solved, audit.inject_expert, audit.unscored, audit.unprofiled) == (1, 1, 1, 1)
    assert "inject_expert" not in pivots[0].meta  # inputs untouched


def test_filter_cli_writes_pivots_and_prints_the_audit(tmp_path):
    src = tmp_path / "prof.jsonl"
    write_pivots(filter_fixture(), src)
    runner = CliRunner()
    res = runner.invoke(app(), ["filter", str(src), "-o", str(tmp_path / "adv.jsonl"), "--min-var", "0",
                                "--max-mean", "0.75"])
    assert res.exit_code == 0, res.output
    assert [p.id for p in read_pivots(tmp_path / "adv.jsonl")] == ["q", "half"]
    assert "kept: D_adv" in res.output and "2 (28.6%)" in res.output
    res = runner.invoke(app(), ["filter", str(src), "-o", str(tmp_path / "pvpo.jsonl"), "--mode", "pvpo"])
    assert res.exit_code == 0, res.output
    assert [p.meta.get("inject_expert") for p in read_pivots(tmp_path / "pvpo.jsonl")] == [True, None, None, None]
    res = runner.invoke(app(), ["filter", str(src), "-o", str(tmp_path / "x.jsonl")])
    assert res.exit_code == 2 and "--max-mean" in res.output
    res = runner.invoke(app(), ["filter", str(src), "-o", str(tmp_path / "x.jsonl"), "--mode", "best"])
    assert res.exit_code == 2 and "adv, random, pvpo" in res.output


# --------------------------------------------------------------------------- report


def test_report_numbers():
    pivots = [
        profiled("a", [0, 0, 0, 0]),
        profiled("b", [1, 1, 1, 1], strict=[1, 1, 0, 0]),
        profiled("c", [1, 0, 0, 0], strict=[0, 0, 0, 0]),   # strict-blind pivot
        profiled("d", [1, 1, 0, 0], strict=[1, 0, 0, 0]),
        profiled("e", [], k=4, errors=4),
        text_pivot("f"),
    ]
    rep = profile_report(pivots, max_mean=0.5)
    assert (rep.pivots, rep.profiled, rep.scored, rep.unscored, rep.samples, rep.errors) == (6, 5, 4, 1, 20, 4)
    assert rep.zero_var == 2 and rep.zero_var_fraction == 0.5
    assert (rep.zero_var_all_fail, rep.zero_var_all_pass) == (1, 1)
    assert rep.survivors == 1  # c (mean .25); d has mean .5, not < .5
    assert rep.mean_hist == [1, 0, 1, 0, 0, 1, 0, 0, 0, 1]
    assert (rep.functional_passes, rep.strict_misses) == (7, 4)  # b: 2 misses, c: 1, d: 1
    assert rep.sample_miss_rate == 4 / 7
    assert rep.pivot_miss_rate == pytest.approx((4 * 0.5 + 4 * 0.25 + 4 * 0.25) / (4 + 1 + 2))
    assert (rep.strict_blind, rep.with_functional_pass) == (1, 3)
    assert profile_report(pivots).survivors == 2
    assert math.isnan(profile_report([]).zero_var_fraction)


def test_profile_cli_on_a_bundled_split_then_report_with_png(tmp_path):
    out = tmp_path / "prof.jsonl.gz"
    res = CliRunner().invoke(app(), ["profile", "--pivots", "bundled:tool_use:test", "--agent", "noisy_expert:0.3",
                                     "-k", "4", "-o", str(out), "--batch-pivots", "64", "--max-mean", "0.75"])
    assert res.exit_code == 0, res.output
    from pivot_envs.envs_data import load_pivots

    got = read_pivots(out)
    assert [p.id for p in got] == [p.id for p in load_pivots("tool_use", "test")]
    assert all(p.profile is not None and p.profile.k == 4 for p in got)
    assert "zero variance" in res.output and "survive filter" in res.output
    assert not (tmp_path / "prof.jsonl.gz.checkpoint").exists()
    pytest.importorskip("matplotlib")
    png = tmp_path / "report.png"
    res = CliRunner().invoke(app(), ["profile", "--report", str(out), "--png", str(png), "--max-mean", "0.5"])
    assert res.exit_code == 0, res.output
    rep = profile_report(got, 0.5)
    assert f"{rep.survivors} ({rep.survivor_fraction:.1%})" in res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = CliRunner().invoke(app(), ["profile", "--pivots", "bundled:nope:train", "--agent", "replay", "-o",
                                     str(tmp_path / "x.jsonl")])
    assert res.exit_code == 2 and "unknown domain 'nope'" in res.output


# --------------------------------------------------------------------------- Ray


@pytest.mark.slow
def test_ray_profile_equals_single_process_and_resumes_its_checkpoint(tmp_path):
    ray = pytest.importorskip("ray")
    from pivot_envs.pipeline.profile_ray import profile_pivots_ray

    pivots = candidates()[:30]
    ckpt = tmp_path / "single.checkpoint"
    single = profile_pivots(pivots, "noisy_expert:0.5", None, k=8, seed=3, batch_pivots=4, checkpoint=ckpt)
    lines = ckpt.read_text().splitlines()
    ckpt.write_text("\n".join(lines[:4]) + "\n")  # as if interrupted after 3 of 8 batches
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        seen: list[tuple[int, int]] = []
        fresh = profile_pivots_ray(pivots, "noisy_expert:0.5", None, k=8, seed=3, batch_pivots=4, workers=2,
                                   progress=lambda d, t: seen.append((d, t)))
        resumed = profile_pivots_ray(pivots, "noisy_expert:0.5", None, k=8, seed=3, batch_pivots=4, workers=2,
                                     checkpoint=ckpt)
    finally:
        ray.shutdown()
    want = [p.to_dict() for p in single]
    assert [p.to_dict() for p in fresh] == want
    assert [p.to_dict() for p in resumed] == want
    assert seen[0] == (0, 30) and seen[-1] == (30, 30) and len(seen) == 1 + 8
    assert len(ckpt.read_text().splitlines()) == 1 + 8


def test_dedup_actions_keeps_the_hardest_pivot_of_each_command_through_the_cli(tmp_path):
    """D_adv with commands de-duplicated: one pivot per expert action, its spelling canonical (quotes and spaces),
    the lowest profiled mean kept; the audit counts the rest."""
    def shell(pid: str, command: str, rewards: list[float]) -> Pivot:
        p = profiled(pid, rewards)
        p.expert = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}
        return p

    pivots = [shell("ls-easy", "ls", [1, 1, 0, 0]), shell("grep", "grep -c x f", [1, 0, 0, 0]),
              shell("ls-hard", "ls ", [1, 0, 0, 0]), shell("grep-quoted", "grep -c 'x' f", [1, 1, 0, 0]),
              shell("cat", "cat f", [1, 1, 1, 0])]
    kept, audit = filter_pivots(pivots, FilterConfig(mode="adv", max_mean=1.0, dedup_actions=True))
    assert [p.id for p in kept] == ["grep", "ls-hard", "cat"] and audit.duplicates == 2 and audit.kept == 3
    assert len(filter_pivots(pivots, FilterConfig(mode="adv", max_mean=1.0))[0]) == 5
    src = tmp_path / "prof.jsonl"
    write_pivots(pivots, src)
    res = CliRunner().invoke(app(), ["filter", str(src), "-o", str(tmp_path / "adv.jsonl"), "--max-mean", "1",
                                     "--dedup-actions"])
    assert res.exit_code == 0, res.output
    assert [p.id for p in read_pivots(tmp_path / "adv.jsonl")] == ["grep", "ls-hard", "cat"]
    assert "the same expert action as a kept pivot" in res.output


def test_profiling_records_what_accepted_each_sample_and_the_report_counts_it_per_domain():
    """A sample the strict verifier passes is ``exact``; any other passing one is named by the verifier that decided
    (``exec``: effect, ``stop``: state, ``tool_call``: arguments); failures and errors name nothing."""
    from pivot_envs.pipeline.profile import summarize

    pivot = text_pivot("p")
    functional = [VerifyResult(1.0, True, "exec", "same effects"), VerifyResult(1.0, True, "stop", "done"),
                  VerifyResult(1.0, True, "tool_call", "same call"), VerifyResult(0.0, False, "exec", "differs"),
                  VerifyResult.failure("exec", "sandbox gone")]
    strict = [VerifyResult(0.0, False, "strict", ""), VerifyResult(0.0, False, "strict", ""),
              VerifyResult(1.0, True, "strict", ""), VerifyResult(0.0, False, "strict", ""),
              VerifyResult(0.0, False, "strict", "")]
    result = summarize(0, pivot, functional, strict)
    assert result.accepted_by == ["effect", "state", "exact", None]  # the errored sample is out of the statistics
    profiled_pivot = result.apply(pivot)
    assert profiled_pivot.meta["profile_accepted_by"] == ["effect", "state", "exact", None]
    report = profile_report([profiled_pivot])
    row = report.by_domain["tool_use"]
    assert row["accepted"] == 3 and row["accepted_by"] == {"effect": 1, "state": 1, "exact": 1}
    assert row["not_exact"] == pytest.approx(2 / 3)
    assert any("not the expert's exact action (tool_use)" in label and "66.7% of 3" in value
               for label, value in report.rows())
