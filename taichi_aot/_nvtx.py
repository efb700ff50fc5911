"""NVTX ranges around launches, for Nsight Systems: where asked, every launch the dispatcher makes
(``_csrc/launch.c``: kernel and graph calls, bound launches, replays, the flat API's launches, XLA's and torch's
autograd launches) is made inside a range named ``taichi_aot:`` and the kernel's or graph's name, pushed on the
calling thread before the launch and popped after it. NVTX is host-side, so this holds on every arch; on CUDA,
Nsight Systems draws each range above the kernels the launch queued.

Asked by ``TAICHI_AOT_NVTX=1``, read once, when the first kernel or graph is made (:func:`first_use`), or by
:func:`taichi_aot.config.set_nvtx`, which wins over the variable. Off (the default), a launch pays one branch in C,
and no library is opened.

The library is NVIDIA's own, opened with dlopen at first use (no header of NVIDIA's is copied here: ``_csrc/nvtx.c``
declares the two functions it calls, ``nvtxRangePushA`` and ``nvtxRangePop``): ``libnvToolsExt.so.1`` (or the
``libnvtx3interop.so.1`` that newer CUDA wheels ship in its place), looked for, in order, on the system's search
path (``LD_LIBRARY_PATH``, ldconfig's cache, a copy already loaded, by PyTorch for one), in the ``nvidia-nvtx-cu12`` /
``nvidia-nvtx`` wheel (``nvidia/nvtx/lib``, ``nvidia/cu13/lib``: PyTorch's CUDA wheels install it) on ``sys.path``,
then in the CUDA toolkit's ``lib64`` (``CUDA_HOME``, ``CUDA_PATH``, ``/usr/local/cuda``). Where none opens, one
warning names every place looked in, and the ranges stay off; nothing fails.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Any

from ._native import ffi, lib
from ._trust import untrusted_file

__all__ = ["LIBRARY_NAMES", "VARIABLE", "first_use", "set_nvtx", "status"]

#: The environment variable that asks for ranges (``1``; ``0`` or unset: none).
VARIABLE = "TAICHI_AOT_NVTX"
#: The NVTX library's names: NVTX 2's, then the one CUDA 12.9 and later ship in its place (the same functions).
LIBRARY_NAMES = ("libnvToolsExt.so.1", "libnvtx3interop.so.1")
#: A range's name is this and the kernel's or graph's name.
PREFIX = "taichi_aot:"
_ON = ("1", "true", "yes", "on")

_lock = threading.Lock()
_read = False  # the variable was read (or set_nvtx was called first: it wins)
_library: str | None = None  # the library opened, once
_looked: list[str] = []  # where it was looked for, and why each place failed, where none opened
_warned = False


def range_name(name: str) -> Any:
    """The C string a launch record of kernel or graph ``name`` points at (``TaichiAotLaunch.name``)."""
    return ffi.new("char[]", (PREFIX + name).encode("utf-8", "replace"))


def _asked() -> bool:
    return os.environ.get(VARIABLE, "").strip().lower() in _ON


def first_use() -> None:
    """Called where a kernel or graph is made (and by the flat API's launches): on the first call, ranges are turned
    on where ``TAICHI_AOT_NVTX`` asks for them and :func:`set_nvtx` has not been called."""
    global _read
    if _read:
        return
    with _lock:
        if _read:
            return
        _read = True
    if _asked():
        set_nvtx(True, _by=f"{VARIABLE}=1")


def candidates() -> list[tuple[str, str]]:
    """Where the library is looked for, in order (each of its names, NVTX 2's first, in each place): (where, what
    dlopen is given)."""
    wheel = []
    here = os.path.realpath(os.getcwd()) if os.path.isdir(os.curdir) else ""
    for entry in dict.fromkeys(sys.path):
        # the working folder (sys.path's "" or its first entry under -m) is where another user may plant a library
        if entry and os.path.isabs(entry) and os.path.realpath(entry) != here:
            wheel += [os.path.join(entry, "nvidia", folder, "lib") for folder in ("nvtx", "cu13")]
    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    toolkit = [os.path.join(root, "lib64") for root in dict.fromkeys(r for r in roots if os.path.isabs(r))]
    out = []
    for name in LIBRARY_NAMES:
        out.append(("the system's search path", name))
        out += [(where, os.path.join(d, name)) for where, folders in (("the nvidia-nvtx wheel", wheel),
                                                                        ("the CUDA toolkit", toolkit))
                for d in folders if os.path.isfile(os.path.join(d, name))]
    return out


def _mapped(name: str) -> str:
    """The file of library ``name`` (a bare name, opened by dlopen's search) as this process mapped it."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.rstrip("\n").split(" ", 5)[-1].strip()
                if os.path.basename(path) == name:
                    return path
    except OSError:
        pass
    return name


def _open() -> str | None:
    """The library's path once opened (``_lock`` held); None where none opens (``_looked`` says why)."""
    global _library
    if _library is not None:
        return _library
    error = ffi.new("char[]", 1024)
    looked, found = [], candidates()
    for where, path in found:
        why = untrusted_file(path) if os.sep in path else ""
        if why:
            looked.append(f"{where}: {path}: not opened: {why}, so another user could plant code there")
            continue
        if lib.taichi_aot_nvtx_load(os.fsencode(path), error, len(error)) == 0:
            _library = path if os.sep in path else _mapped(path)
            _looked.clear()
            return path
        looked.append(f"{where}: {path}: {ffi.string(error).decode('utf-8', 'replace')}")
    if not any(where == "the nvidia-nvtx wheel" for where, _ in found):
        looked.append("the nvidia-nvtx wheel: no nvidia/nvtx/lib or nvidia/cu13/lib on sys.path holds it")
    if not any(where == "the CUDA toolkit" for where, _ in found):
        looked.append("the CUDA toolkit: no lib64 of CUDA_HOME, CUDA_PATH or /usr/local/cuda holds it")
    _looked[:] = looked
    return None


def set_nvtx(on: bool, _by: str = "taichi_aot.config.set_nvtx(True)") -> bool:
    """Turn the ranges on or off for every launch from now on; returns whether they are on. Turning them on opens
    the NVTX library the first time; where none is found, one warning says where it was looked for, and they stay
    off."""
    global _read, _warned
    with _lock:
        _read = True
        if not on:
            lib.taichi_aot_nvtx_enable(0)
            return False
        path = _open()
        if path is not None:
            return bool(lib.taichi_aot_nvtx_enable(1))
        warn, _warned = not _warned, True
    if warn:
        names = " or ".join(LIBRARY_NAMES)
        warnings.warn(f"taichi_aot: NVTX ranges were asked for ({_by}), but no NVTX library ({names}) could be "
                      "opened, so launches are not named in Nsight Systems. Looked in:\n  "
                      + "\n  ".join(_looked) + "\nInstall one (pip install nvidia-nvtx-cu12; PyTorch's CUDA wheels "
                      "bring it) or put its folder on LD_LIBRARY_PATH.", RuntimeWarning, stacklevel=3)
    return False


def status() -> dict[str, Any]:
    """``on`` (ranges are pushed now), ``library`` (the NVTX library opened, or None), ``asked`` (what the variable
    says), ``looked`` (where the library was looked for in vain, where it was asked for and not found)."""
    return {"on": bool(lib.taichi_aot_nvtx), "library": _library, "asked": _asked(), "looked": list(_looked)}
