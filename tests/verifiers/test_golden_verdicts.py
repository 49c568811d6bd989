"""Golden verdicts: every recorded case's verdict must hold unless the versions of its verifiers changed.

The cases, the file and the regeneration command: ``tests/verifiers/golden_verdicts.py`` (``python tests/verifiers/golden_verdicts.py
--write``). A verdict that changes while the versions do not is a code change without a ``version`` bump: the runs
that recorded the old versions would resume under other rewards.
"""

from __future__ import annotations

import io
import json

import pytest

from tests.verifiers import golden_verdicts as golden
from pivot_envs.verifiers import verifier_class, verifier_names
from pivot_envs.verifiers.strict import StrictVerifier
from pivot_envs.types import VerifyResult

RECORDED = golden.read()
GROUPS = sorted({c["group"] for c in RECORDED["cases"]})


@pytest.mark.parametrize("group", GROUPS)
def test_recorded_verdicts_hold(group, request):
    if group in golden.SANDBOXED:
        request.getfixturevalue("bwrap_ok")
    cases = [c for c in RECORDED["cases"] if c["group"] == group]
    unbumped, stale = golden.compare(cases, golden.compute(cases, RECORDED["pivots"]))
    assert not unbumped, golden.unbumped_message(unbumped)
    assert not stale, golden.stale_message(stale)


def test_every_domain_and_every_built_in_verifier_has_cases():
    assert set(golden.DOMAINS) <= set(GROUPS)
    covered = {name for c in RECORDED["cases"] for name in c["versions"]}
    built_in = {n for n in verifier_names() if verifier_class(n).__module__.startswith("pivot_envs.verifiers.")}
    assert built_in - covered == {"judge"}  # the judge's verdicts are a model server's
    for domain in golden.DOMAINS:
        kinds = {c["id"].rsplit("/", 1)[1] for c in RECORDED["cases"] if c["group"] == domain}
        assert {"expert", "alternative", "refusal", "done", "other"} <= kinds, domain
        verdicts = {c["verdict"]["passed"] for c in RECORDED["cases"] if c["group"] == domain}
        assert verdicts == {True, False}, domain


def test_the_domain_cases_are_scored_by_each_domain_s_default_verifier_of_now():
    outdated = golden.outdated_specs(RECORDED["cases"])
    assert not outdated, golden.stale_message(outdated)


def test_the_pivots_are_stored_with_the_cases_not_looked_up():
    for item in RECORDED["cases"]:
        pivot = RECORDED["pivots"][item["pivot"]]
        assert pivot["id"] == item["pivot"] and pivot["expert"] and pivot["context"]


@pytest.fixture
def strict_file(tmp_path):
    """A golden file of the ``strict`` group alone (fast: no world, no sandbox)."""
    cases = [c for c in RECORDED["cases"] if c["group"] == "strict"]
    assert cases
    path = tmp_path / "golden.json"
    golden.write(path, RECORDED["pivots"], cases)
    return path


def always_passes(self, action, pivot):
    return VerifyResult(1.0, True, self.name, "changed code")


def run(fn, *args):
    out = io.StringIO()
    status = fn(*args, out=out)
    return status, out.getvalue()


def test_a_verdict_changed_without_a_version_bump_fails_and_cannot_be_regenerated_away(strict_file, monkeypatch):
    assert run(golden.check, strict_file) == (0, f"{len(json.loads(strict_file.read_text())['cases'])} golden "
                                                 "verdicts unchanged\n")
    monkeypatch.setattr(StrictVerifier, "verify", always_passes)
    status, text = run(golden.check, strict_file)
    assert status == 1
    assert "changed while the versions of their verifiers did not" in text
    assert "/refusal: fail 0 by strict -> pass 1 by strict" in text
    assert f"bump the `version` of the verifier whose code changed, then regenerate with `{golden.COMMAND}`" in text
    before = strict_file.read_text()
    status, text = run(golden.regenerate, strict_file, False)
    assert status == 1 and text.count("refused:") == 1 and strict_file.read_text() == before

    monkeypatch.setattr(StrictVerifier, "version", 2)  # the bump
    status, text = run(golden.check, strict_file)
    assert status == 1 and "recorded under other verifier versions" in text and f"regenerate with `{golden.COMMAND}`" in text
    assert "bump" not in text
    status, text = run(golden.regenerate, strict_file, False)
    assert status == 0 and "verdicts changed with a version bump" in text and "/done: fail 0 by strict -> pass 1" in text
    assert run(golden.check, strict_file)[0] == 0
    assert all(c["versions"] == {"strict": 2} for c in golden.read(strict_file)["cases"])


def test_a_version_bump_without_a_verdict_change_asks_only_for_a_regeneration(strict_file, monkeypatch):
    monkeypatch.setattr(StrictVerifier, "version", 5)
    status, text = run(golden.check, strict_file)
    assert status == 1 and "strict" in text and "regenerate with" in text and "bump" not in text
    status, text = run(golden.regenerate, strict_file, False)
    assert status == 0 and "versions changed" in text and "verdicts changed" not in text


def test_an_erroring_verdict_is_never_recorded(strict_file, monkeypatch):
    monkeypatch.setattr(StrictVerifier, "verify", lambda self, a, p: VerifyResult.failure(self.name, "sandbox down"))
    with pytest.raises(RuntimeError, match="golden case strict:strict/.*: verifier strict errored: sandbox down"):
        golden.check(strict_file, out=io.StringIO())
