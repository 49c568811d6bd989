"""Config files, ``--set`` overrides, and the ``train`` / ``eval`` commands end to end with tiny models."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pytest
import typer
from typer.testing import CliRunner

from pivot_envs.config import (
    ConfigError,
    ConfigSource,
    apply_overrides,
    build_config,
    coerce_value,
    config_keys,
    parse_override,
    read_config_file,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


# --------------------------------------------------------------------------- config files


@dataclass
class Optim:
    """A nested section."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)


@dataclass
class Demo:
    """A config with every kind of field the loader understands."""

    name: str = "run"
    steps: int = 10
    ratio: float = 0.5
    flag: bool = False
    limit: int | None = None
    mode: str = "a"
    tags: list[str] = field(default_factory=list)
    extra: dict[str, int] = field(default_factory=dict)
    out: Path = Path("out")
    scales: Sequence[float] = (1.0,)
    optim: Optim = field(default_factory=Optim)


YAML = """\
# a comment
name: first
steps: 20
optim:
  lr: 3e-4          # YAML 1.1 reads this as a string: coerced to float
  betas: [0.8, 0.9]
tags: [a, b]
"""


def test_yaml_toml_and_json_files_build_the_same_config(tmp_path):
    (tmp_path / "c.yaml").write_text(YAML)
    (tmp_path / "c.toml").write_text('name = "first"\nsteps = 20\ntags = ["a", "b"]\n\n[optim]\nlr = 3e-4\nbetas = [0.8, 0.9]\n')
    (tmp_path / "c.json").write_text(json.dumps({"name": "first", "steps": 20, "tags": ["a", "b"],
                                                 "optim": {"lr": "3e-4", "betas": [0.8, 0.9]}}))
    built = [build_config(Demo, read_config_file(tmp_path / f"c.{ext}")) for ext in ("yaml", "toml", "json")]
    assert built[0] == built[1] == built[2]
    assert built[0] == Demo(name="first", steps=20, tags=["a", "b"], optim=Optim(lr=3e-4, betas=(0.8, 0.9)))
    assert isinstance(built[0].optim.lr, float) and built[0].optim.betas == (0.8, 0.9)
    src = read_config_file(tmp_path / "c.yaml")
    assert src.origins["steps"] == f"{tmp_path / 'c.yaml'}:3" and src.origins["optim.lr"].endswith("c.yaml:5")
    assert read_config_file(tmp_path / "c.toml").origins["optim.lr"].endswith("c.toml:6")


def test_overrides_parse_as_yaml_scalars_and_reach_nested_fields(tmp_path):
    (tmp_path / "c.yaml").write_text(YAML)
    src = apply_overrides(read_config_file(tmp_path / "c.yaml"),
                          ["steps=1e3", "optim.lr=0.01", "flag=yes", "limit=null", "limit=7", "tags=[x]",
                           "extra={a: 1}", "out=runs/x", "name=123", "optim.betas=[0.5, 0.6]", "scales=[1, 2]"])
    cfg = build_config(Demo, src)
    assert cfg == Demo(name="123", steps=1000, flag=True, limit=7, tags=["x"], extra={"a": 1}, out=Path("runs/x"),
                       scales=[1.0, 2.0], optim=Optim(lr=0.01, betas=(0.5, 0.6)))
    assert all(isinstance(x, float) for x in cfg.scales)
    assert src.origins["optim.lr"] == "--set optim.lr=0.01" and src.origins["steps"] == "--set steps=1e3"
    assert parse_override("mode=") == ("mode", "")
    assert parse_override("name=a=b") == ("name", "a=b")
    assert build_config(Demo, {"optim.lr": 0.2}).optim.lr == 0.2  # dotted keys inside a file too
    assert config_keys(Demo) == ["name", "steps", "ratio", "flag", "limit", "mode", "tags", "extra", "out",
                                 "scales", "optim.lr", "optim.betas"]


def test_unknown_keys_name_the_key_its_origin_a_close_match_and_the_valid_keys(tmp_path):
    (tmp_path / "c.yaml").write_text(YAML + "stpes: 3\n")
    with pytest.raises(ConfigError) as err:
        build_config(Demo, read_config_file(tmp_path / "c.yaml"))
    text = str(err.value)
    assert f"{tmp_path / 'c.yaml'}:8: unknown key 'stpes' (did you mean 'steps'?)" in text
    assert "valid keys: extra, flag, limit, mode, name, optim, out, ratio, scales, steps, tags" in text
    with pytest.raises(ConfigError, match=r"--set optim\.lrr=1: unknown key 'optim\.lrr' \(did you mean 'lr'\?\) "
                                          r"for Optim; valid keys under optim: betas, lr"):
        build_config(Demo, apply_overrides(ConfigSource(), ["optim.lrr=1"]))
    with pytest.raises(ConfigError, match=r"--set name\.x=1: 'name' is a value"):
        apply_overrides(ConfigSource(data={"name": "a"}), ["name.x=1"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_override("steps")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("steps=ten", r"--set steps=ten: steps: expected int, got 'ten' \(str\)"),
        ("steps=2.5", r"steps: expected int, got 2\.5"),
        ("flag=maybe", r"flag: expected bool, got 'maybe' \(str\) \(use true or false\)"),
        ("ratio=[1]", r"ratio: expected float, got \[1\]"),
        ("tags=a", r"tags: expected list\[str\], got 'a' \(str\) \(give a list"),
        ("steps=null", r"steps: expected int, got None"),
        ("optim=3", r"optim: expected Optim, got 3 \(int\) \(give a section with the fields lr, betas\)"),
        ("optim.betas=[1, 2, 3]", r"optim\.betas: expected tuple\[float, float\], got \[1, 2, 3\] \(list\) \(needs exactly 2 items\)"),
    ],
)
def test_values_of_the_wrong_type_name_the_key_and_the_expected_type(override, message):
    with pytest.raises(ConfigError, match=message):
        build_config(Demo, apply_overrides(ConfigSource(), [override]))


def test_bad_files_name_the_file_and_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("a: 1\nb: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: not valid YAML"):
        read_config_file(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="a config file is a mapping"):
        read_config_file(tmp_path / "list.yaml")
    (tmp_path / "c.ini").write_text("[x]\n")
    with pytest.raises(ConfigError, match="unknown config format '.ini'"):
        read_config_file(tmp_path / "c.ini")
    with pytest.raises(ConfigError, match="no such config file"):
        read_config_file(tmp_path / "missing.yaml")
    (tmp_path / "bad.toml").write_text("a = \n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        read_config_file(tmp_path / "bad.toml")
    assert coerce_value("3", int | None, "k") == 3 and coerce_value("x", int | str, "k") == "x"


# --------------------------------------------------------------------------- resolving the examples


def test_the_example_configs_resolve_to_their_trainers_configs():
    pytest.importorskip("torch")
    from pivot_envs.cli.train_cmd import resolve_train_config
    from pivot_envs.trainers.sft import SFTConfig

    algorithm, cfg, train = resolve_train_config(EXAMPLES / "train_sft_tiny.yaml", ["steps=7", "lr=3e-3"])
    assert algorithm == "sft" and isinstance(cfg, SFTConfig) and train.__name__ == "train_sft"
    assert (cfg.steps, cfg.lr, cfg.batch_size, cfg.pivots) == (7, 3e-3, 8, "out/pivots-tool_use.jsonl")
    from pivot_envs.trainers import pivotrl

    algorithm, rl, train = resolve_train_config(EXAMPLES / "train_pivotrl_tiny.yaml", ["beta=0.05", "group_size=4"])
    assert algorithm == "pivotrl" and isinstance(rl, pivotrl.PivotRLConfig) and train is pivotrl.train_pivotrl
    assert (rl.beta, rl.group_size, rl.lr, rl.pivots) == (0.05, 4, 1e-3, cfg.pivots)  # same pivots as the SFT arm
    assert (rl.model, rl.steps, rl.seed) == (cfg.model, 50, cfg.seed)
    with pytest.raises(ConfigError, match=r"--set algorithm=ppo: algorithm 'ppo' is not one of pivotrl, e2e, sft"):
        resolve_train_config(EXAMPLES / "train_sft_tiny.yaml", ["algorithm=ppo"])
    with pytest.raises(ConfigError, match=r"train_pivotrl_tiny\.yaml:\d+: unknown key 'pivots_per_step' for SFTConfig"):
        resolve_train_config(EXAMPLES / "train_pivotrl_tiny.yaml", ["algorithm=sft"])


def test_a_config_without_algorithm_is_an_error(tmp_path):
    from pivot_envs.cli.train_cmd import resolve_train_config

    (tmp_path / "c.yaml").write_text("steps: 3\n")
    with pytest.raises(ConfigError, match="missing key 'algorithm'; set it to one of pivotrl, e2e, sft"):
        resolve_train_config(tmp_path / "c.yaml", [])


# --------------------------------------------------------------------------- one config system for both trainers


def _trainer_configs():
    pytest.importorskip("torch")
    from pivot_envs.trainers.config import PivotRLConfig
    from pivot_envs.trainers.sft import SFTConfig

    return PivotRLConfig, SFTConfig


def test_one_config_error_class_for_every_trainer():
    from pivot_envs.trainers import config as trainer_config

    assert trainer_config.ConfigError is ConfigError and issubclass(ConfigError, ValueError)


def test_set_values_mean_the_same_for_both_trainers():
    from pivot_envs.cli.train_cmd import resolve_train_config

    PivotRLConfig, SFTConfig = _trainer_configs()
    assert parse_override("a=[1, 2]") == ("a", [1, 2])
    overrides = ["betas=[0.5, 0.6]", "lr=1e-3", "max_prompt_tokens=null", "save_total_limit=3", "seed=7"]
    built = [
        PivotRLConfig.from_file(EXAMPLES / "train_pivotrl_tiny.yaml", overrides),
        SFTConfig.from_file(EXAMPLES / "train_sft_tiny.yaml", overrides),
        resolve_train_config(EXAMPLES / "train_pivotrl_tiny.yaml", overrides)[1],
        resolve_train_config(EXAMPLES / "train_sft_tiny.yaml", overrides)[1],
        PivotRLConfig.from_dict(dict(parse_override(o) for o in overrides)),
        SFTConfig.from_dict(dict(parse_override(o) for o in overrides)),
    ]
    for cfg in built:
        assert (cfg.betas, cfg.lr, cfg.max_prompt_tokens, cfg.save_total_limit, cfg.seed) == ((0.5, 0.6), 1e-3, None, 3, 7)
        assert type(cfg).from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    # a list where PivotRL takes a list or a name: YAML flow lists, not JSON (`[q_proj, v_proj]` is not JSON)
    rl = PivotRLConfig.from_file(EXAMPLES / "train_pivotrl_tiny.yaml", ["lora_target_modules=[q_proj, v_proj]"])
    assert rl.lora_target_modules == ["q_proj", "v_proj"]
    # the same out-of-range list is rejected by both, naming the --set it came from
    for cls, example in ((PivotRLConfig, "train_pivotrl_tiny.yaml"), (SFTConfig, "train_sft_tiny.yaml")):
        with pytest.raises(ConfigError, match=rf"--set betas=\[1, 2\]: {cls.__name__}\.betas = \(1\.0, 2\.0\) is invalid"):
            cls.from_file(EXAMPLES / example, ["betas=[1, 2]"])
        with pytest.raises(ConfigError, match=r"--set betas=\[a, b\]: betas: expected tuple\[float, float\]"):
            cls.from_file(EXAMPLES / example, ["betas=[a, b]"])


def test_a_misspelt_key_names_the_file_line_and_the_close_match(tmp_path, cli):
    from pivot_envs.cli.train_cmd import resolve_train_config

    PivotRLConfig, SFTConfig = _trainer_configs()
    for cls, algorithm in ((PivotRLConfig, "pivotrl"), (SFTConfig, "sft")):
        path = tmp_path / f"{algorithm}.yaml"
        path.write_text(f"algorithm: {algorithm}\nsteps: 3\nlrr: 1e-3\n")
        expected = f"{path}:3: unknown key 'lrr' (did you mean 'lr'?) for {cls.__name__}"
        for build in (lambda: cls.from_file(path), lambda: resolve_train_config(path, [])):
            with pytest.raises(ConfigError) as err:
                build()
            assert str(err.value).startswith(expected)
        with pytest.raises(ConfigError, match=r"^run\.json: unknown key 'lrr' \(did you mean 'lr'\?\)"):
            cls.from_dict({"lrr": 1}, source="run.json")
        result = cli("train", "--config", path)
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert "unknown key 'lrr' (did you mean 'lr'?)" in " ".join(result.output.split())


def test_toml_falls_back_to_tomli_on_python_310(tmp_path, monkeypatch):
    import sys
    import tomllib

    (tmp_path / "c.toml").write_text('name = "t"\n[optim]\nlr = 0.5\n')
    monkeypatch.setitem(sys.modules, "tomllib", None)  # as on Python 3.10: no tomllib
    monkeypatch.setitem(sys.modules, "tomli", tomllib)  # the backport has the same API
    assert build_config(Demo, read_config_file(tmp_path / "c.toml")) == Demo(name="t", optim=Optim(lr=0.5))
    monkeypatch.setitem(sys.modules, "tomli", None)
    with pytest.raises(ConfigError, match=r"c\.toml: reading TOML on Python 3\.10 needs tomli \(pip install tomli\)"):
        read_config_file(tmp_path / "c.toml")


def test_unreadable_config_files_are_one_line_errors(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"dir\.yaml: is a folder"):
        read_config_file(tmp_path / "dir.yaml")
    (tmp_path / "latin1.yaml").write_bytes("steps: 3\nname: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml:2: not UTF-8 text \(byte 0xe9\); save the file as UTF-8"):
        read_config_file(tmp_path / "latin1.yaml")
    assert build_config(Demo, {"limit": "null", "tags": "[a, b]", "extra": "{a: 1}"}) == Demo(tags=["a", "b"],
                                                                                            extra={"a": 1})


# --------------------------------------------------------------------------- the commands


@pytest.fixture(scope="module")
def cli():
    from pivot_envs.cli.train_cmd import register

    app = typer.Typer()
    register(app)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.trainers.test_sft_eval import tiny_setup

    return tiny_setup(str(tmp_path_factory.getbasetemp() / "tiny-sft-eval"))


def test_train_sft_from_the_example_config_end_to_end(cli, tiny, tmp_path):
    out = tmp_path / "sft"
    args = ["train", "--config", EXAMPLES / "train_sft_tiny.yaml", "--set", f"model={tiny.base}",
            "--set", f"pivots={tiny.pivots_path}", "--set", f"output_dir={out}", "--set", "steps=2",
            "--set", "save_every=1", "--set", "num_threads=1", "--set", "batch_size=4"]
    result = cli(*args)
    assert result.exit_code == 0, result.output
    assert "sft finished" in result.output and "final_model_dir" in result.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert (out / "final" / "model.safetensors").exists() and (out / "checkpoint-000002").is_dir()
    again = cli(*args)
    assert again.exit_code == 2 and "already holds a run" in again.output and "resume_from=latest" in again.output
    resumed = cli(*args, "--set", "resume_from=latest")
    assert resumed.exit_code == 0 and "resumed_from" in resumed.output, resumed.output
    no_model = cli(*args, "--set", f"model={tmp_path / 'none'}", "--set", f"output_dir={tmp_path / 'other'}")
    assert no_model.exit_code == 2 and "sft: cannot load a causal LM from" in no_model.output


def test_train_pivotrl_from_the_example_config_end_to_end(cli, tiny, tmp_path):
    out = tmp_path / "rl"
    result = cli("train", "--config", EXAMPLES / "train_pivotrl_tiny.yaml", "--set", f"model={tiny.base}",
                 "--set", f"pivots={tiny.pivots_path}", "--set", "domain=search", "--set", f"output_dir={out}",
                 "--set", "steps=2", "--set", "pivots_per_step=2", "--set", "group_size=2",
                 "--set", "max_new_tokens=16", "--set", "save_every=0", "--set", "num_threads=1")
    assert result.exit_code == 0, result.output
    assert "pivotrl finished" in result.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert (out / "final").is_dir()


def test_dry_run_prints_the_resolved_config_and_bad_keys_fail_clearly(cli, tmp_path):
    pytest.importorskip("torch")
    result = cli("train", "--config", EXAMPLES / "train_sft_tiny.yaml", "--set", "steps=3", "--set",
                 f"output_dir={tmp_path / 'x'}", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "SFTConfig" in result.output and "steps" in result.output and not (tmp_path / "x").exists()
    bad = cli("train", "--config", EXAMPLES / "train_sft_tiny.yaml", "--set", "lrr=1")
    assert bad.exit_code == 2
    assert "--set lrr=1: unknown key 'lrr' (did you mean 'lr'?)" in bad.output and "valid keys:" in bad.output
    typed = cli("train", "--config", EXAMPLES / "train_sft_tiny.yaml", "--set", "steps=many")
    assert typed.exit_code == 2 and "steps: expected int, got 'many'" in typed.output
    invalid = cli("train", "--config", EXAMPLES / "train_sft_tiny.yaml", "--set", "steps=0")
    assert invalid.exit_code == 2 and "SFTConfig.steps = 0 is invalid" in invalid.output
    missing = cli("train", "--config", tmp_path / "nope.yaml")
    assert missing.exit_code == 2 and "no such config file" in missing.output


def test_eval_prints_a_table_and_writes_the_report(cli, tiny, tmp_path):
    from pivot_envs.trainers.evaluate import evaluate

    report_path = tmp_path / "r.json"
    result = cli("eval", "--model", tiny.final, "--pivots", tiny.pivots_path, "--k", "2", "--no-probes",
                 "--max-new-tokens", "96", "--batch-size", "4", "--seed", "5", "-o", report_path)
    assert result.exit_code == 0, result.output
    for text in ("greedy functional", "greedy strict", "mean@2 functional (T=1)", "pass@2", "search", "wrote"):
        assert text in result.output
    report = json.loads(report_path.read_text())
    direct = evaluate(str(tiny.final), str(tiny.pivots_path), k=2, probes=False, max_new_tokens=96, batch_size=4,
                      seed=5)
    assert report["domains"] == json.loads(json.dumps(direct["domains"]))
    assert report["probes"] is None and report["settings"]["k"] == 2

    probes = cli("eval", "--model", tiny.final, "--pivots", "bundled:search:test", "--limit", "2", "--k", "0",
                 "--max-new-tokens", "8")
    assert probes.exit_code == 0, probes.output
    assert "OOD probes: greedy exact match on 200 items" in probes.output and "mean@" not in probes.output
    missing = cli("eval", "--model", tiny.final, "--pivots", tmp_path / "none.jsonl")
    assert missing.exit_code == 2 and "no such pivot file" in missing.output


# --------------------------------------------------------------------------- typed reports


def test_the_progress_line_reads_the_rows_reward_kl_and_loss_by_name():
    from pivot_envs.cli.train_cmd import _stats_text
    from pivot_envs.trainers.metrics import StepReport

    rl = {"step": 3, "reward_mean": 0.25, "kl": 0.0123456, "loss": -0.5, "updated": True}
    assert StepReport.from_row(rl) == StepReport(step=3, reward=0.25, kl=0.0123456, loss=-0.5)
    assert _stats_text(rl) == "reward 0.25  kl 0.01235  loss -0.5"
    sft = {"step": 1, "loss": 2.0, "lr": 1e-3}  # SFT rows have no reward and no KL
    assert _stats_text(sft) == "loss 2"
    # other spellings are not guessed at: the trainers write reward_mean
    assert StepReport.from_row({"step": 1, "reward": 1.0, "mean_reward": 1.0, "kl": None}).reward is None


def test_the_eval_report_names_its_parts():
    from pivot_envs.trainers.eval_report import EvalReport

    summary = {"pivots": 2, "greedy": {"functional": 0.5, "strict": 0.0, "errors": 0}, "sampled": None}
    data = {"model": "m", "settings": {"k": 0, "temperature": 1.0, "seed": 3}, "domains": {"a": summary, "b": summary},
            "overall": summary, "probes": None, "seconds": 1.5}
    report = EvalReport.from_dict(data)
    assert (report.model, report.k, report.seed, report.seconds) == ("m", 0, 3, 1.5)
    assert not report.has_sampled and not report.has_episodes
    assert [name for name, _ in report.columns()] == ["a", "b", "all"]
    assert [name for name, _ in EvalReport.from_dict({**data, "domains": {"a": summary}}).columns()] == ["a"]
