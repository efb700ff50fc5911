#!/usr/bin/env bash
# Set up (scripts/setup.sh), make the static checks (ruff with the rule set in pyproject.toml,
# mypy on the package) and run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
echo "test: ruff"
.venv/bin/ruff check taichi_aot taichi_aot_bench tests benchmarks examples build_ffi.py setup.py
echo "test: mypy"
.venv/bin/mypy
exec .venv/bin/python -m pytest -q "$@"
