"""A tiny structural diff/patch for JSON values, used to make format conversions lossless.

A converter maps a document to a canonical form and back; whatever the
canonical form cannot express is kept as a *patch*: a list of operations
``["set", path, value]`` or ``["del", path]`` (``path`` is a list of dict keys
and list indices) that turns the canonical rebuild into the original.
``apply_patch(base, diff(target, base)) == target`` for any JSON values.

Equality is strict: ``1``, ``1.0`` and ``True`` differ, so numbers keep their
JSON type through a round trip.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

Op = list[Any]
PathT = Sequence[Any]


def same(a: Any, b: Any) -> bool:
    """Strict JSON equality (types included: ``1 != 1.0 != True``; key order ignored)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def diff(target: Any, base: Any, path: tuple[Any, ...] = ()) -> list[Op]:
    """The operations that turn ``base`` into ``target`` (dicts key by key, equal-length lists item by item)."""
    if same(target, base):
        return []
    if isinstance(target, dict) and isinstance(base, dict):
        ops: list[Op] = []
        for key in sorted(target):  # sorted: the same change gives the same patch whatever the key order
            if key in base:
                ops.extend(diff(target[key], base[key], path + (key,)))
            else:
                ops.append(["set", list(path + (key,)), target[key]])
        ops.extend(["del", list(path + (key,))] for key in sorted(base) if key not in target)
        return ops
    if isinstance(target, list) and isinstance(base, list) and len(target) == len(base):
        return [op for i, (t, b) in enumerate(zip(target, base)) for op in diff(t, b, path + (i,))]
    return [["set", list(path), target]]


def apply_patch(doc: Any, ops: Sequence[Op], skip: Callable[[list[Any]], bool] | None = None) -> Any:
    """A copy of ``doc`` with ``ops`` applied, leaving out the ops for which ``skip(path)`` is true.

    Raises ``ValueError`` naming the path when an op does not fit the document.
    """
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, list) or len(op) not in (2, 3) or op[0] not in ("set", "del") or not isinstance(op[1], list):
            raise ValueError(f"patch: malformed operation {op!r} (expected ['set', path, value] or ['del', path])")
        kind, path = op[0], op[1]
        if skip is not None and skip(path):
            continue
        if not path:
            if kind == "del":
                raise ValueError("patch: cannot delete the whole document")
            doc = copy.deepcopy(op[2])
            continue
        parent = doc
        for depth, key in enumerate(path[:-1]):
            parent = _child(parent, key, path[: depth + 1], create=kind == "set")
        last = path[-1]
        if kind == "set":
            value = copy.deepcopy(op[2])
            if isinstance(parent, dict) and isinstance(last, str):
                parent[last] = value
            elif isinstance(parent, list) and isinstance(last, int) and 0 <= last < len(parent):
                parent[last] = value
            else:
                raise ValueError(f"patch: path {path!r} does not fit the document")
        elif isinstance(parent, dict) and last in parent:
            del parent[last]
        elif isinstance(parent, list) and isinstance(last, int) and 0 <= last < len(parent):
            raise ValueError(f"patch: cannot delete list item at {path!r}")
    return doc


def touches(path: Sequence[Any], prefixes: Sequence[Sequence[Any]]) -> bool:
    """Whether ``path`` lies under one of ``prefixes`` or contains one of them."""
    for prefix in prefixes:
        n = min(len(prefix), len(path))
        if list(path[:n]) == list(prefix[:n]):
            return True
    return False


def _child(parent: Any, key: Any, path: Sequence[Any], create: bool) -> Any:
    if isinstance(parent, dict) and isinstance(key, str):
        if key not in parent or not isinstance(parent[key], (dict, list)):
            if not create:
                return {}
            parent[key] = {}
        return parent[key]
    if isinstance(parent, list) and isinstance(key, int) and 0 <= key < len(parent):
        return parent[key]
    raise ValueError(f"patch: path {list(path)!r} does not fit the document")
