"""The one config system: files (YAML, TOML or JSON) and ``--set key=value`` overrides -> config dataclasses.

Every config of the package goes through here (``pivot-envs train``, ``PivotRLConfig``,
``SFTConfig``, ``pivot-envs verify --config``)::

    from pivot_envs.config import read_config_file, apply_overrides, build_config

    source = read_config_file("examples/train_sft_tiny.yaml")         # data + where each key came from
    source = apply_overrides(source, ["lr=1e-3", "optim.betas=[0.9, 0.95]"])
    config = build_config(SFTConfig, source, ignore=("algorithm",))

    config = config_from_file(SFTConfig, "sft.yaml", overrides=["steps=50"])   # the same, in one call
    config = config_from_dict(SFTConfig, {"lr": "1e-3"}, source="sft.json")    # a dict (strings coerced)
    config_to_dict(config)                                                      # JSON-ready, round-trips

* a file is a mapping; nested mappings configure nested dataclass fields, and the
  same keys can be given with dots (``--set a.b=1``);
* override values are parsed as YAML scalars/flow values (``3``, ``1e-3``, ``true``,
  ``null``, ``[1, 2]``, ``out/run``) and then coerced to the field's type; a string given
  for a list, mapping or optional field (e.g. from Python) is read the same way
  (``"[0.9, 0.95]"`` -> ``[0.9, 0.95]``, ``"null"`` -> ``None``);
* every key is checked against the dataclass: an unknown key is an error that
  names it, where it came from (``FILE:LINE`` or ``--set ...``), a close match,
  and the valid keys; a value of the wrong type names the key, the expected
  type and the value.

Types understood: ``bool``, ``int``, ``float``, ``str``, ``Path``, ``Optional``/unions,
``Literal``, ``list``/``tuple``/``dict`` of those, nested dataclasses, ``Any``.
Strings are coerced to numbers where the field is numeric (``"1e-3"`` -> ``0.001``:
YAML 1.1 reads ``1e-3`` as a string), integral floats to ints (``1e3`` -> ``1000``).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import json
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["ConfigError", "ConfigSource", "read_config_file", "parse_override", "apply_overrides", "build_config",
           "config_from_dict", "config_from_file", "config_to_dict", "config_keys", "coerce_value"]


class ConfigError(ValueError):
    """A configuration problem a user can fix; the message names the key, where it came from, and the fix.

    ``key`` and ``value``, when set, are the offending key (its last part) and value, so that a caller
    holding the file's :class:`ConfigSource` can point at the line (see :func:`locate`).
    """

    def __init__(self, message: str, *, key: str | None = None, value: Any = None):
        super().__init__(message)
        self.key = key
        self.value = value


def unknown_key_error(key: str, valid: Iterable[str], *, owner: str = "", where: str = "",
                      shown: str | None = None) -> ConfigError:
    """The error for an unknown ``key``: it, a close match among ``valid``, and every valid key.

    ``owner`` names what the keys belong to (``"SFTConfig"``, ``"verifier 'fuzzy'"``), ``where`` the
    origin (``FILE:LINE``), ``shown`` the key as written (a dotted path; default ``key``).
    """
    names = sorted(valid)
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    shown = key if shown is None else shown
    under = f" under {shown.rpartition('.')[0]}" if "." in shown else ""
    message = (f"{where + ': ' if where else ''}unknown key {shown!r}{hint}{' for ' + owner if owner else ''}; "
               f"valid keys{under}: {', '.join(names)}")
    return ConfigError(message, key=key)


@dataclass
class ConfigSource:
    """Configuration data and the origin of each (dotted) key.

    Attributes:
        data: the nested mapping read from the file (and overrides).
        path: the file it was read from (``None`` when built in code).
        origins: dotted key -> where it was set (``"train.yaml:7"``, ``"--set lr=1e-3"``).
    """

    data: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    origins: dict[str, str] = field(default_factory=dict)

    def origin(self, key: str) -> str:
        """Where ``key`` (or its closest parent) was set; the file name when unknown."""
        probe = key
        while probe:
            if probe in self.origins:
                return self.origins[probe]
            probe = probe.rpartition(".")[0]
        return str(self.path) if self.path else "config"

    def locate(self, error: ConfigError) -> str:
        """``FILE:LINE`` of the key an error is about (matched by its ``key`` and/or ``value``); the file when
        no single place matches."""
        missing = object()
        found = []
        for dotted in self.origins:
            node: Any = self.data
            for part in dotted.split("."):
                if isinstance(node, dict) and part in node:
                    node = node[part]
                elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                    node = node[int(part)]
                else:
                    node = missing
                    break
            if node is missing or (error.key is None and error.value is None):
                continue
            if error.key is not None and dotted.rpartition(".")[2] != error.key:
                continue
            if error.value is not None and node != error.value:
                continue
            found.append(dotted)
        if len(found) == 1:
            return self.origins[found[0]]
        return str(self.path) if self.path else "config"


# --------------------------------------------------------------------------- reading


def read_config_file(path: str | Path) -> ConfigSource:
    """Read a YAML (``.yaml``/``.yml``), TOML (``.toml``) or JSON (``.json``) config file."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such config file")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; give the config file inside it (.yaml, .toml or .json)")
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise ConfigError(f"{path}: unknown config format {suffix or '(no suffix)'!r}; use .yaml, .yml, .toml or .json")
    text = _read_text(path)
    if suffix in (".yaml", ".yml"):
        data, lines = _read_yaml(text, path)
    elif suffix == ".toml":
        tomllib = _tomllib(path)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        lines = _toml_lines(text)
    elif suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        lines = {}
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file is a mapping of keys to values, got a {type(data).__name__}")
    origins = {key: f"{path}:{line}" for key, line in lines.items()}
    return ConfigSource(data=data, path=path, origins=origins)


def _read_text(path: Path) -> str:
    """The file's text; a non-UTF-8 file or an unreadable one is a :class:`ConfigError` naming it."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8") from None


def _tomllib(path: Path) -> Any:
    """``tomllib`` (Python 3.11+) or its backport ``tomli`` (Python 3.10)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10 (a test simulates it by hiding tomllib)
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ConfigError(f"{path}: reading TOML on Python 3.10 needs tomli (pip install tomli), "
                              "or write the config as YAML or JSON") from None
    return tomllib


def _read_yaml(text: str, path: Path) -> tuple[Any, dict[str, int]]:
    import yaml

    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    lines: dict[str, int] = {}

    def walk(n: Any, prefix: str) -> None:
        if isinstance(n, yaml.MappingNode):
            for key_node, value_node in n.value:
                key = f"{prefix}{key_node.value}"
                lines[key] = key_node.start_mark.line + 1
                walk(value_node, key + ".")
        elif isinstance(n, yaml.SequenceNode):  # items of lists as KEY.0, KEY.1 (e.g. nested verifier configs)
            for i, item in enumerate(n.value):
                lines.setdefault(f"{prefix}{i}", item.start_mark.line + 1)
                walk(item, f"{prefix}{i}.")

    walk(node, "")
    return data, lines


_TOML_TABLE = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_TOML_KEY = re.compile(r"^\s*([A-Za-z0-9_.\-\"' ]+?)\s*=")


def _toml_lines(text: str) -> dict[str, int]:
    """Best-effort line numbers of TOML keys (tables and ``key = value`` lines)."""
    lines: dict[str, int] = {}
    table = ""
    for number, line in enumerate(text.splitlines(), start=1):
        if m := _TOML_TABLE.match(line):
            table = ".".join(part.strip().strip("\"'") for part in m.group(1).split("."))
            lines.setdefault(table, number)
        elif m := _TOML_KEY.match(line):
            key = ".".join(part.strip().strip("\"'") for part in m.group(1).split("."))
            lines.setdefault(f"{table}.{key}" if table else key, number)
    return lines


# --------------------------------------------------------------------------- overrides


def parse_override(text: str) -> tuple[str, Any]:
    """``"a.b=VALUE"`` -> ``("a.b", value)``, the value parsed as a YAML scalar or flow collection.

    This is the only way ``--set`` values are read, for every trainer: ``[1, 2]`` is a list,
    ``1e-3`` a number (after coercion), ``null`` is ``None``; text that is not valid YAML (``[1, 2``) stays text.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE (e.g. --set lr=1e-3 or --set model.name=out/base)")
    if any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text!r}: the key {key!r} has an empty part between dots")
    return key, (_from_text(raw) if raw.strip() else "")


def apply_overrides(source: ConfigSource, overrides: Iterable[str]) -> ConfigSource:
    """A copy of ``source`` with each ``KEY=VALUE`` override set (dotted keys address nested mappings)."""
    import copy

    data = copy.deepcopy(source.data)
    origins = dict(source.origins)
    for text in overrides:
        key, value = parse_override(text)
        parts = key.split(".")
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                prefix = ".".join(parts[: i + 1])
                raise ConfigError(f"--set {text}: {prefix!r} is a value ({child!r}), not a section with keys")
            node = child
        node[parts[-1]] = value
        origins = {k: v for k, v in origins.items() if k != key and not k.startswith(key + ".")}
        origins[key] = f"--set {text}"
    return ConfigSource(data=data, path=source.path, origins=origins)


# --------------------------------------------------------------------------- building


def config_keys(cls: type) -> list[str]:
    """Every settable dotted key of a config dataclass (nested dataclass fields expanded)."""
    keys: list[str] = []
    for f, hint in _fields(cls):
        nested = _dataclass_arm(hint)
        if nested is not None:
            keys.extend(f"{f.name}.{k}" for k in config_keys(nested))
        else:
            keys.append(f.name)
    return keys


def build_config(cls: type, source: ConfigSource | Mapping[str, Any], *, ignore: Sequence[str] = ()) -> Any:
    """Validate ``source`` against the dataclass ``cls``, coerce the values, and build it.

    Top-level keys in ``ignore`` (e.g. ``algorithm``) are skipped. Nested sections build
    nested dataclass fields. Errors from the class's own checks (``__post_init__``) are
    re-raised as :class:`ConfigError` naming where the offending key was set.
    """
    if not isinstance(source, ConfigSource):
        if not isinstance(source, Mapping):
            raise ConfigError(f"config: a {cls.__name__} config is a mapping of keys to values, "
                              f"got a {type(source).__name__}")
        source = ConfigSource(data=dict(source))
    data = {k: v for k, v in source.data.items() if k not in ignore}
    values = _coerce_mapping(cls, data, "", source)
    try:
        return _construct(cls, values)
    except (TypeError, ValueError) as exc:
        text = str(exc)
        if cls.__name__ not in text:
            text = f"invalid {cls.__name__}: {text}"
        named = re.search(rf"\b{cls.__name__}\.(\w+)", text)
        key = named.group(1) if named else ""
        if key in source.origins or source.path is not None:
            text = f"{source.origin(key)}: {text}"
        raise ConfigError(text) from None


def config_from_dict(cls: type, data: Mapping[str, Any], *, source: str | Path | None = None,
                     ignore: Sequence[str] = ()) -> Any:
    """Build the config dataclass ``cls`` from a dict (strings coerced); ``source`` (a file name) is named in errors."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source or 'config'}: a {cls.__name__} config is a mapping of keys to values, "
                          f"got a {type(data).__name__}")
    return build_config(cls, ConfigSource(data=dict(data), path=Path(source) if source else None), ignore=ignore)


def config_from_file(cls: type, path: str | Path, overrides: Iterable[str] = (), *, ignore: Sequence[str] = ()) -> Any:
    """Read a YAML/TOML/JSON file, apply ``KEY=VALUE`` overrides (values read as YAML), build ``cls``."""
    return build_config(cls, apply_overrides(read_config_file(path), overrides), ignore=ignore)


def config_to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config dataclass (tuples -> lists, paths -> strings) that builds it back."""
    return _plain(dataclasses.asdict(config))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _construct(cls: type, values: dict[str, Any]) -> Any:
    kwargs = {}
    for f, hint in _fields(cls):
        if f.name not in values:
            continue
        nested = _dataclass_arm(hint)
        value = values[f.name]
        kwargs[f.name] = _construct(nested, value) if nested is not None and isinstance(value, dict) else value
    return cls(**kwargs)


def _coerce_mapping(cls: type, data: Mapping[str, Any], prefix: str, source: ConfigSource) -> dict[str, Any]:
    fields = dict((f.name, hint) for f, hint in _fields(cls))
    # dotted keys inside a file ("optim.lr: 1") are accepted like nested sections
    expanded: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(f"{source.origin(prefix + str(key))}: key {key!r} must be a string")
        head, dot, rest = key.partition(".")
        if dot:
            expanded.setdefault(head, {})
            if not isinstance(expanded[head], dict):
                raise ConfigError(f"{source.origin(prefix + key)}: {prefix + head!r} is given both as a value and as a section")
            expanded[head][rest] = value
        else:
            if isinstance(expanded.get(key), dict) and isinstance(value, dict):
                expanded[key] = {**value, **expanded[key]}
            else:
                expanded[key] = value
    out: dict[str, Any] = {}
    for key, value in expanded.items():
        full = prefix + key
        if key not in fields:
            raise unknown_key_error(key, fields, owner=cls.__name__, where=source.origin(full), shown=full)
        hint = fields[key]
        nested = _dataclass_arm(hint)
        if nested is not None and isinstance(value, dict):
            out[key] = _coerce_mapping(nested, value, full + ".", source)
        else:
            out[key] = coerce_value(value, hint, full, source.origin(full))
    return out


def _fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: treat as Any
        hints = {}
    return [(f, hints.get(f.name, Any)) for f in dataclasses.fields(cls) if f.init]


def _dataclass_arm(hint: Any) -> type | None:
    """The dataclass type of a field annotated ``SomeConfig`` or ``SomeConfig | None``."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    if _is_union(hint):
        arms = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(arms) == 1:
            return _dataclass_arm(arms[0])
    return None


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _type_name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if isinstance(hint, type):
        return hint.__name__
    if _is_union(hint):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    return str(hint).replace("typing.", "")


class _Mismatch(Exception):
    """The value does not fit one type (internal; turned into a ConfigError naming the key)."""


def coerce_value(value: Any, hint: Any, key: str = "value", where: str = "config") -> Any:
    """``value`` converted to the type ``hint``; :class:`ConfigError` naming ``key`` and ``where`` if it cannot be."""
    try:
        return _coerce(value, hint)
    except _Mismatch as exc:
        detail = f" ({exc})" if str(exc) else ""
        raise ConfigError(f"{where}: {key}: expected {_type_name(hint)}, got {value!r} "
                          f"({type(value).__name__}){detail}") from None


def _coerce(value: Any, hint: Any) -> Any:
    if hint is Any or hint is typing.Any:
        return value
    origin = typing.get_origin(hint)
    if _is_union(hint):
        arms = typing.get_args(hint)
        if isinstance(value, str) and not any(_is_instance(value, a) for a in arms if a is not type(None)):
            value = _from_text(value)  # "null" -> None, "[1, 2]" -> [1, 2], as --set reads it
        if value is None:
            if type(None) in arms:
                return None
            raise _Mismatch("")
        # an arm the value already is wins over coercions (e.g. int | str with "3" stays "3")
        for arm in arms:
            if arm is not type(None) and _is_instance(value, arm):
                return _coerce(value, arm)
        for arm in arms:
            if arm is type(None):
                continue
            try:
                return _coerce(value, arm)
            except _Mismatch:
                continue
        raise _Mismatch("")
    if origin is typing.Literal:
        choices = typing.get_args(hint)
        if value in choices:
            return value
        raise _Mismatch("")
    if value is None:
        raise _Mismatch("null is not allowed here")
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _BOOLS:
            return _BOOLS[value.strip().lower()]
        raise _Mismatch("use true or false")
    if hint is int:
        if isinstance(value, bool):
            raise _Mismatch("")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip().replace("_", ""))
            except ValueError:
                try:
                    number = float(value)
                except ValueError:
                    raise _Mismatch("") from None
                if number.is_integer():
                    return int(number)
        raise _Mismatch("")
    if hint is float:
        if isinstance(value, bool):
            raise _Mismatch("")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip().replace("_", ""))
            except ValueError:
                raise _Mismatch("") from None
        raise _Mismatch("")
    if hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, Path):
            return str(value)
        raise _Mismatch("")
    if hint is Path:
        if isinstance(value, (str, Path)):
            return Path(value)
        raise _Mismatch("")
    if origin in (list, tuple, collections.abc.Sequence) or hint in (list, tuple):
        if isinstance(value, str) and isinstance(_from_text(value), list):
            value = _from_text(value)
        if not isinstance(value, (list, tuple)):
            raise _Mismatch("give a list, e.g. [a, b]")
        args = typing.get_args(hint)
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(value):
                raise _Mismatch(f"needs exactly {len(args)} items")
            return tuple(_coerce(v, a) for v, a in zip(value, args))
        item = args[0] if args else Any
        items = [_coerce(v, item) for v in value]
        return tuple(items) if (origin is tuple or hint is tuple) else items
    if origin in (dict, collections.abc.Mapping) or hint is dict:
        if isinstance(value, str) and isinstance(_from_text(value), dict):
            value = _from_text(value)
        if not isinstance(value, dict):
            raise _Mismatch("give a mapping, e.g. {a: 1}")
        args = typing.get_args(hint)
        if len(args) == 2:
            return {_coerce(k, args[0]): _coerce(v, args[1]) for k, v in value.items()}
        return dict(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        raise _Mismatch("give a section with the fields " + ", ".join(f.name for f, _ in _fields(hint)))
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise _Mismatch("")
    return value


def _from_text(text: str) -> Any:
    """A string read as a YAML value, as ``--set`` reads it (the text itself when it is not valid YAML)."""
    import yaml

    try:
        return yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        return text


_BOOLS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False, "1": True, "0": False}


def _is_instance(value: Any, hint: Any) -> bool:
    """Whether ``value`` already has the type ``hint`` (no coercion needed); bools are not ints."""
    if hint is Any:
        return True
    if typing.get_origin(hint) is typing.Literal:
        return value in typing.get_args(hint)
    base = typing.get_origin(hint) or hint
    if base is collections.abc.Sequence:
        base = (list, tuple)
    if base is collections.abc.Mapping:
        base = dict
    if not isinstance(base, (type, tuple)):
        return False
    if isinstance(value, bool) and base in (int, float):
        return False
    if base is float and isinstance(value, int):
        return False
    return isinstance(value, base)
