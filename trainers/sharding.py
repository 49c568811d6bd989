"""Sharding the policy over the processes of a run: ``sharding: none`` (DDP, every rank a full copy) or
``sharding: fsdp`` (torch's FSDP2: every rank holds about 1/W of the parameters, gradients and AdamW state).

::

    model = wrap_policy(model, dist, device, "fsdp", param_dtype=torch.bfloat16)   # fully_shard per decoder layer,
                                                                                  # then the whole model
    total, local = param_counts(model)          # rank 0's ``params_local`` goes into metrics.jsonl
    state = full_state_dict(model, dist)        # collective: the whole weights, on rank 0's CPU
    save_whole(model, folder, dist)             # collective: save_pretrained of the whole model, on rank 0

Under FSDP every forward is a collective (each layer's shards are all-gathered for it and freed after), so all
ranks must run the same number of forwards: ``transformers``' ``generate`` keeps stepping until every rank is
done (``synced_gpus``, which it switches on for a module marked FSDP-managed, as :func:`wrap_policy` marks it),
and the trainers join every micro-batch with an empty forward where a rank has nothing to train on.

Checkpoints hold the model whole (gathered to rank 0, which saves it) and, under FSDP, the AdamW state as each
rank's shard (``torch.distributed.checkpoint``: no rank ever holds the whole optimiser state). Not run here: NCCL
and GPUs (the project's machine has none); the gloo/CPU path is tested with two processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pivot_envs.config import ConfigError
from pivot_envs.trainers.distributed import DistInfo, barrier, unwrap, wrap_ddp

SHARDINGS = ("none", "fsdp")


def is_sharded(model: Any) -> bool:
    """Whether ``model`` was sharded by FSDP2's ``fully_shard``."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        return False
    return isinstance(model, FSDPModule) or isinstance(_base(model), FSDPModule)


def _base(model: Any) -> Any:
    """The transformers model: itself, or the base of a LoRA (peft) model, whose own module calls it."""
    model = unwrap(model)
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The model's repeated blocks: modules whose class is in ``_no_split_modules`` (transformers' list of the
    blocks that must stay whole, e.g. ``LlamaDecoderLayer``); a LoRA model is searched through its base."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or ())
    layers = [m for m in base.modules() if type(m).__name__ in names]
    if not layers:
        raise ConfigError(f"sharding='fsdp': {type(base).__name__} names no decoder layer class (_no_split_modules is "
                          f"{sorted(names) or 'empty'}), so there is nothing to shard a layer at a time; use "
                          "sharding='none' (DDP) for this model")
    return layers


def wrap_policy(model: Any, dist: DistInfo, device: torch.device, sharding: str,
                param_dtype: torch.dtype | None = None) -> Any:
    """The model ready for a run of ``dist.world_size`` processes: itself in one process, DDP with
    ``sharding='none'``, FSDP2 with ``sharding='fsdp'`` (``param_dtype``: the dtype FSDP gathers the parameters
    in for the forward, e.g. bfloat16 mixed precision; gradients are reduced in float32)."""
    if sharding not in SHARDINGS:
        raise ConfigError(f"sharding={sharding!r} is not one of {', '.join(SHARDINGS)}")
    if not dist.enabled:
        return model
    if sharding == "none":
        return wrap_ddp(model, dist, device)
    return shard(model, dist, device, param_dtype=param_dtype)


def shard(model: Any, dist: DistInfo, device: torch.device, *, param_dtype: torch.dtype | None = None) -> Any:
    """``fully_shard`` each decoder layer, then the model (its embeddings, final norm and head; with LoRA the
    base model inside peft's wrapper); a frozen model (the reference) is sharded the same way."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.world_size,))
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32 if param_dtype else None)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    # the root: the transformers model (a LoRA model's base: peft calls it, for forward and generate alike)
    root = _base(model)
    fully_shard(root, mesh=mesh, mp_policy=mp)
    root._is_fsdp_managed_module = True  # transformers' generate: synced_gpus, every rank steps until all are done
    return model


def param_counts(model: Any) -> tuple[int, int]:
    """``(params_total, params_local)``: the model's parameters, and those held by this process (a DTensor's
    local shard under FSDP; all of them otherwise)."""
    total = local = 0
    for p in unwrap(model).parameters():
        total += p.numel()
        local += p.to_local().numel() if hasattr(p, "to_local") else p.numel()
    return total, local


def layout_fields(model: Any, dist: DistInfo, sharding: str) -> dict[str, Any]:
    """The metrics columns of the run's layout: ``world_size``, ``sharding`` (``none`` in one process),
    ``params_total`` and ``params_local`` (rank 0's share)."""
    total, local = param_counts(model)
    return {"world_size": dist.world_size, "sharding": sharding if dist.enabled else "none",
            "params_total": total, "params_local": local}


def full_state_dict(model: Any, dist: DistInfo) -> dict[str, torch.Tensor] | None:
    """The whole weights (``state_dict`` keys of the unwrapped model) on rank 0's CPU, ``None`` on the other
    ranks; collective under FSDP (the shards are gathered), the local module's own tensors otherwise."""
    if not is_sharded(model):
        return unwrap(model).state_dict() if dist.is_main else None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not dist.is_main:
        return None
    for name in _aliases(model):  # tied weights (an LM head sharing the embeddings): saved once, as unsharded
        state.pop(name, None)
    return state


def _aliases(model: Any) -> list[str]:
    """Names of parameters that are another parameter (tied weights), all but the first name of each."""
    seen: dict[int, str] = {}
    out = []
    for name, p in unwrap(model).named_parameters(remove_duplicate=False):
        if id(p) in seen:
            out.append(name)
        else:
            seen[id(p)] = name
    return out


OPTIMIZER_SHARDS = "optimizer_shards"
"""The folder of a checkpoint where each rank of a sharded run writes its share of the AdamW state
(``torch.distributed.checkpoint``); ``trainer_state.pt`` then holds ``{"sharded": OPTIMIZER_SHARDS}`` in its place."""


def optimizer_state(model: Any, optimizer: torch.optim.Optimizer, dist: DistInfo) -> dict[str, Any]:
    """What a checkpoint's ``trainer_state.pt`` holds for the optimiser: ``optimizer.state_dict()`` (DDP, one
    process), or under FSDP a pointer to the shards :func:`save_optimizer_shards` writes (no rank gathers the
    whole AdamW state, 8 bytes a parameter)."""
    if not is_sharded(model):
        return optimizer.state_dict()
    return {"sharded": OPTIMIZER_SHARDS}


def save_optimizer_shards(model: Any, optimizer: torch.optim.Optimizer, folder: str | Path) -> None:
    """Every rank writes its shard of the AdamW state into ``folder / OPTIMIZER_SHARDS`` (collective; a no-op for
    an unsharded model, whose state is in ``trainer_state.pt``)."""
    if not is_sharded(model):
        return
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    dcp.save({"optimizer": get_optimizer_state_dict(model, optimizer)},
             checkpoint_id=str(Path(folder) / OPTIMIZER_SHARDS))


def load_optimizer_state(model: Any, optimizer: torch.optim.Optimizer, state: dict[str, Any],
                         folder: str | Path | None = None) -> None:
    """Restore what :func:`optimizer_state` gave (``folder``: the checkpoint, where a sharded run's shards are)."""
    if set(state) == {"sharded"}:
        if not is_sharded(model):
            raise ValueError(f"{folder}: the checkpoint's optimiser state is sharded (written with sharding='fsdp'); "
                             "resume it with sharding='fsdp' and the same world size")
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

        current = {"optimizer": get_optimizer_state_dict(model, optimizer)}  # the layout the shards are read into
        dcp.load(current, checkpoint_id=str(Path(folder or ".") / state["sharded"]))
        set_optimizer_state_dict(model, optimizer, optim_state_dict=current["optimizer"])
        return
    if not is_sharded(model):
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, optim_state_dict=state, options=StateDictOptions(full_state_dict=True))


def save_whole(model: Any, folder: str | Path, dist: DistInfo, *, merge_lora: bool = False) -> None:
    """``save_pretrained`` of the whole model into ``folder`` on rank 0 (collective under FSDP: the shards are
    gathered first). ``merge_lora``: a LoRA model is merged into its base first (a LoRA model saved unmerged keeps
    only its adapter, as ``save_pretrained`` does)."""
    module = unwrap(model)
    if not is_sharded(model):
        if dist.is_main:
            (module.merge_and_unload() if merge_lora else module).save_pretrained(folder)
        return
    state = full_state_dict(model, dist)
    if dist.is_main:
        assert state is not None
        if merge_lora:
            _merged_copy(module, state).save_pretrained(folder)
        else:
            module.save_pretrained(folder, state_dict=state)
    barrier(dist)


def _merged_copy(module: Any, state: dict[str, torch.Tensor]) -> Any:
    """A CPU copy of a sharded LoRA model, built from its gathered weights and merged into its base."""
    import copy

    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    base = module.get_base_model()
    plain = AutoModelForCausalLM.from_config(base.config, dtype=next(iter(state.values())).dtype)
    peft_config = copy.deepcopy(module.peft_config[module.active_adapter])
    peft_config.inference_mode = False
    clone = get_peft_model(plain, peft_config)
    missing, unexpected = clone.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if "lora_" not in k and not k.endswith("lm_head.weight")]:
        raise RuntimeError(f"the gathered LoRA weights do not fit a fresh copy (missing {missing[:3]}, unexpected "
                           f"{unexpected[:3]})")
    return clone.merge_and_unload()
