"""Batch verification of (expected, action) rows: the engine behind ``pivot-envs verify``.

Input row (JSONL)::

    {"id": ..., "expected": <assistant message or text>, "action": <assistant message or raw model text>,
     "tools": [OpenAI tool specs], "context": [messages], "fixture": {"files", "setup", "workdir"},
     "domain": "tool_use", "meta": {...}, "verifier": NAME or config}   # all but expected/action optional

``meta`` is the pivot's ``meta``, as pivot JSONL carries it: ``world_exec`` builds the task's world
from ``meta["world"]["config"]`` (the task's world settings, e.g. ``world_seed``). A row's own
``verifier`` replaces the default verifier (the command's ``--verifier``/``--config``/``--world``),
except that a row naming the *same* verifier keeps the default's parameters: by name alone it gets
them all, as a config it adds its own; a parameter the row sets to another value is an error row
(never a silent replacement of the command's settings).

Output row, one per input row and in input order::

    {"id", "reward", "passed", "verifier", "reason", "error"}

A bad row yields an output row whose ``error`` names the line and the problem;
the other rows are verified as usual.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, cast

from pivot_envs.actions import parse_action
from pivot_envs.jsonl import iter_json_lines
from pivot_envs.types import Action, Fixture, Pivot, VerifyResult
from pivot_envs.verifiers import Verifier
from pivot_envs.verifiers.batch import VerifierResolver, verify_batch

CHUNK = 128


@dataclass
class Row:
    """One parsed input row (or the error that made it unusable)."""

    line: int
    id: Any
    pivot: Pivot | None = None
    action: Action | None = None
    verifier: Any = None
    error: str | None = None


def parse_row(obj: Any, line: int, path: str) -> Row:
    """Turn one JSON object into a Row; problems become ``Row.error`` naming file, line and field."""
    if not isinstance(obj, dict):
        return Row(line, None, error=f"{path}:{line}: the row must be a JSON object")
    rid = obj.get("id", line)
    for key in ("expected", "action"):
        if key not in obj:
            return Row(line, rid, error=f"{path}:{line}: field '{key}' is missing (an assistant message or text)")
    try:
        expert = parse_action(_message_or_text(obj["expected"], "expected")).message
        action = parse_action(_message_or_text(obj["action"], "action"))
        context = obj.get("context") or []
        if not isinstance(context, list):
            raise ValueError("field 'context': must be a list of messages")
        tools = obj.get("tools") or []
        if not isinstance(tools, list):
            raise ValueError("field 'tools': must be a list of OpenAI tool specs")
        try:
            fixture = Fixture.from_dict(obj.get("fixture"))
        except ValueError as exc:
            raise ValueError(f"field 'fixture': {exc}") from None
        meta = obj.get("meta") or {}
        if not isinstance(meta, dict):
            raise ValueError("field 'meta': must be a JSON object (the pivot's meta, "
                             "e.g. {\"world\": {\"config\": {...}}})")
    except ValueError as exc:
        return Row(line, rid, error=f"{path}:{line}: {exc}")
    pivot = Pivot(id=str(rid), domain=str(obj.get("domain") or ""), context=context, expert=expert,
                  tools=tools, fixture=fixture, meta=meta)
    return Row(line, rid, pivot=pivot, action=action, verifier=obj.get("verifier"))


def _message_or_text(value: Any, name: str) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value.get("role", "assistant") == "assistant":
        return {**value, "role": "assistant"}
    raise ValueError(f"field '{name}': must be an assistant message object or a string")


def read_rows(path: str | Path) -> Iterator[Row]:
    for line, obj in iter_json_lines(path):
        if isinstance(obj, Exception):
            yield Row(line, None, error=str(obj))
        else:
            yield parse_row(obj, line, str(path))


def verify_rows(rows: list[Row], default_verifier: Any) -> list[dict[str, Any]]:
    """Verify rows in order (one process). Rows sharing a verifier are verified with one ``verify_many``.

    A row's verifier is its own ``verifier`` field (with ``default_verifier``'s parameters when it
    names the same verifier: :func:`row_verifier_spec`), else ``default_verifier``, else its domain's
    default, else ``tool_call``.
    """
    resolver = VerifierResolver(fallback="tool_call")
    out: list[dict[str, Any] | None] = [None] * len(rows)
    chosen: dict[int, Verifier] = {}
    for i, row in enumerate(rows):
        if row.error is not None:
            out[i] = _error_row(row.id, row.error)
            continue
        try:
            spec = row_verifier_spec(row.verifier, default_verifier)
            chosen[i] = resolver.get(spec, row.pivot.domain if row.pivot is not None else "")
        except (ValueError, TypeError) as exc:
            out[i] = _error_row(row.id, f"line {row.line}: field 'verifier': {exc}")
    todo = list(chosen)
    # a row without an error has its action and pivot
    results = verify_batch([cast(Action, rows[i].action) for i in todo], [cast(Pivot, rows[i].pivot) for i in todo],
                           [chosen[i] for i in todo])
    for i, res in zip(todo, results):
        # verified_by: the verifier the row was given (its own, the command's or its domain's default); the
        # result's `verifier` names the part of it that decided (a final_turn's facts or tool_call)
        out[i] = {"id": rows[i].id, **res.to_dict(), "verified_by": chosen[i].name}
    return [o for o in out if o is not None]


def row_verifier_spec(own: Any, default: Any) -> Any:
    """The verifier spec of a row whose own ``verifier`` field is ``own``, given the ``default`` spec.

    ``own`` is ``None``: ``default``. ``own`` names another verifier than ``default``: ``own``.
    ``own`` names the same verifier: ``default``'s parameters still apply (a bare name gets them
    all; a config adds its own parameters to them), and a parameter set to another value in both
    raises ``ValueError`` naming it, so a row never silently replaces the command's settings.
    """
    if own is None:
        return default
    base = _as_config(default)
    if base is None or len(base) == 1 or _spec_name(own) != base.get("name"):
        return own
    if not isinstance(own, dict):
        return base
    clashes = [k for k in own if k != "name" and k in base and own[k] != base[k]]
    if clashes:
        key = clashes[0]
        raise ValueError(f"{own!r} sets {key!r} to {own[key]!r}, but the command's {base['name']} verifier has "
                         f"{key}: {base[key]!r}; drop {key!r} from the row (or from the command), "
                         "or name another verifier")
    return {**base, **own}


def _as_config(spec: Any) -> dict[str, Any] | None:
    """A verifier spec as a config dict (``None`` for no spec)."""
    if spec is None:
        return None
    if isinstance(spec, str):
        return {"name": spec}
    if isinstance(spec, dict):
        return dict(spec)
    if isinstance(spec, Verifier):
        return spec.config()
    return None


def _spec_name(spec: Any) -> Any:
    return spec.get("name") if isinstance(spec, dict) else spec


def _error_row(rid: Any, error: str) -> dict[str, Any]:
    return {"id": rid, **VerifyResult.failure("input", error).to_dict(), "reason": "bad input row"}


def verify_file(
    path: str | Path,
    default_verifier: Any = None,
    workers: int = 1,
    on_done: Callable[[int], None] | None = None,
) -> Iterator[dict[str, Any]]:
    """Verify every row of ``path``; yields output rows in input order.

    ``workers > 1`` verifies chunks of rows in a process pool (verifiers are
    shipped as configs, so each worker builds its own).
    """
    chunks = _chunks(read_rows(path), CHUNK)
    if workers <= 1:
        for chunk in chunks:
            results = verify_rows(chunk, default_verifier)
            if on_done:
                on_done(len(chunk))
            yield from results
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for results in pool.map(verify_rows, chunks, _repeat(default_verifier)):
            if on_done:
                on_done(len(results))
            yield from results


def _repeat(value: Any) -> Iterator[Any]:
    while True:
        yield value


def _chunks(rows: Iterator[Row], size: int) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@dataclass
class MissRateReport:
    """Strict vs functional pass rates over (expected, action) pairs; miss rate P[strict=0 | functional=1]."""

    pairs: int = 0
    errors: int = 0
    functional_pass: int = 0
    strict_pass: int = 0
    missed: int = 0  # functional = 1 and strict = 0

    @property
    def miss_rate(self) -> float:
        return self.missed / self.functional_pass if self.functional_pass else float("nan")

    def to_dict(self) -> dict[str, Any]:
        scored = self.pairs - self.errors
        return {
            "pairs": self.pairs,
            "errors": self.errors,
            "functional_pass_rate": self.functional_pass / scored if scored else float("nan"),
            "strict_pass_rate": self.strict_pass / scored if scored else float("nan"),
            "miss_rate": self.miss_rate,
        }


def miss_rate_report(functional: list[dict[str, Any]], strict: list[dict[str, Any]]) -> MissRateReport:
    """Combine functional and strict output rows (same order) into a miss-rate report; errors are excluded."""
    report = MissRateReport()
    for f, s in zip(functional, strict):
        report.pairs += 1
        if f.get("error") or s.get("error"):
            report.errors += 1
            continue
        report.functional_pass += int(f["passed"])
        report.strict_pass += int(s["passed"])
        report.missed += int(f["passed"] and not s["passed"])
    return report
