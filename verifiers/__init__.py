"""Verifiers: decide whether an action is functionally equivalent to the expert's.

Import :func:`build_verifier` to get one by name or config; every built-in is
registered when this package is imported (:mod:`pivot_envs.verifiers.catalog` imports each of its modules).
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
