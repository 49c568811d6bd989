"""Evaluation: functional and strict accuracy on held-out pivots, and OOD probe accuracy.

::

    from pivot_envs.trainers.evaluate import evaluate

    report = evaluate("out/sft", "bundled:tool_use:test", k=4, seed=0)
    report["domains"]["tool_use"]["greedy"]["functional"]    # greedy accuracy, domain verifier
    report["overall"]["sampled"]["strict"]                   # mean@k at temperature 1, exact match
    report["probes"]["accuracy"]                             # OOD probes, greedy exact match

What is measured, per domain of the pivots and over all of them:

* ``greedy``: one greedy completion per pivot (the ``hf`` agent with temperature 0),
  scored by the functional verifier (``verifier``, default: each domain's default
  verifier, as the env's ``step()``) and by the ``strict`` verifier;
* ``sampled`` (when ``k >= 1`` and ``temperature > 0``): ``k`` completions per pivot at
  ``temperature``; ``functional``/``strict`` are the mean reward over all of them
  (mean@k), ``pass_at_k`` the share of pivots where at least one sample passed;
* ``probes``: greedy exact match (:func:`~pivot_envs.envs_data.probes.score_probe`) on
  the fixed OOD probe set (:func:`~pivot_envs.envs_data.probes.probe_eval_set`): the
  forgetting measure;
* ``episodes`` (with ``episodes=``): task success of whole episodes played greedily in each
  domain's world (:class:`pivot_envs.episodes.EpisodeEnv`, scripted user by default), beside
  the per-turn accuracy: ``domains[d]["episodes"]`` and ``overall["episodes"]`` =
  ``{"episodes", "success", "errors", "truncated", "turns_mean", "tool_calls_mean"}``.

Accuracies are means over *scored* samples: a verifier infrastructure error
(``VerifyResult.error``) is kept out of them and counted in ``errors``. Prompts are
the ``hf`` agent's (:mod:`pivot_envs.agents.prompting`), as in training.
Deterministic under ``seed``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.agents.hf import HFAgent
from pivot_envs.envs_data.probes import probe_eval_set, score_probe
from pivot_envs.episodes import (EpisodeEnv, bundled_domain, episode_starts, repeated, resolve_tasks, run_episodes,
                                    summarize_rows)
from pivot_envs.pipeline.profile import Scorer
from pivot_envs.sources import resolve_pivots
from pivot_envs.trainers.sft import default_prompt_tokens
from pivot_envs.types import Pivot

ProgressCallback = Callable[[str, int, int], None]
"""``progress(phase, done, total)`` with ``phase`` in ``greedy``, ``sampled``, ``probes``, ``episodes``."""

PROBE_MAX_NEW_TOKENS = 16
"""Longest probe answer generated (answers are a few characters)."""


@dataclass
class EvalSettings:
    """Generation settings of :func:`evaluate` (recorded in the report).

    Attributes:
        k: samples per pivot for mean@k (``0``: greedy only).
        temperature: sampling temperature of the mean@k samples.
        seed: sampling seed.
        max_new_tokens: longest action generated.
        max_prompt_tokens: prompt window (task + latest tokens, see agents.prompting); ``None`` in a call: the window SFT trains on
            by default (:func:`pivot_envs.trainers.sft.default_prompt_tokens`); the report records the
            window used.
        batch_size: pivots per ``generate`` call.
        tools: where tool specs go in the prompt (the ``hf`` agent's ``tools``).
    """

    k: int = 1
    temperature: float = 1.0
    seed: int = 0
    max_new_tokens: int = 256
    max_prompt_tokens: int | None = None
    batch_size: int = 16
    tools: str | None = None


def evaluate(
    model: str | Path | Any,
    pivots: str | Path | Sequence[Pivot],
    *,
    k: int = 1,
    temperature: float = 1.0,
    verifier: Any = None,
    probes: bool | Sequence[Any] = True,
    seed: int = 0,
    tokenizer: Any = None,
    max_new_tokens: int = 256,
    max_prompt_tokens: int | None = None,
    batch_size: int = 16,
    tools: str | None = None,
    num_threads: int | None = 1,
    device: str = "auto",
    details: bool = False,
    progress: ProgressCallback | None = None,
    episodes: Any = False,
    episode_max_turns: int = 20,
    episode_user: Any = "scripted",
    episode_limit: int | None = None,
    episode_k: int = 0,
    episode_temperature: float = 1.0,
) -> dict[str, Any]:
    """Evaluate a model on held-out pivots (and the OOD probes); returns the report dict.

    Args:
        model: a model folder (or hub id), or a loaded causal LM (then pass ``tokenizer``).
        pivots: held-out pivots: a pivot file, ``bundled:DOMAIN[:SPLIT]``, or a list.
        k: samples per pivot at ``temperature`` for mean@k (``0``: greedy only).
        temperature: temperature of those samples.
        verifier: the functional verifier (name, config or object); ``None``: each pivot's
            domain default (as the env).
        probes: ``True``: the fixed probe set; ``False``: none; or a list of
            :class:`~pivot_envs.envs_data.probes.ProbeItem`.
        seed: sampling seed.
        tokenizer: the tokenizer of a loaded model.
        max_new_tokens: longest generated action.
        max_prompt_tokens: prompt window (task + latest tokens, see agents.prompting); ``None``: the window recorded
            in the model folder (agents.prompt_format), else the window SFT trains on by default (the model's
            positions or the tokenizer's ``model_max_length``, minus 256), whatever ``max_new_tokens`` is.
        batch_size: pivots per ``generate`` call.
        tools: where tool specs go in the prompt (as the ``hf`` agent; ``None``: the model folder's recorded
            format, else ``auto``).
        num_threads: torch CPU threads while generating (``None``: unchanged).
        device: for a model folder: ``auto``, ``cpu``, ``cuda``...
        details: add ``per_pivot`` (texts and rewards of every pivot) and ``probe_rows``.
        progress: ``progress(phase, done, total)`` after every batch.
        episodes: also play whole tasks and report task success: ``True`` (the tasks of a
            ``bundled:DOMAIN[:SPLIT]`` ``pivots`` source), a task source (a trajectory file or
            ``bundled:DOMAIN:SPLIT``), or ``{domain: task source}``; ``False``: none.
        episode_max_turns: assistant turns before an episode is truncated.
        episode_user: the user simulator of the episodes (``scripted``, ``none``, ``openai:MODEL@URL``).
        episode_limit: play only the first N tasks of each domain.
        episode_k: also play every task ``episode_k`` more times at ``episode_temperature``:
            ``domains[d]["episodes_sampled"]`` / ``overall["episodes_sampled"]``, whose ``success`` is
            pass@1 as the mean over the k samples (``episode_rows_sampled`` with ``details``).
        episode_temperature: sampling temperature of those episodes.

    Returns:
        ``{"model", "settings", "pivots", "domains": {domain: summary}, "overall": summary,
        "probes": {...} | None, "seconds"}``, where a summary is ``{"pivots", "greedy":
        {"functional", "strict", "scored", "errors"}, "sampled": {"functional", "strict",
        "pass_at_k", "samples", "scored", "errors"} | None, "episodes": {...} | None}``.
    """
    if k < 0 or episode_k < 0:
        raise ValueError(f"k and episode_k must be >= 0, got {k} and {episode_k}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    began = time.perf_counter()
    episode_tasks = episode_sources(episodes, pivots) if episodes is not False else None
    settings = EvalSettings(k=k, temperature=temperature, seed=seed, max_new_tokens=max_new_tokens,
                            max_prompt_tokens=max_prompt_tokens, batch_size=batch_size, tools=tools)
    pivot_list = resolve_pivots(pivots)
    common: dict[str, Any] = dict(max_prompt_tokens=max_prompt_tokens, batch_size=batch_size, tools=tools,
                                  logprobs="none", num_threads=num_threads)
    if isinstance(model, (str, Path)):
        greedy_agent = HFAgent(model, device=device, temperature=0.0, max_new_tokens=max_new_tokens, **common)
        name = str(model)
    else:
        if tokenizer is None:
            raise ValueError("evaluate: pass tokenizer= together with a loaded model")
        greedy_agent = HFAgent(model, tokenizer, temperature=0.0, max_new_tokens=max_new_tokens, **common)
        name = greedy_agent.model_path or type(model).__name__
    # the agent resolved both: explicit, else the model folder's recorded format (agents.prompt_format)
    common["tools"] = settings.tools = greedy_agent.settings.tools
    max_prompt_tokens = greedy_agent.settings.max_prompt_tokens
    common["max_prompt_tokens"] = settings.max_prompt_tokens = max_prompt_tokens
    if max_prompt_tokens is None:  # the training window, not the agent's (which depends on max_new_tokens)
        window = default_prompt_tokens(greedy_agent.model, greedy_agent.tokenizer)
        greedy_agent.prompt_config.max_prompt_tokens = window
        common["max_prompt_tokens"] = settings.max_prompt_tokens = window

    def live(**overrides: Any) -> HFAgent:
        """Another agent on the same loaded weights."""
        opts = {**common, "max_new_tokens": max_new_tokens, **overrides}
        return HFAgent(greedy_agent.model, greedy_agent.tokenizer, **opts)

    try:
        report = _evaluate(greedy_agent, live, name, settings, pivot_list, verifier, probes, progress, details, began)
        if episode_tasks is not None:
            evaluate_episodes(report, greedy_agent, episode_tasks, max_turns=episode_max_turns, user=episode_user,
                              limit=episode_limit, seed=seed, batch_size=batch_size, progress=progress, details=details)
            if episode_k > 0:
                evaluate_episodes(report, live(temperature=episode_temperature), episode_tasks,
                                  max_turns=episode_max_turns, user=episode_user, limit=episode_limit, seed=seed,
                                  batch_size=batch_size, progress=progress, details=details, repeats=episode_k,
                                  key="episodes_sampled")
            report["seconds"] = round(time.perf_counter() - began, 3)
        return report
    finally:
        if isinstance(model, (str, Path)):
            greedy_agent.close()  # the weights this call loaded


def evaluate_agents(greedy_agent: Any, live: Callable[..., Any], pivots: str | Path | Sequence[Pivot], *, name: str,
                    k: int = 1, temperature: float = 1.0, verifier: Any = None, probes: bool | Sequence[Any] = True,
                    seed: int = 0, max_new_tokens: int = 256, max_prompt_tokens: int | None = None,
                    batch_size: int = 16, tools: str = "auto", details: bool = False,
                    progress: ProgressCallback | None = None) -> dict[str, Any]:
    """:func:`evaluate` with agents built by the caller (any engine: ``vllm`` as well as ``hf``): ``greedy_agent``
    samples greedily, ``live(temperature=..., max_new_tokens=...)`` returns an agent on the same weights for the
    mean@k samples and the probes. The agents' own settings (prompt window, tools) are the ones used; the
    keyword arguments here are recorded in the report's settings. Returns the same report as :func:`evaluate`."""
    if k < 0 or temperature < 0:
        raise ValueError(f"k and temperature must be >= 0, got {k} and {temperature}")
    settings = EvalSettings(k=k, temperature=temperature, seed=seed, max_new_tokens=max_new_tokens,
                            max_prompt_tokens=max_prompt_tokens, batch_size=batch_size, tools=tools)
    return _evaluate(greedy_agent, live, name, settings, resolve_pivots(pivots), verifier, probes, progress, details,
                     time.perf_counter())


def _evaluate(greedy_agent: Any, live: Callable[..., Any], name: str, settings: EvalSettings,
              pivot_list: list[Pivot], verifier: Any, probes: Any, progress: ProgressCallback | None,
              details: bool, began: float) -> dict[str, Any]:
    """The body of :func:`evaluate` once the agents are set up."""
    k, temperature, seed, batch_size = settings.k, settings.temperature, settings.seed, settings.batch_size
    scorer = Scorer(verifier)
    greedy = _sample(greedy_agent, pivot_list, 1, seed, batch_size, "greedy", progress)
    sampled = None
    if k >= 1 and temperature > 0:
        sampled = _sample(live(temperature=temperature), pivot_list, k, seed, batch_size, "sampled", progress)
    greedy_scores = _score(scorer, pivot_list, greedy)
    sampled_scores = _score(scorer, pivot_list, sampled) if sampled is not None else None

    domains: dict[str, dict[str, Any]] = {}
    for domain in sorted({p.domain for p in pivot_list}):
        idx = [i for i, p in enumerate(pivot_list) if p.domain == domain]
        domains[domain] = _summary(idx, greedy_scores, sampled_scores, k)
    report: dict[str, Any] = {
        "model": name,
        "settings": asdict(settings),
        "verifier": None if scorer.verifier is None else scorer.verifier.config(),
        "pivots": len(pivot_list),
        "domains": domains,
        "overall": _summary(list(range(len(pivot_list))), greedy_scores, sampled_scores, k),
        "probes": None,
    }
    if details:
        report["per_pivot"] = [
            {"id": p.id, "domain": p.domain, "greedy_text": greedy[i][0].text,
             "greedy_functional": greedy_scores[i].functional[0], "greedy_strict": greedy_scores[i].strict[0],
             "sampled_functional": None if sampled_scores is None else sampled_scores[i].functional,
             "sampled_strict": None if sampled_scores is None else sampled_scores[i].strict}
            for i, p in enumerate(pivot_list)
        ]
    if probes is not False:
        items = probe_eval_set() if probes is True else list(probes)
        report["probes"] = evaluate_probes(live(temperature=0.0, max_new_tokens=PROBE_MAX_NEW_TOKENS), items,
                                           seed=seed, batch_size=batch_size, progress=progress, details=details)
    report["seconds"] = round(time.perf_counter() - began, 3)
    return report


def evaluate_probes(agent: Any, items: Sequence[Any], *, seed: int = 0, batch_size: int = 16,
                    progress: ProgressCallback | None = None, details: bool = False) -> dict[str, Any]:
    """Greedy exact-match accuracy of ``agent`` on probe items, overall and per kind."""
    pivots = [item.to_pivot() for item in items]
    groups = _sample(agent, pivots, 1, seed, batch_size, "probes", progress)
    hits = [score_probe(g[0].text, item.answer) for g, item in zip(groups, items)]
    by_kind: dict[str, list[bool]] = {}
    for item, hit in zip(items, hits):
        by_kind.setdefault(item.kind, []).append(hit)
    out: dict[str, Any] = {
        "n": len(items),
        "accuracy": _mean([float(h) for h in hits]),
        "by_kind": {kind: _mean([float(h) for h in v]) for kind, v in sorted(by_kind.items())},
    }
    if details:
        out["rows"] = [{"id": item.id, "kind": item.kind, "question": item.question, "answer": item.answer,
                        "prediction": g[0].text, "correct": hit} for item, g, hit in zip(items, groups, hits)]
    return out


def episode_sources(episodes: Any, pivots: Any) -> dict[str, Any]:
    """``{domain: task source}`` of the ``episodes`` argument of :func:`evaluate` (see there)."""
    if isinstance(episodes, dict):
        return dict(episodes)
    if episodes is True:
        domain = bundled_domain(str(pivots)) if isinstance(pivots, (str, Path)) else None
        if domain is None:
            raise ValueError("episodes=True plays the tasks of bundled:DOMAIN[:SPLIT] pivots; for other pivots "
                             "name the tasks (a trajectory file or bundled:DOMAIN:SPLIT)")
        rest = str(pivots)[len("bundled:"):].partition(":")[2]
        return {domain: f"bundled:{domain}:{rest or 'test'}"}
    if isinstance(episodes, (str, Path)):
        domain = bundled_domain(str(episodes))
        if domain is None:
            of_pivots = bundled_domain(str(pivots)) if isinstance(pivots, (str, Path)) else None
            if of_pivots:
                domain = of_pivots
            else:
                domains = sorted({p.domain for p in resolve_pivots(pivots)})
                if len(domains) != 1:
                    raise ValueError(f"episode tasks {episodes}: cannot tell their domain (the pivots have "
                                     f"{len(domains)}); give bundled:DOMAIN:SPLIT or {{domain: file}}")
                domain = domains[0]
        return {domain: str(episodes)}
    raise ValueError(f"episodes must be True, a task source or {{domain: source}}, got {episodes!r}")


def evaluate_episodes(report: dict[str, Any], agent: Any, sources: dict[str, Any], *, max_turns: int = 20,
                      user: Any = "scripted", limit: int | None = None, seed: int = 0, batch_size: int = 16,
                      progress: ProgressCallback | None = None, details: bool = False, repeats: int = 1,
                      key: str = "episodes") -> dict[str, Any]:
    """Play every task of ``sources`` (``{domain: task source}``) ``repeats`` times with ``agent`` and add
    task success to ``report`` (``domains[d][key]``, ``overall[key]``; the rows as ``episode_rows`` or
    ``{key}``-named rows with ``details``); returns the report."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    rows: list[dict[str, Any]] = []
    plans = []
    for domain, source in sources.items():
        tasks = resolve_tasks(source, domain=domain)
        if limit is not None:
            tasks = tasks[:limit]
        if not tasks:
            raise ValueError(f"episode tasks {source}: no tasks")
        plans.append((domain, tasks))
    total = sum(len(t) for _, t in plans) * repeats
    if progress is not None:
        progress(key, 0, total)
    for domain, tasks in plans:
        def make_env(domain: str = domain, tasks: list[Any] = tasks) -> EpisodeEnv:
            # task success only: per-turn rewards would run the domain's verifier (a sandbox) at every step
            return EpisodeEnv(tasks=tasks, domain=domain, user=user, max_turns=max_turns, score_turns=False)

        def on_done(row: dict[str, Any]) -> None:
            rows.append(row)
            if progress is not None:
                progress(key, len(rows), total)

        probe = make_env()
        starts = episode_starts(probe)
        probe.close()
        run_episodes(make_env, repeated(starts, repeats), agent, batch_size=batch_size, seed=seed, on_done=on_done)
    summary = summarize_rows(rows)
    for domain, block in summary["domains"].items():
        entry = report["domains"].setdefault(domain, {"pivots": 0, "greedy": None, "sampled": None})
        entry[key] = {**block, "repeats": repeats}
    report["overall"][key] = {**summary["overall"], "repeats": repeats}
    report["settings"][key] = {"tasks": {d: str(s) for d, s in sources.items()}, "max_turns": max_turns,
                               "user": user if isinstance(user, str) else str(user), "limit": limit,
                               "repeats": repeats}
    if details:
        report["episode_rows" if key == "episodes" else f"{key}_rows"] = rows
    return report


# --------------------------------------------------------------------------- internals

@dataclass
class PivotScores:
    """Verdicts on the samples at one pivot; ``None`` where that verifier errored.

    Attributes:
        functional: functional rewards.
        passed: functional ``passed`` flags.
        strict: strict rewards.
    """

    functional: list[float | None]
    passed: list[bool | None]
    strict: list[float | None]


def _sample(agent: Any, pivots: Sequence[Pivot], n: int, seed: int, batch_size: int, phase: str,
            progress: ProgressCallback | None) -> list[list[Any]]:
    """``agent.sample`` over ``batch_size`` chunks (the hf agent batches the same way), reporting progress."""
    out: list[list[Any]] = []
    if progress is not None:
        progress(phase, 0, len(pivots))
    for start in range(0, len(pivots), batch_size):
        out.extend(agent.sample(list(pivots[start : start + batch_size]), n, seed=seed))
        if progress is not None:
            progress(phase, len(out), len(pivots))
    return out


def _score(scorer: Any, pivots: Sequence[Pivot], groups: list[list[Any]]) -> list[PivotScores]:
    """Functional (per-domain verifier, one ``verify_many`` per verifier) and strict verdicts of every sample."""
    actions = [c.action for g in groups for c in g]
    owners = [p for p, g in zip(pivots, groups) for _ in g]
    functional, strict = scorer.score(actions, owners)
    out: list[PivotScores] = []
    pos = 0
    for g in groups:
        f, s = functional[pos : pos + len(g)], strict[pos : pos + len(g)]
        out.append(PivotScores(functional=[None if r.error else float(r.reward) for r in f],
                               passed=[None if r.error else bool(r.passed) for r in f],
                               strict=[None if r.error else float(r.reward) for r in s]))
        pos += len(g)
    return out


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def _summary(idx: list[int], greedy: list[PivotScores], sampled: list[PivotScores] | None, k: int) -> dict[str, Any]:
    """Accuracies over the pivots ``idx`` (means over scored samples; errors counted apart)."""

    def block(scores: list[PivotScores]) -> dict[str, Any]:
        f = [r for i in idx for r in scores[i].functional]
        s = [r for i in idx for r in scores[i].strict]
        f_ok = [r for r in f if r is not None]
        s_ok = [r for r in s if r is not None]
        return {"functional": _mean(f_ok), "strict": _mean(s_ok), "scored": len(f_ok),
                "errors": (len(f) - len(f_ok)) + (len(s) - len(s_ok))}

    out: dict[str, Any] = {"pivots": len(idx), "greedy": block(greedy), "sampled": None, "episodes": None}
    if sampled is not None:
        sampled_block = block(sampled)
        sampled_block["samples"] = k
        sampled_block["pass_at_k"] = _mean([float(any(p is True for p in sampled[i].passed)) for i in idx])
        out["sampled"] = sampled_block
    return out
