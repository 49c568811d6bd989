"""Verifier versions: read off the built object graph, hashed into fingerprints, and a mismatch refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pivot_envs.types import VerifyResult
from pivot_envs.verifiers import Verifier, build_verifier, register_verifier
from pivot_envs.verifiers.base import VERIFIERS
from pivot_envs.verifiers.declaration import forget
from pivot_envs.verifiers.defaults import default_verifier_spec
from pivot_envs.verifiers.strict import StrictVerifier
from pivot_envs.verifiers.coverage import CoverageVerifier
from pivot_envs.verifiers.tool_call import ToolCallVerifier
from pivot_envs.verifiers.versions import (VerifierVersionsChanged, changed_versions, check_versions, domain_versions,
                                           merged_versions, verifier_fingerprint, verifier_versions)


@dataclass
class _Holder:
    inner: Any


@register_verifier("versions_test_plain")
@dataclass
class PlainVerifier(Verifier):
    """A user's verifier that declares no version."""

    def verify(self, action, pivot):
        return VerifyResult(1.0, True, self.name, "")


@register_verifier("versions_test_nested")
@dataclass
class NestedVerifier(Verifier):
    """A user's verifier at version 3 that hides its children in a dict, a tuple and a plain dataclass."""

    version = 3
    child: Any = "fuzzy"
    _parts: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._parts = {"held": (_Holder(build_verifier(self.child)),), "other": [build_verifier("strict")]}

    def verify(self, action, pivot):
        return VerifyResult(1.0, True, self.name, "")


@pytest.fixture(autouse=True, scope="module")
def _unregister():
    yield
    for name in ("versions_test_plain", "versions_test_nested"):
        VERIFIERS.unregister(name)
        forget(name)


def test_a_verifier_that_declares_nothing_is_version_1():
    assert verifier_versions("versions_test_plain") == {"versions_test_plain": 1}
    assert verifier_versions(PlainVerifier()) == {"versions_test_plain": 1}


def test_children_are_found_through_attributes_containers_and_dataclasses():
    assert verifier_versions({"name": "versions_test_nested", "child": "tool_call"}) == {
        "versions_test_nested": 3, "tool_call": 1, "fuzzy": 1, "strict": 1}  # tool_call holds a fuzzy text verifier


def test_composites_and_the_domain_defaults_report_every_child():
    cascade = {"name": "cascade", "stages": [{"role": "gate", "verifier": "schema"},
                                             {"role": "decide", "verifier": {"name": "any", "verifiers": ["strict", "coverage"]}}]}
    assert verifier_versions(cascade) == {"any": 1, "cascade": 1, "coverage": CoverageVerifier.version, "schema": 1,
                                          "strict": 1}
    terminal = verifier_versions(default_verifier_spec("terminal"))
    assert {"final_turn", "exec", "facts", "coverage"} <= set(terminal)  # coverage: final_turn -> facts -> otherwise
    assert domain_versions(["search", "terminal", "terminal"]) == merged_versions(
        [default_verifier_spec("search"), default_verifier_spec("terminal")])


def test_a_bump_changes_the_versions_and_the_fingerprint(monkeypatch):
    spec = default_verifier_spec("tool_use")
    before_versions, before = verifier_versions(spec), verifier_fingerprint(spec)
    assert verifier_fingerprint(spec) == before  # stable
    monkeypatch.setattr(ToolCallVerifier, "version", 2)
    assert verifier_versions(spec) == {**before_versions, "tool_call": 2}
    assert verifier_fingerprint(spec) != before
    monkeypatch.undo()
    assert verifier_fingerprint(spec) == before
    assert verifier_fingerprint({"name": "fuzzy", "threshold": 90}) != verifier_fingerprint({"name": "fuzzy", "threshold": 91})


def test_a_mismatch_is_refused_naming_the_verifiers_and_the_fix(monkeypatch):
    recorded = verifier_versions("tool_call")
    check_versions(recorded, verifier_versions("tool_call"), where="ckpt", fix="start afresh")  # equal: accepted
    monkeypatch.setattr(ToolCallVerifier, "version", 4)
    with pytest.raises(VerifierVersionsChanged, match=r"ckpt was scored by other verifier code: tool_call 1 -> 4 "
                                                      r".*start afresh"):
        check_versions(recorded, verifier_versions("tool_call"), where="ckpt", fix="start afresh")
    with pytest.raises(ValueError, match="records no verifier versions .* start afresh"):
        check_versions(None, recorded, where="ckpt", fix="start afresh")
    assert changed_versions({"strict": 1}, {"strict": 1, "exec": 2}) == ["exec not used -> 2"]


def test_a_live_verifier_is_walked_as_it_is(monkeypatch):
    verifier = build_verifier({"name": "all", "verifiers": ["strict", "tool_call"]})
    monkeypatch.setattr(StrictVerifier, "version", 7)
    assert verifier_versions(verifier) == {"all": 1, "fuzzy": 1, "strict": 7, "tool_call": 1}
