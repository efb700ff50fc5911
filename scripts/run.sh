#!/usr/bin/env bash
# Set up what running taichi_aot needs (scripts/setup.sh main) and run the main job: the demo, a
# reaction-diffusion simulation from the module shipped precompiled with the package, on the best backend
# here, without Taichi. Arguments go to the demo (--arch, --size, --steps, --out, --compile).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh main
exec .venv/bin/python -m taichi_aot demo "$@"
