"""A built-in domain is one folder: copied outside the project it is a plugin, added inside the package it is found.

Both tests copy the ``tool_use`` folder (``pivot_envs/envs_data/tool_use/``: its Domain, verifier recipe, world,
generator, tool code and data) and change nothing in it but the env id; the folder's name is the domain's name.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pivot_envs import envs_data
from pivot_envs.builtin_domains import domain_modules

FOLDER = Path(envs_data.__file__).resolve().parent / "tool_use"
ROOT = Path(__file__).resolve().parents[2]

PLAY = '''
import json, sys
import gymnasium
import pivot_envs
from pivot_envs.domains import domain_names, get_domain
from pivot_envs.worlds import build_world, world_names

name, env_id = sys.argv[1], sys.argv[2]
domain = get_domain(name)
pivot = domain.load_pivots("test")[0]
env = gymnasium.make(env_id, pivots=[pivot])
env.reset(seed=0)
_, reward, *_ = env.step(pivot.expert)  # the expert's own action, scored by the folder's default verifier
world = build_world(name)
print(json.dumps({"reward": reward, "domains": domain_names(), "worlds": world_names(),
                  "world": type(world).__module__, "rebuilt": type(build_world(world.config())).__module__,
                  "verifier": domain.verifier_spec()["name"]}))
'''


def copy_domain(dest: Path, env_id: str) -> Path:
    """The tool_use folder copied to ``dest`` (its name: the new domain's), its env id changed."""
    shutil.copytree(FOLDER, dest, ignore=shutil.ignore_patterns("__pycache__"))
    domain_py = dest / "domain.py"
    text = domain_py.read_text()
    assert text.count('env_id="pivot/ToolUse-v0"') == 1
    domain_py.write_text(text.replace('env_id="pivot/ToolUse-v0"', f'env_id="{env_id}"'))
    return dest


def run(args: list[str], env: dict[str, str], cwd: Path) -> dict:
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=env, cwd=cwd)
    return json.loads(out.stdout.strip().splitlines()[-1])


def base_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}


def test_the_built_in_domains_are_found_by_package_discovery():
    assert domain_modules() == [f"pivot_envs.envs_data.{name}.domain" for name in ("search", "swe", "terminal", "tool_use")]


@pytest.mark.slow
def test_a_copied_domain_folder_installs_as_a_plugin_and_plays(tmp_path):
    src = tmp_path / "src"
    copy_domain(src / "pivot_shop", "pivot/Shop-v0")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "pivot-shop"\nversion = "0.0.1"\n\n'
        '[tool.setuptools]\npackages = ["pivot_shop"]\n\n'
        '[tool.setuptools.package-data]\npivot_shop = ["*.jsonl.gz", "*.json"]\n\n'
        '[project.entry-points."pivot_envs.domains"]\nshop = "pivot_shop.domain:DOMAIN"\n')
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), f"{src}/"], check=True)
    assert (site / "pivot_shop" / "test.jsonl.gz").is_file()  # the data travelled with the folder
    env = {**base_env(), "PYTHONPATH": str(site)}
    result = run([sys.executable, "-c", PLAY, "pivot_shop", "pivot/Shop-v0"], env, ROOT)
    assert result["reward"] == 1.0 and result["verifier"] == "final_turn"
    assert "pivot_shop" in result["domains"] and "tool_use" in result["domains"]
    assert "pivot_shop" in result["worlds"]
    assert result["world"] == result["rebuilt"] == "pivot_shop.world"  # rebuilt by name from its config()
    # the whole task, played through the CLI with the expert's actions in the copied folder's world
    out = tmp_path / "episodes.jsonl"
    played = subprocess.run([sys.executable, "-m", "pivot_envs.cli", "play", "--env", "pivot/Shop-Episode-v0",
                             "--tasks", str(site / "pivot_shop" / "test.jsonl.gz"), "--agent", "replay",
                             "--limit", "3", "-o", str(out)], capture_output=True, text=True, env=env, cwd=ROOT)
    assert played.returncode == 0, played.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all(row["success"] is True and row["error"] is None for row in rows), rows


@pytest.mark.slow
def test_a_folder_added_inside_the_package_is_found_with_no_other_edit(tmp_path):
    tree = tmp_path / "tree"
    for name in ("pivot_envs", "verifiers", "agents", "trainers", "envs_data", "pipeline", "experiments", "models",
                 "worlds", "serve", "integrations", "harness"):
        shutil.copytree(ROOT / name, tree / name, symlinks=True,  # pivot_envs/<folder> -> ../<folder>: links kept
                        ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    copy_domain(tree / "envs_data" / "shop", "pivot/Shop-v0")
    result = run([sys.executable, "-c", PLAY, "shop", "pivot/Shop-v0"], base_env(), tree)
    assert result["reward"] == 1.0 and result["domains"][-1] == "tool_use" and "shop" in result["domains"]
    assert result["world"] == result["rebuilt"] == "pivot_envs.envs_data.shop.world"
    listed = subprocess.run([sys.executable, "-c", "from pivot_envs.envs_data import GENERATORS; print(*GENERATORS)"],
                            check=True, capture_output=True, text=True, env=base_env(), cwd=tree)
    assert listed.stdout.split() == ["search", "shop", "swe", "terminal", "tool_use"]  # `pivot-envs data build` too
