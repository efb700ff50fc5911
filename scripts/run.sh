#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job: probe the backends, compile a
# module with Taichi and run its kernels through taichi_aot on every backend here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m taichi_aot demo "$@"
