# Sourced by scripts/lab and scripts/test: make .venv (Python >= 3.10) and install the project.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
fi
export PATH="$PWD/.venv/bin:$PATH"
