#!/usr/bin/env bash
# Set up what running taichi_aot needs (scripts/setup.sh main: nothing is reinstalled that is installed) and run the
# main job: the demo, a reaction-diffusion simulation from the module shipped precompiled with the package, on the
# best backend here, without Taichi. Its picture goes to out/taichi_aot_demo.png (out/ is git-ignored) unless
# --out names another file. Arguments go to the demo (--arch, --size, --steps, --out, --compile).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh main
out=()
case " $* " in *" --out "*|*" --out="*) ;; *) mkdir -p out; out=(--out out/taichi_aot_demo.png) ;; esac
exec .venv/bin/python -m taichi_aot demo "${out[@]}" "$@"
