#!/usr/bin/env bash
# Set up (scripts/setup.sh), make the static checks (ruff with the rule set in pyproject.toml,
# mypy on the package) and run the test suite. Extra arguments go to pytest, which then runs once as asked.
# Without arguments the suite runs as two pytest processes side by side, as the machine's cores allow: the packaging
# tests (wheels built and installed into fresh venvs, frozen apps, the guide run in one, the bench: mostly waiting on
# pip, PyInstaller and children), then the Vulkan tests of memory, copies and launches once more under a discrete
# GPU's placement; and, beside them, everything else.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
echo "test: ruff"
.venv/bin/ruff check taichi_aot taichi_aot_bench tests benchmarks examples build_ffi.py setup.py
echo "test: mypy"
.venv/bin/mypy
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest -q "$@"
fi
PACKAGING=(tests/test_deploy.py tests/test_install.py tests/test_packaging.py tests/test_readme.py tests/test_bench.py)
side=$(mktemp -d)
set -m  # the side job in a process group of its own: stopped with this script (an interrupt, a failure)
(
  status=0
  .venv/bin/python -m pytest -q -p no:cacheprovider --basetemp="$side/tmp" "${PACKAGING[@]}" || status=$?
  # The Vulkan tests of memory, arrays, copies and launches again under a discrete GPU's placement (device memory by
  # default, copies through staging buffers), forced on whatever device this machine has (lavapipe in CI)
  echo "test: the Vulkan tests again with TAICHI_AOT_VULKAN_MEMORY=device"
  TAICHI_AOT_VULKAN_MEMORY=device .venv/bin/python -m pytest -q -p no:cacheprovider --basetemp="$side/tmp" \
    -k vulkan tests/test_ndarray.py tests/test_memory.py tests/test_launch.py tests/test_call.py tests/test_interop.py \
    tests/test_runtime.py tests/test_validation.py tests/test_lifetimes.py tests/test_torch.py tests/test_bindings.py \
    || status=$?
  exit "$status"
) > "$side/log" 2>&1 &
beside=$!
set +m
trap 'kill -- -"$beside" 2>/dev/null || true; rm -rf "$side"' EXIT
echo "test: pytest (the packaging tests and the device-placement pass run beside it; their output follows)"
status=0
.venv/bin/python -m pytest -q "${PACKAGING[@]/#/--ignore=}" || status=$?
wait "$beside" || status=$((status ? status : 1))
echo "test: the packaging tests, then the Vulkan tests with TAICHI_AOT_VULKAN_MEMORY=device"
cat "$side/log"
exit "$status"
