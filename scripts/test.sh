#!/usr/bin/env bash
# Set up (scripts/setup.sh), make the static checks (ruff with the rule set in pyproject.toml,
# mypy on the package) and run the test suite. Extra arguments go to pytest, which then runs once as asked.
# Without arguments the suite runs as two pytest processes side by side, as the machine's cores allow: the packaging
# tests (wheels built and installed into fresh venvs, frozen apps, the guide run in one, the bench: mostly waiting on
# pip, PyInstaller and children) and the close stress (a child of its own), then the Vulkan tests of memory, copies
# and launches once more under a discrete GPU's placement; and, beside them, everything else.
# Everything runs with a temporary folder of this run's own (TMPDIR, and the tools' own variables where one would
# not follow it), removed at the end however the run ends: torch.compile's caches, Ray's sessions, pytest's folders
# and every child's temporary files go with it. The last line totals the pytest runs' counts; the exit status is
# non-zero where any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
run=$(mktemp -d "${TMPDIR:-/tmp}/taichi_aot-test.XXXXXX")  # short: Ray's socket paths under it must stay < 108
jobs_=()  # the pytest runs in flight: each a process group of its own (set -m), stopped with this script
# shellcheck disable=SC2317  # run by the trap
cleanup() {
  for job in "${jobs_[@]}"; do kill -- -"$job" 2>/dev/null || true; done
  for job in "${jobs_[@]}"; do wait "$job" 2>/dev/null || true; done
  rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT  # the runs wait in the background: an interrupt or a stop reaches this script at once
trap 'exit 143' TERM
mkdir -p "$run/tmp" "$run/logs"
export TMPDIR=$run/tmp
# Ray (its sessions) and torch.compile (TorchInductor's caches) follow TMPDIR on Linux, Triton (torch.compile on a
# GPU) keeps its cache in ~/.triton unless told: all named here. XDG_CACHE_HOME stays: it holds pip's cache, which
# the packaging tests' fresh venvs install from, and taichi_aot's, where the builds keep the library they fetch.
export RAY_TMPDIR=$TMPDIR TORCHINDUCTOR_CACHE_DIR=$TMPDIR/torchinductor TRITON_CACHE_DIR=$TMPDIR/triton
# and what would go into the home folder otherwise: Ray's files (~/.ray: its usage-stats setting, and the token of a
# local cluster, which it writes there unless one exists where RAY_AUTH_TOKEN_PATH says), zig's cache (~/.cache/zig:
# the packaging test's cross-compiler), matplotlib's font cache (~/.config/matplotlib), Mesa's shader cache
mkdir -p "$TMPDIR/ray"
python3 -c 'import secrets; print(secrets.token_hex(32))' > "$TMPDIR/ray/auth_token"
export RAY_USAGE_STATS_ENABLED=0 RAY_USAGE_STATS_CONFIG_PATH=$TMPDIR/ray/config.json \
  RAY_AUTH_TOKEN_PATH=$TMPDIR/ray/auth_token ZIG_GLOBAL_CACHE_DIR=$TMPDIR/zig MPLCONFIGDIR=$TMPDIR/matplotlib \
  MESA_SHADER_CACHE_DIR=$TMPDIR/mesa
bash scripts/setup.sh test
echo "test: ruff"
.venv/bin/ruff check taichi_aot taichi_aot_bench tests benchmarks examples build_ffi.py setup.py scripts
echo "test: mypy"
.venv/bin/mypy
total() {  # the last line: every run's counts added up (scripts/pytest_total.py reads each run's log)
  .venv/bin/python scripts/pytest_total.py "$run"/logs/*.log || true
}
set -m  # each job below in a process group of its own, which cleanup stops
main() {  # main LOG PYTEST_ARGS...: pytest shown as it runs and kept in LOG; waited for in the background
  (.venv/bin/python -m pytest -q "${@:2}" 2>&1 | tee "$1") &
  jobs_+=("$!")
  wait "$!"
}
if [ $# -gt 0 ]; then
  status=0
  main "$run/logs/1.log" "$@" || status=$?
  total
  exit "$status"
fi
PACKAGING=(tests/test_deploy.py tests/test_install.py tests/test_packaging.py tests/test_readme.py tests/test_bench.py
           tests/test_close_stress.py)
(
  status=0
  .venv/bin/python -m pytest -q -p no:cacheprovider --basetemp="$run/side" "${PACKAGING[@]}" \
    >"$run/logs/2-packaging.log" 2>&1 || status=$?
  # The Vulkan tests of memory, arrays, copies and launches again under a discrete GPU's placement (device memory by
  # default, copies through staging buffers), forced on whatever device this machine has (lavapipe in CI)
  TAICHI_AOT_VULKAN_MEMORY=device .venv/bin/python -m pytest -q -p no:cacheprovider --basetemp="$run/side" \
    -k vulkan tests/test_ndarray.py tests/test_memory.py tests/test_launch.py tests/test_call.py tests/test_interop.py \
    tests/test_runtime.py tests/test_validation.py tests/test_lifetimes.py tests/test_torch.py tests/test_bindings.py \
    >"$run/logs/3-device-memory.log" 2>&1 || status=$?
  exit "$status"
) &
beside=$!
jobs_+=("$beside")
echo "test: pytest (the packaging tests and the device-placement pass run beside it; their output follows)"
status=0
main "$run/logs/1.log" "${PACKAGING[@]/#/--ignore=}" || status=$?
wait "$beside" || status=$((status ? status : 1))
echo "test: the packaging tests"
cat "$run/logs/2-packaging.log"
echo "test: the Vulkan tests again with TAICHI_AOT_VULKAN_MEMORY=device"
cat "$run/logs/3-device-memory.log"
total
exit "$status"
