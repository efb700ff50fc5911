#!/usr/bin/env bash
# Set up (scripts/setup.sh), make the static checks (ruff with the rule set in pyproject.toml,
# mypy on the package) and run the test suite; without arguments, the Vulkan tests of memory, copies and launches
# once more under a discrete GPU's placement. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
echo "test: ruff"
.venv/bin/ruff check taichi_aot taichi_aot_bench tests benchmarks examples build_ffi.py setup.py
echo "test: mypy"
.venv/bin/mypy
.venv/bin/python -m pytest -q "$@"
if [ $# -eq 0 ]; then
  # The Vulkan tests of memory, arrays, copies and launches again under a discrete GPU's placement (device memory by
  # default, copies through staging buffers), forced on whatever device this machine has (lavapipe in CI)
  echo "test: the Vulkan tests again with TAICHI_AOT_VULKAN_MEMORY=device"
  TAICHI_AOT_VULKAN_MEMORY=device exec .venv/bin/python -m pytest -q -k vulkan tests/test_ndarray.py \
    tests/test_memory.py tests/test_launch.py tests/test_call.py tests/test_interop.py tests/test_runtime.py \
    tests/test_validation.py tests/test_lifetimes.py tests/test_torch.py tests/test_bindings.py
fi
