"""The turn that ends a task is a pivot, and each domain's default verifier scores the decision to stop."""

from __future__ import annotations

import json

import gymnasium
import pytest

from pivot_envs.domains import Domain, get_domain, register_domain
from pivot_envs.envs_data import load_pivots, load_trajectories
from pivot_envs.pipeline.extract import extract_pivots
from pivot_envs.facts import answer_facts
from pivot_envs.types import Pivot, Trajectory, content_text
from pivot_envs.verifiers import build_verifier

ANSWER_DOMAINS = ("terminal", "tool_use", "search")


def _call(name: str, **args: object) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def _final_text_pivots(domain: str) -> list[Pivot]:
    finals = {(t.id, len(t.messages) - 1) for t in load_trajectories(domain, "test")
              if t.reward == 1.0 and t.messages[-1].get("role") == "assistant" and not t.messages[-1].get("tool_calls")}
    pivots = [p for p in load_pivots(domain, "test") if (p.meta["trajectory_id"], p.meta["turn"]) in finals]
    assert len(pivots) == len(finals), f"{domain}: {len(finals) - len(pivots)} final answers are not pivots"
    return pivots


@pytest.mark.parametrize("domain", ANSWER_DOMAINS)
def test_every_final_answer_of_the_bundled_test_split_is_a_pivot_scored_by_what_the_task_needs(domain: str) -> None:
    finals = _final_text_pivots(domain)
    assert len(finals) >= 40
    verifier = build_verifier(get_domain(domain).verifier_spec())
    assert all(r.passed and r.reward == 1.0 for r in verifier.verify_many([p.expert for p in finals], finals))
    factual = [p for p in finals if answer_facts(p.context, content_text(p.expert["content"])) or domain == "search"]
    assert len(factual) >= 15
    done = verifier.verify_many(["Done."] * len(factual), factual)
    assert not any(r.passed for r in done) and not any(r.error for r in done)
    tool = finals[0].tools[0]["function"]["name"]
    another = verifier.verify_many([_call(tool, command="ls") for _ in finals], finals)
    assert not any(r.passed for r in another) and not any(r.error for r in another)


def _stops_before_the_answer(domain: str, turns_back: int = 1) -> list[tuple[Pivot, dict]]:
    """(a call pivot among the last ``turns_back`` pivots before a final answer, after the user's last message,
    that answer) for each task of the test split."""
    pivots = load_pivots(domain, "test")
    by_turn = {(p.meta["trajectory_id"], p.meta["turn"]): p for p in pivots}
    pairs = []
    for final in _final_text_pivots(domain):
        last_user = max(i for i, m in enumerate(final.context) if m["role"] == "user")
        before = [p for (t, turn), p in by_turn.items()
                  if t == final.meta["trajectory_id"] and last_user < turn < final.meta["turn"]]
        for pivot in sorted(before, key=lambda p: -p.meta["turn"])[:turns_back]:
            if pivot.expert.get("tool_calls"):
                pairs.append((pivot, final.expert))
    return pairs


@pytest.mark.parametrize("domain", ["terminal", "search"])
def test_stopping_a_turn_early_is_right_exactly_where_the_episode_would_already_succeed(domain: str) -> None:
    """The expert's answer one turn early: in a task that changes the world's state, the verifier accepts it
    exactly where an episode started at that pivot and stopped with that answer succeeds and every value the answer
    reports had been found (the expert's last check after its last write is such a turn; a stop before the call that
    reads back the VERSION the user asked for is not, though the files are done). In an information task it never
    accepts what the episode fails; an answer whose facts the tools had not yet returned is a guess, refused even
    where it happens to be right."""
    pairs = _stops_before_the_answer(domain, turns_back=2)
    assert len(pairs) >= 60
    pairs = pairs[::2]  # every other task's (a sample as varied as the whole, half the replays)
    verifier = build_verifier(get_domain(domain).verifier_spec())
    results = verifier.verify_many([answer for _, answer in pairs], [p for p, _ in pairs])
    assert not any(r.error for r in results)
    env = gymnasium.make(f"pivot_envs:{get_domain(domain).episode_env_id}", split="test", score_turns=False)
    state_outcomes = []
    for (pivot, answer), result in zip(pairs, results):
        env.reset(options={"pivot_id": pivot.id})
        changes_state = not env.unwrapped.outcome.read_only  # the expert's replay, which reset has just made
        _, _, terminated, _, info = env.step(answer)
        assert terminated and info["success"] is not None
        assert not result.passed or info["success"], (pivot.id, result.reason, info["reason"])
        if changes_state:
            known = not pivot.meta["after"]["pending"]  # every value the answer reports had been found
            state_outcomes.append((result.passed, info["success"] and known))
    env.close()
    assert all(passed == success for passed, success in state_outcomes), state_outcomes
    if domain == "terminal":
        assert {passed for passed, _ in state_outcomes} == {True, False}


def test_tool_use_stops_before_the_answer_score_zero_where_work_is_left() -> None:
    pairs = _stops_before_the_answer("tool_use")
    assert len(pairs) >= 20
    verifier = build_verifier(get_domain("tool_use").verifier_spec())
    results = verifier.verify_many([answer for _, answer in pairs], [p for p, _ in pairs])
    assert not any(r.passed for r in results) and not any(r.error for r in results)
    assert {r.verifier for r in results} <= {"stop", "facts"}


def test_the_terminal_answer_must_carry_the_facts_of_the_experts_answer() -> None:
    pivot = Pivot(id="p", domain="terminal", context=[
        {"role": "system", "content": "You run a shell."},
        {"role": "user", "content": "How many ERROR lines are in app.log?"},
        _call("bash", command="grep -c ERROR app.log"),
        {"role": "tool", "tool_call_id": "c1", "content": "17\n"},
    ], expert={"role": "assistant", "content": "app.log has 17 ERROR lines."},
        tools=json.loads(json.dumps([{"type": "function", "function": {"name": "bash", "parameters": {
            "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}])))
    verifier = build_verifier(get_domain("terminal").verifier_spec())
    assert verifier.verify("There are 17 of them.", pivot).passed
    missing = verifier.verify("I counted the ERROR lines in app.log.", pivot)
    assert not missing.passed and "num:17" in missing.reason
    assert not verifier.verify("There are 18.", pivot).passed
    assert not verifier.verify(_call("bash", command="wc -l app.log"), pivot).passed
    assert not verifier.verify("", pivot).passed
    no_fact = Pivot(id="q", domain="terminal", context=pivot.context[:2], expert={"role": "assistant", "content": "Done."})
    assert verifier.verify("All finished.", no_fact).passed  # the expert's answer states no fact: any answer


REFUSALS = ("Sorry, I cannot help with that.", "I'm sorry, but I can't assist with that request.",
            "I am unable to help with this.")


@pytest.mark.parametrize("domain", ANSWER_DOMAINS)
def test_refusals_done_and_another_tasks_answer_fail_where_the_expert_reported_what_a_tool_returned(domain: str) -> None:
    """Issue 29: a refusal fails at every answer pivot where the expert did not refuse; "Done." and another
    task's answer fail wherever the expert's answer carries facts."""
    from pivot_envs.refusal import is_refusal

    finals = _final_text_pivots(domain)
    verifier = build_verifier(get_domain(domain).verifier_spec())
    answering = [p for p in finals if not is_refusal(content_text(p.expert["content"]))]
    for refusal in REFUSALS:
        results = verifier.verify_many([refusal] * len(answering), answering)
        assert not [r.reason for r in results if r.passed or r.error], refusal
    factual = [p for p in finals if answer_facts(p.context, content_text(p.expert["content"]))]
    assert len(factual) >= 15
    others = [content_text(factual[(i + len(factual) // 2) % len(factual)].expert["content"]) for i in range(len(factual))]
    pairs = [(o, p) for o, p in zip(others, factual)
             if p.meta["trajectory_id"] != factual[(factual.index(p) + len(factual) // 2) % len(factual)].meta["trajectory_id"]
             and o.strip().lower() != content_text(p.expert["content"]).strip().lower()]
    for wrong, pivots in ((["Done."] * len(factual), factual), ([o for o, _ in pairs], [p for _, p in pairs])):
        results = verifier.verify_many(wrong, pivots)
        assert not [(w, r.reason) for w, r in zip(wrong, results) if r.passed or r.error]


def _kv_pivot(value: str, answer: str) -> Pivot:
    return Pivot(id="kv", domain="d", context=[
        {"role": "user", "content": "What is the e-mail on file for ops?"},
        _call("get", key="ops:email"),
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"key": "ops:email", "value": value, "found": True})},
    ], expert={"role": "assistant", "content": answer})


def test_a_fact_is_any_value_a_tool_returned_of_any_type_and_case() -> None:
    verifier = build_verifier({"name": "final_turn", "calls": "tool_call", "answer": "facts"})
    email = _kv_pivot("seven@example.com", "ops:email is seven@example.com.")
    assert answer_facts(email.context, "ops:email is seven@example.com.") == ["value:seven@example.com"]
    assert verifier.verify("It is seven@example.com", email).passed
    wrong = verifier.verify("It is eight@example.com", email)
    assert not wrong.passed and "eight@example.com" in wrong.reason  # a value nothing in the conversation gave
    vague = verifier.verify("The e-mail for ops is on file.", email)
    assert not vague.passed and "value:seven@example.com" in vague.reason
    colour = _kv_pivot("blue", "The theme is blue.")
    assert verifier.verify("blue, it is", colour).passed and not verifier.verify("The theme is green.", colour).passed
    shell = Pivot(id="sh", domain="d", context=[
        {"role": "user", "content": "Which big files did you move into archive/large?"},
        _call("bash", command="ls archive/large"),
        {"role": "tool", "tool_call_id": "c1", "content": "archive/large/frames.bin\narchive/large/sample.bin\n"},
    ], expert={"role": "assistant", "content": "archive/large now holds frames.bin and sample.bin."})
    assert answer_facts(shell.context, content_text(shell.expert["content"])) == ["word:frames.bin", "word:sample.bin"]
    assert verifier.verify("sample.bin and frames.bin are there now", shell).passed
    assert not verifier.verify("frames.bin is there now", shell).passed


def test_a_bare_confirmation_says_so_and_still_refuses_refusals_and_foreign_values() -> None:
    verifier = build_verifier({"name": "final_turn", "calls": "tool_call", "answer": "facts"})
    bare = Pivot(id="b", domain="d", context=[
        {"role": "user", "content": "Set ui:theme to amber."},
        _call("put", key="ui:theme", value="amber"),
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"ok": True, "key": "ui:theme"})},
    ], expert={"role": "assistant", "content": "Done: ui:theme is now amber."})
    assert answer_facts(bare.context, "Done: ui:theme is now amber.") == []
    ok = verifier.verify("ui:theme is amber now.", bare)
    assert ok.passed and "content words" in ok.reason
    unchecked = build_verifier({"name": "final_turn", "calls": "tool_call", "answer": {"name": "facts", "otherwise": None}})
    said = unchecked.verify("All set.", bare)
    assert said.passed and "bare confirmation" in said.reason and "no fact to check" in said.reason
    assert not unchecked.verify("Sorry, I cannot help with that.", bare).passed
    foreign = verifier.verify("Done: region is now amber, see /etc/theme.conf.", bare)
    assert not foreign.passed and "etc/theme.conf" in foreign.reason
    assert not verifier.verify("Done.", bare).passed  # carries none of what the confirmation said


def test_another_verifier_replaces_the_fact_rule_and_configs_round_trip() -> None:
    spec = {"name": "final_turn", "calls": "tool_call",
            "answer": {"name": "fuzzy", "target": "content", "threshold": 90}}
    verifier = build_verifier(spec)
    assert build_verifier(verifier.config()).config() == verifier.config()
    pivot = Pivot(id="p", domain="d", context=[{"role": "user", "content": "capital of France?"}],
                  expert={"role": "assistant", "content": "Paris"})
    assert verifier.verify("Paris", pivot).passed and not verifier.verify("Lyon", pivot).passed
    facts_on_a_call_turn = build_verifier("facts").verify("x", Pivot(id="c", domain="d", context=[], expert=_call("f")))
    assert facts_on_a_call_turn.error is not None  # misuse is an error, never a silent 0


def test_a_user_domain_keeps_its_answer_turns_and_trains_on_them(tmp_path) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}]
    trajectory = Trajectory(meta={"id": "t1"}, tools=tools, reward=1.0, messages=[
        {"role": "user", "content": "What is the code of order A7?"},
        _call("lookup", key="A7"),
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"code": "ZX-4471"})},
        {"role": "assistant", "content": "Order A7 has code ZX-4471."},
    ])
    domain = register_domain(Domain(name="lookup_answers", env_id="pivot/LookupAnswers-v0",
                                    default_verifier={"name": "final_turn", "calls": "tool_call", "answer": "facts"}),
                             replace=True)
    pivots, audit = extract_pivots([trajectory], domain)
    assert audit.kept == {"tool_call": 1, "text": 1}
    env = gymnasium.make("pivot/LookupAnswers-v0", pivots=pivots)
    env.reset(options={"pivot_id": pivots[1].id})
    assert env.step("The code is ZX-4471.")[1] == 1.0
    env.reset(options={"pivot_id": pivots[1].id})
    assert env.step("I looked it up for you.")[1] == 0.0
    env.reset(options={"pivot_id": pivots[0].id})
    assert env.step("The code is ZX-4471.")[1] == 0.0  # stopped where the expert looked it up
    env.close()


def test_the_trl_and_verl_exports_carry_the_answer_pivots_and_score_the_stop() -> None:
    pytest.importorskip("datasets")
    from pivot_envs.integrations.trl import make_reward_func, to_dataset
    from pivot_envs.integrations.verl import compute_score, to_verl_rows

    finals = _final_text_pivots("terminal")[:4]
    rows = to_verl_rows(finals, split="test")
    assert [r["extra_info"]["pivot_id"] for r in rows] == [p.id for p in finals]
    answer = content_text(finals[0].expert["content"])
    assert compute_score(rows[0]["data_source"], answer, rows[0]["reward_model"]["ground_truth"])["score"] == 1.0
    call = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
    assert compute_score(rows[0]["data_source"], call, rows[0]["reward_model"]["ground_truth"])["score"] == 0.0
    dataset = to_dataset(finals)
    reward = make_reward_func()
    got = reward(dataset["prompt"][:2], [answer, call], pivot=dataset["pivot"][:2])
    assert got == [1.0, 0.0]
