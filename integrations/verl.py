"""veRL adapter: pivots and tasks as veRL's RL parquet, the verifiers as a veRL custom reward function.

veRL itself is not a dependency (it trains on CUDA GPUs with Ray and vLLM/SGLang); this module only
needs pivot-envs, and the exporter pyarrow (``pip install "pivot-envs[verl]"``). Written against
veRL 0.9.1 (``verl-project/verl``) and tested with its own code (``tests/integrations/test_integrations_verl.py``)::

    pivot-envs export --to verl -i bundled:tool_use:train -o train.parquet

    # veRL 0.9 (main_ppo / ppo_trainer.yaml) overrides
    data.train_files=train.parquet
    reward.custom_reward_function.path=<site-packages>/pivot_envs/integrations/verl.py
    reward.custom_reward_function.name=compute_score

The top-level ``custom_reward_function.{path,name}`` of older veRL is still in 0.9's config
(``legacy_reward_impl.yaml``) but ``main_ppo`` never reads it: veRL then scores with its default
function, which raises ``NotImplementedError`` for a ``pivot_envs/...`` data source.

What this relies on in veRL 0.9.1:

* the RL dataset layout of ``examples/data_preprocess/*.py``: one row per prompt with ``data_source``,
  ``prompt`` (chat messages; ``RLHFDataset`` hands them on as ``raw_prompt`` and the agent loop renders
  them with the tokenizer's chat template), ``ability``, ``reward_model = {"style": "rule",
  "ground_truth": ...}`` and ``extra_info = {"split", "index", ...}``;
* the reward loop (``verl/experimental/reward_loop``): ``load_reward_manager`` (``verl/trainer/ppo/reward.py``)
  loads ``reward.custom_reward_function`` and builds the manager that ``reward.reward_manager.name`` names
  in the reward-loop registry (default ``naive``). ``NaiveRewardManager.run_single`` scores **one sample
  per call**: it decodes the response with ``skip_special_tokens=True``, sets ``extra_info["num_turns"]``
  and ``extra_info["rollout_reward_scores"]`` and calls ``compute_score(data_source=, solution_str=,
  ground_truth=reward_model["ground_truth"], extra_info=)``. A ``dict`` result carries ``"score"`` (the
  reward); all its keys become the sample's ``reward_extra_info`` (stacked into arrays, so every result
  has the same keys). There is no batch manager in 0.9's reward loop (the legacy ``batch`` manager of
  ``verl/workers/reward_manager`` is not used by it), so there is no batch form here either.

Rows: ``ground_truth`` is the pivot as JSON (``Pivot.to_dict``: a string, so parquet never has to
unify different pivots' nested shapes), enough to rebuild the pivot alone; ``extra_info`` has ``index``,
``split``, ``pivot_id``, ``domain`` and, when the export named one, ``verifier`` (the verifier config as
JSON; absent: the pivot's domain default).

A verifier error: veRL has no way to leave a sample out (the score goes straight into the token reward
tensor, and a NaN would poison the advantages), so :func:`compute_score` returns ``score = 0.0`` with
``verifier_error = 1.0`` and the error text in ``verifier_error_message`` (``0.0`` and ``""`` otherwise).
veRL keeps both per sample in ``reward_extra_info``: the error is visible (the numeric key is averaged
into the validation metrics, the text is written with the dumped generations), never silent.
``strict=True`` (veRL override ``+reward.custom_reward_function.reward_kwargs.strict=true``) raises
instead.

Whole tasks: :func:`to_verl_episode_rows` writes one row per task for the agent loop of
:mod:`pivot_envs.integrations.verl_agent_loop` (which plays the task in its world and scores it by task
success; that module needs veRL).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pivot_envs.episodes.tasks import TaskSource, bundled_domain, resolve_tasks
from pivot_envs.integrations._common import pivot_from_json, pivot_json, prompt_messages, score
from pivot_envs.sources import PivotSource, resolve_pivots
from pivot_envs.types import Pivot
from pivot_envs.verifiers.base import build_verifier
from pivot_envs.verifiers.batch import VerifierResolver

__all__ = [
    "DATA_SOURCE_PREFIX",
    "EPISODE_AGENT_NAME",
    "PIVOT_AGENT_NAME",
    "compute_score",
    "export_episode_parquet",
    "export_parquet",
    "to_verl_episode_rows",
    "to_verl_rows",
]

DATA_SOURCE_PREFIX = "pivot_envs/"
"""``data_source`` of an exported row: ``pivot_envs/<domain>`` (``pivot_envs/<domain>/episode`` for a task)."""

EPISODE_AGENT_NAME = "pivot_envs_episode"
"""The ``agent_name`` of an episode row: the agent loop :mod:`pivot_envs.integrations.verl_agent_loop`
registers under this name."""


PIVOT_AGENT_NAME = "pivot_envs_pivot"
"""The ``agent_name`` of a pivot row exported with ``agent_loop=True``: the agent loop
:class:`pivot_envs.integrations.verl_agent_loop.PivotTurnAgentLoop` renders its prompt as profiling rendered it."""


def source_split(pivots: PivotSource, split: str | None) -> str:
    """``split``, else the split a ``bundled:DOMAIN:SPLIT`` source names, else ``"train"``."""
    if split:
        return split
    if isinstance(pivots, str) and pivots.startswith("bundled:") and pivots.count(":") >= 2:
        return pivots.rsplit(":", 1)[1] or "train"
    return "train"


def to_verl_rows(pivots: PivotSource, *, split: str | None = None, verifier: Any = None,
                 prompt_mode: str = "hermes", agent_loop: bool = False) -> list[dict[str, Any]]:
    """veRL RL rows of ``pivots`` (see the module docstring); ``split`` (written to
    ``extra_info.split``) defaults to the source's (:func:`source_split`).

    ``agent_loop=True``: each row names :data:`PIVOT_AGENT_NAME` in ``agent_name``, so veRL's rollout renders
    the prompt with :class:`~pivot_envs.integrations.verl_agent_loop.PivotTurnAgentLoop`: the token ids
    profiling and the bundled trainer sample from (the pivot's own tools through a tool-aware template's
    ``tools=``, the model folder's recorded prompt format), where veRL's default single-turn loop renders the
    ``prompt`` messages (the Hermes ``<tools>`` block in the system message) with one tool list for all rows."""
    split = source_split(pivots, split)
    items = resolve_pivots(pivots, split=split)
    spec = None
    if verifier is not None:
        spec = json.dumps(build_verifier(verifier).config(), sort_keys=True, default=str)
    rows = []
    for index, p in enumerate(items):
        extra: dict[str, Any] = {"index": index, "split": split, "pivot_id": p.id, "domain": p.domain}
        if spec is not None:
            extra["verifier"] = spec
        row = {
            "data_source": DATA_SOURCE_PREFIX + (p.domain or "pivot"),
            "prompt": prompt_messages(p, prompt_mode),
            "ability": "agent/" + (p.domain or "pivot"),
            "reward_model": {"style": "rule", "ground_truth": pivot_json(p)},
            "extra_info": extra,
        }
        if agent_loop:
            row["agent_name"] = PIVOT_AGENT_NAME
        rows.append(row)
    return rows


def export_parquet(pivots: PivotSource, out: str | Path, *, split: str | None = None, verifier: Any = None,
                   prompt_mode: str = "hermes", agent_loop: bool = False) -> int:
    """Write veRL's RL parquet of ``pivots`` to ``out`` (:func:`to_verl_rows`); returns the number of rows."""
    rows = to_verl_rows(pivots, split=split, verifier=verifier, prompt_mode=prompt_mode, agent_loop=agent_loop)
    return _write_parquet(rows, out, "pivots")


def _write_parquet(rows: list[dict[str, Any]], out: str | Path, what: str) -> int:
    """``rows`` as a parquet file at ``out`` (its folder made); their number. No rows: ``ValueError``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError(f"no {what} to export")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), out)
    return len(rows)


def _verifier_of(extra_info: dict[str, Any] | None) -> Any:
    spec = (extra_info or {}).get("verifier")
    if spec is None or (isinstance(spec, float) and spec != spec):  # absent, or a parquet null read as NaN
        return None
    return json.loads(spec) if isinstance(spec, str) else spec


def compute_score(data_source: str, solution_str: str, ground_truth: str | dict[str, Any] | Pivot,
                  extra_info: dict[str, Any] | None = None, *, strict: bool = False,
                  **_: Any) -> dict[str, float | str]:
    """veRL custom reward function: the pivot's verifier on the decoded response.

    Returns ``{"score", "passed", "verifier_error", "verifier_error_message"}`` (see the module
    docstring for errors). ``ground_truth``: the pivot JSON of the exported row;
    ``extra_info["verifier"]`` (optional) overrides the domain's default verifier. veRL's other
    keywords (``reward_router_address``, ...) are accepted and ignored.
    """
    pivot = pivot_from_json(ground_truth)
    result = score([solution_str], [pivot], VerifierResolver(_verifier_of(extra_info)))[0]
    if result.error is not None:
        if strict:
            raise RuntimeError(f"verifier error on pivot {pivot.id}: {result.error}")
        return {"score": 0.0, "passed": 0.0, "verifier_error": 1.0, "verifier_error_message": str(result.error)}
    return {"score": float(result.reward), "passed": float(bool(result.passed)), "verifier_error": 0.0,
            "verifier_error_message": ""}


# --- whole tasks: rows for the agent loop ------------------------------------------------------------------

def to_verl_episode_rows(tasks: TaskSource = None, *, domain: str | None = None, split: str = "train",
                         min_reward: float | None = 1.0) -> list[dict[str, Any]]:
    """veRL RL rows of whole tasks, one per task, for :mod:`pivot_envs.integrations.verl_agent_loop`.

    ``tasks``: any task source :class:`~pivot_envs.episodes.EpisodeEnv` takes (``bundled:DOMAIN[:SPLIT]``,
    a trajectory file, a list of trajectories; ``None``: ``domain``'s bundled ``split``). Each row has
    ``agent_name`` (:data:`EPISODE_AGENT_NAME`, so veRL runs the pivot-envs agent loop on it), ``prompt``
    (the messages the episode starts from: up to and including the first user message; the tools are
    the world's, rendered by the agent loop), ``data_source`` ``pivot_envs/<domain>/episode``,
    ``reward_model = {"style": "episode", "ground_truth": task_id}`` and ``extra_info`` with ``index``,
    ``split``, ``task_id``, ``domain`` and ``task`` (the task trajectory as JSON: a row is enough to
    rebuild its episode in any veRL worker, without the source).
    """
    domain = domain or bundled_domain(tasks)
    items = resolve_tasks(tasks, domain=domain, split=split, min_reward=min_reward)
    rows = []
    for index, task in enumerate(items):
        first_user = next(i for i, m in enumerate(task.messages) if m.get("role") == "user")
        start = task.messages[: first_user + 1]
        if any(m.get("tool_calls") or m.get("role") == "tool" for m in start):
            raise ValueError(f"task {task.id!r} has tool calls before its first user message: its start is not a "
                             "plain-text prompt")
        name = domain or "task"
        rows.append({
            "data_source": f"{DATA_SOURCE_PREFIX}{name}/episode",
            "agent_name": EPISODE_AGENT_NAME,
            "prompt": [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in start],
            "ability": "agent/" + name,
            "reward_model": {"style": "episode", "ground_truth": task.id},
            "extra_info": {"index": index, "split": split, "task_id": task.id, "domain": domain or "",
                           "task": json.dumps(task.to_dict(), ensure_ascii=False, separators=(",", ":"))},
        })
    return rows


def export_episode_parquet(tasks: TaskSource, out: str | Path, *, domain: str | None = None, split: str = "train",
                           min_reward: float | None = 1.0) -> int:
    """Write :func:`to_verl_episode_rows` of ``tasks`` as veRL's RL parquet; returns the number of rows."""
    rows = to_verl_episode_rows(tasks, domain=domain, split=split, min_reward=min_reward)
    return _write_parquet(rows, out, "tasks")
