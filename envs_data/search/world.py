"""The ``search`` world: the encyclopedia corpus, its BM25 index and the two tools (the generator's own code).

Tools: ``search(query, top_k=5)`` and ``open(doc_id)``, executed by
:func:`pivot_envs.envs_data.search.generator.run_tool` over a
:class:`~pivot_envs.envs_data.search.index.SearchIndex` of the task's corpus, so a
replayed bundled trajectory gets every recorded tool result back byte for byte.

Corpus: the task's ``corpus_seed`` (0 by default: the bundled ``envs_data/search/corpus.jsonl.gz``,
or the same documents rebuilt when the file is absent); other seeds are generated and indexed on
first use and kept for the world's lifetime.

The world is stateless (no tool writes), so :meth:`SearchWorld.start` only picks the index, and
the digest is a constant per corpus: the SHA-256 of its documents as canonical JSON. A tool result
starting with ``Error:`` (empty query, bad ``top_k``, unknown ``doc_id``, unknown tool) is a tool error.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from pivot_envs.worlds.base import ToolResult, World, WorldError, WorldTask, parse_arguments

from . import NAME
from .generator import TOOLS, run_tool
from .corpus import build_corpus, load_bundled_corpus
from .index import SearchIndex


class SearchWorld(World):
    name = NAME

    def __init__(self) -> None:
        self._indexes: dict[int, tuple[Any, str]] = {}  # corpus_seed -> (SearchIndex, digest)
        self._current: tuple[Any, str] | None = None

    def tools(self) -> list[dict[str, Any]]:
        return copy.deepcopy(TOOLS)

    def start(self, task: WorldTask) -> None:
        try:
            seed = int(task.config.get("corpus_seed", 0))
        except (TypeError, ValueError) as exc:
            raise WorldError(f"search world: task {task.id!r} has a bad corpus_seed "
                             f"{task.config.get('corpus_seed')!r}: {exc}") from None
        if seed not in self._indexes:
            self._indexes[seed] = _build(seed)
        self._current = self._indexes[seed]

    def call(self, name: str, arguments: str | dict[str, Any]) -> ToolResult:
        if self._current is None:
            raise WorldError("search world: call() before start()")
        try:
            args = parse_arguments(arguments)
        except ValueError as exc:
            return ToolResult(f"Error: the arguments are not a JSON object: {exc}", error=True)
        content = run_tool(self._current[0], name, args)
        return ToolResult(content, error=content.startswith("Error:"))

    def digest(self) -> str:
        if self._current is None:
            raise WorldError("search world: digest() before start()")
        return self._current[1]

    def close(self) -> None:
        self._current = None


def _build(seed: int) -> tuple[Any, str]:
    """The index of the corpus of ``seed`` and the corpus's digest."""
    docs = load_bundled_corpus() if seed == 0 else build_corpus(seed)
    rows = [{"doc_id": d["doc_id"], "title": d["title"], "text": d["text"]} for d in docs]
    text = json.dumps(rows, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return SearchIndex.build(rows), hashlib.sha256(text.encode("utf-8")).hexdigest()
