"""The demo's evaluations of one model folder, on either engine (:mod:`pivot_envs.experiments.engines`).

* :func:`pivot_report`: greedy per-turn accuracy (and mean@k) at pivots, and the OOD probes
  (:func:`pivot_envs.trainers.evaluate.evaluate` with the ``hf`` engine, exactly as before the engines
  existed; :func:`~pivot_envs.trainers.evaluate.evaluate_agents` on a shared vLLM engine);
* :func:`play_tasks`: tasks played to the end in their domain's world
  (:func:`pivot_envs.trainers.evaluate.evaluate_episodes`), greedily or ``repeats`` times at temperature 1.

Both return the evaluation report with per-item rows (``details``), which
:func:`pivot_envs.experiments.arms.item_outcomes` turns into the paired tests' outcomes. Every argument is
plain data, so they run in worker processes too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from pivot_envs.experiments.engines import EngineSettings, eval_agents
from pivot_envs.trainers.evaluate import evaluate, evaluate_agents, evaluate_episodes


@dataclass(frozen=True)
class Sampling:
    """What every evaluation of one run shares: the engine, the prompt window, the longest action, the batch.

    Attributes:
        engine: who samples (``hf`` or ``vllm``) and how prompts are built.
        max_new_tokens: longest action.
        max_prompt_tokens: prompt window.
        batch_size: pivots (or live episodes) per engine call.
        num_threads: torch CPU threads of the ``hf`` engine.
        device: the ``hf`` engine's device (``cpu``; ``auto`` takes CUDA when there is one).
    """

    engine: EngineSettings
    max_new_tokens: int
    max_prompt_tokens: int
    batch_size: int = 16
    num_threads: int | None = 1
    device: str = "cpu"


def pivot_report(model: str, pivots: str, sampling: Sampling, *, seed: int, k: int,
                 probes: bool | Sequence[Any]) -> dict[str, Any]:
    """Greedy per-turn accuracy at ``pivots`` (and mean@k at T=1 with ``k``), the OOD ``probes`` (``True``: the
    built-in set, a list: those items, ``False``: none), with per-item rows."""
    s = sampling
    if s.engine.kind == "hf":
        return evaluate(model, pivots, k=k, probes=probes, seed=seed, max_new_tokens=s.max_new_tokens,
                        max_prompt_tokens=s.max_prompt_tokens, batch_size=s.batch_size, tools=s.engine.tools,
                        num_threads=s.num_threads, device=s.device, details=True)
    with eval_agents(model, s.engine, seed=seed, max_new_tokens=s.max_new_tokens,
                     max_prompt_tokens=s.max_prompt_tokens, batch_size=s.batch_size, num_threads=s.num_threads,
                     device=s.device) as agent:
        greedy = agent(0.0)

        def live(temperature: float = 1.0, max_new_tokens: int | None = None, **_: Any) -> Any:
            return agent(temperature, max_new_tokens)

        return evaluate_agents(greedy, live, pivots, name=model, k=k, probes=probes, seed=seed,
                               max_new_tokens=s.max_new_tokens, max_prompt_tokens=s.max_prompt_tokens,
                               batch_size=s.batch_size, tools=s.engine.tools, details=True)


def play_tasks(model: str, domain: str, tasks: str, sampling: Sampling, *, seed: int, temperature: float,
               repeats: int, max_turns: int, limit: int | None = None) -> dict[str, Any]:
    """Play every task of ``tasks`` (a trajectory file) in ``domain``'s world, ``repeats`` times at
    ``temperature`` (greedy: ``temperature`` 0, one play); the report holds the rows (``episode_rows`` greedy,
    ``episodes_sampled_rows`` at T>0), ``overall[key]`` and ``seconds``."""
    s = sampling
    sampled = temperature > 0
    key = "episodes_sampled" if sampled else "episodes"
    began = time.perf_counter()
    with eval_agents(model, s.engine, seed=seed, max_new_tokens=s.max_new_tokens,
                     max_prompt_tokens=s.max_prompt_tokens, batch_size=s.batch_size, num_threads=s.num_threads,
                     device=s.device) as agent:
        report = evaluate_episodes({"model": model, "domains": {}, "overall": {}, "settings": {}}, agent(temperature),
                                   {domain: tasks}, max_turns=max_turns, seed=seed, batch_size=s.batch_size,
                                   details=True, repeats=repeats if sampled else 1, key=key, limit=limit)
    report["seconds"] = round(time.perf_counter() - began, 3)
    return report
