"""OOD probes for a pretrained chat model: short questions asked after a few solved examples (few-shot).

A pretrained instruct model (SmolLM2-135M-Instruct) has abilities before any training, partly: these probes
measure them, so that training on a domain can be seen to erode them (the paper's OOD claim). Asked zero-shot,
SmolLM2 answers in sentences (1 % exact match on such questions, 2.5 % on the tiny model's probe set), so each
question comes after ``shots`` solved examples of its family as earlier chat turns, and the model answers with
the bare answer that exact match (:func:`~pivot_envs.envs_data.probes.score_probe`) scores.

Families: one-digit addition, the number after / before a number, the larger of two numbers, the first / last
letter of a word, repeating two words, and key-value lookup. The set is generated deterministically (one
string-seeded :class:`random.Random` per family); the default (30 per family, 3 shots, 240 items) measured on
SmolLM2-135M-Instruct: 0.533 (add 0.23, before 0.20, last letter 0.20, next 0.50, larger 0.57, lookup 0.63,
copy 0.93, first letter 1.00).

::

    items = few_shot_probe_set(per_kind=30, shots=3)       # 240 ProbeItems, each item.messages() few-shot
    evaluate_probes(agent, items)                          # pivot_envs.trainers.evaluate
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from pivot_envs.envs_data.probes import ProbeItem
from pivot_envs.types import Message, stable_hash

WORDS = ("apple river garden candle pencil window mirror basket rocket orange silver forest planet guitar tomato "
         "lemon bridge castle dragon feather hammer island jacket kitten ladder monkey needle pepper rabbit saddle "
         "tunnel violin wallet yellow zebra").split()
"""Words of the letter and copy probes (common nouns, no repeated words)."""


def _add(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f"What is {a} + {b}?", str(a + b)


def _next(rng: random.Random) -> tuple[str, str]:
    a = rng.randint(1, 98)
    return f"What number comes after {a}?", str(a + 1)


def _before(rng: random.Random) -> tuple[str, str]:
    a = rng.randint(2, 99)
    return f"What number comes before {a}?", str(a - 1)


def _larger(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(range(1, 100), 2)
    return f"Which is larger, {a} or {b}?", str(max(a, b))


def _first(rng: random.Random) -> tuple[str, str]:
    w = rng.choice(WORDS)
    return f'What is the first letter of "{w}"?', w[0]


def _last(rng: random.Random) -> tuple[str, str]:
    w = rng.choice(WORDS)
    return f'What is the last letter of "{w}"?', w[-1]


def _copy(rng: random.Random) -> tuple[str, str]:
    words = " ".join(rng.sample(WORDS, 2))
    return f"Repeat: {words}", words


def _lookup(rng: random.Random) -> tuple[str, str]:
    keys = rng.sample("abcdefghjkmnpqrstuvwxyz", 3)
    values = [rng.randint(0, 9) for _ in keys]
    target = rng.randrange(len(keys))
    listing = ", ".join(f"{k}={v}" for k, v in zip(keys, values))
    return f"In the list {listing}, what is {keys[target]}?", str(values[target])


PROBE_FAMILIES: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "add": _add, "next": _next, "before": _before, "larger": _larger, "first_letter": _first,
    "last_letter": _last, "copy": _copy, "lookup": _lookup,
}
"""OOD probe families: each draws one ``(question, answer)`` from a seeded generator."""


@dataclass(frozen=True)
class FewShotProbe(ProbeItem):
    """A probe item asked after solved examples of its family (earlier chat turns)."""

    shots: tuple[tuple[str, str], ...] = ()

    def messages(self) -> list[Message]:
        turns: list[Message] = []
        for question, answer in self.shots:
            turns += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        return turns + [{"role": "user", "content": self.question}]

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "shots": [list(s) for s in self.shots]}


def few_shot_probe_set(per_kind: int = 30, shots: int = 3) -> list[FewShotProbe]:
    """The fixed few-shot OOD probe set: ``per_kind`` items of every family, each after ``shots`` solved examples
    of its family; deterministic (one string-seeded generator per family), no question repeated."""
    if per_kind < 1 or shots < 0:
        raise ValueError(f"few_shot_probe_set: per_kind must be >= 1 and shots >= 0, got {per_kind} and {shots}")
    items: list[FewShotProbe] = []
    for kind, draw in PROBE_FAMILIES.items():
        rng = random.Random(f"real-model-probes:{kind}")
        seen: set[str] = set()
        mine = 0
        while mine < per_kind:
            examples = tuple(draw(rng) for _ in range(shots))
            question, answer = draw(rng)
            if question in seen or any(question == q for q, _ in examples):
                continue
            seen.add(question)
            mine += 1
            items.append(FewShotProbe(id=stable_hash("real-model-probe", kind, question, examples), kind=kind,
                                      question=question, answer=answer, shots=examples))
    return items
