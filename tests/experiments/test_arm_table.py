"""Adding an arm to the demo is one entry of :data:`pivot_envs.experiments.arm_table.ARMS`: the config accepts it,
the arms stage plans its run, its trainer gets its options, and the report titles it."""

from __future__ import annotations

import dataclasses

from pivot_envs.experiments import arm_table, arms, demo


def test_one_new_entry_is_a_new_arm(monkeypatch):
    new = arm_table.Arm("pivotrl_keep", "PivotRL keeping flat groups", "pivotrl", pivots="adv", label="lambda={lam}",
                        lr="rl", options={"zero_variance": "keep"})
    monkeypatch.setitem(arm_table.ARM, new.name, new)  # the one entry (the table's dict, as ARMS would build it)

    cfg = dataclasses.replace(demo.quick_config(), arms=("base", "pivotrl", "pivotrl_keep"), threads=1)
    root = "/runs/demo"
    files = {"val": f"{root}/v.jsonl", "test": f"{root}/t.jsonl", "test_tasks": f"{root}/tt.jsonl"}
    settings = demo.run_settings(cfg, demo.Path(root), {"files": files}, {"dir": f"{root}/base", "key": "k"})
    monkeypatch.setattr(demo, "run_many", lambda specs, settings, workers: [])
    monkeypatch.setattr(demo, "execute_run", lambda spec, settings: spec)
    sets = {"adv": {"1": f"{root}/adv.jsonl"}, "random": {"1": f"{root}/random.jsonl"}, "pvpo": f"{root}/pvpo.jsonl",
            "train_tasks": f"{root}/tasks.jsonl", "profile": {"stats": {"rollouts": 7}}}
    selection = {"lambda": 1.0, "rl_lr": 3e-4, "sft_lr": 3e-4, "metric": None}
    specs = demo.stage_arms(cfg, settings, sets, selection, lambda m: None)

    spec = next(s for s in specs if s.arm == "pivotrl_keep")
    assert (spec.pivots, spec.lr, spec.label, spec.evals) == (f"{root}/adv.jsonl", 3e-4, "lambda=1", ("test",))
    assert spec.key(settings).startswith("pivotrl_keep-s0-")
    assert arms.rl_config(spec, settings, demo.Path(root))["zero_variance"] == "keep"
    assert arms.run_parts(spec, settings)[0] == "train"

    from pivot_envs.experiments.report import aggregate_arms

    test = {"functional": 0.5, "strict": 0.5, "seconds": 1.0}
    runs = [{"arm": name, "seed": 0, "label": "", "lr": None, "test": test, "folder": f"{root}/runs/{name}"}
            for name in ("pivotrl_keep", "base")]
    table = aggregate_arms(runs)
    assert list(table) == ["base", "pivotrl_keep"] and table["pivotrl_keep"]["title"] == new.title
