"""A Nuitka one-file app with taichi_aot, started twice: the second start probes nothing and makes no child.

    python benchmarks/nuitka_onefile.py [--keep DIR]

Builds ``app.py`` (``freeze_support()`` first, then a Vulkan-or-CPU runtime of ``examples/physics.tcm``) with
``python -m nuitka --onefile`` (Nuitka and patchelf are needed: ``pip install nuitka``, ``apt-get install
patchelf``), the bundled libtaichi_c_api added as Nuitka leaves it out of package data, then runs the binary twice
from another folder under ``env -i`` with a cache folder of its own. A one-file app unpacks itself into a new folder
at every start; taichi_aot keys its cache by the one-file binary, so the second start finds the first's answers:
printed are each start's time, the cache's entries after each, and whether the second added any (it must not), with
a non-zero exit where it did. Minutes of C compilation: a benchmark-style check, not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

APP = '''
import sys
import numpy as np
import taichi_aot

taichi_aot.freeze_support()  # a child taichi_aot started does its work here and exits

with taichi_aot.Runtime.for_module(sys.argv[1]) as rt:
    mod = rt.load_module(sys.argv[1])
    x = rt.ndarray((4,), np.float32)
    mod.kernels["step"](x, dt=0.5)
    rt.wait()
    print(rt.arch.name, x.to_numpy().tolist())
'''


def build(work: str) -> str:
    """The one-file binary of APP, built in ``work``."""
    import taichi_aot

    lib = os.path.join(os.path.dirname(taichi_aot.__file__), "_lib", "lib")
    with open(os.path.join(work, "app.py"), "w", encoding="utf-8") as f:
        f.write(APP)
    # Nuitka leaves shared libraries out of package data and data folders: each file of the bundled library named
    files = [f"--include-data-files={os.path.join(lib, n)}=taichi_aot/_lib/lib/{n}" for n in sorted(os.listdir(lib))]
    cmd = [sys.executable, "-m", "nuitka", "--onefile", "--assume-yes-for-downloads",
           "--include-package-data=taichi_aot", *files,
           # what the package imports only where a program asks for it: left to the app's own imports
           "--nofollow-import-to=torch,jax,jaxlib,cupy,taichi,ray,llvmlite,matplotlib,taichi_aot_bench",
           "--output-filename=app.bin", "app.py"]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"nuitka failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return os.path.join(work, "app.bin")


def start(binary: str, cache: str, module: str, cwd: str) -> float:
    """Seconds one start of the app takes under ``env -i`` with ``cache`` as its cache folder."""
    env = {"PATH": "/usr/bin:/bin", "TAICHI_AOT_CACHE": cache}
    t0 = time.perf_counter()
    proc = subprocess.run([binary, module], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"the app failed:\n{proc.stderr[-3000:]}")
    print(f"  {proc.stdout.strip()}  ({took:.2f} s)")
    return took


def entries(cache: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), cache) for d, _, fs in os.walk(cache) for f in fs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="build in this folder and keep it")
    args = parser.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="nuitka_onefile_")
    os.makedirs(work, exist_ok=True)
    try:
        binary = build(work)
        print(f"built {binary} ({os.path.getsize(binary) / 1e6:.0f} MB)")
        cache, elsewhere = os.path.join(work, "cache"), tempfile.mkdtemp(prefix="nuitka_run_")
        module = os.path.join(ROOT, "examples", "physics.tcm")
        first = start(binary, cache, module, elsewhere)
        after_first = entries(cache)
        second = start(binary, cache, module, elsewhere)
        after_second = entries(cache)
        added = sorted(set(after_second) - set(after_first))
        print(f"cache after the first start: {after_first}")
        print(f"first start {first:.2f} s, second {second:.2f} s; entries the second added: {added or 'none'}")
        if added:
            raise SystemExit("the second start probed again: its cache key changed between starts")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
