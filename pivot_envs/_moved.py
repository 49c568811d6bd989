"""Old module paths of the first release, kept importable: ``import pivot_envs.profile`` still works.

The layout moved the data pipeline, the experiments and the model builders into sub-packages
(see docs/design.md). Importing an old path returns the new module itself (one module object, so
``monkeypatch`` and ``isinstance`` see the same thing) and warns once with ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "pivot_envs.extract": "pivot_envs.pipeline.extract",
    "pivot_envs.profile": "pivot_envs.pipeline.profile",
    "pivot_envs.profile_ray": "pivot_envs.pipeline.profile_ray",
    "pivot_envs.pivot_filter": "pivot_envs.pipeline.filter",
    "pivot_envs.profile_report": "pivot_envs.pipeline.report",
    "pivot_envs.verify_io": "pivot_envs.verifiers.rows",
    "pivot_envs.demo": "pivot_envs.experiments.demo",
    "pivot_envs.demo_arms": "pivot_envs.experiments.arms",
    "pivot_envs.demo_base": "pivot_envs.experiments.base_model",
    "pivot_envs.demo_report": "pivot_envs.experiments.report",
    "pivot_envs.verifier_demo": "pivot_envs.experiments.verifier_demo",
    "pivot_envs.tiny_model": "pivot_envs.models.tiny",
    "pivot_envs.reference_model": "pivot_envs.models.reference",
    "pivot_envs.config_files": "pivot_envs.config",
}
"""Old module name -> its new name."""


class _MovedLoader(importlib.abc.Loader):
    def create_module(self, spec):  # type: ignore[no-untyped-def]
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import that instead", DeprecationWarning, stacklevel=3)
        return importlib.import_module(new)

    def exec_module(self, module) -> None:  # type: ignore[no-untyped-def]
        return None  # the new module is already executed


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, _MovedLoader())
        return None


def install() -> None:
    """Make the old paths importable (idempotent)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
