"""Episodes: whole tasks played in their world, scored by task success.

One module per concept:

* :mod:`~pivot_envs.episodes.env`: :class:`EpisodeEnv`, the gymnasium env (ids ``pivot/<Domain>-Episode-v0``
  and ``pivot/Episode-v0``); its module docstring is the env's contract;
* :mod:`~pivot_envs.episodes.tasks`: task resolution (:func:`resolve_tasks`, :func:`world_task`) and the
  expert-outcome cache (:class:`ExpertOutcomes`, bounded);
* :mod:`~pivot_envs.episodes.policy`: :class:`SuccessPolicy`, how a finished episode is judged (the env's
  ``success_policy=``, built from the domain's success rules);
* :mod:`~pivot_envs.episodes.turns`: the per-turn rewards on the expert's path (:class:`TurnScorer`);
* :mod:`~pivot_envs.episodes.runner`: batched play (:func:`run_episodes`, ``pivot-envs play``).

The package re-exports their public names.
"""

from pivot_envs.episodes.env import (DEFAULT_MAX_TURNS, MAX_ACTION_CHARS, MAX_MESSAGES_CHARS, EpisodeEnv,
                                     episode_spaces)
from pivot_envs.episodes.policy import SuccessPolicy
from pivot_envs.episodes.runner import EpisodeStart, episode_starts, repeated, run_episodes, summarize_rows
from pivot_envs.episodes.tasks import (BUNDLED, GENERIC_WORLD_KEYS, ExpertOutcome, ExpertOutcomes, TaskSource,
                                       bundled_domain, expert_outcome, resolve_tasks, shared_expert_outcomes,
                                       world_task)
from pivot_envs.episodes.turns import DOMAINLESS_VERIFIER, TurnScorer, expert_pivot, same_observations

__all__ = [
    "BUNDLED", "DEFAULT_MAX_TURNS", "DOMAINLESS_VERIFIER", "GENERIC_WORLD_KEYS", "MAX_ACTION_CHARS",
    "MAX_MESSAGES_CHARS", "EpisodeEnv", "EpisodeStart", "ExpertOutcome", "ExpertOutcomes", "SuccessPolicy",
    "TaskSource", "TurnScorer", "bundled_domain", "episode_spaces", "episode_starts", "expert_outcome",
    "expert_pivot", "repeated", "resolve_tasks", "run_episodes", "same_observations", "shared_expert_outcomes",
    "summarize_rows", "world_task",
]
