"""veRL adapter, against veRL's own code (veRL 0.9.1 from PyPI, installed ``--no-deps`` with the few light
packages its config, reward loop and agent loop import; see docs/integrations.md).

* the exported parquet has veRL's RL layout (pyarrow only, no veRL);
* veRL's ``ppo_trainer`` config composed with the documented overrides loads ``compute_score`` through veRL's
  ``load_reward_manager``; the legacy top-level keys do not (veRL falls back to its default scorer);
* veRL's ``RewardLoopWorker`` scores exported rows read by veRL's ``RLHFDataset`` into a ``DataProto``: the
  expert's response 1.0, a wrong one 0.0, a verifier error 0.0 with the error in ``reward_extra_info``;
* veRL's ``AgentLoopWorker`` plays episode rows with ``PivotEpisodeAgentLoop`` (named by
  ``examples/verl_agent_loop.yaml``) against a stub server that replays recorded tokens: the expert's
  trajectory scores 1, a failing one 0, and ``response_mask`` is 1 on the model's tokens only.

The veRL tests skip, naming what to install, when veRL cannot be imported. A real veRL run needs GPUs and
vLLM/SGLang: only the rollout server is a stand-in here.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet")

from pivot_envs.actions import message_text  # noqa: E402
from pivot_envs.integrations.verl import compute_score, export_episode_parquet  # noqa: E402
from pivot_envs.types import Pivot  # noqa: E402
from tests.conftest import skip_lane  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
AGENT_LOOP_YAML = ROOT / "examples" / "verl_agent_loop.yaml"
VERL_INSTALL = ('pip install --no-deps verl==0.9.1 hydra-core==1.3.8 omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 '
                'tensordict==0.10.0 pyvers==0.1.0 codetiming==1.4.0 orjson==3.13.0')
WRONG = "I cannot help with that."


@pytest.fixture(scope="module")
def verl():
    """veRL, or a skip that says what to install."""
    try:
        import verl
        from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: F401
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means the lane is not installed
        skip_lane("verl", f"veRL is not importable ({type(exc).__name__}: {exc}); install it with: {VERL_INSTALL}")
    return verl


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, verl):
    """A local model folder veRL loads (``actor_rollout_ref.model.path``): a tiny byte-level BPE tokenizer with
    the ChatML template (no tool support: tools go into the system message as the Hermes block) and a Llama
    config. No weights: nothing here runs the model."""
    from transformers import LlamaConfig

    from pivot_envs.episodes import resolve_tasks
    from pivot_envs.models.tiny import train_tokenizer

    out = tmp_path_factory.mktemp("verl_model")
    texts = [m.get("content") or "" for t in resolve_tasks("bundled:search:test", domain="search")[:4]
             for m in t.messages]
    tokenizer = train_tokenizer(texts, vocab_size=600)
    tokenizer.save_pretrained(out)
    LlamaConfig(vocab_size=len(tokenizer), hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                num_attention_heads=1, num_key_value_heads=1, architectures=["LlamaForCausalLM"]).save_pretrained(out)
    return out


def documented_overrides(train_file: Path) -> list[str]:
    """docs/integrations.md's veRL overrides for pivots."""
    import pivot_envs.integrations.verl as adapter

    return [f"data.train_files={train_file}", f"reward.custom_reward_function.path={adapter.__file__}",
            "reward.custom_reward_function.name=compute_score"]


def compose(verl, overrides: list[str]):
    """veRL's own ``ppo_trainer`` config (the installed package's config folder) with ``overrides``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def dataset_batch(config, tokenizer, parquet: Path, indices):
    """Rows as veRL's trainer batches them: ``RLHFDataset`` items, ``collate_fn``, ``DataProto.from_single_dict``."""
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    dataset = RLHFDataset(data_files=[str(parquet)], tokenizer=tokenizer, config=config.data)
    return DataProto.from_single_dict(collate_fn([dataset[i] for i in indices]))


def with_responses(batch, tokenizer, texts: list[str]):
    """``batch`` with what a rollout adds (veRL's padding: prompts left, responses right): the prompt rendered
    with the chat template, the response tokens and the end-of-turn token."""
    import torch
    from verl import DataProto

    def pad(seqs, left):
        width = max(len(s) for s in seqs)
        ids = [[tokenizer.pad_token_id] * (width - len(s)) + s if left else s + [tokenizer.pad_token_id] * (width - len(s))
               for s in seqs]
        mask = [[0] * (width - len(s)) + [1] * len(s) if left else [1] * len(s) + [0] * (width - len(s)) for s in seqs]
        return torch.tensor(ids), torch.tensor(mask)

    prompts = [list(tokenizer.apply_chat_template(list(m), add_generation_prompt=True, tokenize=True, return_dict=False))
               for m in batch.non_tensor_batch["raw_prompt"]]
    responses = [tokenizer.encode(t, add_special_tokens=False) + [tokenizer.eos_token_id] for t in texts]
    p, pm = pad(prompts, left=True)
    r, rm = pad(responses, left=False)
    return batch.union(DataProto.from_dict({"prompts": p, "responses": r, "input_ids": torch.cat([p, r], 1),
                                            "attention_mask": torch.cat([pm, rm], 1)}))


# --- the layout (no veRL) --------------------------------------------------------------------------


def test_export_has_verls_rl_layout_and_compute_score_scores_it(tmp_path):
    from typer.testing import CliRunner

    from pivot_envs.cli import app

    out = tmp_path / "d" / "test.parquet"
    result = CliRunner().invoke(app, ["export", "--to", "verl", "-i", "bundled:search:test", "-o", str(out)])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    rows = table.to_pylist()
    assert rows and all(r["data_source"] == "pivot_envs/search" for r in rows)
    for index, row in enumerate(rows[:6]):
        assert row["reward_model"]["style"] == "rule"
        assert row["extra_info"]["index"] == index and row["extra_info"]["split"] == "test"
        assert all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in row["prompt"])
        pivot = Pivot.from_dict(json.loads(row["reward_model"]["ground_truth"]))
        assert pivot.id == row["extra_info"]["pivot_id"]
        right = compute_score(row["data_source"], message_text(pivot.expert), row["reward_model"]["ground_truth"],
                              row["extra_info"])
        wrong = compute_score(row["data_source"], WRONG, row["reward_model"]["ground_truth"], row["extra_info"])
        assert right == {"score": 1.0, "passed": 1.0, "verifier_error": 0.0, "verifier_error_message": ""}, pivot.id
        assert wrong["score"] == 0.0 and set(wrong) == set(right), pivot.id  # same keys every call


def test_episode_rows_carry_their_task(tmp_path):
    from pivot_envs.episodes import resolve_tasks

    tasks = resolve_tasks("bundled:search:test", domain="search")[:3]
    out = tmp_path / "episodes.parquet"
    assert export_episode_parquet(tasks, out, domain="search", split="test") == 3
    rows = pq.read_table(out).to_pylist()
    for row, task in zip(rows, tasks):
        assert row["agent_name"] == "pivot_envs_episode" and row["data_source"] == "pivot_envs/search/episode"
        assert row["reward_model"] == {"style": "episode", "ground_truth": task.id}
        assert json.loads(row["extra_info"]["task"]) == json.loads(json.dumps(task.to_dict()))
        assert row["prompt"][-1] == {"role": "user", "content": task.messages[1]["content"]}


# --- veRL's reward loop ------------------------------------------------------------------------------


def test_documented_keys_load_compute_score_and_the_legacy_keys_do_not(verl, model_dir, tmp_path):
    from verl.trainer.ppo.reward import get_custom_reward_fn, load_reward_manager

    from pivot_envs.integrations.verl import to_verl_rows

    row = to_verl_rows("bundled:tool_use:test")[0]
    pivot = Pivot.from_dict(json.loads(row["reward_model"]["ground_truth"]))
    config = compose(verl, documented_overrides(tmp_path / "t.parquet"))
    assert config.reward.reward_manager.name == "naive"  # veRL's default manager in its reward-loop registry
    manager = load_reward_manager(config, tokenizer=None)
    assert manager.compute_score(data_source=row["data_source"], solution_str=message_text(pivot.expert),
                                 ground_truth=row["reward_model"]["ground_truth"], extra_info={})["score"] == 1.0

    legacy = [o.removeprefix("reward.") for o in documented_overrides(tmp_path / "t.parquet")]
    config = compose(verl, legacy)  # veRL <= 0.8's keys: still in the config, never read by main_ppo
    assert get_custom_reward_fn(config) is None
    with pytest.raises(NotImplementedError):
        load_reward_manager(config, tokenizer=None).compute_score(
            data_source=row["data_source"], solution_str=message_text(pivot.expert),
            ground_truth=row["reward_model"]["ground_truth"], extra_info={})


def test_verls_reward_loop_scores_exported_rows(verl, model_dir, tmp_path, monkeypatch):
    from transformers import AutoTokenizer
    from typer.testing import CliRunner
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.reward import resolve_reward_manager_cls

    from pivot_envs.cli import app
    from pivot_envs.integrations._common import pivot_from_json
    from pivot_envs.verifiers.batch import VerifierResolver

    parquet = tmp_path / "train.parquet"
    result = CliRunner().invoke(app, ["export", "--to", "verl", "-i", "bundled:tool_use:test", "-o", str(parquet)])
    assert result.exit_code == 0, result.output
    config = compose(verl, documented_overrides(parquet) + [f"actor_rollout_ref.model.path={model_dir}"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = dataset_batch(config, tokenizer, parquet, range(6))
    pivots = [pivot_from_json(r["ground_truth"]) for r in batch.non_tensor_batch["reward_model"]]
    texts = [message_text(p.expert) if i % 2 == 0 else WRONG for i, p in enumerate(pivots)]
    batch = with_responses(batch, tokenizer, texts)

    async def score(data):
        return await RewardLoopWorker(config).compute_score_batch(data)  # what the RewardLoopManager's actors run

    outputs = asyncio.run(score(batch))
    assert [o["reward_score"] for o in outputs] == [1.0, 0.0] * 3
    assert all(o["reward_extra_info"]["verifier_error"] == 0.0 for o in outputs)
    rm_scores = resolve_reward_manager_cls(config).assemble_rm_scores(batch, [o["reward_score"] for o in outputs])
    assert rm_scores.sum(dim=-1).tolist() == [1.0, 0.0] * 3  # the reward sits on the last response token

    verifier = VerifierResolver().for_pivot(pivots[0])

    def boom(self, actions, pivots):
        raise RuntimeError("backend down")

    monkeypatch.setattr(type(verifier), "verify_many", boom)
    [failed] = asyncio.run(score(batch[0:1]))
    assert failed["reward_score"] == 0.0
    assert failed["reward_extra_info"]["verifier_error"] == 1.0
    assert "backend down" in failed["reward_extra_info"]["verifier_error_message"]

    strict = compose(verl, documented_overrides(parquet) + [f"actor_rollout_ref.model.path={model_dir}",
                                                            "+reward.custom_reward_function.reward_kwargs.strict=true"])

    async def score_strict(data):
        return await RewardLoopWorker(strict).compute_score_batch(data)

    with pytest.raises(RuntimeError, match="backend down"):
        asyncio.run(score_strict(batch[0:1]))


# --- veRL's agent loop ------------------------------------------------------------------------------


class ReplayServer:
    """Stands in for veRL's rollout server (``LLMServerClient.generate``): each trajectory (found by its task's
    question in the prompt) gets its recorded assistant turns as tokens, one per call, in order."""

    def __init__(self, tokenizer, scripts: dict[str, list[dict]]):
        self.tokenizer, self.scripts = tokenizer, scripts
        self.calls: dict[str, list[tuple[list[int], list[int]]]] = {}  # request_id -> [(prompt_ids, reply_ids)]
        self.question: dict[str, str] = {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        if request_id not in self.question:
            text = self.tokenizer.decode(prompt_ids)
            self.question[request_id] = next(q for q in self.scripts if q in text)
        calls = self.calls.setdefault(request_id, [])
        turn = self.scripts[self.question[request_id]][len(calls)]
        reply = self.tokenizer.encode(message_text(turn), add_special_tokens=False) + [self.tokenizer.eos_token_id]
        calls.append((list(prompt_ids), reply))
        return TokenOutput(token_ids=reply)


def test_verls_agent_loop_worker_plays_episodes_scored_by_task_success(verl, model_dir, tmp_path):
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _agent_loop_registry

    from pivot_envs.episodes import resolve_tasks

    passing, failing = resolve_tasks("bundled:search:test", domain="search")[:2]
    parquet = tmp_path / "episodes.parquet"
    export_episode_parquet([passing, failing], parquet, domain="search", split="test")
    config = compose(verl, [f"data.train_files={parquet}", f"actor_rollout_ref.model.path={model_dir}",
                            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOP_YAML}",
                            "actor_rollout_ref.rollout.name=vllm", "data.max_prompt_length=4096",
                            "data.max_response_length=4096"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    expert = [m for m in passing.messages if m["role"] == "assistant"]
    wrong = [next(m for m in failing.messages if m["role"] == "assistant"),
             {"role": "assistant", "content": "The answer is the Nowhere River."}]  # the expert's search, then wrong
    question = {t.id: t.messages[1]["content"] for t in (passing, failing)}
    server = ReplayServer(tokenizer, {question[passing.id]: expert, question[failing.id]: wrong})
    batch = dataset_batch(config, tokenizer, parquet, range(2))

    async def rollout():
        return await AgentLoopWorker(config, llm_client=server).generate_sequences(batch)

    out = asyncio.run(rollout())
    assert _agent_loop_registry["pivot_envs_episode"]["_target_"].endswith("verl_agent_loop.PivotEpisodeAgentLoop")
    assert out.batch["rm_scores"].sum(dim=-1).tolist() == [1.0, 0.0]
    info = out.non_tensor_batch
    assert info["success"].tolist() == [1.0, 0.0] and info["episode_error"].tolist() == [0.0, 0.0]
    assert info["tool_calls"].tolist() == [float(sum(len(m.get("tool_calls") or []) for m in expert)), 1.0]

    by_question = {q: calls for r, calls in server.calls.items() for q in [server.question[r]]}
    for i, task in enumerate((passing, failing)):
        calls = by_question[question[task.id]]
        assert len(calls) == (len(expert) if task is passing else 2)
        for (before, reply), (after, _) in itertools.pairwise(calls):
            assert after[: len(before) + len(reply)] == before + reply  # each turn extends the running tokens
        width = out.batch["responses"].shape[1]
        responses = out.batch["responses"][i]
        valid = out.batch["attention_mask"][i][-width:] == 1
        mask = out.batch["response_mask"][i]
        model_tokens = responses[valid & (mask == 1)].tolist()
        assert model_tokens == [t for _, reply in calls for t in reply]  # 1 exactly on the replayed tokens
        tool_text = tokenizer.decode(responses[valid & (mask == 0)])
        first_result = next(m for m in task.messages if m["role"] == "tool")["content"]
        assert first_result in tool_text  # the world's tool result, with mask 0


class OneReplyServer:
    """Stands in for veRL's rollout server: answers each prompt with the text ``reply(prompt_ids)`` gives."""

    def __init__(self, tokenizer, reply):
        self.tokenizer, self.reply, self.prompts = tokenizer, reply, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        text = self.reply(list(prompt_ids))
        return TokenOutput(token_ids=self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id])


def test_verls_pivot_agent_loop_samples_from_the_profiled_prompt_of_a_tool_template(verl, model_dir, tmp_path):
    """Rows exported with ``agent_loop=True`` are rendered by ``PivotTurnAgentLoop``: with a tool-aware template
    (TRL's Llama 3.1 template, which puts the tools in the first user message: not the Hermes rows' text) veRL's
    rollout server gets the very ids profiling samples from (``encode_prompt`` with the folder's prompt config);
    the response is all model tokens, and the reward function scores it (expert 1.0, wrong 0.0)."""
    import shutil

    from transformers import AutoTokenizer
    from trl.chat_template_utils import llama3_1_chat_template
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from pivot_envs.agents.prompting import encode_prompt
    from pivot_envs.integrations._common import prompt_config, prompt_messages
    from pivot_envs.integrations.verl import export_parquet
    from pivot_envs.sources import resolve_pivots

    folder = tmp_path / "llama"
    shutil.copytree(model_dir, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = llama3_1_chat_template
    tokenizer.save_pretrained(folder)
    pivots = [p for p in resolve_pivots("bundled:search:test") if p.tools and len(p.context) > 2][:2]
    parquet = tmp_path / "pivots.parquet"
    assert export_parquet(pivots, parquet, split="test", agent_loop=True) == 2
    config = compose(verl, documented_overrides(parquet) + [
        f"actor_rollout_ref.model.path={folder}", f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOP_YAML}",
        "actor_rollout_ref.rollout.name=vllm", "data.max_prompt_length=8192", "data.max_response_length=512"])
    profiled = [list(encode_prompt(tokenizer, p, prompt_config(str(folder)))) for p in pivots]
    replies = {tuple(ids): message_text(p.expert) if i == 0 else WRONG for i, (ids, p) in enumerate(zip(profiled, pivots))}
    server = OneReplyServer(tokenizer, lambda ids: replies[tuple(ids)])
    batch = dataset_batch(config, tokenizer, parquet, range(2))
    assert list(batch.non_tensor_batch["agent_name"]) == ["pivot_envs_pivot"] * 2

    async def rollout():
        return await AgentLoopWorker(config, llm_client=server).generate_sequences(batch)

    out = asyncio.run(rollout())
    assert sorted(server.prompts) == sorted(profiled)  # veRL sampled from the profiled prompts
    for i, pivot in enumerate(pivots):
        hermes = tokenizer.apply_chat_template(prompt_messages(pivot), add_generation_prompt=True, tokenize=True,
                                               return_dict=False)
        assert list(hermes) != profiled[i]  # the default loop's rendering would be another prompt
        width = out.batch["responses"].shape[1]
        valid = out.batch["attention_mask"][i][-width:] == 1
        assert out.batch["response_mask"][i][valid].tolist() == [1] * int(valid.sum())  # every response token trains
        prompt_width = out.batch["prompts"].shape[1]
        prompt = out.batch["prompts"][i][out.batch["attention_mask"][i][:prompt_width] == 1].tolist()
        assert prompt in profiled
        text = tokenizer.decode(out.batch["responses"][i][valid], skip_special_tokens=True)
        row = pq.read_table(parquet).to_pylist()[profiled.index(prompt)]
        result = compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row["extra_info"])
        assert result["score"] == (1.0 if profiled.index(prompt) == 0 else 0.0) and result["verifier_error"] == 0.0
