"""On-disk cache of LLM-judge verdicts, keyed by (model, prompt).

One small JSON file per key, ``<dir>/<key[:2]>/<key>.json``, written to a
temporary file in the same folder and moved into place with ``os.replace``:
several processes (Ray workers, data-loader workers) can share one cache
folder without locks, and a reader never sees half a file. Only verdicts are
stored, never errors: a failed request is retried the next time.

The default folder is ``$XDG_CACHE_HOME/pivot-envs/judge`` (``~/.cache/...``
when the variable is unset).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pivot_envs.verifiers.helpers.judge_prompt import Verdict

CACHE_FORMAT = 1
"""Bumped when the stored layout or the prompt format changes, so that old entries are not reused."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/pivot-envs/judge``, or ``~/.cache/pivot-envs/judge``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pivot-envs" / "judge"


def cache_key(model: str, prompt: Any) -> str:
    """A SHA-256 hex key of the judge model name and its prompt (the chat messages)."""
    text = json.dumps([CACHE_FORMAT, model, prompt], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class VerdictCache:
    """Verdicts stored as one JSON file per key under ``directory``."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).expanduser()

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> Verdict | None:
        """The stored verdict, or ``None`` when absent or unreadable (a damaged entry is a miss)."""
        try:
            data = json.loads(self.path(key).read_text(encoding="utf-8"))
            if data.get("format") != CACHE_FORMAT or not isinstance(data.get("equivalent"), bool):
                return None
            return Verdict(equivalent=data["equivalent"], reason=str(data.get("reason", "")))
        except (OSError, ValueError, AttributeError):
            return None

    def put(self, key: str, verdict: Verdict, model: str) -> None:
        """Store ``verdict`` atomically (write a temporary file, then ``os.replace``)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"format": CACHE_FORMAT, "model": model, **verdict.to_dict()}
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(record, fh, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("*/*.json"))
