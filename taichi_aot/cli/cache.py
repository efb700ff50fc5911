"""The compile cache: things compiled on first use and kept, keyed by a digest of their source: Taichi
modules for ``demo --compile`` (``demo_kernels.py`` here) and for the bench (taichi_aot_bench/compile.py, which
keeps its raw C driver here too). The cache is ``TAICHI_AOT_CACHE`` or ``~/.cache/taichi_aot``. Also where the
demo's precompiled module is (:func:`demo_module`)."""

from __future__ import annotations

import hashlib
import os
import shutil
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


class CompileError(Exception):
    """Something could not be compiled; the message says what and why."""


def cache_dir() -> str:
    """Where compiled things are kept: ``TAICHI_AOT_CACHE`` or ``~/.cache/taichi_aot``."""
    from ..config import compile_cache

    return compile_cache()


def digest(*parts: bytes) -> str:
    """The cache's key of ``parts``: the first 12 hex digits of their SHA-256."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.hexdigest()[:12]


def cached_module(out: str, make: Callable[[str], None]) -> str:
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
        key = digest(f.read(), str(cpu_threads).encode())
    out = os.path.join(cache_dir(), f"demo-{arch}-{key}")

    def make(tmp: str) -> None:
        try:
            build(os.path.join(HERE, "demo_kernels.py"), [arch], tmp, cpu_threads=cpu_threads)
        except BuildError as e:
            raise CompileError(f"Taichi could not compile the demo module for {arch}: {e}") from None

    return cached_module(out, make)


def demo_start(size: int) -> np.ndarray:
    """The demo's first state on a ``size`` x ``size`` grid: u 1 and v 0, but in ``max(size // 16, 4)`` squares of 9 x
    9 cells (u 0.5, v 0.25) placed by a fixed seed, as the module's ``seed`` kernel places them at random. Made here,
    the picture is the same every run and on every backend: the kernel draws its places inside a parallel loop,
    whose order among the CPU's threads changes from run to run."""
    import numpy as np

    uv = np.zeros((size, size, 2), np.float32)
    uv[..., 0] = 1.0
    for ci, cj in np.random.default_rng(2026).integers(10, size - 10, size=(max(size // 16, 4), 2)):
        uv[ci - 4:ci + 5, cj - 4:cj + 5] = (0.5, 0.25)
    return uv
