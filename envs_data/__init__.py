"""Bundled data: expert trajectories of the four built-in domains, made by the generators here.

Files: ``<domain>/train.jsonl.gz`` and ``<domain>/test.jsonl.gz`` (trajectories in
OpenAI chat format, one per line), ``<domain>/tools.json`` (the domain's tool specs),
``search/corpus.jsonl.gz`` (the search domain's documents), and ``manifest.json``
(counts, sizes, generator seed). Rebuild them with ``pivot-envs data build``.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from pivot_envs.jsonl import read_rows
from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots
from pivot_envs.types import Pivot, Trajectory

DATA_DIR = Path(__file__).resolve().parent
SPLITS = ("train", "test")
GENERATORS = {
    "tool_use": "pivot_envs.envs_data.generators.tool_use",
    "terminal": "pivot_envs.envs_data.generators.terminal",
    "swe": "pivot_envs.envs_data.generators.swe",
    "search": "pivot_envs.envs_data.generators.search",
}


def generator(domain: str) -> ModuleType:
    """The generator module of a built-in domain (it has ``generate(n, seed)``)."""
    if domain not in GENERATORS:
        raise ValueError(f"no data generator for domain {domain!r}; built-in generators: {', '.join(GENERATORS)}")
    return importlib.import_module(GENERATORS[domain])


def bundled_file(domain: str, split: str) -> Path:
    """Path of a bundled split; raises FileNotFoundError with the fix when it is missing."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    path = DATA_DIR / domain / f"{split}.jsonl.gz"
    if not path.exists():
        raise FileNotFoundError(f"bundled data {path} is missing; rebuild it with `pivot-envs data build`")
    return path


def load_trajectories(domain: str, split: str = "train") -> list[Trajectory]:
    """The bundled expert trajectories of ``domain`` for ``split``."""
    return read_rows(bundled_file(domain, split), Trajectory.from_dict)


@lru_cache(maxsize=16)
def _bundled_pivots(domain: str, split: str) -> tuple[Pivot, ...]:
    pivots, _ = extract_pivots(load_trajectories(domain, split), domain, ExtractOptions(min_reward=1.0))
    return tuple(pivots)


def load_pivots(domain: str, split: str = "train") -> list[Pivot]:
    """Pivot candidates of the bundled successful trajectories (extraction with the domain's defaults).

    The Pivot objects are shared between callers in one process: treat them as read-only.
    """
    return list(_bundled_pivots(domain, split))
