"""veRL adapter: the exported parquet has veRL's RL layout, and compute_score called as veRL's
NaiveRewardManager calls it scores the expert action 1 and a wrong one 0 (veRL itself needs CUDA:
only its calling convention is reproduced here)."""

from __future__ import annotations

import json

import pytest

pq = pytest.importorskip("pyarrow.parquet")

from pivot_envs.actions import message_text  # noqa: E402
from pivot_envs.integrations.verl import compute_score, compute_score_batch  # noqa: E402
from pivot_envs.types import Pivot  # noqa: E402


def _naive_manager_call(row: dict, response_str: str):
    """What verl/workers/reward_manager/naive.py does per sample (after decoding the response)."""
    ground_truth = row["reward_model"]["ground_truth"]
    data_source = row["data_source"]
    extra_info = row.get("extra_info", {})
    extra_info["num_turns"] = None  # NaiveRewardManager sets extra_info["num_turns"] before calling
    score = compute_score(data_source=data_source, solution_str=response_str, ground_truth=ground_truth,
                          extra_info=extra_info)
    return score["score"] if isinstance(score, dict) else score, score


@pytest.mark.parametrize("source", ["bundled:tool_use:test", "bundled:search:test"])
def test_export_then_compute_score_like_verl(tmp_path, source):
    from typer.testing import CliRunner

    from pivot_envs.cli import app

    out = tmp_path / "d" / "test.parquet"
    result = CliRunner().invoke(app, ["export", "--to", "verl", "-i", source, "-o", str(out)])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    rows = table.to_pylist()
    domain = source.split(":")[1]
    assert rows and all(r["data_source"] == f"pivot_envs/{domain}" for r in rows)
    for index, row in enumerate(rows[:12]):
        assert row["reward_model"]["style"] == "rule"
        assert row["extra_info"]["index"] == index and row["extra_info"]["split"] == "test"
        assert all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in row["prompt"])
        assert row["prompt"][-1]["role"] in ("user", "assistant") or row["prompt"][-1]["role"] == "user"
        pivot = Pivot.from_dict(json.loads(row["reward_model"]["ground_truth"]))
        assert pivot.id == row["extra_info"]["pivot_id"]
        reward, detail = _naive_manager_call(row, message_text(pivot.expert))
        assert reward == 1.0 and detail["verifier_error"] == 0.0, (pivot.id, detail)
        reward, detail = _naive_manager_call(row, "I cannot help with that.")
        assert reward == 0.0 and detail["verifier_error"] == 0.0, (pivot.id, detail)
        assert set(detail) == {"score", "passed", "verifier_error"}  # same keys every call (reward_extra_info lists)


def test_pandas_rows_and_batch_form_agree(tmp_path):
    pd = pytest.importorskip("pandas")
    from pivot_envs.integrations.verl import export_parquet

    out = tmp_path / "t.parquet"
    n = export_parquet("bundled:terminal:test", out, verifier="strict")
    df = pd.read_parquet(out)  # how veRL's RLHFDataset reads it (numpy arrays for lists)
    assert len(df) == n
    rows = df.head(6).to_dict("records")
    pivots = [Pivot.from_dict(json.loads(r["reward_model"]["ground_truth"])) for r in rows]
    assert all(json.loads(r["extra_info"]["verifier"])["name"] == "strict" for r in rows)
    texts = [message_text(p.expert) if i % 2 == 0 else "echo nope" for i, p in enumerate(pivots)]
    batch = compute_score_batch([r["data_source"] for r in rows], texts,
                                [r["reward_model"]["ground_truth"] for r in rows], [r["extra_info"] for r in rows])
    single = [compute_score(r["data_source"], t, r["reward_model"]["ground_truth"], r["extra_info"])
              for r, t in zip(rows, texts)]
    assert batch == single
    assert [b["score"] for b in batch] == [1.0, 0.0] * 3


def test_a_verifier_error_is_score_0_and_flagged(monkeypatch):
    from pivot_envs.integrations._common import pivot_json
    from pivot_envs.sources import resolve_pivots
    from pivot_envs.verifiers.batch import VerifierResolver

    pivot = resolve_pivots("bundled:tool_use:test")[0]
    verifier = VerifierResolver().for_pivot(pivot)

    def boom(self, actions, pivots):
        raise RuntimeError("backend down")

    monkeypatch.setattr(type(verifier), "verify_many", boom)
    detail = compute_score("pivot_envs/tool_use", message_text(pivot.expert), pivot_json(pivot), {"index": 0})
    assert detail == {"score": 0.0, "passed": 0.0, "verifier_error": 1.0}
    with pytest.raises(RuntimeError, match="backend down"):
        compute_score("pivot_envs/tool_use", message_text(pivot.expert), pivot_json(pivot), {"index": 0}, strict=True)
