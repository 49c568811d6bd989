"""End-to-end RL and ARPO on episode envs: the branching rule, the rollout-turn counts and the masking
of tool and user tokens, checked against numbers worked out by hand; the trainer on a real tiny model."""

from __future__ import annotations

import json

import pytest

from pivot_envs.agents.baselines import ReplayAgent
from pivot_envs.episodes import EpisodeEnv, resolve_tasks
from pivot_envs.trainers.episode_rollouts import ArpoRule, Rollout, RolloutPlan, Turn, play_groups
from pivot_envs.trainers.episode_rl import EpisodeRLConfig, turn_rows
from pivot_envs.agents.base import Completion

TASK = "terminal-0-24"  # 4 expert turns: 3 bash calls (each answered by a tool result), then a text answer


@pytest.fixture(scope="module")
def task():
    tasks = [t for t in resolve_tasks(None, domain="terminal", split="test") if t.id == TASK]
    assert len(tasks) == 1
    turns = [m for m in tasks[0].messages if m["role"] == "assistant"]
    assert [len(m.get("tool_calls") or []) for m in turns] == [1, 1, 1, 0]
    return tasks[0]


class TokenReplay(ReplayAgent):
    """The expert's action, with token ids (the trainer needs them): one token per character."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[int, int]] = []  # (pivots, n) per call

    def sample(self, pivots, n, *, seed=None):
        self.calls.append((len(pivots), n))
        out = super().sample(pivots, n, seed=seed)
        return [[Completion(c.text, c.action, [ord(ch) % 97 + 1 for ch in c.text[:20]] or [1], None) for c in g]
                for g in out]


def context_length(pivot) -> list[int]:
    return [len(pivot.context)]


def fake_entropy(prompts, completions):
    """0.2 at a task's first turn (context: system + user = 2 messages), 0.3 everywhere else."""
    return [0.2 if p[0] == 2 else 0.3 for p in prompts]


def make_env(task):
    return lambda: EpisodeEnv(tasks=[task], domain="terminal", max_turns=8)


# --------------------------------------------------------------------------- the rule


def test_arpo_rule_by_hand():
    rule = ArpoRule(alpha=0.5, beta=1.0, tau=0.55)
    assert rule.score(0.30, 0.20) == pytest.approx(0.60)  # 0.5 + 1.0 * 0.10
    assert rule.fires(0.30, 0.20)
    assert rule.score(0.24, 0.20) == pytest.approx(0.54)  # below tau
    assert not rule.fires(0.24, 0.20)
    assert not rule.fires(0.25, 0.20)  # P == tau exactly: strictly greater is required
    steep = ArpoRule(alpha=0.3, beta=0.2, tau=0.4)
    assert steep.score(0.9, 0.1) == pytest.approx(0.46)  # 0.3 + 0.2 * 0.8
    assert steep.fires(0.9, 0.1) and not steep.fires(0.5, 0.1)  # 0.3 + 0.2 * 0.4 = 0.38
    with pytest.raises(ValueError, match="beta"):
        ArpoRule(beta=-1.0)
    with pytest.raises(ValueError, match="initial <= group_size"):
        RolloutPlan(group_size=2, arpo=ArpoRule(initial=3))


# --------------------------------------------------------------------------- rollout counts


def test_group_rollouts_count_turns_and_tool_calls(task):
    agent = TokenReplay()
    groups, stats = play_groups(make_env(task), agent, [task], RolloutPlan(group_size=3), encode=context_length)
    # 3 independent rollouts x 4 turns, one model call per live episode per round, 4 rounds
    assert stats.rollout_turns == 12 and stats.rounds == 4
    assert stats.tool_calls == 9 and stats.replayed_steps == 0 and stats.branches == []
    assert agent.calls == [(3, 1)] * 4
    assert [r.success for r in groups[0]] == [True, True, True]  # the expert's actions reach the expert's state
    assert all(len(r.turns) == 4 and r.parent is None for r in groups[0])


def test_arpo_branches_where_the_rule_fires_until_the_budget_is_spent(task):
    """N=1, Z=1, M=3, entropy 0.2 at the first turn and 0.3 after every tool result (P = 0.6 > 0.55).

    Round 1: root samples turn 0 (H_init = 0.2)                                  rollout turns 1
    Round 2: root turn 1 fires -> branch b1 at turn 1 (budget 2 of 3)            + 1 + 1 = 3
    Round 3: root turn 2 fires -> branch b2 at turn 2 (budget 3 of 3); b1 turn 2
             fires too but the budget is spent                                  + 2 + 1 = 6
    Round 4: root, b1, b2 play turn 3 (the answer)                              + 3     = 9
    Replayed steps: b1 re-plays 1 turn, b2 re-plays 2. Own tool calls: root 3, b1 2, b2 1.
    """
    agent = TokenReplay()
    rule = ArpoRule(initial=1, branches=1, entropy_tokens=4, alpha=0.5, beta=1.0, tau=0.55)
    groups, stats = play_groups(make_env(task), agent, [task], RolloutPlan(group_size=3, arpo=rule),
                                encode=context_length, entropy_fn=fake_entropy)
    root, b1, b2 = groups[0]
    assert stats.rollout_turns == 9 and stats.rounds == 4
    assert [(t, parent, turn) for t, parent, turn, _ in stats.branches] == [(TASK, 0, 1), (TASK, 0, 2)]
    assert [p for *_, p in stats.branches] == pytest.approx([0.6, 0.6])
    assert stats.replayed_steps == 3 and stats.tool_calls == 6 and stats.topped_up == 0
    assert (b1.parent, b1.branch_turn, b2.parent, b2.branch_turn) == (0, 1, 0, 2)
    assert [t.shared for t in b1.turns] == [True, False, False, False]
    assert [t.shared for t in b2.turns] == [True, True, False, False]
    assert b2.turns[0].completion is root.turns[0].completion  # the shared prefix is the parent's tokens
    assert root.initial_entropy == b1.initial_entropy == pytest.approx(0.2)
    assert [r.success for r in (root, b1, b2)] == [True, True, True]
    # sampling calls: one per round over the live episodes, plus one for the branch points of a round
    assert agent.calls == [(1, 1), (1, 1), (1, 1), (2, 1), (1, 1), (3, 1)]


def test_arpo_without_branching_tops_the_budget_up_from_the_start(task):
    agent = TokenReplay()
    rule = ArpoRule(initial=1, branches=2, alpha=0.0, beta=1.0, tau=0.5)  # P = dH = 0.1: never fires
    groups, stats = play_groups(make_env(task), agent, [task], RolloutPlan(group_size=3, arpo=rule),
                                encode=context_length, entropy_fn=fake_entropy)
    assert stats.branches == [] and stats.topped_up == 2
    assert stats.rollout_turns == 12 and stats.rounds == 8  # 1 rollout for 4 rounds, then 2 for 4 more
    assert all(r.parent is None for r in groups[0])


def test_arpo_needs_an_entropy_function(task):
    with pytest.raises(ValueError, match="entropy_fn"):
        play_groups(make_env(task), TokenReplay(), [task], RolloutPlan(group_size=2, arpo=ArpoRule(initial=1)))


# --------------------------------------------------------------------------- masking


def _turn(prompt, tokens):
    return Turn(prompt, Completion("x", None, tokens, None))


def test_turn_rows_train_on_assistant_tokens_only():
    """Turn 2's prompt holds the tool result (tokens 42, 43) after turn 1's tokens: only 5 + 6 + 7 and
    8 + 9 are trained, each with the rollout's advantage; a rollout with an error gives no rows."""
    import torch

    from pivot_envs.trainers.loss import pivotrl_loss
    from pivot_envs.trainers.token_batch import pack

    ok = Rollout("t", 0, turns=[_turn([1, 2], [5, 6, 7]), _turn([1, 2, 5, 6, 7, 42, 43], [8, 9])], success=True)
    broken = Rollout("t", 1, turns=[_turn([1, 2], [5])], success=None, error="world down")
    rows = turn_rows([ok, broken], [0.5, -0.5])
    assert [(r.prompt, r.completion, r.advantage) for r in rows] == [
        ([1, 2], [5, 6, 7], 0.5), ([1, 2, 5, 6, 7, 42, 43], [8, 9], 0.5)]
    batch = pack([r.prompt for r in rows], [r.completion for r in rows], pad_id=0)
    assert int(batch.completion_mask.sum()) == 5  # 3 + 2 assistant tokens; the 2 tool tokens are never counted
    trained = batch.completion_ids[batch.completion_mask.bool()].tolist()
    assert 42 not in trained and 43 not in trained
    # token-level loss with ratio 1: -(mean advantage over the 5 counted tokens) = -0.5
    zeros = torch.zeros(batch.completion_ids.shape)
    out = pivotrl_loss(zeros, zeros, None, torch.tensor([0.5, 0.5]), batch.completion_mask, agg="token")
    assert float(out.loss) == pytest.approx(-0.5)


def _scored(prompt, tokens, reward):
    turn = _turn(prompt, tokens)
    turn.reward = reward
    return turn


def test_turn_credit_by_hand():
    """w = 0.5; rbar = mean(1, 1, 1, 0) = 0.75 over the scored rollouts' scored turns (the errored rollout's 0.0
    and the off-path None are left out): A's turns 1 + 0.5 * 0.25; B's -1 + 0.125, -1 - 0.375, and -1 off the path."""
    from pivot_envs.trainers.advantage import AdvantagePolicy, turn_mean
    from pivot_envs.trainers.episode_rl import scored_turn_rewards

    a = Rollout("t", 0, turns=[_scored([1], [5], 1.0), _scored([1, 5], [6], 1.0)], success=True)
    b = Rollout("t", 1, turns=[_scored([1], [5], 1.0), _scored([1, 5], [7], 0.0), _scored([1, 5, 7], [8], None)],
                success=False)
    broken = Rollout("t", 2, turns=[_scored([1], [9], 0.0)], success=None, error="world down")
    assert turn_mean(scored_turn_rewards([a, b, broken])) == pytest.approx(0.75)
    rows = turn_rows([a, b, broken], [1.0, -1.0, 0.0], AdvantagePolicy(turn_credit=0.5))
    assert [r.advantage for r in rows] == pytest.approx([1.125, 1.125, -0.875, -1.375, -1.0])
    assert [r.advantage for r in turn_rows([a, b, broken], [1.0, -1.0, 0.0])] == [1.0, 1.0, -1.0, -1.0, -1.0]


def test_played_turns_carry_the_envs_turn_reward(task):
    """On the real terminal world: the expert's turns are on the path (1.0 each); a wrong first call scores 0.0
    and every later turn is off the path (None)."""
    groups, _ = play_groups(make_env(task), TokenReplay(), [task], RolloutPlan(group_size=2),
                            encode=context_length)
    assert [t.reward for t in groups[0][0].turns] == [1.0, 1.0, 1.0, 1.0]

    class WrongFirst(TokenReplay):
        def sample(self, pivots, n, *, seed=None):
            out = super().sample(pivots, n, seed=seed)
            if len(pivots[0].context) == 2:  # the task's first turn: another command
                out = [[Completion("", {"type": "tool_call", "tool_calls": [
                    {"name": "bash", "arguments": {"command": "echo nothing-to-see"}}]}, [1], None)] for _ in out]
            return out

    groups, _ = play_groups(make_env(task), WrongFirst(), [task], RolloutPlan(group_size=2),
                            encode=context_length)
    rewards = [t.reward for t in groups[0][0].turns]
    assert rewards[0] == 0.0 and len(rewards) > 1 and all(r is None for r in rewards[1:])


def test_real_episode_tool_results_stay_in_prompts(task):
    """With a real tokenizer and the real terminal world: each tool result's text is in the next turn's
    prompt, never in a trained completion."""
    from pivot_envs.models.tiny import build_tiny_model
    from transformers import AutoTokenizer

    from pivot_envs.agents.prompting import PromptConfig, action_target, encode_prompt

    texts = [m.get("content") or "" for m in task.messages] + [action_target(m) for m in task.messages
                                                               if m["role"] == "assistant"]
    import tempfile

    folder = build_tiny_model(tempfile.mkdtemp() + "/m", texts, vocab_size=300, hidden_size=16, n_layers=1, n_heads=2)
    tok = AutoTokenizer.from_pretrained(folder)

    class Tokens(TokenReplay):
        def sample(self, pivots, n, *, seed=None):
            out = ReplayAgent.sample(self, pivots, n, seed=seed)
            return [[Completion(c.text, c.action, tok(c.text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
                                None) for c in g] for g in out]

    groups, _ = play_groups(make_env(task), Tokens(), [task], RolloutPlan(group_size=2),
                            encode=lambda p: encode_prompt(tok, p, PromptConfig()))
    rollout = groups[0][0]
    rows = turn_rows([rollout], [1.0])
    assert len(rows) == 4
    tool_outputs = [m["content"] for m in task.messages if m["role"] == "tool" and len(m["content"]) > 12]
    assert tool_outputs
    decoded_prompts = [tok.decode(r.prompt) for r in rows]
    decoded_completions = [tok.decode(r.completion) for r in rows]
    for out in tool_outputs:
        snippet = out.strip().splitlines()[0][:12]
        assert any(snippet in p for p in decoded_prompts), snippet
        assert not any(snippet in c for c in decoded_completions), snippet


# --------------------------------------------------------------------------- the trainer


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, task):
    from pivot_envs.agents.prompting import action_target
    from pivot_envs.jsonl import write_jsonl
    from pivot_envs.models.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("e2e")
    others = [t for t in resolve_tasks(None, domain="terminal", split="test")[:3] if t.id != TASK]
    tasks = [task] + others[:1]
    texts = [m.get("content") or "" for t in tasks for m in t.messages] + [
        action_target(m) for t in tasks for m in t.messages if m["role"] == "assistant"]
    model = build_tiny_model(root / "model", texts, vocab_size=400, hidden_size=32, n_layers=1, n_heads=2, seed=0)
    write_jsonl(root / "tasks.jsonl", [t.to_dict() for t in tasks])
    return root, model


@pytest.mark.parametrize("rollout", ["group", "arpo"])
def test_trainer_runs_steps_and_counts_rollout_turns(tiny, rollout):
    from pivot_envs.trainers.episode_rl import train_episode_rl

    root, model = tiny
    out = root / rollout
    cfg = dict(model=str(model), domain="terminal", tasks=str(root / "tasks.jsonl"), output_dir=str(out), steps=2,
               tasks_per_step=2, group_size=2, max_turns=2, max_new_tokens=16, lr=1e-3, rollout=rollout,
               arpo_initial=1, device="cpu", save_every=1, num_threads=1, plots=False)
    result = train_episode_rl(cfg)
    rows = [json.loads(line) for line in result.metrics_path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["episodes"] == 4  # 2 tasks x group_size 2
        assert r["rollout_turns"] >= r["episodes"]  # every episode samples at least one turn
        assert r["success_mean"] is not None and 0.0 <= r["success_mean"] <= 1.0
    assert rows[1]["cumulative_rollout_turns"] == rows[0]["rollout_turns"] + rows[1]["rollout_turns"]
    assert (result.final_model_dir / "config.json").exists()
    # resuming from step 1 keeps the running count of rollout turns
    resumed = train_episode_rl({**cfg, "resume_from": str(out / "checkpoint-000001"), "steps": 2})
    again = [json.loads(line) for line in resumed.metrics_path.read_text().splitlines()]
    assert again[0] == rows[0] and again[1]["cumulative_rollout_turns"] == rows[1]["cumulative_rollout_turns"]


def test_arpo_entropy_is_the_tested_normalised_entropy_of_the_policy(tiny):
    import torch

    from pivot_envs.trainers.distributed import DistInfo
    from pivot_envs.trainers.logprobs import completion_logprobs, normalised_entropy
    from pivot_envs.trainers.token_batch import pack
    from pivot_envs.trainers.policy_update import PolicyUpdate

    _, model = tiny
    policy = PolicyUpdate(EpisodeRLConfig(model=str(model), device="cpu"), DistInfo(), torch.device("cpu"))
    prompts, completions = [[5, 6, 7], [8, 9]], [[10, 11, 12], []]
    got = policy.entropies(prompts, completions)
    batch = pack([prompts[0]], [completions[0]], policy.pad_id, torch.device("cpu"))
    with torch.no_grad():
        _, per_token = completion_logprobs(policy.module, batch, with_entropy=True)
    assert got[0] == pytest.approx(normalised_entropy(per_token[0, :3].tolist(), policy.module.config.vocab_size))
    assert 0.0 < got[0] <= 1.0 and got[1] == 0.0  # an empty completion has no entropy to measure


def test_turn_credit_trains_on_scored_turns(tiny):
    """With turn credit the episodes score their turns: the rows report the turn rewards; without, none."""
    from pivot_envs.trainers.episode_rl import train_episode_rl

    root, model = tiny
    cfg = dict(model=str(model), domain="terminal", tasks=str(root / "tasks.jsonl"), steps=1, tasks_per_step=2,
               group_size=2, max_turns=2, max_new_tokens=16, lr=1e-3, device="cpu", save_every=0, num_threads=1,
               plots=False, zero_variance="keep")
    credited = train_episode_rl({**cfg, "output_dir": str(root / "credit"), "turn_credit": 0.5})
    row = [json.loads(line) for line in credited.metrics_path.read_text().splitlines()][0]
    assert row["scored_turns"] >= row["episodes"] == 4  # every episode's first turn starts on the path
    assert 0.0 <= row["turn_reward_mean"] <= 1.0
    plain = train_episode_rl({**cfg, "output_dir": str(root / "plain")})
    row = [json.loads(line) for line in plain.metrics_path.read_text().splitlines()][0]
    assert row["scored_turns"] == 0 and row["turn_reward_mean"] is None


def test_config_errors_name_the_field():
    from pivot_envs.config import ConfigError

    with pytest.raises(ConfigError, match="rollout"):
        EpisodeRLConfig(model="m", rollout="beam")
    with pytest.raises(ConfigError, match="arpo_initial"):
        EpisodeRLConfig(model="m", rollout="arpo", group_size=2, arpo_initial=3)
    with pytest.raises(ConfigError, match="advantage = 'pvpo' is invalid: it must be one of grpo, dr_grpo"):
        EpisodeRLConfig(model="m", advantage="pvpo")
    with pytest.raises(ConfigError, match="zero_variance = 'resample' is invalid: it must be one of skip, keep"):
        EpisodeRLConfig(model="m", zero_variance="resample")
    with pytest.raises(ConfigError, match="unknown key 'pivots'"):  # episodes start at tasks
        EpisodeRLConfig.from_dict({"model": "m", "pivots": "p.jsonl"})
    with pytest.raises(ConfigError, match="EpisodeRLConfig.tasks_per_step = 0"):
        EpisodeRLConfig(model="m", tasks_per_step=0)
    with pytest.raises(ConfigError, match="turn_credit"):
        EpisodeRLConfig(model="m", turn_credit=-0.5)


def test_pivots_per_step_is_not_an_episode_key():  # episodes count tasks: tasks_per_step
    from pivot_envs.config import ConfigError

    with pytest.raises(ConfigError, match="unknown key 'pivots_per_step'"):
        EpisodeRLConfig.from_dict({"model": "m", "pivots_per_step": 3})


def test_the_episode_trainer_holds_the_shared_policy_update_not_the_pivotrl_trainer():
    from pivot_envs.trainers.config import PivotRLConfig, PolicyConfig
    from pivot_envs.trainers.episode_rl import EpisodeRLTrainer
    from pivot_envs.trainers.pivotrl import PivotRLTrainer

    assert not issubclass(EpisodeRLTrainer, PivotRLTrainer)
    assert issubclass(EpisodeRLConfig, PolicyConfig) and not issubclass(EpisodeRLConfig, PivotRLConfig)
    fields = set(EpisodeRLConfig().to_dict())
    assert "tasks_per_step" in fields and not fields & {"pivots", "strict_verifier", "max_resample", "pvpo_refresh_every"}


def test_example_configs_train_from_the_cli(tiny):
    """Both example files load as e2e configs and train a step through ``pivot-envs train``."""
    from pathlib import Path

    from typer.testing import CliRunner

    from pivot_envs.cli import app
    from pivot_envs.cli.train_cmd import resolve_train_config

    examples = Path(__file__).resolve().parents[2] / "examples"
    algorithm, cfg, _ = resolve_train_config(examples / "train_e2e_tiny.yaml", [])
    assert algorithm == "e2e" and isinstance(cfg, EpisodeRLConfig) and cfg.rollout == "group"
    _, arpo, _ = resolve_train_config(examples / "train_arpo_tiny.yaml", [])
    assert arpo.rollout == "arpo" and (arpo.arpo_initial, arpo.arpo_branches, arpo.group_size) == (2, 2, 4)
    root, model = tiny
    out = root / "cli-arpo"
    result = CliRunner().invoke(app, [
        "train", "--config", str(examples / "train_arpo_tiny.yaml"), "--set", f"model={model}",
        "--set", f"output_dir={out}", "--set", f"tasks={root / 'tasks.jsonl'}", "--set", "steps=1",
        "--set", "tasks_per_step=1", "--set", "max_turns=2", "--set", "max_new_tokens=12", "--set", "device=cpu",
        "--set", "save_every=0", "--set", "num_threads=1"])
    assert result.exit_code == 0, result.output
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert row["episodes"] == 4 and row["rollout_turns"] >= 4
