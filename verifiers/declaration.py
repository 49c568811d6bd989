"""One declaration per verifier: its name, the line that says what it checks, its module, and what it reports as
having accepted a sample (:mod:`pivot_envs.verifiers.accepted_by`).

The catalog (:mod:`pivot_envs.verifiers.catalog`), the accepted-by reports and the docs table read these
declarations; no other place lists the verifiers. A verifier declares itself where it is defined, with
:func:`~pivot_envs.verifiers.base.register_verifier` (the docs line is the first paragraph of its docstring)::

    @register_verifier("sql", accepted_by="effect")
    @dataclass
    class SqlVerifier(Verifier):
        \"\"\"The same rows when both queries run on the pivot's database.\"\"\"

A verdict name that no registered verifier builds (the stop rules' ``stop``) is declared with :func:`declare`.
"""

from __future__ import annotations

from dataclasses import dataclass

CATEGORIES = ("exact", "arguments", "similarity", "effect", "state", "facts", "judge", "tool name", "other")
"""What may accept a sample, in report order (:mod:`pivot_envs.verifiers.accepted_by` says what each means)."""


@dataclass(frozen=True)
class Declaration:
    """What one verifier (or verdict name) declares about itself."""

    name: str
    """The name it is registered under, which its verdicts carry (``VerifyResult.verifier``)."""
    accepted_by: str
    """The category of :data:`CATEGORIES` a sample it passes is reported under."""
    doc: str
    """One line: what it checks (the docs table)."""
    module: str
    """The module that declares it (``pivot_envs.verifiers.facts``)."""
    registered: bool = True
    """A verifier :func:`~pivot_envs.verifiers.base.build_verifier` builds; ``False``: a verdict name only."""


_DECLARED: dict[str, Declaration] = {}


def declare(name: str, *, accepted_by: str = "other", doc: str, module: str, registered: bool = False) -> Declaration:
    """Declare ``name`` (declaring it again replaces the declaration); a category outside :data:`CATEGORIES` raises."""
    if accepted_by not in CATEGORIES:
        raise ValueError(f"verifier {name!r}: accepted_by must be one of {CATEGORIES}, got {accepted_by!r}")
    declaration = Declaration(name, accepted_by, doc, module, registered)
    _DECLARED[name] = declaration
    return declaration


def forget(name: str) -> None:
    """Remove ``name``'s declaration (the inverse of :func:`declare`: a test's cleanup)."""
    _DECLARED.pop(name, None)


def declared(name: str) -> Declaration | None:
    """The declaration of ``name``, or ``None`` (a verifier registered through an entry point declares nothing)."""
    return _DECLARED.get(name)


def declarations() -> list[Declaration]:
    """Every declaration, by name."""
    return [_DECLARED[name] for name in sorted(_DECLARED)]


def doc_line(docstring: str | None) -> str:
    """The first paragraph of ``docstring`` on one line, without a pointer to the module's docstring."""
    paragraph = (docstring or "").strip().split("\n\n")[0]
    line = " ".join(paragraph.split())
    for pointer in (" (see the module docstring)", " (see the module table)"):
        line = line.replace(pointer, "")
    return line
