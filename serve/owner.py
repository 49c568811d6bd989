"""Which process owns a gym session or a rollout job of ``pivot-envs serve``.

Sessions (live env objects) and rollout jobs (with the backend pool that runs them) live in the
memory of the process that created them. With ``--workers N`` uvicorn spreads requests over N
processes, so a ``/step`` or ``GET /rollouts/{id}`` may reach a worker that never saw the id. Ids
made here carry the creating process (``w<pid>-<hex>``), so such a request gets a 421 (Misdirected
Request) that says what happened and what to do, instead of a bare "unknown session".

::

    from pivot_envs.serve.owner import new_id, misrouted

    sid = new_id()                     # "w4242-3f9c..." in process 4242
    misrouted("session", sid)          # None here; in another process: the 421 message
"""

from __future__ import annotations

import os
import re
import uuid

_TAG = re.compile(r"^w(\d+)-")

MISROUTED_STATUS = 421
"""HTTP 421 Misdirected Request: the id belongs to another process of the server."""


def new_id(hex_chars: int = 32) -> str:
    """A fresh id tagged with this process: ``w<pid>-<hex_chars random hex digits>``."""
    return f"w{os.getpid()}-{uuid.uuid4().hex[:hex_chars]}"


def owner_pid(ident: str) -> int | None:
    """The pid an id was made in (``None`` for ids without the tag, e.g. a client's own session id)."""
    match = _TAG.match(ident)
    return int(match.group(1)) if match else None


def misrouted(kind: str, ident: str) -> str | None:
    """The error message when ``ident`` (a ``kind``: "session", "rollout job") was made by another process,
    else ``None`` (an id of this process, or one without the tag: then it is simply unknown)."""
    pid = owner_pid(ident)
    if pid is None or pid == os.getpid():
        return None
    return (f"{kind} {ident!r} was created by server process {pid}, not this one ({os.getpid()}): another worker "
            f"of `pivot-envs serve --workers N`, or a run of the server before a restart. Gym sessions, rollout "
            f"jobs and the backend pool live in one process: serve them with --workers 1 (more workers scale "
            f"/verify, which keeps no state)")
