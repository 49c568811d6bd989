"""The episode API under its first name: everything lives in :mod:`pivot_envs.episodes` now.

``from pivot_envs.episode_env import EpisodeEnv, run_episodes, resolve_tasks, ...`` keeps working, and so
does the env ids' entry point ``pivot_envs.episode_env:EpisodeEnv``. The env's contract is the docstring of
:mod:`pivot_envs.episodes.env`.
"""

from pivot_envs.episodes import *  # noqa: F401,F403 (the public names, as pivot_envs.episodes.__all__ lists them)
from pivot_envs.episodes import __all__  # noqa: F401
