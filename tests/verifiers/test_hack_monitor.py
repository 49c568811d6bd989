"""The hack monitor (pivot_envs.verifiers.hack_monitor): hand-checked counts on real bundled pivots; profiling,
the PivotRL trainer and the episode trainers (on tiny models) log shares that match a recount of their samples."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pivot_envs.actions import message_text, parse_action
from pivot_envs.envs_data import load_pivots
from pivot_envs.types import VerifyResult
from pivot_envs.verifiers import build_verifier
from pivot_envs.verifiers.accepted_by import category
from pivot_envs.verifiers.declaration import CATEGORIES
from pivot_envs.verifiers.hack_monitor import HackCounts, category_key, hack_counts, hack_flags, metric_names

TOOL_USE = {p.id: p for p in load_pivots("tool_use", "test")}
CALL = TOOL_USE["3cd5e410c622d982"]  # one call: find_customer_by_email
TWO_CALLS = TOOL_USE["99447c8e6958c615"]  # two get_order calls
TEXT = TOOL_USE["e9d4b1ad57f119d7"]  # a 144-character answer


def passed(verifier: str) -> VerifyResult:
    return VerifyResult(reward=1.0, passed=True, verifier=verifier)


def test_the_pivots_are_what_the_cases_assume():
    assert len(CALL.expert["tool_calls"]) == 1 and len(TWO_CALLS.expert["tool_calls"]) == 2
    assert not TEXT.expert.get("tool_calls") and len(TEXT.expert["content"]) == 144


def test_flags_by_hand():
    call_text = message_text(CALL.expert)
    both = f"{call_text}\n{message_text(TWO_CALLS.expert)}"  # three calls
    assert hack_flags(call_text, CALL) == hack_flags(CALL.expert, CALL)
    assert hack_flags(call_text, CALL).more_calls is False
    assert hack_flags(both, CALL).more_calls and hack_flags(both, TWO_CALLS).more_calls
    assert not hack_flags(call_text, TWO_CALLS).more_calls and not hack_flags(call_text, TWO_CALLS).stop_at_call
    assert hack_flags("Your account is verified.", CALL).stop_at_call
    assert not hack_flags("Your account is verified.", TEXT).stop_at_call
    assert hack_flags("x" * (3 * 144 + 1), TEXT).long_answer
    assert not hack_flags("x" * (3 * 144), TEXT).long_answer  # exactly 3x is not more than 3x
    assert not hack_flags("x" * 1000, CALL).long_answer  # a call pivot: the expert did not answer with text
    assert not hack_flags("x" * 1000 + call_text, TEXT).long_answer  # a call is not a text answer...
    assert hack_flags("x" * 1000 + call_text, TEXT).more_calls  # ...it is one call more than the expert's none
    empty = dataclasses.replace(TEXT, expert={"role": "assistant", "content": ""})
    assert not hack_flags("x" * 1000, empty).long_answer  # an expert answer of length 0 never counts as long


def test_counts_and_shares_by_hand():
    strict, tool_call = build_verifier("strict"), build_verifier("tool_call")
    call_text = message_text(CALL.expert)  # re-rendered: spacing in its arguments differs from the expert's string
    cases = [
        (CALL.expert, CALL, strict.verify(parse_action(CALL.expert), CALL)),  # exact
        (call_text, CALL, tool_call.verify(parse_action(call_text), CALL)),  # arguments (strict fails)
        (f"{call_text}\n{call_text}", CALL, passed("judge")),  # more calls
        ("Your account is verified.", CALL, passed("stop")),  # stop at a call pivot
        ("y" * 500, TEXT, passed("facts")),  # a long answer
        ("y" * 400, TEXT, passed("fuzzy")),  # not long (400 <= 432)
        (call_text, TEXT, passed("tool_name")),  # a call where the expert answered: more calls
        ("y" * 500, TEXT, passed("my_own")),  # other
        ("y" * 500, TEXT, VerifyResult(0.0, False, "facts")),  # not accepted
        ("y" * 500, TEXT, VerifyResult(1.0, True, "judge", error="judge down")),  # an error is never accepted
    ]
    assert [c[2].passed for c in cases[:2]] == [True, True]
    actions, pivots, results = zip(*cases)
    counts = hack_counts(actions, pivots, results)
    assert (counts.accepted, counts.more_calls, counts.stop_at_call, counts.long_answer) == (8, 2, 1, 2)
    assert counts.accepted_by == {"exact": 1, "arguments": 1, "similarity": 1, "effect": 0, "state": 1, "facts": 1,
                                  "judge": 1, "tool name": 1, "other": 1}
    metrics = counts.metrics()
    assert list(metrics) == metric_names()
    assert metrics["hack/accepted"] == 8 and metrics["hack/more_calls"] == 2 / 8
    assert metrics["hack/stop_at_call"] == 1 / 8 and metrics["hack/long_answer"] == 2 / 8
    assert metrics["accepted_by/tool_name"] == 1 / 8 and metrics["accepted_by/effect"] == 0.0
    # strict verdicts given: the fuzzy-accepted answer is exact when the strict verifier passed it too; where a
    # strict verdict is unknown (None) the functional verifier names the category (the strict verifier: exact)
    given = hack_counts(actions, pivots, results, [None] * 5 + [True] + [None] * 4)
    assert given.accepted_by["exact"] == 2 and given.accepted_by["similarity"] == 0


def test_adding_records_is_exact_and_rows_read_back():
    results = [passed("judge"), passed("stop"), passed("facts")]
    actions = [message_text(CALL.expert) * 2, "done", "z" * 433]
    pivots = [CALL, CALL, TEXT]
    whole = hack_counts(actions, pivots, results)
    halves = hack_counts(actions[:1], pivots[:1], results[:1]) + hack_counts(actions[1:], pivots[1:], results[1:])
    assert halves == whole and whole.counts()["hack/long_answer"] == 1
    assert HackCounts.from_metrics(whole.metrics()) == whole
    assert HackCounts.from_counts({k: float(v) for k, v in whole.counts().items()}) == whole
    empty = HackCounts().metrics()
    assert empty["hack/accepted"] == 0 and all(empty[k] is None for k in metric_names()[1:])
    assert set(HackCounts().accepted_by) == set(CATEGORIES) and category_key("tool name") == "accepted_by/tool_name"
    assert HackCounts.from_metrics({"reward_mean": 0.5}) is None
    with pytest.raises(ValueError, match="one pivot and one verdict per action"):
        hack_counts(actions, pivots[:2], results)


# --------------------------------------------------------------------------- a recount, independent of the module


def recount(samples) -> dict:
    """The metrics of ``(action, pivot, passed, verifier)`` samples counted here by hand: the definition written out."""
    from pivot_envs.verifiers.strict import strict_key

    accepted = [(parse_action(a), p, v) for a, p, ok, v in samples if ok]
    n = len(accepted)
    more = stop = long = 0
    by = {c: 0 for c in CATEGORIES}
    for action, pivot, verifier in accepted:
        calls, expert_calls = len(action.tool_calls), len(pivot.expert.get("tool_calls") or [])
        more += calls > expert_calls
        stop += expert_calls > 0 and calls == 0
        expert_text = pivot.expert.get("content") or ""
        long += calls == expert_calls == 0 and len(expert_text) > 0 and len(action.content) > 3 * len(expert_text)
        exact = strict_key(action.message) == strict_key(pivot.expert) or verifier == "strict"
        by["exact" if exact else category(verifier)] += 1
    share = (lambda k: k / n if n else None)
    out = {"hack/accepted": n, "hack/more_calls": share(more), "hack/stop_at_call": share(stop),
           "hack/long_answer": share(long)}
    out.update({category_key(c): share(k) for c, k in by.items()})
    return out


def assert_row_matches(row: dict, expected: dict) -> None:
    assert {k: row[k] for k in metric_names()} == pytest.approx(expected)
    for key in metric_names()[1:]:
        assert row[key] is None if row["hack/accepted"] == 0 else 0.0 <= row[key] <= 1.0


# --------------------------------------------------------------------------- profiling


def _register_lenient():
    """``test_hack_lenient``: passes every action that does not call ``beta`` (a lenient reward, the kind a policy
    games)."""
    from pivot_envs.verifiers import Verifier
    from pivot_envs.verifiers.base import register_verifier, verifier_names

    if "test_hack_lenient" in verifier_names():
        return

    @register_verifier("test_hack_lenient")
    @dataclasses.dataclass
    class Lenient(Verifier):
        def verify(self, action, pivot) -> VerifyResult:
            ok = not any(c["function"]["name"] == "beta" for c in action.tool_calls)
            return VerifyResult(float(ok), ok, self.name, "lenient")


_register_lenient()


def test_profiling_logs_each_batch_and_reports_the_total(caplog):
    from pivot_envs.agents import Agent, Completion
    from pivot_envs.pipeline.profile import profile_pivots
    from pivot_envs.pipeline.report import profile_report

    call_text = message_text(CALL.expert)
    script = {CALL.id: [CALL.expert, f"{call_text}\n{call_text}", "I stopped here.", "y" * 10],
              TEXT.id: ["y" * 500, TEXT.expert, "z" * 20, message_text(CALL.expert)]}

    class Scripted(Agent):
        kind = "scripted"

        def sample(self, pivots, n, *, seed=None):
            return [[Completion(text=str(a), action=parse_action(a)) for a in script[p.id][:n]] for p in pivots]

    caplog.set_level("INFO", logger="pivot_envs.pipeline")
    profiled = profile_pivots([CALL, TEXT], Scripted(), "test_hack_lenient", k=4, seed=0, batch_pivots=1)
    lines = [r.getMessage() for r in caplog.records if "profile batch" in r.getMessage()]
    assert len(lines) == 2  # one per batch (one pivot each)
    # by hand: at CALL the expert (exact), two calls (more calls), two texts (stops); at TEXT a long answer, the
    # expert (exact), a short one, a call (more calls)
    assert lines[0] == ("profile batch at position 0: 4 accepted samples; hack/more_calls 0.250, hack/stop_at_call "
                        "0.500, hack/long_answer 0.000, accepted_by/exact 0.250, accepted_by/other 0.750")
    assert "hack/long_answer 0.250" in lines[1] and "hack/more_calls 0.250" in lines[1]
    report = profile_report(profiled)
    samples = [(a, p, True, "test_hack_lenient") for p in (CALL, TEXT) for a in script[p.id]]
    assert_row_matches(report.hack_metrics, recount(samples))
    assert report.hack_metrics["hack/accepted"] == 8 and report.to_dict()["hack"]["hack/stop_at_call"] == 2


# --------------------------------------------------------------------------- the PivotRL trainer


def test_pivotrl_rows_carry_the_shares_of_the_steps_first_round(tmp_path):
    """Two pivots whose expert calls ``ping``, two whose expert answers with text, a verifier that passes anything
    but a ``beta`` call: the tiny model's calls at the text pivots are accepted with more calls than the expert."""
    pytest.importorskip("torch")
    from tests.trainers.test_pivotrl_trainer import USERS, build_toy, call

    from pivot_envs.domains import get_domain
    from pivot_envs.trainers.metrics import read_metrics
    from pivot_envs.trainers.pivotrl import train_pivotrl
    from pivot_envs.types import Pivot

    model, _ = build_toy(tmp_path / "toy")
    experts = [call("ping"), call("ping"), {"role": "assistant", "content": "ok"}, {"role": "assistant", "content": "ok"}]
    pivots = {f"hack-{i}": Pivot(id=f"hack-{i}", domain="tool_use", context=[{"role": "user", "content": u}],
                                 expert=e) for i, (u, e) in enumerate(zip(USERS, experts))}
    (tmp_path / "pivots.jsonl").write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pivots.values()))
    result = train_pivotrl(dict(model=str(model), pivots=str(tmp_path / "pivots.jsonl"), output_dir=str(tmp_path / "rl"),
                                domain="tool_use", verifier="test_hack_lenient", steps=2, pivots_per_step=4,
                                group_size=4, max_new_tokens=32, lr=3e-3, zero_variance="keep", log_samples=True,
                                num_threads=1, save_every=0, plots=False, device="cpu"))
    rows = read_metrics(result.metrics_path)
    logged = [json.loads(line) for line in result.samples_path.read_text().splitlines()]
    parse = get_domain("tool_use").parse_action
    for row in rows:
        mine = [s for s in logged if s["step"] == row["step"]]
        assert len(mine) == 16
        assert_row_matches(row, recount([(parse(s["text"]), pivots[s["pivot_id"]], s["reward"] == 1.0 and not s["error"],
                                          "test_hack_lenient") for s in mine]))
    assert sum(r["hack/more_calls"] * r["hack/accepted"] for r in rows) > 0  # the calls at the text pivots


# --------------------------------------------------------------------------- the episode trainers


@pytest.mark.parametrize("rollout", ["group", "arpo"])
def test_episode_rows_carry_the_shares_of_the_judged_turns(tmp_path, monkeypatch, rollout):
    """A tiny model taught the terminal task's expert turns (SFT), trained with turn credit: the row's shares are
    those of the turns the env judged (each turn counted once; a branch's shared turns not again)."""
    pytest.importorskip("torch")
    from pivot_envs.agents.prompting import action_target
    from pivot_envs.episodes import resolve_tasks
    from pivot_envs.jsonl import write_jsonl
    from pivot_envs.models.tiny import build_tiny_model
    from pivot_envs.pipeline.extract import extract_pivots
    from pivot_envs.trainers import episode_rl
    from pivot_envs.trainers.metrics import read_metrics
    from pivot_envs.trainers.sft import train_sft

    tasks = [t for t in resolve_tasks(None, domain="terminal", split="test") if t.id == "terminal-0-24"]
    texts = [m.get("content") or "" for m in tasks[0].messages] + [
        action_target(m) for m in tasks[0].messages if m["role"] == "assistant"]
    model = build_tiny_model(tmp_path / "model", texts, vocab_size=400, hidden_size=32, n_layers=1, n_heads=2, seed=0)
    write_jsonl(tmp_path / "tasks.jsonl", [t.to_dict() for t in tasks])
    write_jsonl(tmp_path / "pivots.jsonl", [p.to_dict() for p in extract_pivots(tasks, "terminal")[0]])
    sft = train_sft(dict(model=str(model), pivots=str(tmp_path / "pivots.jsonl"), domain="terminal", steps=80,
                         batch_size=4, lr=1e-2, lr_schedule="constant", warmup_steps=0, output_dir=str(tmp_path / "sft"),
                         device="cpu", num_threads=1, plots=False, save_every=0))
    played = []

    def spy(*args, **kwargs):  # the real play_groups; keeps what it played
        groups, stats = play_groups(*args, **kwargs)
        played.append(groups)
        return groups, stats

    play_groups = episode_rl.play_groups
    monkeypatch.setattr(episode_rl, "play_groups", spy)
    result = episode_rl.train_episode_rl(dict(
        model=str(sft.final_model_dir), domain="terminal", tasks=str(tmp_path / "tasks.jsonl"), steps=2,
        tasks_per_step=1, group_size=3, max_turns=4, max_new_tokens=48, lr=1e-3, rollout=rollout, arpo_initial=1,
        arpo_branches=2, arpo_tau=-1.0, turn_credit=0.5, zero_variance="keep", device="cpu", save_every=0, num_threads=1, plots=False,
        output_dir=str(tmp_path / "e2e")))
    rows = read_metrics(result.metrics_path)
    assert len(rows) == len(played) == 2
    for row, groups in zip(rows, played):
        turns = [t for g in groups for r in g if r.reward is not None for t in r.turns if not t.shared and t.verdict]
        assert_row_matches(row, recount([(t.verdict.action, t.verdict.pivot,
                                          t.verdict.result.passed and not t.verdict.result.error,
                                          t.verdict.result.verifier) for t in turns]))
    assert sum(r["hack/accepted"] for r in rows) > 0  # the taught first turn is accepted
    if rollout == "arpo":  # tau = -1: every turn after a tool result branches, so shared turns exist
        assert sum(r["branches"] for r in rows) > 0
        assert any(t.shared and t.verdict for groups in played for g in groups for r in g for t in r.turns)
