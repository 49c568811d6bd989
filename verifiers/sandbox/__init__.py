"""Sandboxes that run a shell command in a fresh, isolated copy of a fixture.

``get_backend("bwrap" | "docker" | "auto")`` returns a ready backend or raises
:class:`SandboxUnavailable` saying how to install one; ``auto`` prefers
bubblewrap and never falls back to running on the host.
"""

from __future__ import annotations

from pivot_envs.verifiers.sandbox.base import (
    FileEntry,
    SandboxBackend,
    SandboxLimits,
    SandboxRequest,
    SandboxResult,
    SandboxUnavailable,
    Seed,
    State,
    check_workdir,
    describe_exit,
)
from pivot_envs.verifiers.sandbox.bwrap import BwrapBackend
from pivot_envs.verifiers.sandbox.docker_backend import DEFAULT_IMAGE, DockerBackend

BACKENDS = ("bwrap", "docker", "auto")
"""Accepted backend names."""


def make_backend(name: str, docker_image: str | None = None) -> SandboxBackend:
    """A backend object by name (not probed yet). ``auto`` is resolved by :func:`get_backend`."""
    if name == "bwrap":
        return BwrapBackend()
    if name == "docker":
        return DockerBackend(image=docker_image or DEFAULT_IMAGE)
    raise ValueError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")


def get_backend(name: str = "auto", docker_image: str | None = None) -> SandboxBackend:
    """A probed, working backend, or :class:`SandboxUnavailable` with what to install."""
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")
    names = ["bwrap", "docker"] if name == "auto" else [name]
    problems = []
    for candidate in names:
        backend = make_backend(candidate, docker_image)
        problem = backend.probe()
        if problem is None:
            return backend
        problems.append(f"{candidate}: {problem}; to fix: {backend.install_hint()}")
    raise SandboxUnavailable(
        "no sandbox backend works on this host, so commands are not run (never on the host itself). "
        + " | ".join(problems)
    )


__all__ = [
    "BACKENDS",
    "FileEntry",
    "SandboxBackend",
    "SandboxLimits",
    "SandboxRequest",
    "SandboxResult",
    "SandboxUnavailable",
    "Seed",
    "State",
    "check_workdir",
    "describe_exit",
    "get_backend",
    "make_backend",
]
