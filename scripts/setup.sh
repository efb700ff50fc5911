#!/usr/bin/env bash
# Set up a virtual environment in .venv from a fresh clone. Usage: bash scripts/setup.sh [main|test]
#   main (the default): system libraries (as root on Debian/Ubuntu: libX11, the Vulkan loader, Mesa's software
#         Vulkan driver, a C compiler), then taichi_aot installed editable with what running it needs: cffi and
#         numpy. The build bundles libtaichi_c_api (fetched once with pip download: taichi_aot/_bundle.py).
#   test: main, plus the test, check, build (Taichi, which compiles the test modules), ptx (llvmlite), ray, jax
#         (JAX's CPU build) and package (scripts/package.sh's tools) extras, and the interop extra (PyTorch) where
#         pip resolves it to a CPU build; see below.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-main}
case "$mode" in main|test) ;; *) echo "usage: bash scripts/setup.sh [main|test]" >&2; exit 2 ;; esac

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; then
  # libtaichi_c_api links libX11; Vulkan needs the loader and, without a GPU driver, Mesa's software
  # rasterizer (lavapipe); building the extension needs a C compiler and Python's headers.
  need=""
  # the test command also checks the own Vulkan launch's declarations against Vulkan's headers (libvulkan-dev)
  for pkg in libx11-6 libvulkan1 mesa-vulkan-drivers gcc python3-dev $([ "$mode" = test ] && echo libvulkan-dev); do
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
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
extras=""
if [ "$mode" = test ]; then
  extras="[test,check,build,ray,docs,plot,ptx,jax,package]"
  # PyTorch (the interop extra) is tested through its CPU build (a few hundred MB). Where pip's only torch is
  # the CUDA build (PyPI's default on Linux x86_64: several GB of nvidia-* packages), it is not installed and the
  # torch tests say so: point pip at a CPU build (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu) or
  # set TAICHI_AOT_TORCH=any to take whatever pip resolves. The decision is written to .venv/taichi_aot-extras.
  rm -f .venv/taichi_aot-extras
  if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
    report=$(mktemp)
    chosen=""
    # 2.13.0 first: the release whose CPU build lies beside the registry on this project's machines
    for spec in "torch==2.13.0" "torch>=2.1"; do
      if "${pip[@]}" --dry-run --ignore-installed --report "$report" "$spec" >/dev/null 2>&1; then
        if [ "${TAICHI_AOT_TORCH:-cpu}" = any ] || ! grep -q '"name": "nvidia-' "$report"; then chosen=$spec; break; fi
      fi
    done
    rm -f "$report"
    if [ -n "$chosen" ]; then
      echo "setup: installing $chosen (interop extra)"
      "${pip[@]}" "$chosen"
    else
      echo "interop: not installed: pip resolves torch only to its CUDA build here (several GB of nvidia-* packages); give pip a CPU build (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu) or set TAICHI_AOT_TORCH=any" > .venv/taichi_aot-extras
      echo "setup: $(cat .venv/taichi_aot-extras)"
    fi
  fi
fi
# Installed before from the same sources (the C files, the build scripts, the vendored headers, the package's
# requirements) with these extras (test's include main's): nothing to do, as an editable install reads the Python
# files where they are. The stamp of each mode: .venv/taichi_aot-installed-MODE.
sources=$( (cat pyproject.toml setup.py build_ffi.py taichi_aot/_bundle.py; \
           find include taichi_aot/_csrc taichi_aot_bench/_csrc -type f | LC_ALL=C sort | xargs cat) | sha256sum)
installed=""
for m in "$mode" test; do
  [ -f ".venv/taichi_aot-installed-$m" ] && [ "$(cat ".venv/taichi_aot-installed-$m")" = "$sources" ] && installed=$m
done
if [ -n "$installed" ] && .venv/bin/python -c "import taichi_aot.capi" >/dev/null 2>&1; then
  echo "setup: taichi_aot is installed from these sources ($installed extras): nothing to reinstall"
else
  rm -f .venv/taichi_aot-installed-*
  "${pip[@]}" -e ".$extras"
  echo "$sources" > ".venv/taichi_aot-installed-$mode"
fi
.venv/bin/python -c "import taichi_aot.capi as c; print('setup: taichi_aot loads', c.library.path, 'C-API', c.get_version())"
