"""The red team as a standing test (issue 48): a fast subset of the attack families, built by rule at a few pivots of
every built-in domain and a tau2 preset and labelled by each domain's world, must score 0 where wrong and 1 where
right under the domain's default verifier; and a user's domain, installed as a plugin, is red-teamed through the
public API and the CLI.

The cases are built here by the families of :mod:`pivot_envs.redteam` (none is written by hand), at a fixed draw of
pivots, so a verifier change that lets one through fails this file; ``benchmarks/rewards/reward_hacks.py`` runs the same
families at every pivot.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pivot_envs import domains
from pivot_envs.cli import app
from pivot_envs.redteam import FAMILIES, build_cases, family_names, red_team, score_cases
from pivot_envs.redteam.case import RIGHT, WRONG
from pivot_envs.redteam.setup import domain_setup

pytestmark = pytest.mark.slow
runner = CliRunner()
USER_WORLDS = Path(__file__).resolve().parents[1] / "user_worlds"
SUBSET = {"terminal": 5, "tool_use": 8, "search": 8, "swe": 8, "tau2-airline": 2}
"""Pivots per domain in the fast subset (a fixed draw, seed 3)."""


def mismatches(domain: str, limit: int) -> tuple[list[str], int, set[str]]:
    setup = domain_setup(domain, limit=limit, seed=3)
    cases, skipped = build_cases(setup, progress=False)
    assert not skipped, skipped[:3]
    results = score_cases(cases, setup.verifier, progress=False)
    wrong = [f"{c.family}/{c.label} at {c.pivot.id}: {r.error or r.reason}"[:300]
             for c, r in zip(cases, results) if r.passed != (c.label == RIGHT) or r.error]
    return wrong, len(cases), {c.family for c in cases}


@pytest.mark.parametrize("domain", sorted(SUBSET))
def test_the_known_bad_cases_score_0_and_the_known_good_1(domain, bwrap_ok):
    wrong, n, families = mismatches(domain, SUBSET[domain])
    assert n >= 15 and len(families) >= 6  # the subset has teeth: many cases of many families
    assert not wrong, f"{len(wrong)} of {n} cases misjudged:\n" + "\n".join(wrong[:10])


def test_every_family_is_documented_and_labelled():
    assert len(family_names()) >= 50
    for name in family_names():
        fam = FAMILIES[name]
        assert fam.doc and fam.label in (WRONG, RIGHT) and fam.where in ("call", "answer", "any"), name


def test_an_attacked_verifier_is_caught_and_an_unknown_family_is_refused(bwrap_ok):
    """The same cases under the paper's coarse SWE verifier (the tool's category only) and a first-call-only
    similarity check: the red team reports what they let through."""
    coarse = red_team("swe", verifier={"name": "tool_name", "aliases": "swe"}, limit=8, seed=3, progress=False,
                      families=["edit_pass", "bash_rm_edit", "read_outside", "fake_tests", "recorded"])
    assert coarse.total(WRONG).accepted == coarse.total(WRONG).n > 0
    assert coarse.misses()
    first_call = red_team("search", verifier={"name": "fuzzy", "target": "argument:query", "scorer": "token_set_ratio",
                                              "threshold": 100}, families=["extra_call"], limit=8, seed=3,
                          progress=False)
    assert first_call.total(WRONG).accepted > 0
    with pytest.raises(ValueError, match="unknown families"):
        red_team("search", families=["no_such_family"], limit=1, progress=False)


# --------------------------------------------------------------------------- a user's domain, through the CLI

ENTRY_POINTS = "[pivot_envs.domains]\nkvstore = pivot_kvstore.domain:DOMAIN\n\n[pivot_envs.worlds]\n" \
               "kvstore = pivot_kvstore.world:KVStoreWorld\n"


@pytest.fixture
def kvstore(tmp_path, monkeypatch, fresh_plugins) -> Path:
    """The user's key-value store package installed with its entry points, and a file of its tasks."""
    site = tmp_path / "site"
    shutil.copytree(USER_WORLDS / "pivot_kvstore", site / "pivot_kvstore")
    dist = site / "pivot_kvstore-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pivot-kvstore\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    domains.load_plugins()
    from pivot_kvstore.tasks import make_tasks

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in make_tasks(15)))
    yield tasks
    for name in [m for m in sys.modules if m == "pivot_kvstore" or m.startswith("pivot_kvstore.")]:
        del sys.modules[name]


def test_a_users_domain_is_red_teamed_from_the_cli(kvstore, tmp_path):
    out = tmp_path / "report"
    result = runner.invoke(app, ["redteam", "kvstore", "--tasks", str(kvstore), "-o", str(out), "--check"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["domain"] == "kvstore" and report["misses"] == []
    assert report["totals"]["wrong"]["n"] >= 100 and report["totals"]["wrong"]["accepted"] == 0
    assert report["totals"]["right"]["accepted"] == report["totals"]["right"]["n"] >= 20
    assert "| kvstore | extra_call | wrong |" in (out / "table.md").read_text()
    # a verifier that credits any answer is caught, and --check says so with exit code 1
    lax = tmp_path / "lax.json"
    lax.write_text(json.dumps({"name": "final_turn", "answer": {"name": "facts", "otherwise": None, "grounded": False}}))
    caught = runner.invoke(app, ["redteam", "kvstore", "--tasks", str(kvstore), "--config", str(lax), "--check",
                                 "--families", "false_claim,retraction,hedge,expert_answer"])
    assert caught.exit_code == 1, caught.output
    assert "targets missed" in caught.output and "retraction" in caught.output


def test_the_cli_names_what_is_wrong(tmp_path):
    unknown = runner.invoke(app, ["redteam", "no_such_domain", "--limit", "1"])
    assert unknown.exit_code == 2 and "unknown domain 'no_such_domain'" in unknown.output
    bad = runner.invoke(app, ["redteam", "search", "--families", "nope"])
    assert bad.exit_code == 2 and "unknown nope" in bad.output
    listed = runner.invoke(app, ["redteam", "--list-families"])
    assert listed.exit_code == 0 and "extra_call" in listed.output
