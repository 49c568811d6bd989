"""The catalog: every built-in verifier, found by importing each top-level module of this package.

A verifier is one module here that declares it (:mod:`pivot_envs.verifiers.declaration`); importing the module
registers it. No list names them: :func:`discover` imports every top-level module of the package (``helpers/`` and
``sandbox/`` hold no verifier and are imported by the modules that use them). A module that fails to import raises:
a broken verifier is never hidden. :func:`table` is the docs' table of verifiers (``docs/verifiers.md``).
"""

from __future__ import annotations

import importlib
import pkgutil

from pivot_envs.verifiers.declaration import Declaration, declarations

PACKAGE = __name__.rpartition(".")[0]
"""The package whose modules are the verifiers (``pivot_envs.verifiers``)."""


def discover() -> list[str]:
    """Import every top-level module of the package, so that each verifier in it registers; their names."""
    package = importlib.import_module(PACKAGE)
    names = [info.name for info in pkgutil.iter_modules(package.__path__) if not info.ispkg]
    for name in names:
        importlib.import_module(f"{PACKAGE}.{name}")
    return names


MODULES = tuple(discover())
"""The package's top-level modules, imported."""


def _source(declaration: Declaration) -> str:
    """The repository path of the module that declares a verifier (``verifiers/facts.py``)."""
    return declaration.module.removeprefix("pivot_envs.").replace(".", "/") + ".py"


def _markdown(doc: str) -> str:
    """A docstring line as a markdown table cell (reST's double backticks single, no column bar)."""
    return doc.replace("``", "`").replace("|", "/")


def built_in() -> list[Declaration]:
    """The declarations of the package's own modules (not those of a user's or a test's verifier), by name."""
    return [d for d in declarations() if d.module.startswith(f"{PACKAGE}.")]


def table() -> str:
    """The markdown table of every built-in verifier and verdict name: what it checks, where, what it reports."""
    rows = ["| name | checks | accepted by | module |", "|---|---|---|---|"]
    for d in built_in():
        name = f"`{d.name}`" if d.registered else f"`{d.name}` (a verdict, not a verifier)"
        rows.append(f"| {name} | {_markdown(d.doc)} | {d.accepted_by} | `{_source(d)}` |")
    return "\n".join(rows)
