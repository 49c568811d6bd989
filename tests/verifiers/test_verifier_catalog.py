"""The verifier room: one module per verifier named as it registers, one declaration feeding the catalog, the
accepted-by reports and the docs table, a new verifier from one new file, no private name imported across modules,
and ``final_turn``'s routes stated."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

import pivot_envs.verifiers as package
from pivot_envs import Pivot, parse_action
from pivot_envs.types import VerifyResult
from pivot_envs.verifiers import build_verifier, verifier_names
from pivot_envs.verifiers.accepted_by import accepted_by, category
from pivot_envs.verifiers.base import VERIFIERS
from pivot_envs.verifiers.catalog import built_in, discover, table
from pivot_envs.verifiers.declaration import declared, forget
from pivot_envs.verifiers.final_turn import ROUTES, FinalTurnVerifier, turn_kind

ROOT = Path(__file__).resolve().parents[2]
COMBINATORS = {"all", "any", "cascade", "weighted", "by_tool"}
"""The combinators, together in ``compose``; every other verifier has a module of its own name."""


def test_each_verifier_is_a_module_of_its_name() -> None:
    verifiers = [d for d in built_in() if d.registered]
    assert len(verifiers) == 18 and set(verifier_names()) >= {d.name for d in verifiers}
    for d in verifiers:
        expected = "compose" if d.name in COMBINATORS else d.name
        assert d.module == f"pivot_envs.verifiers.{expected}", d
    assert declared("stop") is not None and declared("stop").module == "pivot_envs.verifiers.stop"
    assert "stop" not in verifier_names()  # a verdict name, not a verifier one builds


def test_accepted_by_reports_the_categories_as_before() -> None:
    before = {  # the table accepted_by.py kept by hand before each verifier declared its own
        "strict": "exact", "tool_call": "arguments", "fuzzy": "similarity", "exec": "effect", "world_exec": "effect",
        "retrieves": "effect", "stop": "state", "facts": "facts", "coverage": "facts", "judge": "judge",
        "tool_name": "tool name", "swe_call": "tool name"}
    for d in built_in():
        assert d.accepted_by == before.get(d.name, "other"), d.name
    assert category("a user's own") == "other"


def test_the_docs_table_is_the_generated_one() -> None:
    text = (ROOT / "docs" / "verifiers.md").read_text()
    block = text.split("<!-- verifier table: generated -->\n")[1].split("\n<!-- end of the verifier table -->")[0]
    assert block == table(), ('docs/verifiers.md\'s verifier table is stale: paste the output of python -c '
                              '"from pivot_envs.verifiers.catalog import table; print(table())"')


NEW_VERIFIER = '''
from dataclasses import dataclass

from pivot_envs.types import VerifyResult
from pivot_envs.verifiers.base import Verifier, register_verifier


@register_verifier("zz_sql_rows", accepted_by="effect")
@dataclass
class SqlRowsVerifier(Verifier):
    """The same rows as the expert's query (a test's verifier for a new action type)."""

    def verify(self, action, pivot):
        same = action.content.strip().lower() == str(pivot.expert.get("content", "")).strip().lower()
        return VerifyResult(float(same), same, self.name, "same query")
'''


@pytest.fixture
def new_module(tmp_path: Path):
    """A folder with one new verifier module, made part of the package for the test, then taken out again."""
    (tmp_path / "zz_sql_rows.py").write_text(NEW_VERIFIER)
    package.__path__.append(str(tmp_path))
    try:
        yield "zz_sql_rows"
    finally:
        package.__path__.remove(str(tmp_path))
        sys.modules.pop("pivot_envs.verifiers.zz_sql_rows", None)
        VERIFIERS.unregister("zz_sql_rows")
        forget("zz_sql_rows")


def test_a_new_verifier_is_one_new_file(new_module: str) -> None:
    assert new_module in discover()  # what the package's import runs: no list to edit
    assert "zz_sql_rows" in verifier_names()
    pivot = Pivot(id="q", domain="sql", context=[], expert={"role": "assistant", "content": "SELECT 1"})
    result = build_verifier("zz_sql_rows")(parse_action("select 1"), pivot)
    assert result.passed and accepted_by(result, strict_passed=False) == "effect"
    assert "| `zz_sql_rows` | The same rows as the expert's query (a test's verifier for a new action type). | effect |" \
        in table()


def test_no_private_name_is_imported_across_verifier_modules() -> None:
    found = []
    for path in sorted((ROOT / "verifiers").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pivot_envs"):
                found += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []


def test_final_turn_states_where_each_turn_goes() -> None:
    assert set(ROUTES) == {(e, a) for e in ("stop", "call") for a in ("stop", "call")}
    sql_as_text = parse_action("SELECT name FROM users WHERE id = 7;")
    assert turn_kind(sql_as_text.tool_calls) == "stop"  # a text-form action is a stop ...
    assert ROUTES[("stop", turn_kind(sql_as_text.tool_calls))] == "answer"  # ... judged by `answer` (facts)
    pivot = Pivot(id="t", domain="x", context=[{"role": "user", "content": "who is 7?"}],
                  expert={"role": "assistant", "content": "SELECT name FROM users WHERE id = 7;"})
    verdict = FinalTurnVerifier(world_state=False).verify(sql_as_text, pivot)
    assert isinstance(verdict, VerifyResult) and verdict.verifier != "final_turn"  # the answer child decided it


def test_the_catalog_imports_the_package_modules() -> None:
    modules = discover()
    assert {"compose", "facts", "final_turn", "stop", "swe_call", "exec", "judge"} <= set(modules)
    assert "helpers" not in modules and "sandbox" not in modules
    assert importlib.import_module("pivot_envs.verifiers.catalog").MODULES == tuple(modules)
