"""Wall time of the demo's stages, summed over every call that worked on them (``timings.json``).

A long run is stopped and resumed (a session ends, CI needs the cores, the machine reboots), so a stage's time
is spread over several calls. :class:`StageClock` adds each call's share to the stage's total when the stage
ends *or is interrupted*: an exception, Ctrl-C, or a ``SIGTERM`` (turned into ``SystemExit`` by
:func:`sigterm_as_exit`) still writes the time spent, so ``timings.total_s`` counts the work a resumed run
really cost, not only the call that finished it.

::

    clock = StageClock(Path("runs/demo/timings.json"))
    data = clock.run("data", lambda: stage_data(...))
    clock.total()   # seconds over every call
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator


class StageClock:
    """Per-stage wall seconds, kept in ``path`` and added to by every call."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.seconds: dict[str, float] = json.loads(self.path.read_text(encoding="utf-8")) if self.path.exists() else {}

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()``; its wall time adds to stage ``name`` whether it returns or raises."""
        began = time.perf_counter()
        try:
            return fn()
        finally:
            self.add(name, time.perf_counter() - began)

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to stage ``name`` and save."""
        self.seconds[name] = round(self.seconds.get(name, 0.0) + seconds, 2)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.seconds, indent=1) + "\n", encoding="utf-8")

    def total(self) -> float:
        """Seconds over every stage and every call."""
        return sum(self.seconds.values())


@contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """Inside the block, ``SIGTERM`` raises ``SystemExit(143)`` in the main thread, so ``finally`` blocks run (a
    plain ``SIGTERM`` kills Python without them); the previous handler is back after it. Does nothing outside
    the main thread or where a handler of the program's own is set."""
    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or previous not in (signal.SIG_DFL, None):
        yield
        return

    def _exit(signum: int, frame: Any) -> None:
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
