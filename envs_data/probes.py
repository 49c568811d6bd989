"""Out-of-domain probes: a small task family the base model learns and narrow fine-tuning can destroy.

PivotRL's claim is that turn-level RL on pivots keeps what the model knew
outside the training domain, while SFT on the same data erodes it. The
small-scale reproduction measures this with *probes*: short questions with one
exact answer that are in none of the agentic domains. The base model learns them
in its pre-training mixture; after training on a domain, greedy exact-match
accuracy on the fixed :func:`probe_eval_set` is the forgetting measure (the
paper's OOD table).

Families (``PROBE_KINDS``)::

    add     What is 7 + 5?                            -> 12
    sub     What is 9 - 4?                            -> 5
    lookup  In the list a=3, b=9, c=1, what is b?     -> 9

Each item is a chat exchange (user question -> assistant answer), so the model's
own chat template applies, as for the pivots::

    from pivot_envs.envs_data.probes import probe_examples, probe_eval_set, score_probe

    train_pairs = [p.example() for p in probe_examples(2000, seed=0)]   # (messages, answer) for train_lm
    eval_items = probe_eval_set()                                       # 200 fixed items
    score_probe("12.", "12")                                            # True

Two kinds of knowledge, so that forgetting of either shows:

* ``add`` and ``sub`` are *closed* families: the single-digit tables (100 and 55
  facts), which a tiny model memorises in a few hundred steps. Their eval items
  are facts of the same tables: the measure is *retention* of what the base model
  knew.
* ``lookup`` is an *open* family (tens of millions of questions): a skill (find
  the key, copy its value). Its questions are split by a hash of their text, one
  in ``EVAL_BUCKETS`` belonging to ``eval``: no eval lookup question is ever in a
  training mixture, whatever the seeds, so the measure is the skill on unseen
  lists.

Deterministic under ``seed`` (Python's string-seeded :class:`random.Random`, which
does not depend on ``PYTHONHASHSEED``); ``train`` and ``eval`` draw from separate
streams.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Sequence

from pivot_envs.types import Message, Pivot, stable_hash

PROBE_KINDS = ("add", "sub", "lookup")
"""The probe families: single-digit addition and subtraction (non-negative results), key-value lookup."""

CLOSED_KINDS = ("add", "sub")
"""Families with a finite fact table: train and eval share it (the eval measures retention)."""

PROBE_DOMAIN = "probe"
"""The ``domain`` of probe items turned into pivots (not a registered env: probes are scored by exact match)."""

SPLITS = ("train", "eval")
EVAL_BUCKETS = 5
"""One in this many distinct ``lookup`` questions belongs to the ``eval`` split, the others to ``train``."""

EVAL_SEED = 20260321
"""Seed of :func:`probe_eval_set` (fixed: changing it changes the published OOD numbers)."""

EVAL_MIX = (("add", 70), ("sub", 50), ("lookup", 80))
"""Items of each family in :func:`probe_eval_set` (200 in all; ``sub`` has 55 distinct facts)."""

MAX_OPERAND = 9
"""Operands of ``add``/``sub`` are drawn from ``0..MAX_OPERAND``."""

LOOKUP_KEYS = "abcdefghjkmnpqrstuvwxyz"
"""Keys of ``lookup`` lists (single letters; ``i``, ``l`` and ``o`` left out as look-alikes of digits)."""


@dataclass(frozen=True)
class ProbeItem:
    """One probe: a question with a single exact answer.

    Attributes:
        id: stable id (hash of kind and question).
        kind: one of :data:`PROBE_KINDS`.
        question: the user turn.
        answer: the expected assistant reply (exact, before normalisation).
    """

    id: str
    kind: str
    question: str
    answer: str

    def messages(self) -> list[Message]:
        """The chat prompt: one user turn."""
        return [{"role": "user", "content": self.question}]

    def example(self) -> tuple[list[Message], str]:
        """A ``(messages, answer)`` pair, the form :func:`pivot_envs.models.tiny.train_lm` takes."""
        return self.messages(), self.answer

    def to_pivot(self) -> Pivot:
        """The probe as a :class:`Pivot` (domain ``probe``, no tools), so any agent can answer it."""
        return Pivot(id=self.id, domain=PROBE_DOMAIN, context=self.messages(),
                     expert={"role": "assistant", "content": self.answer}, meta={"probe_kind": self.kind})

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "question": self.question, "answer": self.answer}


def probe_split(kind: str, question: str) -> str | None:
    """The split (``train`` or ``eval``) an open-family question belongs to (a hash of its text, so fixed
    forever); ``None`` for the closed families, whose facts belong to both."""
    if kind in CLOSED_KINDS:
        return None
    return "eval" if int(stable_hash("probe-split", question), 16) % EVAL_BUCKETS == 0 else "train"


def make_probe(kind: str, rng: random.Random) -> ProbeItem:
    """Draw one probe of ``kind`` with ``rng``."""
    if kind == "add":
        a, b = rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)
        question, answer = f"What is {a} + {b}?", str(a + b)
    elif kind == "sub":
        a, b = rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)
        a, b = max(a, b), min(a, b)
        question, answer = f"What is {a} - {b}?", str(a - b)
    elif kind == "lookup":
        keys = rng.sample(LOOKUP_KEYS, rng.randint(3, 4))
        values = [rng.randint(0, 9) for _ in keys]
        target = rng.randrange(len(keys))
        listing = ", ".join(f"{k}={v}" for k, v in zip(keys, values))
        question, answer = f"In the list {listing}, what is {keys[target]}?", str(values[target])
    else:
        raise ValueError(f"unknown probe kind {kind!r}; kinds: {', '.join(PROBE_KINDS)}")
    return ProbeItem(id=stable_hash("probe", kind, question), kind=kind, question=question, answer=answer)


def probe_examples(
    n: int,
    seed: int = 0,
    split: str = "train",
    *,
    kinds: Sequence[str] = PROBE_KINDS,
    unique: bool | None = None,
) -> list[ProbeItem]:
    """``n`` probe items of ``split``, the kinds in turn (``kinds[i % len(kinds)]``), deterministic under ``seed``.

    Args:
        n: how many items.
        seed: the draw's seed (the same ``(n, seed, split, kinds)`` always gives the same list,
            and a longer list starts with the shorter one).
        split: ``train`` (for the base model's mixture) or ``eval`` (the draw of the eval set; its
            ``lookup`` questions are never in ``train``).
        kinds: probe families to draw from (see :data:`PROBE_KINDS`).
        unique: no repeated question; default ``True`` for ``eval`` and ``False`` for ``train``.
            Raises ``ValueError`` when a family runs out of distinct questions.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    kinds = list(kinds)
    if not kinds:
        raise ValueError("kinds must name at least one probe family")
    for kind in kinds:
        if kind not in PROBE_KINDS:
            raise ValueError(f"unknown probe kind {kind!r}; kinds: {', '.join(PROBE_KINDS)}")
    unique = split == "eval" if unique is None else unique
    rngs = {kind: random.Random(f"pivot-envs-probe:{split}:{seed}:{kind}") for kind in kinds}
    seen: set[str] = set()
    out: list[ProbeItem] = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        for _ in range(10_000):
            item = make_probe(kind, rngs[kind])
            if probe_split(kind, item.question) in (None, split) and not (unique and item.question in seen):
                break
        else:
            raise ValueError(f"probe family {kind!r} has no more distinct {split} questions after {len(out)} items; "
                             "ask for fewer items or pass unique=False")
        seen.add(item.question)
        out.append(item)
    return out


def probe_eval_set() -> list[ProbeItem]:
    """The fixed probe eval set: :data:`EVAL_MIX` distinct ``eval`` items from :data:`EVAL_SEED`, in a fixed order."""
    items = [item for kind, count in EVAL_MIX for item in probe_examples(count, EVAL_SEED, "eval", kinds=[kind])]
    random.Random(f"pivot-envs-probe-order:{EVAL_SEED}").shuffle(items)
    return items


def probe_texts(n: int = 500, seed: int = 0) -> list[str]:
    """Question and answer texts of training probes (e.g. for a tokenizer corpus)."""
    return [text for item in probe_examples(n, seed) for text in (item.question, item.answer)]


_ANSWER_PREFIX = re.compile(r"^(?:the\s+)?answer\s*(?:is|:)\s*", re.IGNORECASE)
_NUMBER = re.compile(r"^[+-]?\d+(?:\.\d+)?$")


def normalize_answer(text: str) -> str:
    """Light normalisation for exact match.

    Strips whitespace, an ``answer:`` / ``the answer is`` prefix, surrounding quotes or
    backticks, and trailing ``.``; lower-cases; collapses inner whitespace; writes numbers in
    a canonical form (``+42``, ``42.0`` and ``042`` all become ``42``).
    """
    out = " ".join(str(text).split()).strip()
    out = _ANSWER_PREFIX.sub("", out)
    out = out.rstrip(".").strip().strip("\"'`").strip().lower()
    if _NUMBER.match(out):
        value = float(out)
        out = str(int(value)) if value.is_integer() else repr(value)
    return out


def score_probe(prediction: str, answer: str) -> bool:
    """Exact match after :func:`normalize_answer` on both sides."""
    return normalize_answer(prediction) == normalize_answer(answer)
