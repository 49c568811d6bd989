"""What the sandboxed worlds (``terminal``, ``swe``) share: their sandbox settings and ``config()``."""

from __future__ import annotations

from typing import Any

from pivot_envs.worlds.base import World


class SandboxedWorld(World):
    """A world whose tools run commands in a sandbox (one fresh sandbox per call; see ``SandboxSession``).

    Args:
        backend: ``"bwrap"``, ``"docker"`` or ``"auto"`` (bwrap, else docker; never the host).
        timeout_s: wall-clock limit of one command (against hangs).
        cpu_time_s: CPU seconds per process of a command (against runaway computations: SIGXCPU).
        setup_timeout_s: wall-clock limit of the fixture's setup script.
        memory_mb, max_processes, max_file_size_mb, max_output_bytes, max_disk_mb: sandbox limits
            (:class:`~pivot_envs.verifiers.sandbox.SandboxLimits`).
        docker_image: image of the docker backend.
    """

    def __init__(self, backend: str = "auto", timeout_s: float = 30.0, cpu_time_s: float = 10.0,
                 setup_timeout_s: float = 120.0, memory_mb: int = 1024, max_processes: int = 64,
                 max_file_size_mb: int = 16, max_output_bytes: int = 1_000_000, max_disk_mb: int = 64,
                 docker_image: str | None = None) -> None:
        from pivot_envs.verifiers.sandbox import SandboxLimits

        for key, value in (("timeout_s", timeout_s), ("cpu_time_s", cpu_time_s), ("setup_timeout_s", setup_timeout_s)):
            if not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{self.name} world: {key} must be a positive number, got {value!r}")
        self._params: dict[str, Any] = {
            "backend": backend, "timeout_s": timeout_s, "cpu_time_s": cpu_time_s, "setup_timeout_s": setup_timeout_s,
            "memory_mb": memory_mb, "max_processes": max_processes, "max_file_size_mb": max_file_size_mb,
            "max_output_bytes": max_output_bytes, "max_disk_mb": max_disk_mb, "docker_image": docker_image,
        }
        self.limits = SandboxLimits(memory_mb=memory_mb, max_processes=max_processes,
                                    max_file_size_mb=max_file_size_mb, max_output_bytes=max_output_bytes,
                                    max_disk_mb=max_disk_mb)
        self.timeout_s = float(timeout_s)
        self.cpu_time_s = float(cpu_time_s)
        self.setup_timeout_s = float(setup_timeout_s)

    def config(self) -> dict[str, Any]:
        return {"name": self.name, **self._params}
