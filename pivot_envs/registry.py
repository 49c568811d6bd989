"""One registry for every plugin kind: verifiers, agents, worlds, user simulators, success rules, algorithms.

A :class:`Registry` maps names to factories (a class, or a function that builds the object) and builds
objects from one spec grammar::

    WIDGETS = Registry("widget", group="my_pkg.widgets")

    @WIDGETS.register("plain")                   # a decorator ...
    class Plain: ...

    WIDGETS.register("fancy", Fancy)             # ... or a call
    WIDGETS.register("heavy", "my_pkg.heavy:Heavy")   # a "module:attr" reference, imported on first use

    WIDGETS.build("plain")                       # a name
    WIDGETS.build("fancy:red")                   # "name:arg": the text after the first ':' is the kind's one argument
    WIDGETS.build({"name": "fancy", "colour": "red"})   # a config dict: the name and keyword arguments
    WIDGETS.build('{"name": "fancy"}')           # the same dict as JSON text
    WIDGETS.build(WIDGETS.config(widget))        # a round trip: ``config`` gives back the spec of a built object

By default the text after ``name:`` is passed as the factory's single positional argument; a kind
that wants it parsed (``openai:MODEL@URL``, ``noisy_expert:P``) registers an ``arg`` parser that turns
it into keyword arguments. A registry whose kind already used another dict key (``{"kind": ...}``)
names it in ``aliases``. Names are looked up in the entry-point group ``group`` of installed packages
(``NAME = "pkg.module:Object"``) the first time a name is missing or the names are listed; an entry
point that does not load is reported (a warning, and an error naming the entry point when its name is
asked for), never silently skipped. An unknown name raises an error that names the kind, the closest
names ("did you mean") and every known name.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import threading
import warnings
from importlib.metadata import entry_points
from typing import Any, Callable, Generic, Mapping, MutableMapping, Optional, TypeVar, Union, cast

T = TypeVar("T")

ArgParser = Callable[[Optional[str]], dict]
"""Turns the text after ``name:`` (``None`` when the spec has no ``:``) into keyword arguments;
raises ``ValueError`` with the problem for a bad one."""

ErrorFactory = Callable[[Any, str], Exception]
"""``(spec, message) -> exception``: how a registry reports a bad spec (default: ``ValueError(message)``)."""

ARGS_KEY = "_args"
"""The config key of the positional argument of a ``name:arg`` spec (``{"name": ..., "_args": [arg]}``)."""

Spec = Union[str, Mapping[str, Any]]
"""A spec: a name, ``"name:arg"``, a config dict or its JSON text."""

_NO_SPEC: Any = object()


def _value_error(spec: Any, message: str) -> Exception:
    return ValueError(message)


def resolve_reference(reference: str) -> Any:
    """The object a ``"module:attr"`` reference names (``attr`` may be dotted), imported now."""
    module, _, attr = reference.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Names -> entries of type ``T`` (factories) of one plugin kind, and the one spec grammar that builds them.

    Args:
        kind: what the registry holds, as messages say it (``"verifier"``, ``"world"``).
        group: the entry-point group that installed packages publish entries in (``None``: none).
        key: the config dict key that names the entry (``"name"``).
        aliases: other keys a config dict may name the entry with (legacy ``"kind"``).
        entries: the dict that stores name -> factory (a module's existing table keeps working when given).
        instance_of: built objects of this kind; :meth:`build` returns one as it is.
        factories: ``False`` when entries are the objects themselves (success rules): :meth:`build` returns
            the entry and takes no arguments.
        check: ``(name, obj) -> obj`` run on everything registered (in code or by an entry point), except
            ``"module:attr"`` references; raises on a bad one, returns what to store.
        error: ``(spec, message) -> exception`` for a bad spec.
        help: appended to the unknown-name message (``" (see `pivot-envs list`)"``).
    """

    def __init__(self, kind: str, *, group: str | None = None, key: str = "name", aliases: tuple[str, ...] = (),
                 entries: MutableMapping[str, Any] | None = None, instance_of: type | tuple[type, ...] | None = None,
                 factories: bool = True, check: Callable[[str, Any], Any] | None = None,
                 error: ErrorFactory = _value_error, help: str = ""):
        self.kind = kind
        self.group = group
        self.key = key
        self.aliases = tuple(aliases)
        self.instance_of = instance_of
        self.factories = factories
        self.help = help
        self._check = check
        self.error = error
        self._entries: MutableMapping[str, Any] = {} if entries is None else entries
        self._origins: dict[str, str] = {}
        self._arg_parsers: dict[str, ArgParser | str] = {}
        self._broken: dict[str, str] = {}  # entry-point name -> why it did not load
        self._plugins_loaded = False
        self._lock = threading.RLock()  # re-entrant: a plugin module may look names up while it loads

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, group={self.group!r}, {len(self._entries)} entries)"

    # ------------------------------------------------------------------ registering

    def register(self, name: str, obj: Any = None, *, replace: bool = False, arg: ArgParser | str | None = None,
                 origin: str = "registered") -> Any:
        """Register ``obj`` under ``name`` and return it; without ``obj``, a decorator that does so.

        ``obj`` is a factory (or, for ``factories=False``, the object itself), or a ``"module:attr"``
        reference imported on first use. A name that is taken raises ``ValueError`` unless ``replace``.
        ``arg`` says how the text of ``name:TEXT`` is passed: ``None`` positionally, a keyword's name,
        or an :data:`ArgParser`. ``origin`` is what :meth:`origin` reports.
        """
        if obj is None:
            def decorator(target: Any) -> Any:
                return self.register(name, target, replace=replace, arg=arg, origin=origin)

            return decorator
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name is a non-empty string, got {name!r}")
        if ":" in name or name.startswith("{"):
            raise ValueError(f"{self.kind} name {name!r}: ':' and a leading '{{' are reserved ('name:arg' specs, "
                             "JSON configs)")
        stored = obj if isinstance(obj, str) or self._check is None else self._check(name, obj)
        if not replace and name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered; pass replace=True to override it "
                             f"(registered: {self._describe(self._entries[name])})")
        self._entries[name] = stored
        self._origins[name] = origin
        self._arg_parsers.pop(name, None)
        if arg is not None:
            self._arg_parsers[name] = arg
        return obj

    def unregister(self, name: str) -> None:
        """Forget ``name`` (no error when it is not registered)."""
        self._entries.pop(name, None)
        self._origins.pop(name, None)
        self._arg_parsers.pop(name, None)

    # ------------------------------------------------------------------ entry points

    def load_plugins(self) -> None:
        """Register the entries published in the entry-point group, once per process.

        A name already registered keeps its entry. An entry point that fails to load (or that ``check``
        refuses) is kept in :meth:`plugin_errors`, warned about, and asking for its name raises an error
        that names the entry point.
        """
        if self.group is None:
            return
        with self._lock:  # another thread waits until the entry points are read; this one may re-enter
            if self._plugins_loaded:
                return
            self._plugins_loaded = True
            for ep in entry_points(group=self.group):
                if ep.name in self._entries:
                    continue
                try:
                    self.register(ep.name, ep.load(), origin=f"plugin {ep.name} = {ep.value}")
                except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the library
                    message = f"pivot_envs: could not load {self.kind} plugin {ep.name!r} ({ep.value}): {exc}"
                    self._broken[ep.name] = f"{message} (entry-point group {self.group})"
                    warnings.warn(message, stacklevel=3)

    def plugin_errors(self) -> list[str]:
        """Why entry points of the group could not be loaded (after :meth:`load_plugins`)."""
        return list(self._broken.values())

    # ------------------------------------------------------------------ looking up

    def names(self) -> list[str]:
        """Every known name, sorted (the entry points are loaded first)."""
        self.load_plugins()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name not in self._entries:
            self.load_plugins()
        return name in self._entries

    def origin(self, name: str) -> str | None:
        """Where ``name`` comes from (``registered``, ``plugin NAME = module:Object``, what ``register`` was told),
        or ``None`` for an entry put into the entries dict by hand."""
        return self._origins.get(name) if name in self._entries else None

    def get(self, name: str, spec: Any = _NO_SPEC) -> T:
        """The entry ``name`` (a ``"module:attr"`` reference imported); an error naming the kind, close names
        and the known ones when there is none (``spec``: what the error reports as the spec)."""
        spec = name if spec is _NO_SPEC else spec
        if not isinstance(name, str):
            raise self.error(spec, f"a {self.kind} name is a string, got {name!r}; known: {', '.join(self.names())}")
        if name not in self._entries:
            self.load_plugins()
        if name in self._entries:
            entry = self._entries[name]
            return resolve_reference(entry) if isinstance(entry, str) else entry
        if name in self._broken:
            raise self.error(spec, self._broken[name])
        raise self.error(spec, self.unknown(name))

    def unknown(self, name: str) -> str:
        """The message for an unknown ``name``: the kind, the close names and the known ones."""
        known = self.names()
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        return f"unknown {self.kind} {name!r}{hint}; known: {', '.join(known)}{self.help}"

    def name_of(self, obj: Any) -> str | None:
        """The name ``obj`` (a factory, or an object a class entry built) is registered under, or ``None``."""
        for name, entry in list(self._entries.items()):
            if entry is obj:
                return name
        for name, entry in list(self._entries.items()):
            if isinstance(entry, type) and type(obj) is entry:
                return name
        return None

    # ------------------------------------------------------------------ specs

    def parse(self, spec: Any) -> dict[str, Any]:
        """The config dict of a spec: ``{key: NAME, **keyword arguments}`` (plus ``_args`` for a ``name:arg``
        whose kind takes it positionally)."""
        if isinstance(spec, Mapping):
            return self._from_mapping(spec, spec)
        if not isinstance(spec, str):
            raise self.error(spec, f"expected a {self.kind} name, 'name:arg' or a config dict, "
                                   f"got {type(spec).__name__}")
        text = spec.strip()
        if not text:
            raise self.error(spec, f"expected a non-empty {self.kind} spec")
        if text.startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise self.error(spec, f"invalid JSON at column {exc.colno}: {exc.msg}") from None
            if not isinstance(data, dict):
                raise self.error(spec, f"a JSON spec must be an object with a {self.key!r}")
            return self._from_mapping(data, spec)
        name, sep, rest = text.partition(":")
        if name not in self:
            self.get(name, spec)  # raises: unknown (or a broken entry point)
        parser = self._arg_parsers.get(name)
        if parser is None:
            return {self.key: name, ARGS_KEY: [rest]} if sep else {self.key: name}
        if isinstance(parser, str):
            if not rest.strip():
                raise self.error(spec, f"{name} needs an argument: {name}:{parser.upper()}")
            return {self.key: name, parser: rest}
        try:
            params = parser(rest if sep else None)
        except ValueError as exc:
            raise self.error(spec, str(exc)) from None
        return {self.key: name, **params}

    def _from_mapping(self, data: Mapping[str, Any], spec: Any) -> dict[str, Any]:
        keys = [k for k in (self.key, *self.aliases) if k in data]
        if not keys:
            raise self.error(spec, f"missing {self.key!r}: a config dict names the {self.kind} with {self.key!r} "
                                   f"(one of {', '.join(self.names())}), got keys {sorted(map(str, data))}")
        if len(keys) > 1:
            raise self.error(spec, f"a {self.kind} config names it once: give {' or '.join(map(repr, keys))}, "
                                   "not both")
        config = {k: v for k, v in data.items() if k != keys[0]}
        return {self.key: data[keys[0]], **config}

    def build(self, spec: Any) -> Any:
        """The object a spec describes: a name, ``"name:arg"``, a config dict (or its JSON text), or an
        object already built (``instance_of``), returned as it is."""
        if self.instance_of is not None and isinstance(spec, self.instance_of):
            return spec
        config = self.parse(spec)
        name = config.pop(self.key)
        args = list(config.pop(ARGS_KEY, []))
        entry = self.get(name, spec)
        if not self.factories:
            if args or config:
                raise self.error(spec, f"{self.kind} {name!r} takes no parameters, got "
                                       f"{sorted(config) + [repr(a) for a in args]}")
            return entry
        return self.call(spec, name, cast(Callable[..., Any], entry), args, config)  # factories=True: T is a factory

    def call(self, spec: Any, name: str, factory: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
        """``factory(*args, **kwargs)``; arguments the factory does not take are the spec's error, not a bug."""
        try:
            inspect.signature(factory).bind(*args, **kwargs)
        except TypeError as exc:
            raise self.error(spec, f"bad parameters for {self.kind} {name!r}: {exc}") from None
        except ValueError:  # no signature to check (a builtin): the call decides
            pass
        return factory(*args, **kwargs)

    def config(self, obj: Any) -> dict[str, Any]:
        """The spec that rebuilds ``obj``: ``build(config(obj))`` is equivalent to ``obj``.

        The object's own ``config()`` when it has one, else ``{key: NAME}`` of the entry it is (or was built from).
        """
        method = getattr(obj, "config", None)
        if callable(method) and not isinstance(obj, type):
            return method()
        name = self.name_of(obj)
        if name is None:
            raise TypeError(f"{obj!r} is no registered {self.kind} and has no config() method")
        return {self.key: name}

    # ------------------------------------------------------------------ describing

    def _describe(self, entry: Any) -> str:
        if isinstance(entry, str):
            return entry
        module = getattr(entry, "__module__", None) or type(entry).__module__
        qualname = getattr(entry, "__qualname__", None) or type(entry).__qualname__
        return f"{module}.{qualname}"

