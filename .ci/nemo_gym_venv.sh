#!/usr/bin/env bash
# Creates .venv-nemo-gym from scratch: NeMo Gym 0.4.0 (Python 3.12) and this project (its [serve] extra), the venv
# tests/serve/test_nemo_gym_package.py starts NeMo Gym's runner from. nemo-gym 0.5-0.7 need Python >= 3.13.14; 0.4.0 needs
# >= 3.12. The interpreter is found on PATH (python3.12), else through pyenv (the newest 3.12 it has).
# Usage: .ci/nemo_gym_venv.sh [VENV_DIR]   (default .venv-nemo-gym, in the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-nemo-gym}"

python312=""
if command -v python3.12 >/dev/null && python3.12 -c "" 2>/dev/null; then
    python312="python3.12"
elif command -v pyenv >/dev/null && version="$(pyenv latest 3.12 2>/dev/null)"; then
    python312="$(PYENV_VERSION="$version" pyenv which python3.12)"
fi
if [ -z "$python312" ]; then
    echo "nemo_gym_venv.sh: no Python 3.12 found (not on PATH, and pyenv has none): install one, e.g. pyenv install 3.12" >&2
    exit 1
fi

rm -rf "$venv"
"$python312" -m venv "$venv"
"$venv/bin/pip" install -q uv  # uv resolves and downloads NeMo Gym's ~150 dependencies in parallel
"$venv/bin/uv" pip install -q --python "$venv/bin/python" "nemo-gym==0.4.0" -e ".[serve]"
"$venv/bin/python" -c "import nemo_gym, pivot_envs.serve.nemo_gym; print('nemo-gym', __import__('importlib.metadata').metadata.version('nemo-gym'), 'ready in $venv')"
