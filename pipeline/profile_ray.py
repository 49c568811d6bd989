"""Profiling scaled out over a Ray cluster (extra: ``pivot-envs[ray]``).

Same result as :func:`pivot_envs.pipeline.profile.profile_pivots` — same order, same
numbers — computed by a pool of Ray actors::

    from pivot_envs.pipeline.profile_ray import profile_pivots_ray

    profiled = profile_pivots_ray(pivots, "hf:out/ref", None, k=8, seed=0, address="local")

* Each actor builds its own agent from the agent's config (``Agent.config()``,
  a spec string or a config dict) and its verifiers from their configs, so
  nothing heavy is pickled; a model loads once per actor.
* The pivots are sharded by batch: the fixed batches of
  :func:`~pivot_envs.pipeline.profile.plan_batches` (the same as in a single process) go
  to idle actors; each batch is one ``agent.sample`` call on one actor, with the
  same seed, hence the same numbers.
* Finished batches are appended to the checkpoint as they arrive (in any order)
  and the result is assembled in input order; resume works as in a single process.

``address="local"`` starts (or reuses) a Ray instance on this machine; any other
value is passed to ``ray.init(address=...)`` (``auto``, ``ray://host:10001``).
When Ray is already initialised the running instance is used and left running.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

from pivot_envs.agents import Agent, build_agent, parse_agent_spec
from pivot_envs.pipeline.profile import (
    PivotResult,
    ProgressCallback,
    Scorer,
    agent_config,
    plan_batches,
    profile_batch,
    run_params,
    run_profiling,
)
from pivot_envs.types import Pivot
from pivot_envs.verifiers import VerifierSpec


class _ProfileWorker:
    """A Ray actor body: one agent, one scorer, many batches."""

    def __init__(self, agent_config: dict[str, Any], scorer_config: dict[str, Any], k: int, seed: int):
        self.agent = build_agent(agent_config)
        self.scorer = Scorer(scorer_config["verifier"], scorer_config["strict"])
        self.k = k
        self.seed = seed

    def run(self, indices: list[int], pivots: list[Pivot]) -> list[PivotResult]:
        return profile_batch(pivots, indices, self.agent, self.scorer, self.k, self.seed)

    def agent_config(self) -> dict[str, Any]:
        return agent_config(self.agent)

    def close(self) -> None:
        self.agent.close()


def agent_config_of(agent: Any) -> dict[str, Any]:
    """A config dict that rebuilds ``agent`` in another process (spec string, dict or Agent)."""
    if isinstance(agent, Agent):
        try:
            return dict(agent.config())
        except NotImplementedError:
            raise ValueError(f"agent {type(agent).__name__} has no config(), so Ray workers cannot rebuild it: "
                             "implement Agent.config() or profile in one process") from None
    if isinstance(agent, str):
        return parse_agent_spec(agent)
    if isinstance(agent, dict):
        return dict(agent)
    raise TypeError(f"cannot ship an agent given as {type(agent).__name__}: "
                    "use a spec string, a config dict or an Agent")


def profile_pivots_ray(
    pivots: Sequence[Pivot],
    agent: Any,
    verifier: VerifierSpec | None = None,
    k: int = 8,
    *,
    seed: int = 0,
    batch_pivots: int = 16,
    checkpoint: str | Path | None = None,
    progress: ProgressCallback | None = None,
    strict_verifier: VerifierSpec = "strict",
    address: str = "local",
    workers: int | None = None,
    worker_cpus: float = 1.0,
    worker_gpus: float = 0.0,
) -> list[Pivot]:
    """:func:`~pivot_envs.pipeline.profile.profile_pivots` on Ray actors (arguments as there, plus):

    Args:
        address: ``"local"`` or a Ray address for ``ray.init(address=...)``.
        workers: number of actors; ``None`` = the cluster's CPUs / ``worker_cpus``, at most
            one per batch.
        worker_cpus: CPUs reserved per actor.
        worker_gpus: GPUs reserved per actor (e.g. 1 for an ``hf`` agent on a GPU node).
    """
    try:
        import ray
        from ray.util import ActorPool
    except ImportError:
        raise ValueError("--ray needs Ray: pip install 'pivot-envs[ray]'") from None

    if k < 1:
        raise ValueError(f"k (samples per pivot) must be >= 1, got {k}")
    pivots = list(pivots)
    config = agent_config_of(agent)
    scorer = Scorer(verifier, strict_verifier)
    started = False
    if not ray.is_initialized():
        ray.init(address=None if address == "local" else address, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
        started = True
    actors: list[Any] = []

    def run_batches(batches: list[list[int]]) -> Iterator[list[PivotResult]]:
        pool = ActorPool(actors)
        for batch in batches:
            pool.submit(lambda actor, b: actor.run.remote(b, [pivots[i] for i in b]), batch)
        while pool.has_next():
            yield pool.get_next_unordered()

    try:
        n_batches = max(1, len(plan_batches(len(pivots), batch_pivots)))
        n = workers or max(1, int(ray.cluster_resources().get("CPU", 1) // max(worker_cpus, 1e-9)))
        remote = ray.remote(num_cpus=worker_cpus, num_gpus=worker_gpus)(_ProfileWorker)
        actors.extend(remote.remote(config, scorer.config(), k, seed) for _ in range(min(n, n_batches)))
        # the checkpoint records the config the workers' agent reports, as a single process would
        params = run_params(pivots, ray.get(actors[0].agent_config.remote()), scorer, k, seed, batch_pivots)
        return run_profiling(pivots, run_batches, params, batch_pivots=batch_pivots, checkpoint=checkpoint,
                             progress=progress)
    finally:
        if actors:
            try:
                ray.get([actor.close.remote() for actor in actors], timeout=30)
            except Exception:  # noqa: BLE001 - a worker that failed is killed below anyway
                pass
        for actor in actors:
            ray.kill(actor)
        if started:
            ray.shutdown()
