"""libtaichi_c_api as a launch backend: every kernel and graph a module holds, launched by ``ti_launch_kernel`` and
``ti_launch_compute_graph`` (``_csrc/launch.c``), the reference and the fallback of the others.

What differs from the own launches: arguments are ``TiArgument``s whose ndarrays are the library's ``TiMemory``
(foreign arrays are imported), scalars only of the widths the C-API carries (i32, f32; others go as their nearest,
checked by the packers), errors are the library's last error (thread-local, read once), and on CUDA it launches on a
stream of its own: it cannot run on a non-blocking stream nor be captured into a CUDA graph (launch.c refuses it,
``TAICHI_AOT_REFUSED``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .._native import lib
from ..errors import InvalidStateError, NotSupportedError, make_error, take_last_error
from .choice import AUTO, LIBTAICHI, Choice, library_choice

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata import ArgInfo
    from ..metadata.model import GraphInfo, KernelInfo

__all__ = ["NAME", "Absent", "LibtaichiBackend", "driver_error", "launch_error", "load"]

#: The backend's name, as ``Kernel.launcher`` and ``AotModule.launchers()`` say it.
NAME = LIBTAICHI
KERNEL, GRAPH = lib.TAICHI_AOT_KIND_KERNEL, lib.TAICHI_AOT_KIND_GRAPH


class LibtaichiBackend:
    """libtaichi as a module's backend (``choice.Backend``): every kernel and graph, but a kernel that returns values
    (its C-API gives none: the room refuses it rather than lose the value)."""

    name = NAME

    def kernel(self, name: str, info: KernelInfo, library: Callable[[], Any]) -> tuple[Choice, list[ArgInfo]] | None:
        if info.returns:
            return None
        handle = library()  # None: the module was loaded without libtaichi (the own CUDA runtime's, all on PTX)
        return None if handle is None else (library_choice(KERNEL, handle), info.args)

    def graph(self, info: GraphInfo, library: Any) -> Choice | None:
        return None if library is None else library_choice(GRAPH, library)

    def takes(self, name: str, info: KernelInfo | None) -> bool:
        return info is None or not (info.returns or info.reverse)  # a reverse kernel's gradients: no TiNdArray field

    def why_not(self, name: str) -> str | None:
        return None

    def reverse(self, module: Any, name: str, grad: KernelInfo, threads: int | None) -> Any:
        return None  # libtaichi cannot hand a reverse-mode kernel its gradients

    def unload(self) -> None:
        pass  # libtaichi's module is the AotModule's own


class Absent:
    """libtaichi's place among a module's backends on taichi_aot's own CUDA runtime of a device but 0
    (``choice.Backend``): it launches nothing there (the room refuses each kernel the own launcher does not take,
    saying why)."""

    name = NAME

    def __init__(self, reason: str):
        self.reason = reason  # why libtaichi has no runtime there (the device's words, the end of a sentence)

    def kernel(self, name: str, info: KernelInfo, library: Callable[[], Any]) -> tuple[Choice, list[ArgInfo]] | None:
        return None

    def graph(self, info: GraphInfo, library: Any) -> Choice | None:
        return None

    def takes(self, name: str, info: KernelInfo | None) -> bool:
        return False

    def why_not(self, name: str) -> str | None:
        return None

    def reverse(self, module: Any, name: str, grad: KernelInfo, threads: int | None) -> Any:
        return None

    def unload(self) -> None:
        pass


def load(runtime: Any, state: Any, what: str, folder: str | None, choice: str, meta: Any) -> LibtaichiBackend | Absent:
    """libtaichi as the last backend of a module just loaded in ``runtime`` (its registration's ``load``); on
    taichi_aot's own CUDA runtime of a device but 0, where libtaichi has no runtime, its :class:`Absent` place
    (``launcher="taichi"`` refused there: NotSupportedError)."""
    why = runtime.device.library.why_not()
    if why is None:
        return LibtaichiBackend()
    if choice != AUTO:
        raise NotSupportedError(f"{what}: launcher='taichi': {why}")
    return Absent(why)


def launch_error(code: int, what: str) -> Exception:
    """The exception of a launch's error ``code``: the library's own, with its last message; or the dispatcher's
    refusal of a launch libtaichi cannot make on the CUDA stream set, or the driver's error waiting for the caller's
    stream before a launch made elsewhere (``_csrc/launch.c``'s ``launch_library``)."""
    if code == lib.TAICHI_AOT_REFUSED:
        return NotSupportedError(
            f"{what}: launched through libtaichi (module.launchers() says why), which cannot run on the non-blocking "
            "CUDA stream set, nor be captured into a CUDA graph (it copies each launch's arguments on the legacy "
            "default stream, and waits); set a blocking stream or None (rt.set_cuda_stream), or give the module PTX "
            "(python -m taichi_aot ptx)")
    if code <= lib.TAICHI_AOT_CUDA_ERROR:
        return driver_error(code, what)
    c, message = take_last_error()
    return make_error(c or code, message, what)


def driver_error(code: int, what: str) -> Exception:
    """The exception of a launch's code for a CUDA driver error (TAICHI_AOT_CUDA_ERROR minus its CUresult), of
    either launch on CUDA."""
    from ..drivers.cuda import error_name

    return InvalidStateError(f"{what}: the CUDA driver refused the launch "
                             f"({error_name(lib.TAICHI_AOT_CUDA_ERROR - code)})")
