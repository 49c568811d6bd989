"""Docker backend (optional extra ``docker``): one throw-away container per run.

For hosts with a Docker engine but no usable bubblewrap. Each run creates a
container of ``image`` with no network, a read-only root, size-limited tmpfs
at the work directory, ``/tmp`` and ``/.pivot``, memory and pid limits,
ulimits (cpu, fsize, nofile, core), all capabilities dropped,
``no-new-privileges``, an init process, and user 65534. The same wrapper
and wire format as bubblewrap (:mod:`~pivot_envs.verifiers.sandbox.base`) go
through the attach socket: the seed tar on stdin, the command's stdout/stderr
and the final tar back. Past the deadline the container is killed; it is
always removed.

The image must provide ``/bin/sh``, ``tar`` and the command shell (default
``python:3.11-slim`` has bash, coreutils and python3). The backend never pulls
images itself: ``docker pull`` it once.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from typing import Any

from pivot_envs.verifiers.sandbox.base import (
    SANDBOX_UID,
    SandboxBackend,
    SandboxLimits,
    SandboxRequest,
    SandboxResult,
    Seed,
    StreamCollector,
    WRAPPER,
    new_nonce,
    sandbox_env,
)

DEFAULT_IMAGE = "python:3.11-slim"
"""Image used when none is configured."""


class DockerBackend(SandboxBackend):
    """Runs sandboxes as Docker containers through the ``docker`` SDK.

    Args:
        image: the image every container starts from.
        base_url: Docker engine address (default: the environment, as ``docker.from_env()``).
    """

    name = "docker"

    def __init__(self, image: str = DEFAULT_IMAGE, base_url: str | None = None) -> None:
        super().__init__()
        self.image = image
        self.base_url = base_url
        self._client: Any = None
        self._client_lock = threading.Lock()

    def install_hint(self) -> str:
        return (f"install the docker SDK (`pip install 'pivot-envs[docker]'`), run a Docker engine this user may "
                f"use (DOCKER_HOST or /var/run/docker.sock), and `docker pull {self.image}`")

    def client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                import docker

                self._client = (docker.DockerClient(base_url=self.base_url, timeout=30) if self.base_url
                                else docker.from_env(timeout=30))
            return self._client

    def _probe(self) -> str | None:
        try:
            import docker
        except ImportError:
            return "the docker SDK is not installed"
        try:
            client = self.client()
            client.ping()
        except Exception as exc:  # noqa: BLE001 - engine absent, socket refused, permission denied...
            return f"no Docker engine answers ({type(exc).__name__}: {exc})"
        try:
            client.images.get(self.image)
        except docker.errors.ImageNotFound:
            return f"image {self.image} is not present (docker pull {self.image})"
        result = self.run(SandboxRequest(script="echo ok", seed=Seed("/probe", {}), timeout_s=30.0, shell="sh",
                                         limits=SandboxLimits(max_disk_mb=1)))
        if result.error:
            return result.error
        if not result.completed or result.stdout.strip() != b"ok":
            return (f"a test command did not run as expected (exit {result.exit_code}, "
                    f"{result.killed or result.stderr[:200]!r})")
        return None

    def run(self, request: SandboxRequest) -> SandboxResult:
        t0 = time.monotonic()
        result = SandboxResult()
        try:
            api = self.client().api
            container_id = self._create(api, request)
        except Exception as exc:  # noqa: BLE001 - any engine failure is an infrastructure error
            result.error = f"docker could not create the sandbox container: {type(exc).__name__}: {exc}"
            return result
        nonce = new_nonce()
        collector = StreamCollector(nonce, request.limits)
        try:
            sock = api.attach_socket(container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            raw = getattr(sock, "_sock", sock)
            api.start(container_id)
            raw.settimeout(request.start_timeout_s)
            raw.sendall(request.encode(nonce))
            raw.shutdown(socket.SHUT_WR)
            self._pump(raw, request, collector, result, t0)
        except Exception as exc:  # noqa: BLE001
            result.error = f"docker sandbox failed: {type(exc).__name__}: {exc}"
        finally:
            try:
                api.remove_container(container_id, force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        collector.finish(result, request.seed.workdir, request.keep_contents, timeout_s=request.timeout_s)
        result.duration_s = time.monotonic() - t0
        return result

    def _create(self, api: Any, request: SandboxRequest) -> str:
        from docker.types import Ulimit

        limits = request.limits
        workdir = request.seed.workdir
        cpu = request.cpu_limit
        fsize = limits.max_file_size_mb << 20
        tmpfs = {
            workdir: f"rw,exec,nosuid,nodev,size={limits.max_disk_mb}m,mode=1777",
            "/tmp": f"rw,exec,nosuid,nodev,size={limits.max_disk_mb}m,mode=1777",
            "/.pivot": f"rw,noexec,nosuid,nodev,size={2 * limits.max_file_size_mb + 2}m,mode=1777",
        }
        host_config = api.create_host_config(
            network_mode="none", mem_limit=f"{limits.memory_mb}m", memswap_limit=f"{limits.memory_mb}m",
            pids_limit=limits.max_processes + 4, read_only=True, tmpfs=tmpfs, init=True,
            cap_drop=["ALL"], security_opt=["no-new-privileges"],
            ulimits=[Ulimit(name="cpu", soft=cpu, hard=cpu + 1), Ulimit(name="fsize", soft=fsize, hard=fsize),
                     Ulimit(name="nofile", soft=limits.max_open_files, hard=limits.max_open_files),
                     Ulimit(name="core", soft=0, hard=0)],
        )
        container = api.create_container(
            self.image, command=["/bin/sh", "-c", WRAPPER, "pivot-sandbox", workdir, request.shell],
            user=f"{SANDBOX_UID}:{SANDBOX_UID}", environment=dict(sandbox_env(workdir)), working_dir="/",
            hostname="sandbox", stdin_open=True, network_disabled=True, host_config=host_config,
        )
        return container["Id"]

    def _pump(self, raw: Any, request: SandboxRequest, collector: StreamCollector, result: SandboxResult,
              t0: float) -> None:
        """Demultiplex the attach stream (8-byte frame headers) until EOF, the deadline or a cap.

        Past a deadline the stream is read once more without waiting (what the sandbox sent before it:
        a host process scheduled late must not turn a phase that ended in time into a timeout)."""
        buf = bytearray()
        deadline = t0 + request.start_timeout_s
        phase = "start"
        raw.setblocking(False)

        def readable(wait: float) -> bool:
            return bool(getattr(raw, "pending", lambda: 0)()) or bool(select.select([raw], [], [], wait)[0])

        while True:
            remaining = deadline - time.monotonic()
            late = remaining <= 0
            if not late and not readable(min(remaining, 1.0)):
                continue
            was, eof = phase, False
            for _ in range(LATE_READS if late else 1):
                if late and not readable(0):
                    break
                try:
                    chunk = raw.recv(1 << 16)
                except (BlockingIOError, InterruptedError):
                    break
                if not chunk:
                    eof = True
                    break
                buf += chunk
                _demultiplex(buf, collector)
                if collector.over:
                    break
            if collector.over:
                return
            if phase == "start" and collector.started:
                phase, deadline = "command", time.monotonic() + request.timeout_s
            if phase == "command" and collector.ended:
                phase, deadline = "snapshot", time.monotonic() + request.snapshot_timeout_s
            if eof:
                return
            if late and phase == was:
                if phase == "command":
                    result.timed_out = True
                else:
                    result.error = f"the docker sandbox took too long ({phase} phase)"
                return


LATE_READS = 16
"""Reads (64 KiB each) at most, past a deadline, of what the sandbox sent before it."""


def _demultiplex(buf: bytearray, collector: StreamCollector) -> None:
    """Feed the complete frames at the head of ``buf`` to ``collector`` (and remove them from ``buf``)."""
    while len(buf) >= 8:
        stream, size = struct.unpack(">BxxxL", bytes(buf[:8]))
        if len(buf) < 8 + size:
            break
        payload = bytes(buf[8:8 + size])
        del buf[:8 + size]
        if stream == 1:
            collector.feed_stdout(payload)
        elif stream == 2:
            collector.feed_stderr(payload)
