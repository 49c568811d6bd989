"""``tool_call``: functional equivalence of tool calls.

Two actions are equivalent when they call the same functions with arguments
that *mean* the same, compared as follows.

Calls
    The calls of a turn are a multiset: their order does not matter. Each
    expert call must be matched one-to-one with an action call to the same
    function with equivalent arguments (a bipartite matching, so any valid
    pairing is found). A different number of calls fails (by default: see
    *Parallel calls*).

Parallel calls (NeMo Gym's ``parallel_tool_call_reward_mode``, PR #2463)
    ``parallel`` sets the reward of a turn with calls, from a *maximum*
    matching of expert calls to action calls (``matched`` pairs; ``E``
    expert calls, ``A`` action calls):

    ``"all"`` (default)
        1 when every required call is matched, else 0 (NeMo Gym's
        ``binary_strict``).
    ``"fractional"``
        ``matched / required``: recall only, surplus calls are free.
    ``"f1"``
        ``2 * matched / (E + A)``, the harmonic mean of precision and
        recall: missing and surplus calls cost alike, only the exact set
        scores 1 (NeMo Gym recommends it for RL).

    First a count gate: an action with fewer calls than the expert scores 0
    unless ``allow_fewer_calls`` (NeMo Gym's ``allow_subset``; ``required``
    is then ``min(E, A)``, else ``E``), one with more scores 0 unless
    ``allow_more_calls`` (``allow_superset``). ``passed`` is ``reward ==
    1``. With the defaults (``"all"``, no gate open) the rules of *Calls*
    above apply unchanged; otherwise the reason lists the pairs and the
    misses: ``f1 0.8: 2/3 expert calls matched by 2 action calls: expert
    #1 get_weather = action #2; expert #2 get_weather = action #1; expert
    #3 get_weather unmatched (call 'get_weather': argument 'city': ...)``.
    NeMo Gym's shipped default (``parallel_tool_call_rewarding: false``,
    surplus calls free) is ``"all"`` with ``allow_more_calls``. A
    ``content`` check (see *Text*) runs only on a turn whose calls score 1.

Arguments (parsed from JSON; key order never matters)
    1. Not valid JSON, or not a JSON object: fails, with the parser's message
       (an empty string counts as ``{}``). When the *expert's* arguments are
       not valid JSON, the action passes only with the same text (verbatim,
       surrounding whitespace ignored).
    2. ``null_is_missing``: a top-level argument given as ``null`` counts as
       omitted (unless it is required).
    3. Types (``coerce``). By default (``"off"``) no value changes type: an
       action value must have the JSON type the expert's has, as a backend
       that takes JSON values as they come (tau2-bench's servers, a Python
       tool function) sees them. ``"5"`` is not ``5``, ``12345`` is not
       ``"12345"``, ``'["a"]'`` is not ``["a"]``, and where the schema
       (``pivot.tool_spec(name)``'s ``parameters``) declares ``integer``,
       ``5.0`` is not ``5`` either (``tail(lines=1.0)`` crashes a real
       backend), unless the expert wrote that float too. Executing such
       calls on tau2's airline and retail databases shows each of them does
       something else (``benchmarks/rewards/world_exec_tau2.py``). For a backend
       that validates and converts its inputs (pydantic's lax mode, as
       FastMCP servers do), opt in:

       ``coerce: "strict"`` (the previous default) converts every value to
       its declared type when that is lossless: for ``integer``, integer
       text (``"5"``, ``" 5 "``) becomes ``5`` (a float still is no
       integer); for ``number``, ``"7.5"`` becomes ``7.5``; for
       ``boolean``, ``"true"``/``"false"`` and ``1``/``0``; for ``string``,
       a JSON number becomes its JSON text (``5`` -> ``"5"``, ``5.0`` ->
       ``"5.0"``) and a boolean ``"true"``/``"false"``; an array or object
       encoded as a JSON string is decoded. So under a ``string`` schema
       ``5`` equals ``"5"`` but ``5.0`` does not equal ``"5"``: a string
       parameter is text, and ``"5.0"`` is not the text ``"5"``. Nested
       arrays (``items``) and objects (``properties``) are coerced too;
       ``type`` lists and ``anyOf``/``oneOf`` pick the branch the value
       already fits. ``coerce: "lenient"`` (the first default) also turns
       integral floats and their text (``5.0``, ``"5.0"``) into integers.
    4. ``use_defaults``: an omitted property that declares a ``default``
       equals that default (at every object level of the schema).
    5. Against the schema: an action argument that the schema does not
       declare (and that the expert did not use) fails as ``unknown``, unless
       the schema sets ``additionalProperties`` to ``true`` or a schema; a
       required argument that the action omits (and the expert gave) fails as
       ``missing required``. Without a schema there is no coercion and no
       default: values are compared as parsed (numbers as numbers: ``5.0``
       equals ``5`` when no schema says ``integer``).
    6. Values: numbers by ``math.isclose(rel_tol, abs_tol)`` (two integers
       exactly; booleans are never numbers; NaN equals NaN); strings after the
       ``normalizers`` pipeline (or the argument's own list in
       ``argument_normalizers``), or by rapidfuzz score when the argument has a
       threshold in ``fuzzy_arguments``; arrays in order (as a multiset when
       the schema says ``uniqueItems: true``); objects key by key.

String whitespace
    No normaliser runs by default: ``" ABC123 "`` is not ``"ABC123"``, as it
    is not to a real backend looking up an ID or a name. ``normalizers:
    ["strip"]`` ignores surrounding whitespace (the old default; the terminal
    domain's recipe strips and collapses whitespace in commands, and the
    tool_use domain strips and lower-cases emails and names).

String case
    Strings are compared case-sensitively by default. That is
    right for worlds where IDs, codes and enum values are case-sensitive (tau2-bench's
    airline tools, for one, treat reservation IDs, airport codes and the ``cabin`` and
    ``insurance`` enums so: a call with another case does something else). BFCL's AST checker ignores case and some punctuation;
    ``normalizers: ["bfcl"]`` is its convention (drop spaces and ``,./-_*^``,
    lower-case, ``'`` as ``"``); ``["strip", "lower"]`` ignores case only, and
    ``argument_normalizers`` sets it for chosen arguments (free text) alone::

        build_verifier({"name": "tool_call", "normalizers": ["bfcl"]})                # BFCL
        build_verifier({"name": "tool_call", "argument_normalizers": {"note": ["strip", "lower"]}})

Text
    ``content`` decides what happens to the text of a turn that has calls:
    ``"ignore"`` (default), or a verifier spec (``"fuzzy"``, a judge
    config...) run on the two texts alone when the expert wrote some text.
    When the expert made no call (a text turn), an action with calls fails and
    an action without calls is decided by ``text_verifier`` (default ``fuzzy``).

Reasons say exactly what differed, action value first, e.g.
``call 'book': argument 'amount': 5.0 != 7.5``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, cast

from pivot_envs.types import Action, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier, register_verifier
from pivot_envs.verifiers.compose import PicklesByConfig, build_child
from pivot_envs.verifiers.fuzzy import get_scorer, similarity
from pivot_envs.verifiers.helpers.normalize import (
    BadArguments,
    PivotCache,
    check_normalizers,
    message_calls,
    message_content,
    normalizer_pipeline,
    parse_arguments,
    tool_parameters,
)

PARALLEL_MODES = ("all", "fractional", "f1")
"""Values of ``tool_call``'s ``parallel`` parameter."""
COERCE_MODES = ("strict", "lenient", "off")
"""Values of ``tool_call``'s ``coerce`` parameter (``True`` is ``"strict"``, ``False`` is ``"off"``)."""

_IDENTITY = normalizer_pipeline([])
_INT_TEXT = re.compile(r"[+-]?\d+")
_NUM_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SHOW_LIMIT = 80


# --------------------------------------------------------------------------- coercion by schema

Coercer = Callable[[Any], Any]


def _fits(value: Any, t: str) -> bool:
    """Whether ``value`` already has JSON-Schema type ``t``."""
    if t == "string":
        return isinstance(value, str)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "array":
        return isinstance(value, list)
    if t == "object":
        return isinstance(value, dict)
    if t == "null":
        return value is None
    return False


def coerce(value: Any, schema: Any, use_defaults: bool = True, lenient: bool = False) -> Any:
    """``value`` coerced to the type ``schema`` declares, when that is lossless (else unchanged).

    ``lenient`` also turns integral floats (``5.0``, ``"5.0"``) into integers (``coerce: "lenient"``).
    """
    return compile_coercer(schema, use_defaults, lenient)(value)


def compile_coercer(schema: Any, use_defaults: bool = True, lenient: bool = False,
                    convert: bool = True) -> Coercer:
    """A function coercing values to ``schema``'s declared types (see the module docstring).

    Compiled once per tool schema so that the hot path does no schema lookups. ``convert=False``
    changes no value's type (``coerce: "off"``): it only fills the schema's defaults into objects.
    """
    if not isinstance(schema, dict):
        return _same
    t = schema.get("type")
    if t is None:
        if "properties" in schema:
            t = "object"
        elif "items" in schema or "prefixItems" in schema:
            t = "array"
        else:
            for key in ("anyOf", "oneOf"):
                branches = schema.get(key)
                if isinstance(branches, list):
                    return _branches_coercer(branches, use_defaults, lenient, convert)
            return _same
    if isinstance(t, list):
        types = [x for x in t if isinstance(x, str)]
        coercers = [(x, _typed_coercer(x, schema, use_defaults, lenient, convert)) for x in types]

        def pick(value: Any) -> Any:
            for x, fn in coercers:
                if _fits(value, x):
                    return fn(value)
            for x, fn in coercers:
                out = fn(value)
                if _fits(out, x):
                    return out
            return value

        return pick
    if not isinstance(t, str):
        return _same
    return _typed_coercer(t, schema, use_defaults, lenient, convert)


def _branches_coercer(branches: list, use_defaults: bool, lenient: bool, convert: bool) -> Coercer:
    options = []
    for branch in branches:
        if isinstance(branch, dict):
            t = branch.get("type")
            types = [x for x in (t if isinstance(t, list) else [t]) if isinstance(x, str)]
            options.append((types, compile_coercer(branch, use_defaults, lenient, convert)))

    def pick(value: Any) -> Any:
        for types, fn in options:
            if any(_fits(value, x) for x in types):
                return fn(value)
        return value

    return pick


def _same(value: Any) -> Any:
    return value


def _to_integer(value: Any) -> Any:
    """Integer text (what ``int()`` parses: ``"5"``, ``" 5 "``) becomes the integer; floats stay floats."""
    if isinstance(value, str):
        text = value.strip()
        if _INT_TEXT.fullmatch(text):
            return int(text)
    return value


def _to_integer_lenient(value: Any) -> Any:
    """:func:`_to_integer`, and integral floats and their text (``5.0``, ``"5.0"``, ``"5e0"``) too."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if _NUM_TEXT.fullmatch(text) and not _INT_TEXT.fullmatch(text):
            number = float(text)
            if number.is_integer():
                return int(number)
    return _to_integer(value)


def _to_number(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if _INT_TEXT.fullmatch(text):
            return int(text)
        if _NUM_TEXT.fullmatch(text):
            return float(text)
    return value


def _to_string(value: Any) -> Any:
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return value


def _to_boolean(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if type(value) is int and value in (0, 1):
        return bool(value)
    return value


_SCALARS: dict[str, Coercer] = {"integer": _to_integer, "number": _to_number, "string": _to_string,
                                "boolean": _to_boolean}


def _typed_coercer(t: str, schema: dict, use_defaults: bool, lenient: bool, convert: bool) -> Coercer:
    if not convert and t not in ("array", "object"):
        return _same
    if t == "integer" and lenient:
        return _to_integer_lenient
    if t in _SCALARS:
        return _SCALARS[t]
    if t == "array":
        return _array_coercer(schema, use_defaults, lenient, convert)
    if t == "object":
        return _object_coercer(schema, use_defaults, lenient, convert)
    return _same


def _array_coercer(schema: dict, use_defaults: bool, lenient: bool, convert: bool) -> Coercer:
    items = schema.get("items")
    item = compile_coercer(items, use_defaults, lenient, convert) if isinstance(items, dict) else None
    prefix = schema.get("prefixItems")
    firsts = [compile_coercer(x, use_defaults, lenient, convert) for x in prefix] if isinstance(prefix, list) else None

    def to_array(value: Any) -> Any:
        if convert and isinstance(value, str) and value.lstrip().startswith("["):
            value = _loads_or(value, value)
        if not isinstance(value, list):
            return value
        if firsts is not None:
            rest = item or _same
            return [(firsts[i] if i < len(firsts) else rest)(v) for i, v in enumerate(value)]
        if item is not None:
            return [item(v) for v in value]
        return value

    return to_array


def _object_coercer(schema: dict, use_defaults: bool, lenient: bool, convert: bool) -> Coercer:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    fields = {k: compile_coercer(sub, use_defaults, lenient, convert) for k, sub in props.items()}
    extra_schema = schema.get("additionalProperties")
    extra = compile_coercer(extra_schema, use_defaults, lenient, convert) if isinstance(extra_schema, dict) else _same
    defaults = []
    if use_defaults:
        for k, sub in props.items():
            if isinstance(sub, dict) and "default" in sub:
                defaults.append((k, fields[k](sub["default"])))

    def to_object(value: Any) -> Any:
        if convert and isinstance(value, str) and value.lstrip().startswith("{"):
            value = _loads_or(value, value)
        if not isinstance(value, dict):
            return value
        out = {k: fields.get(k, extra)(v) for k, v in value.items()}
        for k, default in defaults:
            if k not in out:
                out[k] = default
        return out

    return to_object


def _loads_or(text: str, fallback: Any) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return fallback


def _show(value: Any) -> str:
    if isinstance(value, BadArguments):
        text = value.raw
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 3] + "..."


# --------------------------------------------------------------------------- matching


def _augment(i: int, adjacency: list[list[int]], owner: list[int], seen: list[bool]) -> bool:
    """Kuhn's step: pair left node ``i``, re-pairing earlier ones along an augmenting path if need be."""
    for j in adjacency[i]:
        if not seen[j]:
            seen[j] = True
            if owner[j] < 0 or _augment(owner[j], adjacency, owner, seen):
                owner[j] = i
                return True
    return False


def _left_to_right(owner: list[int], n_left: int) -> list[int]:
    match = [-1] * n_left
    for j, i in enumerate(owner):
        if i >= 0:
            match[i] = j
    return match


def maximum_matching(adjacency: list[list[int]], n_right: int) -> list[int]:
    """A maximum matching of a 0/1 bipartite graph (Kuhn's augmenting paths).

    ``adjacency[i]`` lists the right-hand nodes left node ``i`` may pair with.
    Returns ``match[i]`` = the right node of left node ``i``, or -1 where ``i`` stays unpaired.
    """
    owner = [-1] * n_right
    for i in range(len(adjacency)):
        _augment(i, adjacency, owner, [False] * n_right)
    return _left_to_right(owner, len(adjacency))


def perfect_matching(adjacency: list[list[int]], n_right: int) -> list[int] | None:
    """A matching pairing every left node (as :func:`maximum_matching`), or None when there is none."""
    owner = [-1] * n_right
    for i in range(len(adjacency)):
        if not _augment(i, adjacency, owner, [False] * n_right):
            return None
    return _left_to_right(owner, len(adjacency))


@dataclass(frozen=True)
class _Tool:
    """What the comparison needs from a tool's parameters schema, computed once per pivot."""

    schema: dict[str, Any] | None
    props: dict[str, Any] | None
    """Declared properties (None when the schema is unknown or declares none)."""
    required: frozenset[str]
    open: bool
    """``additionalProperties`` is ``true`` or a schema: undeclared arguments are not unknown."""
    coercer: Coercer | None
    """Coerces (and fills defaults into) an arguments object; None when nothing is to be done."""

    @classmethod
    def of(cls, schema: dict[str, Any] | None, coerce: str, use_defaults: bool) -> "_Tool":
        if not schema:
            return _NO_SCHEMA
        props = schema.get("properties")
        req = schema.get("required")
        required = frozenset(r for r in req if isinstance(r, str)) if isinstance(req, list) else frozenset()
        if coerce != "off" or (use_defaults and _declares_defaults(schema)):
            coercer: Coercer | None = _object_coercer(schema, use_defaults, coerce == "lenient", coerce != "off")
        else:
            coercer = None  # nothing to convert, no default to fill: the arguments stay as parsed
        return cls(schema, props if isinstance(props, dict) else None, required,
                   bool(schema.get("additionalProperties")), coercer)


_NO_SCHEMA = _Tool(None, None, frozenset(), True, None)


@dataclass
class _Call:
    """One parsed tool call: name, canonical arguments (or BadArguments), its tool's schema info."""

    name: str
    args: dict[str, Any] | BadArguments
    tool: _Tool


@dataclass
class _Expert:
    calls: list[_Call]
    content: str
    content_pivot: Pivot | None


# --------------------------------------------------------------------------- the verifier


@register_verifier("tool_call", accepted_by="arguments")
@dataclass
class ToolCallVerifier(PicklesByConfig, Verifier):
    """Tool calls equal by meaning: same functions, equivalent arguments (see the module docstring)."""

    normalizers: list[str] = field(default_factory=list)
    """Normalisers applied to every string argument value (both sides) before comparing (none by default:
    ``" ABC123 "`` is not ``"ABC123"``; ``["strip"]`` ignores surrounding whitespace)."""
    argument_normalizers: dict[str, list[str]] = field(default_factory=dict)
    """Per-argument normalisers replacing ``normalizers``; keys ``"arg"`` or ``"tool.arg"`` (the latter wins)."""
    fuzzy_arguments: dict[str, float] = field(default_factory=dict)
    """Per-argument rapidfuzz thresholds (0..100) for string values; keys ``"arg"`` or ``"tool.arg"``."""
    fuzzy_scorer: str = "ratio"
    """The rapidfuzz scorer used for ``fuzzy_arguments``."""
    rel_tol: float = 1e-6
    """Relative tolerance for comparing numbers (``math.isclose``)."""
    abs_tol: float = 1e-9
    """Absolute tolerance for comparing numbers."""
    coerce: bool | str = "off"
    """Conversion of values to the schema's types: ``"off"`` (default: none; a value must already have the type
    the expert's has, and ``5.0`` is no integer where the schema declares one), ``"strict"`` (text to the declared
    type when lossless: ``"5"`` -> ``5``, ``5`` -> ``"5"``, ``"true"`` -> ``True``, JSON text -> arrays and objects;
    the previous default) or ``"lenient"`` (also ``5.0``/``"5.0"`` -> ``5``: the first default);
    ``True``/``False`` mean strict/off. See the module docstring, *Types*."""
    use_defaults: bool = True
    """An omitted argument equals the schema's ``default`` when one is declared."""
    null_is_missing: bool = True
    """A top-level argument given as ``null`` counts as omitted (unless required)."""
    reject_unknown: bool = True
    """Fail action arguments the schema does not declare (unless ``additionalProperties`` allows them)."""
    content: Any = "ignore"
    """Text of a turn with calls: ``"ignore"``, or a verifier spec run on the two texts."""
    text_verifier: Any = "fuzzy"
    """Verifier spec deciding turns where the expert made no tool call."""
    parallel: str = "all"
    """Reward of a turn with calls: ``"all"`` (1 when every expert call is matched, else 0), ``"fractional"``
    (matched / expert calls) or ``"f1"`` (2 * matched / (expert + action calls))."""
    allow_fewer_calls: bool = False
    """Admit an action with fewer calls than the expert (else it scores 0); full credit then needs as many
    matches as the action has calls (``"all"``, ``"fractional"``). NeMo Gym's ``allow_subset``."""
    allow_more_calls: bool = False
    """Admit an action with more calls than the expert (else it scores 0); surplus calls cost nothing
    except under ``"f1"``. NeMo Gym's ``allow_superset``."""

    _cache: PivotCache = field(init=False, repr=False, compare=False)
    _content: Verifier | None = field(init=False, repr=False, compare=False)
    _text: Verifier = field(init=False, repr=False, compare=False)
    _norm: Callable[[str], str] = field(init=False, repr=False, compare=False)
    _arg_norms: dict[str, Callable[[str], str]] = field(init=False, repr=False, compare=False)
    _strict_ints: bool = field(init=False, repr=False, compare=False)
    _exact_all: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.coerce = _coerce_mode(self.coerce)
        self._strict_ints = self.coerce != "lenient"
        if self.parallel not in PARALLEL_MODES:
            raise ValueError(f"parallel must be one of {', '.join(PARALLEL_MODES)}, got {self.parallel!r}")
        self._exact_all = self.parallel == "all" and not self.allow_fewer_calls and not self.allow_more_calls
        self.normalizers = check_normalizers(self.normalizers)
        self._norm = normalizer_pipeline(self.normalizers)
        self._arg_norms = {
            key: normalizer_pipeline(check_normalizers(names, f"argument_normalizers[{key!r}]"))
            for key, names in self.argument_normalizers.items()
        }
        for key, threshold in self.fuzzy_arguments.items():
            if not isinstance(threshold, (int, float)) or not 0 <= threshold <= 100:
                raise ValueError(f"fuzzy_arguments[{key!r}] must be a threshold in [0, 100], got {threshold!r}")
        get_scorer(self.fuzzy_scorer, "fuzzy_scorer")
        if self.rel_tol < 0 or self.abs_tol < 0:
            raise ValueError(f"rel_tol and abs_tol must be >= 0, got {self.rel_tol!r}, {self.abs_tol!r}")
        self._content = None if self.content == "ignore" else build_child(self.content)
        self._text = build_child(self.text_verifier)
        self._cache = PivotCache()

    def _norm_for(self, tool: str, arg: str) -> Callable[[str], str]:
        if not self._arg_norms:
            return self._norm
        return self._arg_norms.get(f"{tool}.{arg}") or self._arg_norms.get(arg) or self._norm

    def _fuzzy_for(self, tool: str, arg: str) -> float | None:
        if not self.fuzzy_arguments:
            return None
        return self.fuzzy_arguments.get(f"{tool}.{arg}", self.fuzzy_arguments.get(arg))

    def _canonical(self, name: str, raw: Any, tool: _Tool) -> dict[str, Any] | BadArguments:
        args = parse_arguments(raw)
        if isinstance(args, BadArguments):
            return args
        if self.null_is_missing and None in args.values():
            args = {k: v for k, v in args.items() if v is not None or k in tool.required}
        if tool.coercer is not None:
            args = tool.coercer(args)
        if self._norm is _IDENTITY and not self._arg_norms:
            return args
        return {k: _map_strings(v, self._norm_for(name, k)) for k, v in args.items()}

    def _expert(self, pivot: Pivot) -> _Expert:
        calls = []
        for name, raw in message_calls(pivot.expert):
            mode = cast(str, self.coerce)  # a mode name since __post_init__
            tool = _Tool.of(tool_parameters(pivot, name), mode, self.use_defaults)
            calls.append(_Call(name, self._canonical(name, raw, tool), tool))
        content = message_content(pivot.expert)
        content_pivot = None
        if calls and self._content is not None and content.strip():
            content_pivot = dataclasses.replace(
                pivot, id=f"{pivot.id}#content", expert={"role": "assistant", "content": content}
            )
        return _Expert(calls, content, content_pivot)

    # -- verification

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        expert = self._cache.get(pivot, self._expert)
        raw_calls = message_calls(action.message)
        if not expert.calls:
            if raw_calls:
                names = ", ".join(n for n, _ in raw_calls)
                return self._fail(f"the expert replied with text; the action made tool call(s): {names}")
            return self._text.safe_verify(action, pivot)
        if not raw_calls:
            return self._fail(f"expected tool call(s) {_names(expert.calls)}, got a text reply")
        if not self._exact_all:
            return self._verify_scored(action, raw_calls, expert)
        if len(expert.calls) == 1:
            same_names = len(raw_calls) == 1 and raw_calls[0][0] == expert.calls[0].name
        else:
            same_names = Counter(n for n, _ in raw_calls) == Counter(c.name for c in expert.calls)
        if not same_names:
            got = [n for n, _ in raw_calls]
            return self._fail(f"tool calls differ: expected {_names(expert.calls)}, got {_bracket(got)}")
        calls = self._action_calls(raw_calls, expert)
        reason = self._match_calls(calls, expert.calls)
        if reason is not None:
            return self._fail(reason)
        n = len(calls)
        return self._passed(action, expert, f"{n} equivalent tool call{'s' if n > 1 else ''}")

    def _action_calls(self, raw_calls: list[tuple[str, Any]], expert: _Expert) -> list[_Call]:
        """The action's calls, parsed under the expert's tool schemas (a call to another tool is left raw)."""
        tools = {c.name: c.tool for c in expert.calls}
        return [_Call(n, self._canonical(n, raw, tools[n]), tools[n]) if n in tools else _Call(n, {}, _NO_SCHEMA)
                for n, raw in raw_calls]

    def _passed(self, action: Action, expert: _Expert, reason: str) -> VerifyResult:
        """Every call matched: the result, after the content check when one is configured."""
        if expert.content_pivot is not None and self._content is not None:
            return self._verify_content(action, expert)
        return VerifyResult(1.0, True, self.name, reason)

    def _verify_scored(self, action: Action, raw_calls: list[tuple[str, Any]], expert: _Expert) -> VerifyResult:
        """The ``parallel`` reward (see the module docstring): count gate, maximum matching, score."""
        n_expert, n_action = len(expert.calls), len(raw_calls)
        if not self._admits(n_expert, n_action):
            got = _bracket([n for n, _ in raw_calls])
            return self._fail(f"{n_action} tool call(s), expected {n_expert}: expected {_names(expert.calls)}, "
                              f"got {got}")
        calls = self._action_calls(raw_calls, expert)
        diffs = self._pair_diffs(calls, expert.calls)
        match = maximum_matching([[j for j, d in enumerate(row) if d is None] for row in diffs], n_action)
        matched = sum(j >= 0 for j in match)
        reward = parallel_reward(self.parallel, matched, n_expert, n_action, self.allow_fewer_calls)
        reason = _matching_reason(self.parallel, reward, match, diffs, expert.calls, calls)
        if reward == 1.0:
            return self._passed(action, expert, reason)
        return VerifyResult(reward, False, self.name, reason)

    def _admits(self, n_expert: int, n_action: int) -> bool:
        """The count gate: whether an action with ``n_action`` calls is scored at all."""
        if n_action < n_expert:
            return self.allow_fewer_calls
        return n_action == n_expert or self.allow_more_calls

    def _verify_content(self, action: Action, expert: _Expert) -> VerifyResult:
        assert expert.content_pivot is not None and self._content is not None
        text = message_content(action.message)
        view = Action(text=text, message={"role": "assistant", "content": text})
        result = self._content.safe_verify(view, expert.content_pivot)
        return dataclasses.replace(result, reason=f"tool calls equivalent; content: {result.reason}")

    def _fail(self, reason: str) -> VerifyResult:
        return VerifyResult(0.0, False, self.name, reason)

    def _pair_diffs(self, calls: list[_Call], expected: list[_Call]) -> list[list[str | None]]:
        """``diffs[i][j]``: None when action call ``j`` matches expert call ``i``, else why not (``"name"``:
        another tool)."""
        return [[self._call_diff(c, e) if c.name == e.name else "name" for c in calls] for e in expected]

    def _match_calls(self, calls: list[_Call], expected: list[_Call]) -> str | None:
        """None when the calls match the expected ones one-to-one, else why not."""
        if len(expected) == 1:
            return self._call_diff(calls[0], expected[0])
        diffs = self._pair_diffs(calls, expected)
        adjacency = [[j for j, d in enumerate(row) if d is None] for row in diffs]
        if perfect_matching(adjacency, len(calls)) is not None:
            return None
        for i, row in enumerate(adjacency):
            if not row:
                first = next(d for d in diffs[i] if d != "name")
                return f"expected call #{i + 1}: {first}"
        return "the calls cannot be paired one-to-one with the expert's calls"

    def _call_diff(self, call: _Call, expected: _Call) -> str | None:
        prefix = f"call {call.name!r}: "
        a, b = call.args, expected.args
        if isinstance(b, BadArguments):
            if a == b:
                return None
            return prefix + f"the expert's arguments are not valid JSON and differ verbatim: {_show(a)} != {_show(b)}"
        if isinstance(a, BadArguments):
            return prefix + a.why
        tool = call.tool
        props = tool.props
        for k, bv in b.items():
            if k not in a:
                if k in tool.required:
                    return prefix + f"missing required argument {k!r}"
                return prefix + f"argument {k!r} missing (expected {_show(bv)})"
        for k, av in a.items():
            if k not in b:
                if props is not None and self.reject_unknown and k not in props and not tool.open:
                    return prefix + f"unknown argument {k!r}"
                return prefix + f"extra argument {k!r} ({_show(av)})"
        for k, bv in b.items():
            sub = props.get(k) if props is not None else None
            diff = self._diff(a[k], bv, sub, k, self._fuzzy_for(call.name, k))
            if diff is not None:
                return prefix + diff
        return None

    def _diff(self, a: Any, b: Any, schema: Any, path: str, fuzzy: float | None) -> str | None:
        """None when ``a`` (action) and ``b`` (expert) mean the same, else why not."""
        ta, tb = type(a), type(b)
        if ta is str and tb is str:
            if a == b or (fuzzy is not None and similarity(get_scorer(self.fuzzy_scorer), a, b) >= fuzzy):
                return None
            return f"argument {path!r}: {_show(a)} != {_show(b)}"
        if (ta is int or ta is float) and (tb is int or tb is float):
            if ta is float and tb is int and self._strict_ints and _declares_integer(schema):
                return f"argument {path!r}: {_show(a)} is not an integer (the schema declares integer)"
            if ta is int and tb is int:
                same = a == b
            else:
                same = math.isclose(a, b, rel_tol=self.rel_tol, abs_tol=self.abs_tol) or (a != a and b != b)
            return None if same else f"argument {path!r}: {_show(a)} != {_show(b)}"
        if ta is dict and tb is dict:
            props = schema.get("properties") if isinstance(schema, dict) else None
            props = props if isinstance(props, dict) else {}
            for k in b:
                if k not in a:
                    return f"argument {path + '.' + k!r} missing (expected {_show(b[k])})"
            for k in a:
                if k not in b:
                    return f"extra argument {path + '.' + k!r} ({_show(a[k])})"
            for k, bv in b.items():
                diff = self._diff(a[k], bv, props.get(k), f"{path}.{k}", fuzzy)
                if diff is not None:
                    return diff
            return None
        if ta is list and tb is list:
            if len(a) != len(b):
                return f"argument {path!r}: {len(a)} items != {len(b)} items"
            items = schema.get("items") if isinstance(schema, dict) else None
            if isinstance(schema, dict) and schema.get("uniqueItems") is True:
                adjacency = [
                    [j for j, av in enumerate(a) if self._diff(av, bv, items, path, fuzzy) is None] for bv in b
                ]
                if perfect_matching(adjacency, len(a)) is None:
                    return f"argument {path!r}: {_show(a)} != {_show(b)} (as sets)"
                return None
            for i, (av, bv) in enumerate(zip(a, b)):
                diff = self._diff(av, bv, items, f"{path}[{i}]", fuzzy)
                if diff is not None:
                    return diff
            return None
        if ta is tb and a == b:
            return None
        return f"argument {path!r}: {_show(a)} != {_show(b)}"


def _coerce_mode(value: Any) -> str:
    if value is True:
        return "strict"
    if value is False:
        return "off"
    if value not in COERCE_MODES:
        raise ValueError(f"coerce must be one of {', '.join(COERCE_MODES)} (or true/false), got {value!r}")
    return value


def _declares_defaults(schema: Any) -> bool:
    """Whether ``schema`` declares a ``default`` anywhere below its top level (properties, items, branches)."""
    if isinstance(schema, list):
        return any(_declares_defaults(x) for x in schema)
    if not isinstance(schema, dict):
        return False
    props = schema.get("properties")
    if isinstance(props, dict) and any(isinstance(x, dict) and ("default" in x or _declares_defaults(x))
                                       for x in props.values()):
        return True
    return any(_declares_defaults(schema.get(k)) for k in ("items", "prefixItems", "anyOf", "oneOf",
                                                            "additionalProperties"))


def _declares_integer(schema: Any) -> bool:
    """Whether ``schema`` types a value as an integer (and not as any number)."""
    t = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(t, list):
        return "integer" in t and "number" not in t
    return t == "integer"


def parallel_reward(mode: str, matched: int, n_expert: int, n_action: int, allow_fewer: bool = False) -> float:
    """The reward of ``matched`` expert calls paired one-to-one with action calls (NeMo Gym's formulas).

    ``"f1"``: ``2 * matched / (n_expert + n_action)``. ``"all"`` and ``"fractional"`` score against the
    calls required, ``n_expert`` (``min(n_expert, n_action)`` when fewer calls are allowed): all of them
    for 1 else 0, or the matched fraction of them.
    """
    if mode == "f1":
        total = n_expert + n_action
        return 2 * matched / total if total else 0.0
    required = min(n_expert, n_action) if allow_fewer else n_expert
    if mode == "fractional":
        return matched / required if required else 0.0
    return 1.0 if matched == required else 0.0


def _matching_reason(mode: str, reward: float, match: list[int], diffs: list[list[str | None]],
                     expected: list[_Call], calls: list[_Call]) -> str:
    """Which calls matched, why the others did not, and the reward, e.g.
    ``f1 0.8: 2/3 expert calls matched by 2 action calls: expert #1 get_weather = action #2, ...``."""
    matched = sum(j >= 0 for j in match)
    parts = [f"expert #{i + 1} {expected[i].name} = action #{j + 1}" for i, j in enumerate(match) if j >= 0]
    for i, j in enumerate(match):
        if j < 0:
            near = next((d for d in diffs[i] if d is not None and d != "name"), None)
            parts.append(f"expert #{i + 1} {expected[i].name} unmatched ({near or 'no call to this tool'})")
    paired = set(match)
    parts.extend(f"action #{j + 1} {c.name} extra" for j, c in enumerate(calls) if j not in paired)
    head = f"{mode} {reward:.4g}: {matched}/{len(expected)} expert calls matched by {len(calls)} action calls"
    return head + ": " + "; ".join(parts)


def _map_strings(value: Any, norm: Callable[[str], str]) -> Any:
    t = type(value)
    if t is str:
        return norm(value)
    if t is dict:
        return {k: _map_strings(v, norm) for k, v in value.items()}
    if t is list:
        return [_map_strings(v, norm) for v in value]
    return value


def _names(calls: list[_Call]) -> str:
    return _bracket([c.name for c in calls])


def _bracket(names: list[str]) -> str:
    return "[" + ", ".join(sorted(names)) + "]"


__all__ = ["COERCE_MODES", "PARALLEL_MODES", "ToolCallVerifier", "coerce", "maximum_matching", "parallel_reward",
           "perfect_matching"]
