"""Per-turn rewards on ``/verify``: rows that carry a whole episode get ``step_rewards``.

A verify row scores one action at one pivot: the row's ``input`` is the context, ``expected_action``
the expert's action, ``response.output`` the model's. A row that also carries ``expected_output``
is an **episode row**: ``expected_output`` is the expert's continuation from the row's input, as
Responses output items (its ``function_call`` and assistant ``message`` items, the
``function_call_output`` items that answered its calls, any ``user`` message items), and
``response.output`` may hold several assistant turns in the same shape. Both are cut into turns: an
assistant turn is a run of ``function_call`` / ``reasoning`` / assistant ``message`` items, ended by
what comes back (``function_call_output`` items, messages of other roles). The response's items of
other types are skipped (as ``extract_action`` skips them); ``expected_output`` must start with an
action and holds only these types.

Each assistant turn of the response is scored against the expert's turn at the same position, at
that turn's pivot (the row's context plus the expert's turns and what came back to them before it),
while the response is **on the expert's path**, as in :mod:`pivot_envs.episodes`: every earlier
turn scored 1.0 (and passed) and what came back after it equals what came back to the expert (the
same tool outputs, in any order within the turn, call ids aside; the same user messages). The answer
gains:

* ``step_rewards``: one per assistant turn of the response, the verifier's reward in [0, 1] on the
  path, ``null`` off it (after a turn below 1.0, other tool outputs, a verifier failure, or past the
  expert's last turn);
* ``step_errors``: one per turn, ``null`` or the verifier failure of that turn (its reward is then
  ``null``, never a silent 0, and the path ends there).

``reward``, ``passed``, ``reason``, ``error`` and ``verifier`` are the first turn's: the action at the
row's pivot, which is what every verify row scores (so a one-turn response scores as a plain row; a
plain row, without ``expected_output``, still reads its whole output as one action, as NeMo Gym's
``extract_action`` does). An episode row needs no ``expected_action``: the expert's first turn is it
(one given beside ``expected_output`` is not used). Turns are scored one after another, so a
verifier runs only while the response is on the path.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pivot_envs.actions import parse_action
from pivot_envs.episodes import same_observations
from pivot_envs.formats.responses import (ITEM_TYPES, content_from_parts, input_to_messages, message_to_expected,
                                          output_text)
from pivot_envs.jsonl import BadRowError
from pivot_envs.serve.row_reader import READER, BodyError, RowInfo, RowReader, body_error, action_from_response
from pivot_envs.types import Message, Pivot, VerifyResult, stable_hash

EPISODE_FIELD = "expected_output"
STEP_FIELDS = ("step_rewards", "step_errors")


def is_episode_row(body: Any) -> bool:
    """Whether a verify body carries a whole episode (``expected_output``)."""
    return isinstance(body, dict) and EPISODE_FIELD in body


@dataclass
class Turn:
    """One assistant turn of a response's output: its items, the items that came back after it, and
    their positions in the output (for error messages)."""

    actions: list[dict[str, Any]] = field(default_factory=list)
    after: list[dict[str, Any]] = field(default_factory=list)
    after_at: list[int] = field(default_factory=list)


def _kind(item: dict[str, Any]) -> Any:
    return item.get("type", "message" if "role" in item else None)


def _is_action(item: dict[str, Any]) -> bool:
    kind = _kind(item)
    if kind == "message":
        return item.get("role", "assistant") == "assistant"
    return kind in ("function_call", "reasoning")


def split_turns(items: Any, field_name: str) -> list[Turn]:
    """A response's output items -> its assistant turns (see the module docstring); :class:`BodyError`
    names a bad item."""
    if not isinstance(items, list):
        raise BodyError(field_name, "must be a list of Responses output items")
    turns: list[Turn] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise BodyError(f"{field_name}[{i}]", "an output item must be an object")
        if _kind(item) not in ITEM_TYPES:
            continue  # other items (a web search call...) are neither actions nor tool results: skipped
        if _kind(item) == "message" and "type" not in item:
            item = {"type": "message", **item}  # a message item may leave its type out (input style)
        if _is_action(item):
            if not turns or turns[-1].after:
                turns.append(Turn())
            turns[-1].actions.append(item)
        elif not turns:
            raise BodyError(f"{field_name}[{i}]", "comes before any assistant turn (the output starts with the "
                                                  "model's function_call or message items)")
        else:
            turns[-1].after.append(item)
            turns[-1].after_at.append(i)
    return turns


def expert_turns(items: Any) -> list[tuple[Message, list[Message]]]:
    """``expected_output`` -> the expert's turns as (its assistant message, the messages that came back);
    :class:`BodyError` names a bad item."""
    if not isinstance(items, list) or not items:
        raise BodyError(EPISODE_FIELD, "must be a non-empty list of Responses output items (the expert's "
                                       "function_call / message items and what came back)")
    first = items[0]
    if not isinstance(first, dict) or not _is_action(first):
        raise BodyError(f"{EPISODE_FIELD}[0]", "must be the expert's first action (a function_call, reasoning or "
                                               "assistant message item), not what came back")
    typed = [{**item, "role": item.get("role", "assistant")} if isinstance(item, dict) and _kind(item) == "message"
             else item for item in items]  # an output-style message item may leave its role out
    try:
        messages = input_to_messages(typed, EPISODE_FIELD)
    except BadRowError as exc:
        raise body_error(exc) from None
    turns: list[tuple[list[Message], list[Message]]] = []
    for m in messages:  # each run of assistant messages is one turn, the messages after it came back
        if m.get("role") == "assistant":
            if not turns or turns[-1][1]:
                turns.append(([], []))
            turns[-1][0].append(m)
        else:
            turns[-1][1].append(m)
    return [(_merge(said), came_back) for said, came_back in turns]


def _merge(messages: list[Message]) -> Message:
    """Several assistant messages of one turn (a reasoning item, a text, calls) as one."""
    out: Message = {"role": "assistant", "content": None}
    for m in messages:
        if out["content"] is None and m.get("content") is not None:
            out["content"] = m["content"]
        if m.get("tool_calls"):
            out.setdefault("tool_calls", []).extend(m["tool_calls"])
    if out["content"] is None and not out.get("tool_calls"):
        out["content"] = ""
    return out


def _came_back(turn: Turn, field_name: str) -> list[Message]:
    """What came back after one of the response's turns, as chat messages (for the path check only)."""
    out: list[Message] = []
    try:
        for item, at in zip(turn.after, turn.after_at):
            if _kind(item) == "function_call_output":
                out.append({"role": "tool", "content": output_text(item.get("output"), f"{field_name}[{at}].output")})
            else:
                out.append({"role": item.get("role"), "content": content_from_parts(item.get("content"),
                                                                                   f"{field_name}[{at}].content")})
    except BadRowError as exc:
        raise body_error(exc) from None
    return out


def episode_pivot(body: dict[str, Any], domain: str, reader: RowReader | None = None,
                  info: RowInfo | None = None) -> tuple[Pivot, list[tuple[Message, list[Message]]]]:
    """The row's pivot (its expert: the first expert turn) and the expert's turns as (message, came back)."""
    expert = expert_turns(body[EPISODE_FIELD])
    pivot = (reader or READER).pivot({**body, "expected_action": message_to_expected(expert[0][0])}, domain, info)
    return dataclasses.replace(pivot, expert=expert[0][0]), expert


def score_episode(body: dict[str, Any], pivot: Pivot, expert: list[tuple[Message, list[Message]]],
                  verifier: Any) -> list[VerifyResult | None]:
    """One result per assistant turn of ``body``'s response: the verifier's on the expert's path, else ``None``."""
    turns = split_turns(body["response"].get("output"), "response.output") or [Turn()]
    results: list[VerifyResult | None] = []
    context = list(pivot.context)
    on_path = True
    for k, turn in enumerate(turns):
        if not on_path or k >= len(expert):
            results.append(None)
            on_path = False
            continue
        message, came_back = expert[k]
        here = pivot if k == 0 else Pivot(id=stable_hash(pivot.id, k, context, message), domain=pivot.domain,
                                          context=context, expert=message, tools=pivot.tools, meta=pivot.meta)
        action = parse_action(action_from_response({"output": turn.actions}, "response"))
        result = verifier.safe_verify(action, here)
        results.append(result)
        on_path = (not result.error and result.passed and result.reward >= 1.0
                   and same_observations(_came_back(turn, "response.output"), came_back))
        context = context + [message] + came_back
    return results


def step_fields(results: list[VerifyResult | None]) -> dict[str, list[Any]]:
    """``step_rewards`` and ``step_errors`` of the results of :func:`score_episode`."""
    rewards: list[float | None] = []
    errors: list[str | None] = []
    for r in results:
        failed = r is not None and bool(r.error)
        rewards.append(None if r is None or failed else min(1.0, max(0.0, float(r.reward))))
        errors.append(f"{r.verifier}: {r.error}" if failed else None)
    return {"step_rewards": rewards, "step_errors": errors}
