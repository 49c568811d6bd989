"""The built-in domains: every folder (sub-package) of :mod:`pivot_envs.envs_data` that has a ``domain`` module.

A folder is a whole domain (``pivot_envs/envs_data/<domain>/``): ``domain.py`` declares its
:class:`~pivot_envs.domains.Domain` as ``DOMAIN`` (env id, bundled data, world, success rules, finish tools,
default verifier recipe) and registers its world; ``world.py``, ``generator.py`` and the tool code they share, and
the data files sit beside it. They are found by package discovery, so adding a folder is the only edit that adds a
built-in domain; a folder copied into another package is a plugin (entry-point group ``pivot_envs.domains``).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

from pivot_envs import envs_data
from pivot_envs.domains import Domain, register_domain


def domain_modules() -> list[str]:
    """The ``domain`` modules of :mod:`pivot_envs.envs_data`'s sub-packages, by folder name."""
    found = []
    for info in pkgutil.iter_modules(envs_data.__path__, f"{envs_data.__name__}."):
        if info.ispkg and importlib.util.find_spec(f"{info.name}.domain") is not None:
            found.append(f"{info.name}.domain")
    return sorted(found)


def builtin_domains() -> list[Domain]:
    """The ``DOMAIN`` of every built-in domain folder (importing a folder's ``domain`` registers its world)."""
    return [importlib.import_module(module).DOMAIN for module in domain_modules()]


def register_builtin_domains() -> None:
    for domain in builtin_domains():
        register_domain(domain, replace=True)
