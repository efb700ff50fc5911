"""taichi_aot's own CUDA runtime: a runtime on any CUDA device, without libtaichi's.

libtaichi_c_api 1.7.4 makes its CUDA runtime on device 0 only, and one at a time (a process that destroys two
aborts). A CUDA runtime of our own needs none of it where every kernel of its modules runs on the own CUDA launcher
(a module with PTX: :mod:`taichi_aot.backends.cuda`): it lives in its device's *primary context* (the one torch,
JAX and CuPy use, so their memory and streams are its own), allocates ndarrays with the driver, loads each module's
PTX in that context, and waits through the driver. Several may be open at once, on one device or on several.

Which runtime a ``Runtime("cuda", device_index=k)`` gets (:func:`chosen`): the ``cuda_runtime`` it is given, else
``TAICHI_AOT_CUDA_RUNTIME``, else "auto", which is "own": taichi_aot's own on every device. On device 0 libtaichi's
runtime is made beside it for a module whose kernels need it (SNode fields, ``print``, what the PTX step refuses,
a module without PTX where llvmlite is missing, ``launcher="taichi"``): ``Runtime.library_runtime``; their launches
get the own runtime's memory as libtaichi's imports (``_csrc/imports.c``). On other devices such kernels are refused,
saying why. "taichi" asks for libtaichi's runtime alone (device 0 only, one at a time in a process).

Threads: any thread may use a runtime of the own CUDA runtime (launches, copies, waits, ops, gradients), as torch's
and CuPy's arrays are used, whichever thread made it: a launch from another thread than the runtime's packs its
arguments into a buffer of its own (``launch.py``), the launches made in Python take the runtime's lock
(``backends.RuntimeBackends.lock``), and a kernel's tasks are queued under its stand-in's (``_csrc/backends/cuda.c``).
Kernels run on the runtime's stream (:meth:`Runtime.set_cuda_stream`, one for every thread). libtaichi's runtimes
(``cuda_runtime="taichi"``, x64, Vulkan) and libtaichi's launches beside the own runtime keep to the thread that
made the runtime (WrongThreadError, saying so).

Memory of the own runtime is ``cuMemAlloc``'s (device memory), or ``cuMemAllocManaged``'s where the host maps it
(``host_access``); its ``TiMemory`` in a launch record is the device pointer tagged with ``TAICHI_AOT_POINTER_TAG``,
which the own launcher takes as it is (``_csrc/backends/cuda.c``); libtaichi never sees it.
"""

from __future__ import annotations

import os
import threading
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ._native import lib
from .drivers.cudart import CudaDevice, library_context
from .enums import archs_instead
from .errors import ArgumentTypeError, InvalidArgumentError, NotSupportedError, WrongThreadError

__all__ = ["AUTO", "ENV", "LIBTAICHI", "OWN", "chosen", "library_absent", "library_calls", "no_library",
           "open_device", "release", "wrong_thread"]

ENV = "TAICHI_AOT_CUDA_RUNTIME"
AUTO, OWN, LIBTAICHI = "auto", "own", "taichi"


def chosen(given: str | None, device_index: int) -> str:
    """Which CUDA runtime a runtime on ``device_index`` gets: OWN or LIBTAICHI (``given``, else the environment's,
    else "auto": the own runtime but on device 0)."""
    if given is not None and not isinstance(given, str):
        raise ArgumentTypeError(f"cuda_runtime must be 'auto', 'own' or 'taichi', got {given!r}")
    value = (given if given is not None else os.environ.get(ENV, "")).strip().lower() or AUTO
    if value not in (AUTO, OWN, LIBTAICHI):
        where = "cuda_runtime" if given is not None else ENV
        raise InvalidArgumentError(f"{where} must be one of 'auto', 'own' or 'taichi', got {value!r}")
    if value == LIBTAICHI and device_index != 0:
        raise NotSupportedError(f"cuda_runtime='taichi' on CUDA device {device_index}: libtaichi_c_api 1.7.4 makes its "
                                "CUDA runtime on device 0 only; taichi_aot's own runtime ('own', or 'auto') drives "
                                "every device")
    return LIBTAICHI if value == LIBTAICHI else OWN


def library_absent(device: int) -> str:
    """Why libtaichi launches nothing on taichi_aot's own CUDA runtime of ``device`` (the end of a sentence)."""
    return (f"this runtime is taichi_aot's own CUDA runtime on device {device}, which has no libtaichi runtime to "
            "launch it (libtaichi_c_api 1.7.4 makes one on device 0 only): give the module PTX (python -m taichi_aot "
            "ptx, with llvmlite installed), or run it on device 0")


def no_library(device: int, owner: int) -> Exception:
    """Why the own CUDA runtime of ``device`` makes no libtaichi runtime beside it: not device 0 (NotSupportedError),
    or asked from another thread than ``owner``, the runtime's (WrongThreadError: libtaichi's runtime is the thread's
    that made the own one)."""
    if device != 0:
        return NotSupportedError(
            f"taichi_aot's own CUDA runtime on device {device} has no libtaichi runtime: libtaichi_c_api 1.7.4 makes "
            "one on device 0 only; give the module PTX (python -m taichi_aot ptx, with llvmlite installed) for the "
            "own CUDA launcher")
    return WrongThreadError(
        f"a module whose kernels libtaichi launches needs libtaichi's CUDA runtime, which is used from the thread that "
        f"made the own runtime ({owner}), not from thread {threading.get_ident()}: load it there, or give the module "
        "PTX (python -m taichi_aot ptx) for the own CUDA launcher, which any thread may use")


def wrong_thread(arch: str, owner: int, why: str = "") -> str:
    """What WrongThreadError says where a runtime of libtaichi (on ``arch``) made on thread ``owner`` is used from
    this one; ``why``: the device's own reason it keeps to its thread, with what to do (else libtaichi's)."""
    own = ", or taichi_aot's own CUDA runtime (cuda_runtime='own'), which any thread may use" if arch == "CUDA" else ""
    why = why or f"libtaichi's runtime is used from the thread that made it: create one runtime per thread{own}"
    return f"this {arch} runtime belongs to thread {owner}; it was used from thread {threading.get_ident()} ({why})"


def release(device: CudaDevice, library: list[Any]) -> None:
    """A runtime on ``device`` is destroyed (its memory and modules were given back): libtaichi's runtime made beside
    it (``library``: its handle, or empty) destroyed, its imports forgotten first; the device's work waited for."""
    if library:
        lib.taichi_aot_imports_forget(library[0])
        destroy_library_runtime(library[0])
    device.settle()


def destroy_library_runtime(handle: Any) -> None:
    """libtaichi's CUDA runtime ``handle`` destroyed in device 0's context (its teardown frees memory and waits:
    in another GPU's context, left current by another library, the driver refuses them)."""
    from . import capi

    with library_context():
        capi.destroy_runtime(handle)


def library_calls(cuda: bool) -> AbstractContextManager[None]:
    """:func:`library_context` for a CUDA runtime's libtaichi calls (``cuda``), else nothing."""
    return library_context() if cuda else nullcontext()


def _refused(why: str) -> NotSupportedError:
    """A CUDA runtime refused here (``why``), naming the archs that work instead."""
    from . import capi

    return NotSupportedError(f"CUDA: {why}{archs_instead(capi.arch_status(), why)}")


def open_device(ordinal: int) -> CudaDevice:
    """CUDA device ``ordinal`` as the own runtime uses it (:class:`~taichi_aot.drivers.cudart.CudaDevice`); a device
    the driver refuses is refused naming the archs that work instead."""
    return CudaDevice(ordinal, _refused)
