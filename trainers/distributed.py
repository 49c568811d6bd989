"""Multi-process helpers (torch DDP), launched by ``torchrun`` or ``accelerate launch``.

Both launchers set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``; :func:`init_distributed` reads them and starts the process
group (``nccl`` on CUDA, ``gloo`` on CPU). Without them (a plain ``python``
run) everything here is a no-op for a world of one::

    torchrun --nproc_per_node 2 -m pivot_envs.cli train --config rl.json

In the trainer each process samples its own pivots, gradients are averaged by
DDP in the backward pass, and every process ends each update with the same
weights. Rank 0 alone writes metrics, checkpoints and the final model.

The CUDA/NCCL path follows the torch documentation but was not run here (the
project's machine has no GPU); the CPU/gloo path is tested with two processes.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
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
        return model.no_sync()  # type: ignore[operator]
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
