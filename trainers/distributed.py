"""Multi-process helpers (torch DDP or FSDP2), launched by ``torchrun``.

``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``; :func:`init_distributed` reads them and starts the process
group (``nccl`` on CUDA, ``gloo`` on CPU). Without them (a plain ``python``
run) everything here is a no-op for a world of one::

    torchrun --nproc_per_node 2 -m pivot_envs.cli train --config rl.json

In the trainers (PivotRL and SFT) each process trains on its own share of a step's pivots, gradients are
averaged in the backward pass (DDP, or FSDP2 with ``sharding: fsdp``, :mod:`.sharding`), and every process ends
each update with the same weights. Rank 0 alone writes metrics and the final model; every rank writes its part of
each checkpoint, so the output folder must be shared: :func:`check_shared_dir` refuses a run whose ranks do not
see one folder, at its start. A checkpoint resumes only under the world size that wrote it
(:func:`check_world_size`).

The CUDA/NCCL path follows the torch documentation but was not run here (the
project's machine has no GPU); the CPU/gloo path is tested with two processes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    """Where this process stands in the job.

    Attributes:
        rank: global rank (0 for a single process).
        world_size: number of processes.
        local_rank: rank on this machine (selects the GPU).
        initialized_here: whether :func:`init_distributed` started the process group (and so
            :func:`shutdown` ends it).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(device_type: str) -> DistInfo:
    """Join the process group described by the launcher's environment variables (if any)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    created = False
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":  # not run here (no GPU): one GPU per process, as torchrun expects
            torch.cuda.set_device(local)
        dist.init_process_group(backend=backend)
        created = True
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local, initialized_here=created)


def shutdown(info: DistInfo) -> None:
    """End the process group if :func:`init_distributed` started it."""
    if info.initialized_here and dist.is_initialized():
        dist.destroy_process_group()


def select_device(requested: str, info: DistInfo) -> torch.device:
    """``auto`` -> ``cuda:LOCAL_RANK`` when CUDA is available, else CPU; ``cuda`` -> ``cuda:LOCAL_RANK``."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device='cuda' but torch sees no CUDA device; use device='cpu' or 'auto'")
        return torch.device("cuda", info.local_rank)
    return torch.device(requested)


def wrap_ddp(model: torch.nn.Module, info: DistInfo, device: torch.device) -> torch.nn.Module:
    """``DistributedDataParallel(model)`` in a multi-process job, else ``model`` itself."""
    if not info.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside a DDP wrapper (or the model itself)."""
    return getattr(model, "module", model) if _is_ddp(model) else model


def no_sync(model: torch.nn.Module, skip: bool) -> contextlib.AbstractContextManager:
    """DDP's ``no_sync()`` (accumulate gradients locally) when ``skip`` is true, else a no-op."""
    if skip and _is_ddp(model):
        return model.no_sync()
    return contextlib.nullcontext()


def reduce_sums(values: dict[str, float], info: DistInfo) -> dict[str, float]:
    """Sum every value over all processes (float64, same keys on every rank)."""
    if not info.enabled:
        return dict(values)
    keys = sorted(values)
    tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
    if dist.get_backend() == "nccl":  # not run here: NCCL reduces CUDA tensors only
        tensor = tensor.cuda()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return dict(zip(keys, tensor.cpu().tolist()))


def gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    """Every process's ``obj`` (picklable), in rank order, on every process."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


SHARED_TOKEN = ".pivot-envs-shared-check"
"""The file rank 0 writes into the output folder at the start of a multi-process run (removed after the check)."""


class OutputNotShared(ValueError):
    """The output folder is not one folder that every process of the run sees (a setting to fix: a ``ValueError``,
    which the CLI prints as a one-line error)."""


def check_shared_dir(output_dir: str | Path, info: DistInfo) -> None:
    """Refuse a multi-process run whose ``output_dir`` is not shared by every rank (collective; a no-op in one
    process). Rank 0 writes a token file with a random value, then, after a barrier, every rank reads it back; a
    rank that cannot (a node-local folder) fails the run on every rank at once, before anything is trained,
    instead of crashing at the first checkpoint. Also catches two runs under one folder."""
    if not info.enabled:
        return
    root = Path(output_dir)
    token_file = root / SHARED_TOKEN
    token = [secrets.token_hex(16) if info.is_main else None]
    dist.broadcast_object_list(token, src=0)
    written = ""
    if info.is_main:
        try:
            root.mkdir(parents=True, exist_ok=True)
            assert token[0] is not None  # rank 0 drew it
            token_file.write_text(token[0], encoding="utf-8")
        except OSError as exc:
            written = f"rank 0 cannot write {token_file}: {exc}"
    dist.barrier()
    try:
        seen = token_file.read_text(encoding="utf-8").strip()
        problem = written or ("" if seen == token[0] else f"reads another run's token in {token_file}")
    except OSError as exc:
        problem = written or f"cannot read {token_file} ({type(exc).__name__})"
    reports = gather_objects((info.rank, socket.gethostname(), problem), info)
    dist.barrier()
    if info.is_main:
        token_file.unlink(missing_ok=True)
    bad = [(rank, host, why) for rank, host, why in reports if why]
    if bad:
        where = "; ".join(f"rank {rank} on {host}: {why}" for rank, host, why in bad)
        raise OutputNotShared(
            f"output_dir {str(root)!r} is not one folder shared by all {info.world_size} processes ({where}). Rank 0 "
            "writes metrics and the model there, and every rank writes its part of each checkpoint: put output_dir "
            "on a file system every node mounts at the same path (NFS, Lustre, a cloud file share), or run all "
            "processes on one machine; and never start two runs in one output_dir")


def check_world_size(saved: int | None, info: DistInfo, where: str) -> None:
    """Refuse to resume a checkpoint written by another number of processes (``saved``: ``None`` for checkpoints
    written before the world size was recorded, which were single-process unless they hold several RNG files)."""
    if saved is not None and int(saved) != info.world_size:
        raise ValueError(
            f"{where} was written by {saved} process(es) and this run has {info.world_size}: a resumed run must keep "
            f"the world size (each rank's data share, RNG state and, with sharding, optimiser shard follow from it). "
            f"Resume with --nproc_per_node x --nnodes = {saved}, or start afresh (another output_dir, or "
            "overwrite_output_dir=true without resume_from)")


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Use ``n`` torch CPU threads inside the block (``None``: unchanged)."""
    previous = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _is_ddp(model: Any) -> bool:
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(model, DistributedDataParallel)
