"""``world_exec``: tool calls verified by executing them in the pivot's world.

The expert's calls and the candidate's run on two copies of the world at the pivot (each copy:
the task's start state plus the context's earlier tool calls replayed, see
:meth:`pivot_envs.worlds.World.at_pivot`). They are equivalent when

* the world's digests after the two sequences are equal (the same state change, or none), and
* the normalised tool outputs agree as a multiset (the same information came back; the order of
  parallel calls in one turn is free).

That settles what string rules cannot: whether ``"ECONOMY"`` means ``"economy"``, whether an
omitted argument has a default, whether two different ids name the same record. Compose it after a
cheap check, so execution only decides what strings could not accept::

    {"name": "cascade", "stages": [{"role": "accept", "verifier": "tool_call"},
                                   {"role": "decide", "verifier": {"name": "world_exec", "world": "tool_use"}}]}

Outputs are normalised before comparison: JSON outputs as canonical JSON (key order free),
other text with whitespace collapsed. A turn without tool calls on both sides is decided by
``text_verifier`` (default ``fuzzy``); calls on one side only fail.

The world is ``world`` (a world spec: a built-in or registered world's name, ``mcp:COMMAND``, a
config dict, a World subclass or a zero-argument factory; a World instance is refused) or, when
``None``, the pivot's domain world. The verifier builds its own world from the spec (never one that
an episode or another verifier uses) and runs one sequence at a time on it; each verification starts
it afresh at the pivot, with the task's world settings (``pivot.meta["world"]["config"]``). The
expert's outcome is cached per pivot (its id, context, expert, tools and world settings). A world
that fails (``WorldError``: the sandbox or server is gone) is an error result, never a 0 or 1.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from pivot_envs.domains import get_domain
from pivot_envs.types import Action, Pivot, VerifyResult, stable_hash
from pivot_envs.verifiers.base import Verifier, register_verifier
from pivot_envs.verifiers.compose import build_child
from pivot_envs.cache import LRUCache
from pivot_envs.worlds import WorldError, WorldTask, build_world

Outcome = tuple[str, tuple[str, ...]]
"""What a sequence of calls did: (digest after, normalised outputs in call order)."""


@register_verifier("world_exec", accepted_by="effect")
@dataclass
class WorldExecVerifier(Verifier):
    """Equivalent when executing both sides in the pivot's world leaves the same state and outputs."""

    world: Any = None
    """The world (name, ``mcp:COMMAND``, config dict, World subclass or factory); ``None``: the pivot's domain world."""
    compare_outputs: bool = True
    """Also require the normalised tool outputs to agree as a multiset (else the digests alone decide)."""
    text_verifier: Any = "fuzzy"
    """Verifier of turns where neither side made a tool call."""
    cache_size: int = 1024
    """Expert outcomes kept (one per pivot)."""

    _worlds: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _experts: Any = field(default=None, init=False, repr=False, compare=False)
    _text: Verifier = field(init=False, repr=False, compare=False)
    _lock: Any = field(default=None, init=False, repr=False, compare=False)

    name = "world_exec"

    def __post_init__(self) -> None:
        if self.world is not None:
            build_world(self.world).close()  # a bad spec fails when the verifier is built, not per row
        self._text = build_child(self.text_verifier)
        self._experts = LRUCache(self.cache_size)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"world": self.world, "compare_outputs": self.compare_outputs, "text_verifier": self.text_verifier,
                "cache_size": self.cache_size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]  # unpickling: the config rebuilds the derived state

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        expert_calls, cand_calls = _calls(pivot.expert), _calls(action.message)
        if not expert_calls and not cand_calls:
            return self._text.safe_verify(action, pivot)
        if not expert_calls or not cand_calls:
            side = "the action" if cand_calls else "the expert"
            return VerifyResult(0.0, False, self.name, f"only {side} made tool calls")
        try:
            with self._lock:  # one world object per spec: sequences run one at a time
                expert, _ = self._experts.get_or_compute(_expert_key(pivot), lambda: self._run(pivot, expert_calls))
                cand = self._run(pivot, cand_calls)
        except (WorldError, ValueError) as exc:
            return VerifyResult.failure(self.name, f"pivot {pivot.id}: world: {exc}")
        return self._compare(expert, cand)

    def close(self) -> None:
        for world in self._worlds.values():
            world.close()
        self._worlds.clear()

    # ------------------------------------------------------------------ internals

    def _world_for(self, pivot: Pivot) -> Any:
        spec = self.world
        if spec is None:
            spec = get_domain(pivot.domain).world if pivot.domain else None
            if spec is None:
                raise ValueError(f"domain {pivot.domain!r} has no world: give one (world=..., CLI --world SPEC)")
        key = json.dumps(spec, sort_keys=True, default=str)
        if key not in self._worlds:
            self._worlds[key] = build_world(spec)
        return self._worlds[key]

    def _run(self, pivot: Pivot, calls: list[tuple[str, str]]) -> Outcome:
        world = self._world_for(pivot)
        world.at_pivot(WorldTask.from_pivot(pivot), pivot.context)
        outputs = tuple(world.normalize_output(world.call(name, args).content) for name, args in calls)
        return world.digest(), outputs

    def _compare(self, expert: Outcome, cand: Outcome) -> VerifyResult:
        if expert[0] != cand[0]:
            return VerifyResult(0.0, False, self.name, "the world's state differs after the calls")
        if self.compare_outputs:
            if len(expert[1]) != len(cand[1]):
                return VerifyResult(0.0, False, self.name, f"{len(cand[1])} tool outputs != {len(expert[1])}")
            missing = _multiset_difference(expert[1], cand[1])  # parallel calls: their order is free
            if missing:
                extra = _multiset_difference(cand[1], expert[1])
                return VerifyResult(0.0, False, self.name,
                                    f"tool outputs differ: {_short(extra[0])} where the expert got {_short(missing[0])}")
        return VerifyResult(1.0, True, self.name, "same state and tool outputs" if self.compare_outputs else "same state")


def _expert_key(pivot: Pivot) -> str:
    """What the expert's outcome depends on: rows that reuse an id with another task never share it."""
    fixture = pivot.fixture.to_dict() if pivot.fixture is not None else None
    return stable_hash(pivot.id, pivot.domain, pivot.context, pivot.expert, pivot.tools,
                       pivot.meta.get("world"), fixture)


def _multiset_difference(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """Items of ``a`` not matched one-to-one by items of ``b``."""
    left = list(b)
    out = []
    for item in a:
        if item in left:
            left.remove(item)
        else:
            out.append(item)
    return out


def _calls(message: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        out.append((str(fn.get("name", "")), args if isinstance(args, str) else json.dumps(args or {})))
    return out


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
