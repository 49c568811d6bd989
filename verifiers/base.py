"""The verifier protocol and the verifier registry.

A verifier decides whether an :class:`~pivot_envs.types.Action` is functionally
equivalent to the expert action of a :class:`~pivot_envs.types.Pivot`::

    result = verifier.verify(action, pivot)          # one
    results = verifier.verify_many(actions, pivots)  # a group, in order
    result = await verifier.averify(action, pivot)   # async forms

Verifiers are plain picklable objects built from a config (a name plus
parameters) so that multiprocessing and Ray can ship them::

    build_verifier("strict")
    build_verifier({"name": "fuzzy", "threshold": 90})
    verifier.config()  # -> {"name": "fuzzy", "threshold": 90, ...}

An infrastructure failure (judge down, sandbox crash, timeout of the verifier
itself) is returned as ``VerifyResult(error=...)``, never as a silent 0 or 1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from typing import Any, Callable, ClassVar, Sequence, TypeVar

from pivot_envs.actions import parse_action
from pivot_envs.config import ConfigError, unknown_key_error
from pivot_envs.registry import Registry
from pivot_envs.types import Action, Message, Pivot, VerifyResult
from pivot_envs.verifiers.declaration import declare, doc_line

VerifierSpec = Any
"""A verifier name (``"strict"``), a config dict (``{"name": ..., **params}``) or a Verifier."""

ENTRY_POINT_GROUP = "pivot_envs.verifiers"
"""Entry-point group of verifiers published by packages (``NAME = "pkg.module:VerifierClass"``)."""

_REGISTRY: dict[str, type["Verifier"]] = {}
"""Name -> Verifier class: the store of :data:`VERIFIERS`."""

V = TypeVar("V", bound=type)


class Verifier:
    """Base class. Subclasses set ``name`` and implement :meth:`verify`.

    Subclasses are dataclasses: their fields are the config parameters, so
    ``config()`` and ``build_verifier(config)`` round-trip. A subclass bumps ``version`` whenever its
    verdicts change (:mod:`pivot_envs.verifiers.versions`: runs record it and refuse to resume under another).
    """

    name: ClassVar[str] = "base"
    version: ClassVar[int] = 1
    """The version of this verifier's verdicts: bump it when a code change changes what it accepts or rewards."""

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def verify_many(self, actions: Sequence[Action], pivots: Sequence[Pivot] | Pivot) -> list[VerifyResult]:
        """Verify a batch, in order. ``pivots`` may be one pivot shared by all actions (a group)."""
        pivot_list = broadcast(pivots, len(actions))
        return [self.safe_verify(a, p) for a, p in zip(actions, pivot_list)]

    async def averify(self, action: Action, pivot: Pivot) -> VerifyResult:
        """Async form; the default runs :meth:`safe_verify` in a worker thread."""
        return await asyncio.to_thread(self.safe_verify, action, pivot)

    async def averify_many(self, actions: Sequence[Action], pivots: Sequence[Pivot] | Pivot) -> list[VerifyResult]:
        pivot_list = broadcast(pivots, len(actions))
        return list(await asyncio.gather(*(self.averify(a, p) for a, p in zip(actions, pivot_list))))

    def safe_verify(self, action: Action | str | Message, pivot: Pivot) -> VerifyResult:
        """:meth:`verify` that never raises: an unexpected exception becomes ``error``."""
        try:
            return self.verify(parse_action(action), pivot)
        except Exception as exc:  # noqa: BLE001 - a verifier bug must not kill a batch
            return VerifyResult.failure(self.name, f"{type(exc).__name__}: {exc}")

    def config(self) -> dict[str, Any]:
        """The config that rebuilds this verifier with :func:`build_verifier`."""
        params: dict[str, Any] = {}
        if dataclasses.is_dataclass(self):
            for f in dataclasses.fields(self):
                if f.init and not f.name.startswith("_"):
                    params[f.name] = _config_value(getattr(self, f.name))
        return {"name": self.name, **params}

    def __call__(self, action: Action | str | Message, pivot: Pivot) -> VerifyResult:
        return self.safe_verify(action, pivot)


def _config_value(value: Any) -> Any:
    if isinstance(value, Verifier):
        return value.config()
    if isinstance(value, (list, tuple)):
        return [_config_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _config_value(v) for k, v in value.items()}
    return value


def broadcast(pivots: Sequence[Pivot] | Pivot, n: int) -> list[Pivot]:
    """The pivots of a batch of ``n`` actions: ``pivots`` itself, or one pivot shared by all of them (a group)."""
    if isinstance(pivots, Pivot):
        return [pivots] * n
    pivot_list = list(pivots)
    if len(pivot_list) != n:
        raise ValueError(f"verify_many got {n} actions but {len(pivot_list)} pivots")
    return pivot_list


def _named(name: str, cls: Any) -> Any:
    """What every registered verifier is: a Verifier subclass, whose ``name`` becomes its registered name."""
    if not (isinstance(cls, type) and issubclass(cls, Verifier)):
        raise TypeError(f"verifier {name!r}: a verifier is a subclass of pivot_envs.verifiers.Verifier, got {cls!r}")
    cls.name = name
    return cls


def _config_error(spec: Any, message: str) -> ConfigError:
    return ConfigError(message, value=spec)


VERIFIERS: Registry[type[Verifier]] = Registry(
    "verifier", group=ENTRY_POINT_GROUP, entries=_REGISTRY, instance_of=Verifier, check=_named,
    error=_config_error, help=" (see `pivot-envs list`)")
"""The verifier registry: :func:`register_verifier` adds to it, :func:`build_verifier` builds from it."""


def register_verifier(name: str, *, accepted_by: str = "other") -> Callable[[V], V]:
    """Class decorator: register a Verifier subclass under ``name`` (registering the same class again is a no-op)
    and declare it (:mod:`pivot_envs.verifiers.declaration`): ``accepted_by`` is the category a sample it passes is
    reported under, the first paragraph of its docstring the line that says what it checks."""

    def deco(cls: V) -> V:
        registered = VERIFIERS.register(name, cls, replace=_REGISTRY.get(name) is cls)
        declare(name, accepted_by=accepted_by, doc=doc_line(cls.__doc__), module=cls.__module__, registered=True)
        return registered

    return deco


def verifier_names() -> list[str]:
    """Names of all registered verifiers (those of installed packages' entry points included)."""
    return VERIFIERS.names()


def verifier_class(name: str) -> type[Verifier]:
    """The registered class of ``name``; :class:`~pivot_envs.config.ConfigError` (a ``ValueError``) naming
    close names and the catalog when there is none."""
    return VERIFIERS.get(name)


def verifier_parameters(cls: type[Verifier]) -> list[str] | None:
    """The config keys (besides ``name``) a verifier class takes; ``None`` when it takes any (``**kwargs``)."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")]
    params = inspect.signature(cls).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def build_verifier(spec: VerifierSpec) -> Verifier:
    """Build a verifier from a name, a config dict or an existing Verifier.

    A bad config raises :class:`~pivot_envs.config.ConfigError` (a ``ValueError``) before anything is
    verified: an unknown verifier name (with close names and the catalog), an unknown parameter (with a
    close match and the valid ones: ``unknown key 'normalisers' (did you mean 'normalizers'?)``) or a bad
    value, nested configs (``cascade`` stages, ``all``/``any`` children, ``by_tool`` routes) included.
    """
    if isinstance(spec, Verifier):
        return spec
    if not isinstance(spec, (str, dict)):
        raise TypeError(f"cannot build a verifier from {type(spec).__name__}")
    if isinstance(spec, dict) and "name" not in spec:
        raise ConfigError(f"a verifier config needs a 'name' field (one of {', '.join(verifier_names())}), "
                          f"got keys {sorted(spec)}", key="name")
    config = VERIFIERS.parse(spec)
    name = config.pop("name")
    try:
        cls = verifier_class(name)
    except ConfigError as exc:
        raise ConfigError(str(exc), key="name", value=name) if isinstance(spec, dict) else exc from None
    args = config.pop("_args", None)
    if args is not None:
        raise ConfigError(f"verifier {name!r} takes no argument after ':'; give its parameters in a config dict "
                          f"({{\"name\": {name!r}, ...}})", value=spec)
    valid = verifier_parameters(cls)
    if valid is not None:
        for key in config:
            if key not in valid:
                raise unknown_key_error(str(key), valid, owner=f"verifier {name!r}")
    return _construct(cls, name, config)


def _construct(cls: type[Verifier], name: str, params: dict[str, Any]) -> Verifier:
    try:
        return cls(**params)
    except ConfigError:
        raise  # a nested verifier's error, already naming it
    except TypeError as exc:
        raise ConfigError(f"bad parameters for verifier {name!r}: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"verifier {name!r}: {exc}") from None
