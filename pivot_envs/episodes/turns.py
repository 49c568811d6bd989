"""Per-turn rewards of an episode: the verifier's reward for each agent turn on the expert's path.

The episode is **on the expert's path** at an agent turn when its messages so far are the expert's up to
equivalent actions, which holds when

* it started at the task's first turn or at one of its pivots (the expert's own messages),
* every earlier agent action of the episode was judged equivalent to the expert's action at its turn (the
  verifier's reward 1.0 and ``passed``), and
* everything that came back after each of those actions equals what came back to the expert: the same tool
  results (in any order within the turn; call ids aside) and the same user replies
  (:func:`same_observations`). The tool results stand for the world's state (no digest is taken per turn).

On the path, the turn's reward is the verifier's reward (a float in [0, 1]) for this turn's action against
the expert's action at this turn, at the pivot extraction makes of that turn (:func:`expert_pivot`). Off the
path (an earlier action below 1.0, other tool results or user replies, an earlier verifier error, a turn past
the expert's last one) it is ``None``, for the rest of the episode. A verifier failure gives ``None`` and an
error naming it (never a silent 0), and leaves the path. :class:`TurnScorer` keeps this for one env, and the
step's :class:`TurnVerdict` (the action, the expert's pivot and the verifier's result: what the hack monitor,
:mod:`pivot_envs.verifiers.hack_monitor`, counts over).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from pivot_envs.domains import Domain
from pivot_envs.pipeline.extract import make_pivot
from pivot_envs.types import Action, Message, Pivot, Trajectory, VerifyResult, content_text, stable_hash
from pivot_envs.verifiers import Verifier, build_verifier

DOMAINLESS_VERIFIER = "tool_call"
"""The per-turn verifier of an episode env without a domain (and without ``verifier=``)."""

MAX_CACHED_PIVOTS = 4096
"""How many expert pivots (per task and turn) a scorer keeps before it starts over."""


@dataclass(frozen=True)
class TurnVerdict:
    """One judged turn: the parsed action, the expert's pivot at that turn and the verifier's result."""

    action: Action
    pivot: Pivot
    result: VerifyResult


def turn_verifier(spec: Any, domain: Domain | None) -> Verifier:
    """The verifier of the per-turn rewards: ``spec``, else the domain's default (:data:`DOMAINLESS_VERIFIER`
    without a domain)."""
    if spec is None:
        spec = domain.verifier_spec() if domain is not None else DOMAINLESS_VERIFIER
    return build_verifier(spec)


def expert_pivot(task: Trajectory, i: int, domain: Domain | None, tools: list[dict[str, Any]]) -> Pivot:
    """The pivot of ``task``'s assistant turn ``i``: the domain's extraction of it
    (:func:`pivot_envs.pipeline.extract.extract_pivots`: context, expert, fixture at the turn, world
    settings), or without a domain the plain cut; ``tools`` stand in for a task that lists none."""
    if domain is not None:
        pivot = make_pivot(task, i, domain)
    else:
        pivot = Pivot(id=stable_hash("", task.id, i), domain="", context=task.messages[:i], expert=task.messages[i],
                      tools=task.tools, fixture=task.fixture, meta={"trajectory_id": task.id, "turn": i})
    return pivot if pivot.tools else dataclasses.replace(pivot, tools=list(tools))


def same_observations(agent: Sequence[Message], expert: Sequence[Message]) -> bool:
    """Whether the messages that came back after an agent's action (tool results, user replies) are the
    ones that came back to the expert: the same roles in order, the same contents (a turn's tool results
    in any order; tool-call ids and names aside)."""
    if [m.get("role") for m in agent] != [m.get("role") for m in expert]:
        return False

    def keys(messages: Sequence[Message]) -> list[tuple[str, str]]:
        return [(str(m.get("role")), content_text(m.get("content"))) for m in messages]

    return keys(agent) == keys(expert) or sorted(keys(agent)) == sorted(keys(expert))


class TurnScorer:
    """The per-turn rewards of one env's episodes (see the module docstring).

    ``verifier``: the verifier that judges each turn; ``None`` scores nothing (every turn's reward is
    ``None`` and the episode is off the path from its first step). Per episode (:meth:`clear` starts one):
    ``rewards`` (one per agent turn), ``reward``, ``error`` and ``verdict`` (this step's; ``verdict`` is ``None``
    where the turn was not judged), ``errors`` (the episode's verifier failures) and ``on_path`` (whether the next
    turn is still on the expert's path).
    """

    def __init__(self, verifier: Verifier | None, domain: Domain | None):
        self.verifier = verifier
        self.domain = domain
        self._pivots: dict[tuple[str, int], Pivot] = {}
        self.clear()

    def clear(self) -> None:
        """Start an episode."""
        self.rewards: list[float | None] = []
        self.reward: float | None = None
        self.error: str | None = None
        self.verdict: TurnVerdict | None = None
        self.errors: list[str] = []
        self.on_path = True

    def leave_path(self) -> None:
        """This step gets no turn reward, and the episode is off the expert's path from now on."""
        self.reward = self.error = self.verdict = None
        self.rewards.append(None)
        self.on_path = False

    def score(self, action: Action, task: Trajectory, recorded: Sequence[int], k: int, at: int,
              tools: list[dict[str, Any]]) -> int | None:
        """Judge ``action`` (the agent's ``k``-th turn, about to be appended at message ``at``) against the
        expert's action at this turn while on the path; ``recorded`` lists the expert's assistant turns (message
        indices). Returns ``k`` while on the path, else ``None``."""
        if self.verifier is None or not self.on_path or k >= len(recorded) or recorded[k] != at:
            self.leave_path()
            return None
        pivot = self._pivot(task, recorded[k], tools)
        result = self.verifier.safe_verify(action, pivot)
        if result.error:
            self.leave_path()
            self.error = f"{result.verifier}: {result.error}"
            self.errors.append(self.error)
            self.verdict = TurnVerdict(action, pivot, result)
            return None
        self.reward = min(1.0, max(0.0, float(result.reward)))
        self.error = None
        self.verdict = TurnVerdict(action, pivot, result)
        self.rewards.append(self.reward)
        self.on_path = bool(result.passed) and self.reward >= 1.0
        return k if self.on_path else None

    def follow(self, turn: int | None, task: Trajectory, recorded: Sequence[int], came_back: Sequence[Message],
               failed: bool) -> None:
        """After the step of expert turn ``turn``: the episode stays on the path when what came back
        (``came_back``: tool results, user replies) is what came back to the expert, and nothing ``failed``."""
        if turn is None or not self.on_path:
            return
        at = recorded[turn]
        end = recorded[turn + 1] if turn + 1 < len(recorded) else len(task.messages)
        if failed or not same_observations(came_back, task.messages[at + 1:end]):
            self.on_path = False

    def _pivot(self, task: Trajectory, i: int, tools: list[dict[str, Any]]) -> Pivot:
        """The expert's pivot at message ``i`` of ``task`` (cached per task and turn)."""
        key = (task.id, i)
        pivot = self._pivots.get(key)
        if pivot is None:
            pivot = expert_pivot(task, i, self.domain, tools)
            if len(self._pivots) >= MAX_CACHED_PIVOTS:
                self._pivots.clear()
            self._pivots[key] = pivot
        return pivot
