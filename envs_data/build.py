"""Regenerate the bundled data set (``pivot-envs data build``) deterministically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from pivot_envs.envs_data import DATA_DIR, GENERATORS, generator
from pivot_envs.jsonl import write_jsonl
from pivot_envs.types import Trajectory

DEFAULT_N = 300
TEST_EVERY = 5  # every 5th trajectory (index % 5 == 4) goes to the test split: 80/20


def split_trajectories(trajs: list[Trajectory]) -> dict[str, list[Trajectory]]:
    """Deterministic 80/20 split by position."""
    return {
        "train": [t for i, t in enumerate(trajs) if i % TEST_EVERY != TEST_EVERY - 1],
        "test": [t for i, t in enumerate(trajs) if i % TEST_EVERY == TEST_EVERY - 1],
    }


def tool_union(trajs: list[Trajectory]) -> list[dict[str, Any]]:
    """Every distinct tool spec used by ``trajs``, by name, in first-seen order."""
    tools: dict[str, dict[str, Any]] = {}
    for t in trajs:
        for tool in t.tools:
            tools.setdefault(tool.get("function", tool).get("name"), tool)
    return list(tools.values())


def build_domain(domain: str, n: int, seed: int, out_dir: Path) -> dict[str, Any]:
    """Generate ``n`` trajectories of ``domain`` and write its split files; returns manifest entries."""
    trajs = generator(domain).generate(n, seed)
    folder = out_dir / domain
    folder.mkdir(parents=True, exist_ok=True)
    entry: dict[str, Any] = {"n": n, "seed": seed, "splits": {}}
    for split, rows in split_trajectories(trajs).items():
        path = folder / f"{split}.jsonl.gz"
        write_jsonl(path, (t.to_dict() for t in rows))
        entry["splits"][split] = {
            "trajectories": len(rows),
            "successful": sum(1 for t in rows if (t.reward or 0) >= 1.0),
            "assistant_turns": sum(1 for t in rows for m in t.messages if m.get("role") == "assistant"),
            "bytes": path.stat().st_size,
        }
    (folder / "tools.json").write_text(json.dumps(tool_union(trajs), indent=1) + "\n", encoding="utf-8")
    extra = getattr(generator(domain), "write_corpus", None)
    if extra is not None:
        extra(folder / "corpus.jsonl.gz")
        entry["corpus_bytes"] = (folder / "corpus.jsonl.gz").stat().st_size
    return entry


def build_all(
    n: int = DEFAULT_N,
    seed: int = 0,
    domains: list[str] | None = None,
    out_dir: Path = DATA_DIR,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build every domain's bundled files and ``manifest.json``; returns the manifest."""
    manifest_path = out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for domain in domains or list(GENERATORS):
        if progress:
            progress(domain)
        manifest[domain] = build_domain(domain, n, seed, out_dir)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return manifest
