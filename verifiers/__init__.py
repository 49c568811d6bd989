"""Verifiers: decide whether an action is functionally equivalent to the expert's.

Import :func:`build_verifier` to get one by name or config; every built-in is
registered when this package is imported (:mod:`pivot_envs.verifiers.catalog` imports each of its modules).

The room: a verifier is a module named as it registers (``facts.py`` registers ``facts``; the combinators share
``compose.py``), the ``stop`` verdict is declared in ``stop.py``, and ``docs/verifiers.md``'s table lists them all.
The protocol and the engine around them: ``base`` (the protocol, the registry), ``declaration`` (what each verifier
declares), ``catalog``, ``accepted_by``, ``batch``, ``rows``, ``versions``, ``hack_monitor`` and ``defaults``.
``helpers/`` holds the code verifiers share, ``sandbox/`` the execution backends.
"""

from pivot_envs.verifiers.base import (
    Verifier,
    VerifierSpec,
    build_verifier,
    register_verifier,
    verifier_class,
    verifier_names,
)
from pivot_envs.verifiers import catalog  # noqa: F401  (registers every built-in verifier)

__all__ = [
    "Verifier",
    "VerifierSpec",
    "build_verifier",
    "register_verifier",
    "verifier_class",
    "verifier_names",
]
