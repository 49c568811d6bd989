"""A domain's pivots, tasks, world and verifier, as the red team needs them.

A registered domain (built-in or a user's) gives its trajectories (``tasks``: a file, ``bundled:DOMAIN[:SPLIT]``,
or ``None``: its bundled ``split``), cut into pivots by the domain's extraction, its world and its default
verifier. The tau2 presets (``tau2-airline``, ``tau2-retail``) give tau2-bench's tasks, one pivot per expected
action, on their MCP world, scored by the cascade docs/verifiers.md recommends for them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from pivot_envs.domains import domain_names, find_domain
from pivot_envs.episodes.tasks import resolve_tasks
from pivot_envs.formats.tau2_tasks import read_tau2_tasks, tau2_pivots
from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots
from pivot_envs.types import Pivot, Trajectory
from pivot_envs.verifiers.defaults import default_verifier_spec

TAU2_PRESETS = ("tau2-airline", "tau2-retail")


def tau2_verifier(world: str) -> dict[str, Any]:
    """The tau2 presets' local verifier: ``tool_call`` with BFCL's string convention as a cheap reject, ``tool_call``
    as an accept, ``world_exec`` deciding, inside ``final_turn`` on the preset's world."""
    calls = {"name": "cascade", "stages": [
        {"role": "gate", "verifier": {"name": "tool_call", "normalizers": ["bfcl"], "coerce": "lenient"}},
        {"role": "accept", "verifier": "tool_call"},
        {"role": "decide", "verifier": {"name": "world_exec", "world": world}}]}
    return {"name": "final_turn", "calls": calls, "world": world}


@dataclass
class Setup:
    """What a red-team run works on.

    Attributes:
        name: the domain (or preset) name, for reports.
        pivots: the pivots the cases are built at.
        tasks: the trajectories they were cut from, by id (the oracle replays them).
        world: the world spec (``None``: a domain without a world; world-labelled families make nothing).
        task_domain: the domain the world's tasks belong to (``None`` for an MCP preset).
        verifier: the verifier spec the cases are scored with.
    """

    name: str
    pivots: list[Pivot]
    tasks: dict[str, Trajectory]
    world: Any
    task_domain: str | None
    verifier: Any


def domain_setup(domain: str, *, tasks: Any = None, split: str = "test", world: Any = None, verifier: Any = None,
                 limit: int | None = None, seed: int = 0) -> Setup:
    """The :class:`Setup` of ``domain`` (see the module docstring). ``limit``: at most this many pivots, drawn with
    ``seed``; ``world`` / ``verifier`` replace the domain's."""
    if domain in TAU2_PRESETS:
        trajs = read_tau2_tasks(domain=domain.split("-", 1)[1])
        pivots = tau2_pivots(trajs)
        world = world or domain
        verifier = verifier or tau2_verifier(world)
        return Setup(domain, _sample(pivots, limit, seed), {t.id: t for t in trajs}, world, None, verifier)
    found = find_domain(domain)
    if found is None:
        raise ValueError(f"unknown domain {domain!r}; registered: {', '.join(domain_names())} "
                         f"(or a tau2 preset: {', '.join(TAU2_PRESETS)})")
    trajs = resolve_tasks(tasks, domain=domain, split=split)
    pivots, _ = extract_pivots(trajs, domain, ExtractOptions(min_reward=None))  # resolve_tasks kept the successful ones
    return Setup(domain, _sample(pivots, limit, seed), {t.id: t for t in trajs}, world or found.world, domain,
                 verifier or default_verifier_spec(domain))


def _sample(pivots: list[Pivot], limit: int | None, seed: int) -> list[Pivot]:
    if limit is None or limit >= len(pivots):
        return list(pivots)
    chosen = set(random.Random(seed).sample(range(len(pivots)), limit))
    return [p for i, p in enumerate(pivots) if i in chosen]
