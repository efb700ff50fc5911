"""The compile cache: things compiled on first use and kept, keyed by a digest of their source: Taichi
modules for the benchmarks and for ``demo --compile`` (``*_kernels.py`` here), and the raw C benchmark driver
(``bench_driver.c``). The cache is ``TAICHI_AOT_CACHE`` or ``~/.cache/taichi_aot``. Also where the demo's
precompiled module is (:func:`demo_module`)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
#: A source checkout's root (its include/ holds the vendored headers).
CHECKOUT = os.path.dirname(os.path.dirname(HERE))


class CompileError(Exception):
    """Something could not be compiled; the message says what and why."""


def cache_dir() -> str:
    """Where compiled things are kept: ``TAICHI_AOT_CACHE`` or ``~/.cache/taichi_aot``."""
    from ..config import compile_cache

    return compile_cache()


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.hexdigest()[:12]


def _cached_module(out: str, make: Callable[[str], None]) -> str:
    """``out``, a module folder of the cache: as it is when complete, else made by ``make(tmp)`` in a private
    folder and moved into place (a concurrent maker's copy wins; a failed one leaves nothing)."""
    if os.path.isfile(os.path.join(out, "__content__")):
        return out
    tmp = out + f".tmp{os.getpid()}"
    try:
        make(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not os.path.exists(out):
        os.replace(tmp, out)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


#: The demo's module, compiled from demo_kernels.py for every arch the package ships it for.
DEMO_MODULE = os.path.join(HERE, "demo.tcm")


def demo_module(arch: str, compile: bool = False, cpu_threads: int | None = None) -> str:
    """The demo's module: the precompiled one shipped with the package (``arch`` "": whatever it holds), or built
    anew with Taichi for ``arch`` (cached) when asked to (``compile``, or ``cpu_threads``: CPU kernels on that
    many threads) or when the shipped one has no part for it."""
    from ..metadata import read_module

    if not compile and cpu_threads is None and (not arch or arch in read_module(DEMO_MODULE).parts):
        return DEMO_MODULE
    from .build import BuildError, build

    with open(os.path.join(HERE, "demo_kernels.py"), "rb") as f:
        digest = _digest(f.read(), str(cpu_threads).encode())
    out = os.path.join(cache_dir(), f"demo-{arch}-{digest}")

    def make(tmp: str) -> None:
        try:
            build(os.path.join(HERE, "demo_kernels.py"), [arch], tmp, cpu_threads=cpu_threads)
        except BuildError as e:
            raise CompileError(f"Taichi could not compile the demo module for {arch}: {e}") from None

    return _cached_module(out, make)

def taichi_module(kind: str, arch: str) -> str:
    """Compile (once, cached) ``<kind>_kernels.py``'s module for ``arch`` with Taichi in a child process."""
    source = os.path.join(HERE, f"{kind}_kernels.py")  # never imported here: it imports taichi
    ptx = arch == "cuda" and importlib.util.find_spec("llvmlite") is not None  # the own launcher's PTX too
    with open(source, "rb") as f:
        digest = _digest(f.read(), b"ptx" if ptx else b"")
    out = os.path.join(cache_dir(), f"{kind}-{arch}-{digest}")
    if os.path.isfile(os.path.join(out, "__content__")):
        return out
    if importlib.util.find_spec("taichi") is None:
        raise CompileError(f"the {kind} kernels are compiled with Taichi 1.7.4: pip install 'taichi_aot[build]'")

    def make(tmp: str) -> None:
        proc = subprocess.run([sys.executable, source, "build", arch, tmp], capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"Taichi could not compile the {kind} module for {arch}:\n{proc.stderr[-2000:]}")
        if ptx:
            from ..ptx import add_to_folder

            add_to_folder(tmp)

    return _cached_module(out, make)

def bench_driver(library_path: str) -> str:
    """Compile (once, cached) the raw C benchmark driver against ``library_path``."""
    source = os.path.join(HERE, "bench_driver.c")
    lib_dir = os.path.dirname(os.path.abspath(library_path))
    include = os.path.join(os.path.dirname(lib_dir), "include")  # the library's own headers
    if not os.path.isfile(os.path.join(include, "taichi", "taichi_core.h")):
        include = os.path.join(CHECKOUT, "include")  # a source checkout's vendored copy
    with open(source, "rb") as f:
        digest = _digest(f.read(), library_path.encode(), include.encode())
    out = os.path.join(cache_dir(), f"bench-driver-{digest}")
    if os.path.isfile(out):
        return out
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise CompileError("no C compiler (cc, gcc or clang) found for the raw C reference")
    os.makedirs(cache_dir(), exist_ok=True)
    tmp = out + f".tmp{os.getpid()}"
    cmd = [cc, "-O2", "-o", tmp, source, "-I", include, os.path.abspath(library_path), f"-Wl,-rpath,{lib_dir}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(f"compiling the raw C driver failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    os.replace(tmp, out)
    return out
