"""The built-in domains, one sub-package (folder) each, and their bundled data.

A folder ``<domain>/`` holds the whole domain: ``domain.py`` (its ``DOMAIN``: a
:class:`~pivot_envs.domains.Domain`, found by :func:`pivot_envs.builtin_domains.domain_modules`), ``world.py``,
``generator.py`` (``generate(n, seed)``) with the tool code the world runs, and its data:
``train.jsonl.gz`` and ``test.jsonl.gz`` (trajectories in OpenAI chat format, one per line),
``tools.json`` (the domain's tool specs), ``search/corpus.jsonl.gz`` (the search domain's documents).
``manifest.json`` here holds the counts, sizes and generator seed of every folder. Rebuild the data with
``pivot-envs data build``.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from pivot_envs.jsonl import read_rows
from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots
from pivot_envs.types import Pivot, Trajectory

DATA_DIR = Path(__file__).resolve().parent
SPLITS = ("train", "test")


def _generators() -> dict[str, str]:
    """Folder name -> generator module, for every sub-package here with a ``generator`` module."""
    found = {}
    for info in pkgutil.iter_modules(__path__, f"{__name__}."):
        if info.ispkg and importlib.util.find_spec(f"{info.name}.generator") is not None:
            found[info.name.rpartition(".")[2]] = f"{info.name}.generator"
    return found


GENERATORS = _generators()
"""The built-in data generators by domain (found by package discovery, sorted by name)."""


def generator(domain: str) -> ModuleType:
    """The generator module of a built-in domain (it has ``generate(n, seed)``)."""
    if domain not in GENERATORS:
        raise ValueError(f"no data generator for domain {domain!r}; built-in generators: {', '.join(GENERATORS)}")
    return importlib.import_module(GENERATORS[domain])


def bundled_file(domain: str, split: str, folder: Path | None = None) -> Path:
    """Path of a bundled split (in ``folder``, by default the domain's folder here); raises FileNotFoundError with
    the fix when it is missing."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    path = (DATA_DIR / domain if folder is None else folder) / f"{split}.jsonl.gz"
    if not path.exists():
        raise FileNotFoundError(f"bundled data {path} is missing; rebuild it with `pivot-envs data build`")
    return path


def load_trajectories(domain: str, split: str = "train", folder: Path | None = None) -> list[Trajectory]:
    """The bundled expert trajectories of ``domain`` for ``split`` (from ``folder``: :func:`bundled_file`)."""
    return read_rows(bundled_file(domain, split, folder), Trajectory.from_dict)


@lru_cache(maxsize=16)
def _bundled_pivots(domain: str, split: str, folder: Path | None) -> tuple[Pivot, ...]:
    pivots, _ = extract_pivots(load_trajectories(domain, split, folder), domain, ExtractOptions(min_reward=1.0))
    return tuple(pivots)


def load_pivots(domain: str, split: str = "train", folder: Path | None = None) -> list[Pivot]:
    """Pivot candidates of the bundled successful trajectories (extraction with the domain's defaults); the files
    are read from ``folder`` (a domain folder's own data), by default the domain's folder here.

    The Pivot objects are shared between callers in one process: treat them as read-only.
    """
    return list(_bundled_pivots(domain, split, folder))
