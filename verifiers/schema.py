"""``schema``: JSON-Schema validation of an action's form (Draft 2020-12, ``jsonschema``).

This verifier checks *form*, not equivalence: it passes any action that is
well formed, whatever it does.

- Without ``output_schema`` (default): every tool call of the action must name
  a tool declared at the pivot (when the pivot declares tools) and carry
  arguments that are a JSON object valid against that tool's ``parameters``.
  A tool with no ``parameters`` accepts any JSON object. When the expert made
  tool calls and ``require_calls`` is on, an action without calls fails; an
  action without calls at a text turn passes.
- With ``output_schema``: the action's text content (optionally inside a
  ```` ```json ```` fence) must be JSON valid against that schema.

Values are validated as given: ``"5"`` is not an ``integer`` here (use
``tool_call`` for equivalence with coercion). A tool whose declared schema is
itself invalid makes the result an ``error`` (the pivot's data is at fault,
not the action). Compiled validators are cached by the schema's canonical
JSON (bounded ``functools.lru_cache``) and per pivot.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError, best_match

from pivot_envs.types import Action, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier, register_verifier
from pivot_envs.verifiers.compose import PicklesByConfig
from pivot_envs.verifiers.helpers.normalize import (
    BadArguments,
    PivotCache,
    canonical_json,
    message_calls,
    message_content,
    parse_arguments,
)

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@functools.lru_cache(maxsize=512)
def compiled_validator(schema_json: str, check_formats: bool = False) -> jsonschema.protocols.Validator:
    """A Draft 2020-12 validator for the schema given as (canonical) JSON text.

    Raises :class:`jsonschema.exceptions.SchemaError` when the schema is invalid.
    """
    schema = json.loads(schema_json)
    cls = jsonschema.Draft202012Validator
    cls.check_schema(schema)
    checker = cls.FORMAT_CHECKER if check_formats else None
    return cls(schema, format_checker=checker)


def validator_for(schema: dict[str, Any], check_formats: bool = False) -> jsonschema.protocols.Validator:
    """The cached compiled validator of ``schema`` (see :func:`compiled_validator`)."""
    return compiled_validator(canonical_json(schema), check_formats)


def describe_error(error: jsonschema.ValidationError) -> str:
    """A one-line description of a validation error with the path of the value."""
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
    where = f"argument {path!r}: " if path else ""
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    return where + message


@dataclass
class _Tools:
    declared: bool
    """Whether the pivot declares any tools (else any tool name is accepted)."""
    validators: dict[str, Any]
    """Tool name -> compiled validator, None (no parameters schema) or a SchemaError text."""
    expert_calls: bool


@register_verifier("schema")
@dataclass
class SchemaVerifier(PicklesByConfig, Verifier):
    """Valid tool-call arguments (or a valid JSON answer) by JSON Schema (see the module docstring)."""

    output_schema: dict[str, Any] | None = None
    """When set, validate the action's content parsed as JSON against this schema instead of tool calls."""
    require_calls: bool = True
    """When the expert made tool calls, fail an action that makes none."""
    check_formats: bool = False
    """Also assert ``format`` keywords (``date``, ``email``, ...)."""

    _cache: PivotCache = field(init=False, repr=False, compare=False)
    _output: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._output = None
        if self.output_schema is not None:
            if not isinstance(self.output_schema, dict):
                raise ValueError(f"output_schema must be a JSON Schema object, got {type(self.output_schema).__name__}")
            try:
                self._output = validator_for(self.output_schema, self.check_formats)
            except SchemaError as exc:
                raise ValueError(f"output_schema is not a valid JSON Schema: {exc.message}") from None
        self._cache = PivotCache()

    def _tools(self, pivot: Pivot) -> _Tools:
        validators: dict[str, Any] = {}
        for tool in pivot.tools:
            fn = tool.get("function", tool) if isinstance(tool, dict) else {}
            name = fn.get("name") if isinstance(fn, dict) else None
            if not isinstance(name, str):
                continue
            params = fn.get("parameters")
            if not isinstance(params, dict):
                validators[name] = None
                continue
            try:
                validators[name] = validator_for(params, self.check_formats)
            except SchemaError as exc:
                validators[name] = f"tool {name!r} of pivot {pivot.id!r} declares an invalid JSON Schema: {exc.message}"
        return _Tools(bool(pivot.tools), validators, bool(pivot.expert.get("tool_calls")))

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        if self._output is not None:
            return self._verify_output(action)
        tools = self._cache.get(pivot, self._tools)
        calls = message_calls(action.message)
        if not calls:
            if tools.expert_calls and self.require_calls:
                return VerifyResult(0.0, False, self.name, "expected a tool call, got a text reply")
            return VerifyResult(1.0, True, self.name, "no tool call to validate")
        for name, raw in calls:
            if tools.declared and name not in tools.validators:
                known = ", ".join(sorted(tools.validators))
                return VerifyResult(0.0, False, self.name, f"tool {name!r} is not declared (declared: {known})")
            args = parse_arguments(raw)
            if isinstance(args, BadArguments):
                return VerifyResult(0.0, False, self.name, f"call {name!r}: {args.why}")
            validator = tools.validators.get(name)
            if isinstance(validator, str):
                return VerifyResult.failure(self.name, validator)
            if validator is not None and not validator.is_valid(args):
                error = best_match(validator.iter_errors(args))
                return VerifyResult(0.0, False, self.name, f"call {name!r}: {describe_error(error)}")
        n = len(calls)
        return VerifyResult(1.0, True, self.name, f"{n} valid tool call{'s' if n > 1 else ''}")

    def _verify_output(self, action: Action) -> VerifyResult:
        text = message_content(action.message).strip()
        fenced = _FENCE.match(text)
        if fenced:
            text = fenced.group(1)
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            return VerifyResult(0.0, False, self.name, f"content is not valid JSON ({exc})")
        if not self._output.is_valid(value):
            error = best_match(self._output.iter_errors(value))
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            return VerifyResult(0.0, False, self.name, f"content{path}: {error.message[:160]}")
        return VerifyResult(1.0, True, self.name, "content is valid against output_schema")
