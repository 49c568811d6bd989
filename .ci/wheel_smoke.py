"""Exercise an INSTALLED wheel (run from outside the source tree): bundled data, envs, verify CLI.

Run by .ci/run in a fresh virtual environment that holds only the wheel and its core dependencies.
Exits non-zero with the failed check named.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import gymnasium

import pivot_envs
from pivot_envs.envs_data import DATA_DIR

root = Path(pivot_envs.__file__).resolve().parent
assert "site-packages" in str(root), f"pivot_envs imported from {root}, not from the installed wheel"

manifest_path = DATA_DIR / "manifest.json"
assert manifest_path.is_file(), f"{manifest_path}: missing from the wheel"
sizes = json.loads(manifest_path.read_text())
for domain in ("tool_use", "terminal", "swe", "search"):
    assert sizes.get(domain, {}).get("splits"), f"manifest.json lacks {domain}: the wheel misses envs_data/manifest.json"
listing = subprocess.run(["pivot-envs", "list"], capture_output=True, text=True, check=True).stdout
assert "240/60" in listing, f"pivot-envs list shows no bundled data sizes:\n{listing}"

for env_id in ("pivot/ToolUse-v0", "pivot/Terminal-v0", "pivot/SWE-v0", "pivot/Search-v0"):
    env = gymnasium.make(f"pivot_envs:{env_id}", split="test")
    obs, info = env.reset(seed=0)
    _, reward, terminated, _, step_info = env.step(info["expert"])
    assert terminated and step_info["error"] is None and reward == 1.0, f"{env_id}: expert scored {reward} {step_info}"
    env.close()

with tempfile.TemporaryDirectory() as tmp:
    rows = Path(tmp, "rows.jsonl")
    rows.write_text(json.dumps({"expected": "ls -a", "action": "ls -a"}) + "\n")
    out = Path(tmp, "out.jsonl")
    subprocess.run(["pivot-envs", "verify", "--verifier", "exec", "-i", str(rows), "-o", str(out)], check=True)
    result = json.loads(out.read_text().splitlines()[0])
    assert result["passed"] and result["error"] is None, f"exec verify from the wheel: {result}"

print(f"wheel smoke: ok ({pivot_envs.__version__}, {root})")
