"""veRL adapter: pivots as veRL's RL parquet, and the verifiers as a veRL custom reward function.

veRL itself is not a dependency (it needs CUDA GPUs, Ray and vLLM/SGLang to train); this module
only needs pivot-envs, and the exporter pyarrow (``pip install "pivot-envs[verl]"``)::

    pivot-envs export --to verl -i bundled:tool_use:train -o train.parquet

    # veRL (PPO / GRPO trainer config)
    data.train_files=train.parquet
    custom_reward_function.path=<site-packages>/pivot_envs/integrations/verl.py
    custom_reward_function.name=compute_score          # or compute_score_batch with reward_model.reward_manager=batch

What this relies on in veRL (``volcengine/verl``):

* the RL dataset layout of ``examples/data_preprocess/*.py`` (e.g. ``gsm8k.py``): one row per
  prompt with ``data_source``, ``prompt`` (chat messages, rendered by ``RLHFDataset`` with the
  tokenizer's chat template), ``ability``, ``reward_model = {"style": "rule", "ground_truth": ...}``
  and ``extra_info = {"split", "index", ...}``;
* ``NaiveRewardManager`` (``verl/workers/reward_manager/naive.py``) decodes each response with
  ``skip_special_tokens=True`` and calls ``compute_score(data_source=, solution_str=,
  ground_truth=reward_model["ground_truth"], extra_info=)`` (it sets ``extra_info["num_turns"]``
  first); a ``dict`` result must carry ``"score"`` (the reward) and its other keys are collected
  into ``reward_extra_info`` lists, so every result must have the same keys;
  ``BatchRewardManager`` (``batch.py``) calls ``compute_score(data_sources=, solution_strs=,
  ground_truths=, extra_infos=)`` once per batch (:func:`compute_score_batch`).

Rows: ``ground_truth`` is the pivot as JSON (``Pivot.to_dict``: a string, so parquet never has
to unify different pivots' nested shapes), enough to rebuild the pivot alone; ``extra_info`` has
``index``, ``split``, ``pivot_id``, ``domain`` and, when the export named one, ``verifier`` (the
verifier config as JSON; absent: the pivot's domain default).

A verifier error: veRL has no way to leave a sample out (the score goes straight into the token
reward tensor, and a NaN would poison the advantages), so :func:`compute_score` returns a dict
with ``score = 0.0`` and ``verifier_error = 1.0`` (``0.0`` otherwise), which veRL logs per sample
in ``reward_extra_info``: the error is visible, never silent, and mask-able by a custom reward
manager. ``strict=True`` raises instead (stops the run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from pivot_envs.integrations._common import pivot_from_json, pivot_json, prompt_messages, score
from pivot_envs.sources import PivotSource, resolve_pivots
from pivot_envs.types import Pivot
from pivot_envs.verifiers.base import build_verifier
from pivot_envs.verifiers.batch import VerifierResolver

__all__ = ["compute_score", "compute_score_batch", "to_verl_rows", "export_parquet", "DATA_SOURCE_PREFIX"]

DATA_SOURCE_PREFIX = "pivot_envs/"
"""``data_source`` of an exported row: ``pivot_envs/<domain>``."""


def source_split(pivots: PivotSource, split: str | None) -> str:
    """``split``, else the split a ``bundled:DOMAIN:SPLIT`` source names, else ``"train"``."""
    if split:
        return split
    if isinstance(pivots, str) and pivots.startswith("bundled:") and pivots.count(":") >= 2:
        return pivots.rsplit(":", 1)[1] or "train"
    return "train"


def to_verl_rows(pivots: PivotSource, *, split: str | None = None, verifier: Any = None,
                 prompt_mode: str = "hermes") -> list[dict[str, Any]]:
    """veRL RL rows of ``pivots`` (see the module docstring); ``split`` (written to
    ``extra_info.split``) defaults to the source's (:func:`source_split`)."""
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
        rows.append({
            "data_source": DATA_SOURCE_PREFIX + (p.domain or "pivot"),
            "prompt": prompt_messages(p, prompt_mode),
            "ability": "agent/" + (p.domain or "pivot"),
            "reward_model": {"style": "rule", "ground_truth": pivot_json(p)},
            "extra_info": extra,
        })
    return rows


def export_parquet(pivots: PivotSource, out: str | Path, *, split: str | None = None, verifier: Any = None,
                   prompt_mode: str = "hermes") -> int:
    """Write veRL's RL parquet of ``pivots`` to ``out``; returns the number of rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = to_verl_rows(pivots, split=split, verifier=verifier, prompt_mode=prompt_mode)
    if not rows:
        raise ValueError("no pivots to export")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), out)
    return len(rows)


def _verifier_of(extra_info: dict[str, Any] | None) -> Any:
    spec = (extra_info or {}).get("verifier")
    if spec is None or (isinstance(spec, float) and spec != spec):  # absent, or a parquet null read as NaN
        return None
    return json.loads(spec) if isinstance(spec, str) else spec


def _result(r: Any) -> dict[str, Any]:
    failed = r.error is not None
    return {"score": 0.0 if failed else float(r.reward), "passed": float(bool(r.passed) and not failed),
            "verifier_error": float(failed)}


def compute_score(data_source: str, solution_str: str, ground_truth: str | dict[str, Any] | Pivot,
                  extra_info: dict[str, Any] | None = None, *, strict: bool = False, **_: Any) -> dict[str, float]:
    """veRL custom reward function: the pivot's verifier on the decoded response.

    Returns ``{"score", "passed", "verifier_error"}`` (floats; see the module docstring for errors).
    ``ground_truth``: the pivot JSON of the exported row; ``extra_info["verifier"]`` (optional)
    overrides the domain's default verifier.
    """
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], strict=strict)[0]


def compute_score_batch(data_sources: Sequence[str], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                        extra_infos: Sequence[dict[str, Any] | None] | None = None, *, strict: bool = False,
                        **_: Any) -> list[dict[str, float]]:
    """veRL ``BatchRewardManager`` form of :func:`compute_score`: one ``verify_batch`` per verifier."""
    n = len(solution_strs)
    extras = list(extra_infos) if extra_infos is not None else [None] * n
    pivots = [pivot_from_json(g) for g in ground_truths]
    specs = [_verifier_of(e) for e in extras]
    out: list[dict[str, float] | None] = [None] * n
    for key in {json.dumps(s, sort_keys=True) for s in specs}:
        spec = json.loads(key)
        idx = [i for i in range(n) if json.dumps(specs[i], sort_keys=True) == key]
        results = score([solution_strs[i] for i in idx], [pivots[i] for i in idx], VerifierResolver(spec))
        for i, r in zip(idx, results):
            if strict and r.error is not None:
                raise RuntimeError(f"verifier error on pivot {pivots[i].id}: {r.error}")
            out[i] = _result(r)
    return out  # type: ignore[return-value]
