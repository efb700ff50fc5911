#!/usr/bin/env bash
# Rebuild the demo's shipped module, taichi_aot/cli/demo.tcm, from taichi_aot/cli/demo_kernels.py: the x64 and
# Vulkan parts compiled here, the CUDA part given as a module compiled where a GPU is (GPU_DEMO=1
# benchmarks/gpu_run.sh writes it). Usage: bash scripts/demo_module.sh [CUDA_PART.tcm]   (needs .venv, test setup)
set -euo pipefail
cd "$(dirname "$0")/.."
with=()
if [ -n "${1:-}" ]; then with=(--with "cuda=$(realpath "$1")"); fi
cd taichi_aot/cli
../../.venv/bin/python -m taichi_aot build demo_kernels.py --arch x64 vulkan "${with[@]}" -o demo.tcm
../../.venv/bin/python -m taichi_aot info demo.tcm | head -3
