"""What the bench compiles on first use and keeps in taichi_aot's compile cache (taichi_aot/cli/cache.py): the
Taichi modules of its sections (``*_kernels.py`` here, compiled in a child process) and the raw C driver
(``_csrc/driver.c``, compiled with the system compiler against the library taichi_aot loaded), and the raw programs
that open their driver themselves (``_csrc/cuda_events.c``: :func:`raw_program`)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

from taichi_aot.cli.cache import CompileError, cache_dir, cached_module, digest

HERE = os.path.dirname(os.path.abspath(__file__))
#: A source checkout's root (its include/ holds the vendored headers).
CHECKOUT = os.path.dirname(HERE)


def taichi_module(kind: str, arch: str, *words: str) -> str:
    """Compile (once, cached) ``<kind>_kernels.py``'s module for ``arch`` with Taichi in a child process; ``words``
    follow the folder on the child's command line (the cores section's thread count)."""
    source = os.path.join(HERE, f"{kind}_kernels.py")  # never imported here: it imports taichi
    ptx = arch == "cuda" and importlib.util.find_spec("llvmlite") is not None  # the own launcher's PTX too
    caps: list[str] = []
    if arch == "vulkan" and kind != "autodiff":  # as `build` makes a Vulkan module: this machine's capabilities
        from taichi_aot.cli.build import device_caps

        caps = device_caps(arch)[0]
    caps += words
    with open(source, "rb") as f:
        key = digest(f.read(), b"ptx" if ptx else b"", b"sealed", " ".join(caps).encode())
    out = os.path.join(cache_dir(), f"{kind}-{arch}-{key}")
    if os.path.isfile(os.path.join(out, "__content__")):
        return out
    if importlib.util.find_spec("taichi") is None:
        raise CompileError(f"the {kind} kernels are compiled with Taichi 1.7.4: pip install 'taichi_aot[build]'")

    def make(tmp: str) -> None:
        proc = subprocess.run([sys.executable, source, "build", arch, tmp, *caps], capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"Taichi could not compile the {kind} module for {arch}:\n{proc.stderr[-2000:]}")
        if ptx:
            from taichi_aot.ptx import add_to_folder

            add_to_folder(tmp)
        if arch != "vulkan" and os.path.isfile(os.path.join(tmp, "taichi_aot.json")):
            from taichi_aot.cli.build import seal

            seal(tmp)  # as build seals what it makes: its first load needs no child process

    return cached_module(out, make)


def _compiled(stem: str, source: str, args: list[str], *key: bytes, what: str) -> str:
    """``source`` compiled once with the system compiler (``args`` after it), kept in the compile cache as
    ``bench-<stem>-<digest>`` (of the source and ``key``); ``what`` names it in a failure."""
    with open(source, "rb") as f:
        out = os.path.join(cache_dir(), f"bench-{stem}-{digest(f.read(), *key)}")
    if os.path.isfile(out):
        return out
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise CompileError("no C compiler (cc, gcc or clang) found for the raw C reference")
    os.makedirs(cache_dir(), exist_ok=True)
    tmp = out + f".tmp{os.getpid()}"
    cmd = [cc, "-O2", "-o", tmp, source, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(f"compiling {what} failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    os.replace(tmp, out)
    return out


def raw_program(name: str) -> str:
    """Compile (once, cached) ``_csrc/<name>.c``, a program that opens its driver at run time (``-ldl``)."""
    return _compiled(name, os.path.join(HERE, "_csrc", f"{name}.c"), ["-ldl"], what=f"{name}.c")


def bench_driver(library_path: str) -> str:
    """Compile (once, cached) the raw C benchmark driver against ``library_path``."""
    lib_dir = os.path.dirname(os.path.abspath(library_path))
    include = os.path.join(os.path.dirname(lib_dir), "include")  # the library's own headers
    if not os.path.isfile(os.path.join(include, "taichi", "taichi_core.h")):
        include = os.path.join(CHECKOUT, "include")  # a source checkout's vendored copy
    return _compiled("driver", os.path.join(HERE, "_csrc", "driver.c"),
                     ["-I", include, os.path.abspath(library_path), f"-Wl,-rpath,{lib_dir}"],
                     library_path.encode(), include.encode(), what="the raw C driver")
