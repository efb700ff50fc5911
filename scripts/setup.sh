#!/usr/bin/env bash
# Set up a development environment from a fresh clone: system libraries (as root on
# Debian/Ubuntu), a virtual environment in .venv, and taichi_aot installed editable
# with its test and runtime dependencies (the taichi wheel ships libtaichi_c_api), the ray extra
# (the pool's Ray backend is tested too) and the interop extra (PyTorch: its CPU tensors are tested too).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; then
  # libtaichi_c_api links libX11; Vulkan needs the loader and, without a GPU driver,
  # Mesa's software rasterizer (lavapipe).
  need=""
  for pkg in libx11-6 libvulkan1 mesa-vulkan-drivers gcc python3-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
  done
  if [ -n "$need" ]; then
    echo "setup: installing$need"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# PyTorch first, pinned: 2.13.0 is the release whose CPU build (a few hundred MB, not several GB of CUDA
# packages) pip finds beside the registry on the development machines; the interop extra's range then holds
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e '.[test,check,ray,interop]'
.venv/bin/python -c "import taichi_aot.capi as c; print('setup: taichi_aot loads', c.library.path, 'C-API', c.get_version())"
