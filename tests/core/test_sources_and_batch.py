"""The one pivot-source resolver and the one batch-scoring routine."""

from __future__ import annotations

import pytest

from pivot_envs import Pivot, VerifyResult, parse_action
from pivot_envs.formats import write_pivots
from pivot_envs.sources import resolve_pivots
from pivot_envs.verifiers import Verifier, build_verifier
from pivot_envs.verifiers.batch import VerifierResolver, verify_batch


def test_every_source_form_resolves(tmp_path):
    bundled = resolve_pivots("bundled:tool_use:test")
    assert bundled and all(p.domain == "tool_use" for p in bundled)
    assert [p.id for p in resolve_pivots(None, domain="tool_use", split="test")] == [p.id for p in bundled]
    path = tmp_path / "p.jsonl"
    write_pivots(bundled[:3], path)
    assert [p.id for p in resolve_pivots(path)] == [p.id for p in bundled[:3]]
    assert [p.id for p in resolve_pivots([p.to_dict() for p in bundled[:2]])] == [p.id for p in bundled[:2]]


@pytest.mark.parametrize("source, needle", [
    ("missing.jsonl", "no such pivot file"),
    ("bundled:nope", "unknown domain 'nope'"),
    ("", "no pivots given"),
])
def test_bad_sources_name_the_source_and_the_fix(tmp_path, source, needle):
    with pytest.raises((ValueError, FileNotFoundError)) as err:
        resolve_pivots(source)
    assert needle in str(err.value)
    with pytest.raises(ValueError, match="is a folder"):
        resolve_pivots(tmp_path)


class _Raises(Verifier):
    name = "raises"

    def verify_many(self, actions, pivots):
        raise RuntimeError("boom")


class _OutOfRange(Verifier):
    name = "out_of_range"

    def verify(self, action, pivot):
        return VerifyResult(reward=2.0, passed=True, verifier=self.name, reason="")


def test_verify_batch_groups_by_verifier_and_masks_broken_ones():
    tool_use = resolve_pivots("bundled:tool_use:test")[0]
    search = resolve_pivots("bundled:search:test")[0]
    pivots = [tool_use, search, tool_use]
    actions = [parse_action(p.expert) for p in pivots]
    resolver = VerifierResolver()
    results = verify_batch(actions, pivots, resolver.for_pivot)
    assert [r.passed for r in results] == [True, True, True]
    assert resolver.for_pivot(tool_use) is resolver.for_pivot(tool_use)  # built once per domain
    assert resolver.for_pivot(tool_use).name == "final_turn" and resolver.for_pivot(search).name == "final_turn"
    assert resolver.for_pivot(tool_use) is not resolver.for_pivot(search)  # one per domain
    broken = verify_batch(actions, pivots, [_Raises(), build_verifier("strict"), _OutOfRange()])
    assert "boom" in broken[0].error and broken[1].error is None and "outside [0, 1]" in broken[2].error
    with pytest.raises(ValueError, match="no 'domain'"):
        VerifierResolver().for_pivot(Pivot(id="x", domain="", context=[], expert={"role": "assistant", "content": "a"}))
