"""The bundled data set: sizes, counts, and that it is what the generators make."""

import json

import pytest

from pivot_envs.envs_data import DATA_DIR, GENERATORS, generator, load_pivots, load_trajectories
from pivot_envs.envs_data.build import split_trajectories
from pivot_envs.pipeline.extract import extract_pivots


def test_bundle_is_small():
    total = sum(p.stat().st_size for p in DATA_DIR.glob("*/*") if p.suffix in (".gz", ".json"))
    assert total < 5 * 1024 * 1024


@pytest.mark.parametrize("domain", sorted(GENERATORS))
def test_each_domain_has_enough_trajectories_and_candidates(domain):
    trajs = {s: load_trajectories(domain, s) for s in ("train", "test")}
    assert sum(len(t) for t in trajs.values()) >= 200
    candidates = sum(len(extract_pivots(t, domain)[0]) for t in trajs.values())
    assert candidates >= 1000
    assert load_pivots("tool_use", "test") and all(p.meta["trajectory_reward"] == 1.0 for p in load_pivots(domain, "test"))
    tools = json.loads((DATA_DIR / domain / "tools.json").read_text())
    assert tools and all(t["type"] == "function" and "parameters" in t["function"] for t in tools)
    train_ids = {t.id for t in trajs["train"]}
    assert train_ids.isdisjoint(t.id for t in trajs["test"])


def test_bundled_tool_use_split_is_exactly_what_the_generator_makes():
    manifest = json.loads((DATA_DIR / "manifest.json").read_text())["tool_use"]
    made = split_trajectories(generator("tool_use").generate(manifest["n"], manifest["seed"]))
    for split, trajs in made.items():
        assert [t.to_dict() for t in trajs] == [t.to_dict() for t in load_trajectories("tool_use", split)]
