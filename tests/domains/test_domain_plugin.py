"""A third-party package adds a domain through the ``pivot_envs.domains`` entry-point group."""

import json
import subprocess
import sys
import textwrap

import pytest

from pivot_envs import Domain, register_domain
from pivot_envs.domains import get_domain

PLUGIN_MODULE = '''
import json
from pivot_envs import Domain, Pivot


def _pivots(split):
    return [Pivot(id=f"r{i}", domain="recipes", context=[{"role": "user", "content": "what goes in soup " + str(i)}],
                  expert={"role": "assistant", "content": "salt"}) for i in range(3)]


DOMAIN = Domain(name="recipes", env_id="pivot/Recipes-v0", description="a plugin domain",
                default_verifier="strict", load_pivots=_pivots)
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "pivot-recipes-plugin"
version = "0.0.1"

[project.entry-points."pivot_envs.domains"]
recipes = "pivot_recipes:DOMAIN"
'''

CHECK = '''
import gymnasium, json
env = gymnasium.make("pivot_envs:pivot/Recipes-v0")
obs, info = env.reset(seed=0)
_, reward, terminated, _, step = env.step("salt")
from pivot_envs.domains import domain_names
print(json.dumps({"reward": reward, "terminated": terminated, "domains": domain_names(), "pivot": info["pivot_id"]}))
'''


@pytest.mark.slow
def test_installed_plugin_package_registers_an_env(tmp_path):
    src = tmp_path / "src"
    (src / "pivot_recipes").mkdir(parents=True)
    (src / "pivot_recipes" / "__init__.py").write_text(textwrap.dedent(PLUGIN_MODULE))
    (src / "pyproject.toml").write_text(PYPROJECT)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), f"{src}/"], check=True)
    out = subprocess.run([sys.executable, "-c", CHECK], check=True, capture_output=True, text=True,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["reward"] == 1.0 and result["terminated"] is True
    assert "recipes" in result["domains"] and result["pivot"].startswith("r")
    # without the package the env id does not exist
    missing = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode != 0 and "Recipes" in missing.stderr


def test_register_domain_in_process():
    dom = Domain(name="unit_test_domain", env_id="pivot/UnitTest-v0", default_verifier="strict")
    register_domain(dom, replace=True)
    assert get_domain("unit_test_domain") is dom
    with pytest.raises(ValueError, match="already registered"):
        register_domain(dom)
    with pytest.raises(TypeError):
        register_domain({"name": "x"})
