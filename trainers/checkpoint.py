"""Checkpoints for exact resumption of a PivotRL run.

Layout of ``OUTPUT_DIR/checkpoint-000040/`` (the number: steps completed)::

    model/               save_pretrained of the policy (with LoRA: the adapter only) + tokenizer
    trainer_state.pt     optimizer, scheduler, pivot-sampler position, PVPO values, step, config
    rng_rank{R}.pt       python / numpy / torch (CPU and CUDA) RNG states of process R
    trainer_state.json   the step, the config and the step's metrics, for people

A checkpoint is written into ``checkpoint-000040.tmp`` and renamed when
complete, so a run killed while saving leaves the previous checkpoint as the
latest one. Files are read with ``torch.load(weights_only=True)`` (plain
tensors and Python values only). With several processes every rank writes its
RNG file into the same folder: the output folder must be shared (one machine,
or a shared file system; a run checks this at its start,
:func:`~pivot_envs.trainers.distributed.check_shared_dir`). Under FSDP the model and
the optimiser state are gathered whole to rank 0 first (:mod:`.sharding`).
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pivot_envs.agents.prompt_format import write_prompt_format
from pivot_envs.trainers.distributed import DistInfo, barrier

PREFIX = "checkpoint-"
_PATTERN = re.compile(rf"^{PREFIX}(\d+)$")


def checkpoint_path(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / f"{PREFIX}{step:06d}"


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints of ``output_dir``, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _PATTERN.match(p.name)
        if m and p.is_dir() and (p / "trainer_state.pt").exists():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def resolve_checkpoint(resume_from: str, output_dir: str | Path) -> Path:
    """``"latest"`` -> the newest checkpoint of ``output_dir``; a path -> that checkpoint (checked)."""
    if resume_from == "latest":
        found = list_checkpoints(output_dir)
        if not found:
            raise FileNotFoundError(f"resume_from='latest' but {output_dir} holds no complete {PREFIX}NNNNNN folder; "
                                    "start without resume_from")
        return found[-1]
    path = Path(resume_from)
    if not (path / "trainer_state.pt").exists():
        raise FileNotFoundError(f"resume_from={resume_from!r}: {path / 'trainer_state.pt'} is missing "
                                f"(pass a {PREFIX}NNNNNN folder or 'latest')")
    return path


def rng_state() -> dict[str, Any]:
    """The RNG states of python, numpy and torch (CPU, and every CUDA device when present)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():  # not run here (no GPU)
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():  # not run here (no GPU)
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    path: str | Path,
    *,
    model: Any,
    tokenizer: Any,
    state: dict[str, Any],
    info: DistInfo,
    summary: dict[str, Any] | None = None,
    prompt_format: dict[str, Any] | None = None,
    weights: dict[str, Any] | None = None,
    write_shards: Any = None,
) -> Path:
    """Write a checkpoint (collective: every rank must call it); returns its folder. ``prompt_format``
    (``{"tools": ..., "max_prompt_tokens": ...}``) is recorded beside the model (agents.prompt_format).
    ``weights``: the model's whole state dict, gathered beforehand from a sharded model (FSDP), saved with the
    model's ``save_pretrained`` in place of its own tensors (a LoRA model keeps only its adapter's).
    ``write_shards(folder)``: called on every rank once the folder exists (a sharded optimiser state writes there)."""
    final = Path(path)
    tmp = final.with_name(final.name + ".tmp")
    if info.is_main:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        if weights is not None:
            model.save_pretrained(tmp / "model", state_dict=weights)
        else:
            model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        if prompt_format is not None:
            write_prompt_format(tmp / "model", **prompt_format)
        torch.save(state, tmp / "trainer_state.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(summary or {}, indent=1, default=str) + "\n", encoding="utf-8")
    barrier(info)
    if write_shards is not None:
        write_shards(tmp)
    torch.save(rng_state(), tmp / f"rng_rank{info.rank}.pt")
    barrier(info)
    if info.is_main:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    barrier(info)
    return final


def prune_checkpoints(output_dir: str | Path, keep: int | None) -> list[Path]:
    """Delete all but the newest ``keep`` checkpoints (``None``: keep all); returns the deleted folders."""
    if keep is None:
        return []
    found = list_checkpoints(output_dir)
    doomed = found[: max(0, len(found) - keep)]
    for p in doomed:
        shutil.rmtree(p)
    return doomed


def load_trainer_state(path: str | Path) -> dict[str, Any]:
    return torch.load(Path(path) / "trainer_state.pt", weights_only=True, map_location="cpu")


def load_rng_state(path: str | Path, rank: int) -> dict[str, Any] | None:
    """This rank's RNG states (``None`` when the checkpoint was written by fewer processes)."""
    file = Path(path) / f"rng_rank{rank}.pt"
    if not file.exists():
        return None
    return torch.load(file, weights_only=True, map_location="cpu")
