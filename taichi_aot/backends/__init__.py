"""Launch backends, and the one place that decides which launches a kernel.

A launch backend launches a module's kernels (and graphs) its own way. Each is a :class:`~.choice.Backend` (the
contract: a name, a :class:`~.choice.Choice` or None for each kernel and graph, why it declines one, its code
unloaded), and a module's backends are asked in order, the own launches first:

* "cuda", the own CUDA launcher (:mod:`.cuda`, reverse-mode kernels in :mod:`.cuda_reverse`): CUDA kernels the
  module has PTX for, launched from taichi_aot's C plans on any stream, capturable into CUDA graphs, 2.5-3x cheaper
  a launch; the one that gives a CUDA kernel's return value (``value = kernel(a)``: libtaichi's C-API cannot);
* "x64", the own x64 launch (:mod:`.cpu`): x64 kernels compiled here from the module's IR (llvmlite) where libtaichi
  cannot give them what they need: kernels that return values and kernels that take f64, i64, u64, u32, i8 or u8
  scalars (and, as their primal's ``grad``, reverse-mode kernels: libtaichi cannot hand them their gradients);
* "taichi", libtaichi (:mod:`.libtaichi`): libtaichi_c_api's ``ti_launch_*``, every kernel and graph a module holds
  but those that return values; the reference, and the fallback of the others.

A kernel that returns values on a backend that cannot give them (Vulkan; CUDA without PTX; x64 without llvmlite)
is refused when it is looked up (NotSupportedError), and ``launchers()`` says why: never a call that returns None.

What differs between them is theirs: which kernels they take and why not, the argument layout and which scalar
types they take as they are, stand-ins and streams, their error codes, what may be captured. The rest of the package
asks this room, never a backend's internals:

* :class:`ModuleBackends`, one per loaded module: the :class:`Choice` of each kernel and graph (its backend, the C
  launch's kind, flags and handle, why not the own launches), ``launchers()``, reverse-mode kernels;
* :class:`RuntimeBackends`, one per runtime: what a backend keeps per runtime (the own CUDA launcher's stand-ins,
  the stream selected, what CUDA graphs hold);
* :func:`launch_error`: the exception of a launch's error code, by the backend that gave it.

Every launch, whatever way it comes in (the C call, the Python call, a replay, XLA's handler, torch's autograd
thread, the flat API's ``ti_launch_*``), is made by ``_csrc/launch.c`` from a ``TaichiAotLaunch`` of the
:class:`Choice`'s kind and flags: ``launch_any`` is the one switch on the kind. A new backend: a module here whose
class keeps the contract, put in :meth:`ModuleBackends.load`'s order, with its error mapping in :func:`launch_error`,
and a kind in ``_csrc/taichi_aot.h`` launched in ``launch_any`` (``docs/contributing.md`` lists every step).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from .._native import ffi, lib
from ..enums import Arch
from ..errors import InvalidStateError, NotSupportedError
from . import libtaichi
from .choice import AUTO, CUDA, LIBTAICHI, X64, Backend, Choice, launchers

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata import ArgInfo, ModuleInfo
    from ..metadata.model import GraphInfo, KernelInfo
    from . import cuda
    from .cuda_reverse import GradCall

__all__ = ["CUDA", "LIBTAICHI", "X64", "Backend", "Choice", "ModuleBackends", "RuntimeBackends", "launch_error",
           "launchers"]
#: The error codes of the own launches (backends/cuda.c) and of launch.c's refusal, beside libtaichi's TiError codes.
_OWN_CODES = (lib.TAICHI_AOT_CUDA_BAD_ARGS, lib.TAICHI_AOT_REFUSED, lib.TAICHI_AOT_CUDA_STACK_OVERFLOW,
              lib.TAICHI_AOT_CUDA_CAPTURE_REFUSED, lib.TAICHI_AOT_CUDA_RESULT_CAPTURE_REFUSED)


def launch_error(code: int, what: str) -> Exception:
    """The exception of a launch's non-zero error ``code`` (``what`` names the launch), by the backend that gave it."""
    if code == lib.TAICHI_AOT_UNKNOWN_KIND:  # a record no backend wrote: the dispatcher launched nothing
        return InvalidStateError(f"{what}: a launch of a kind the dispatcher does not know (nothing was launched)")
    if code <= lib.TAICHI_AOT_CUDA_ERROR or code in _OWN_CODES:
        from .cuda import own_launch_error  # imported when first needed: the CUDA backend's import is not small

        return own_launch_error(code, what)
    return libtaichi.launch_error(code, what)


class RuntimeBackends:
    """What the launch backends keep per runtime: the own CUDA launcher's state (``cuda``: its stand-ins, one a
    stream, made with the runtime's first module with PTX), and the lock the launches made in Python take (``lock``:
    any thread may launch on the own CUDA runtime; the runtime's staged copies and cache are one for all)."""

    def __init__(self) -> None:
        self.cuda: cuda.Launcher | None = None
        self.lock = threading.RLock()

    def select_stream(self, stream: int | None) -> None:
        """Launch on ``stream`` (None: the legacy default stream) from now on (its stand-in made first: it may fail,
        out of memory)."""
        if self.cuda is not None:
            self.cuda.select(stream)

    def xla_record(self) -> Any:
        """The own CUDA launcher's runtime record for launches from XLA's handler (a copy, with a stand-in of XLA's
        own: XLA's stream is not the runtime's), or NULL where the runtime has none. The caller keeps it alive."""
        if self.cuda is None:
            return ffi.NULL
        record = ffi.new("TaichiAotCudaRuntime *", self.cuda.c[0])
        record.standin = self.cuda.xla_standin()
        return record

    def keep_for_graphs(self) -> None:
        """Launches may be captured into CUDA graphs out of the runtime's sight (XLA's command buffers): the own
        launcher's stand-ins and code stay for the process's life."""
        if self.cuda is not None:
            self.cuda.captured = True


class ModuleBackends:
    """The launch backends of one loaded module, asked in order (the own launches first, libtaichi last): which
    launches each kernel and graph (:meth:`kernel`, :meth:`graph`), and its reverse-mode kernels (:meth:`reverse`)."""

    def __init__(self, arch: Arch, folder: str | None, order: list[Backend], own: cuda.Kernels | None = None,
                 device: int | None = None):
        self._arch = arch
        self._device = device  # the own CUDA runtime's device (libtaichi has no runtime there), else None
        self._folder = folder  # the module's files (a .tcm's unpacked): the x64 launch compiles their IR
        self._order = order
        self._own = own  # its kernels on the own CUDA launcher (reverse kernels run there), or None
        self._reverse: dict[str, Any] = {}  # primal kernel -> its reverse-mode kernel's call, made once

    @staticmethod
    def by_choice(runtime: Any) -> bool:
        """Whether a module's kernels differ with the launchers asked for (``launcher=``) on ``runtime``: on CUDA the
        own launcher takes them or libtaichi does; elsewhere the same backends load whatever is asked."""
        return bool(runtime.arch == Arch.CUDA)

    @classmethod
    def load(cls, runtime: Any, state: RuntimeBackends, what: str, folder: str | None, choice: str) -> ModuleBackends:
        """The backends of a module of ``folder`` (its files, where it has a folder) just loaded in ``runtime``,
        with ``choice`` (:func:`~.choice.launchers`): on CUDA with "auto", its kernels with PTX loaded on the own
        launcher (a module saved without PTX gets it at its first load where llvmlite is installed, kept in the
        cache); on x64, the own x64 launch for the kernels libtaichi cannot give all they need; libtaichi last."""
        order: list[Backend] = []
        own = None
        # the own CUDA runtime of a device but 0, where libtaichi has no runtime
        device = runtime.device_index if runtime.cuda_device is not None and runtime.device_index != 0 else None
        if device is not None and choice != AUTO:
            raise NotSupportedError(f"{what}: launcher='taichi': {libtaichi.absent(device)}")
        if cls.by_choice(runtime) and choice == AUTO and folder is not None:  # CUDA: the own launcher where asked
            from ..ptx import _kernels, ptx_folder
            from . import cuda

            source, why = ptx_folder(folder)  # the module's PTX, else made at its first load and kept
            entries = _kernels(folder)
            own = cuda.load(state, runtime, source, entries, what) if source is not None else \
                cuda.Kernels.none(dict.fromkeys(entries, why))
            if own is not None:
                order.append(cuda.CudaBackend(own))
        elif runtime.arch == Arch.X64:
            from .cpu import X64Backend

            order.append(X64Backend(folder, runtime.cpu_threads or 1))
        order.append(libtaichi.LibtaichiBackend() if device is None else libtaichi.Absent())
        return cls(runtime.arch, folder, order, own, device)

    def kernel(self, name: str, info: KernelInfo, library: Callable[[], Any]) -> tuple[Choice, list[ArgInfo]]:
        """The choice of kernel ``name`` and the signature its launches take (a reverse-mode kernel on the own CUDA
        launcher: its arguments, then their gradients): the first backend's that takes it. ``library()`` gives
        libtaichi's handle. A kernel that returns values no backend here gives: NotSupportedError."""
        for backend in self._order:
            got = backend.kernel(name, info, library)
            if got is not None:
                return got
        if self._device is not None or not info.returns:
            raise NotSupportedError(f"kernel {name!r}: {self._unowned(name)}")
        raise NotSupportedError(f"kernel {name!r} returns values, which {self._lost(name)}")

    def graph(self, info: GraphInfo, library: Any) -> Choice:
        """The choice of a compute graph: the first backend's that takes it (the own CUDA launcher's where it takes
        every kernel the graph dispatches), libtaichi's (``library``, its handle) last."""
        for backend in self._order:
            got = backend.graph(info, library)
            if got is not None:
                return got
        if self._device is not None:
            kernels = ", ".join(repr(k) for k in info.dispatches)
            raise NotSupportedError(f"graph {info.name!r}: one of its kernels is not on taichi_aot's own CUDA launcher "
                                    f"({kernels}; module.launchers() says why), and {libtaichi.absent(self._device)}")
        raise NotSupportedError(f"graph {info.name!r}: no launch backend takes it")  # libtaichi takes every graph

    def _why_not(self, name: str) -> str | None:
        """The first reason a backend gives for not launching kernel ``name``."""
        return next((why for b in self._order if (why := b.why_not(name))), None)

    def needs_library(self, meta: ModuleInfo) -> bool:
        """Whether a kernel or graph of the module is libtaichi's to launch (its module is loaded then): one the own
        launches do not take (a reverse kernel or a kernel returning values never is)."""
        own = self._own
        if own is None:
            return any(not info.reverse and not info.returns for info in meta.kernels.values()) or bool(meta.graphs)
        if any(name not in own.plans and not info.reverse and not info.returns for name, info in meta.kernels.items()):
            return True
        return any(own.graph(info) is None for info in meta.graphs.values())

    def _unowned(self, name: str) -> str:
        """Why a kernel cannot run on the own CUDA runtime (the end of a sentence)."""
        why = self._why_not(name) or "no PTX"
        if self._device is None:  # device 0: libtaichi was not loaded for the module (a reverse kernel is never asked)
            return (f"taichi_aot's own CUDA launcher does not take it ({why}), and the module was loaded without "
                    "libtaichi (its kernels all run on the own launcher; a reverse-mode kernel runs through its "
                    "primal's grad)")
        return f"taichi_aot's own CUDA launcher does not take it ({why}), and {libtaichi.absent(self._device)}"

    def _lost(self, name: str) -> str:
        """Why a kernel that returns values has no backend here that gives them (the end of a sentence)."""
        why = self._why_not(name)
        if self._arch == Arch.X64:
            return f"only taichi_aot's x64 launch gives, and it cannot take it: {why or ''}"
        if self._arch == Arch.CUDA:
            return ("only taichi_aot's own CUDA launcher gives (libtaichi_c_api 1.7.4 gives no kernel result), "
                    + (f"and it does not take it: {why}" if why else
                       "which needs the module's PTX (build it where llvmlite is installed, or run `taichi_aot ptx`) "
                       "and the own launcher (not launcher='taichi')"))
        return (f"libtaichi_c_api 1.7.4 does not give back on {self._arch.name} (its C-API gives no kernel result); "
                "taichi_aot gives them on x64 and CUDA: write them into an ndarray argument here")

    def launchers(self, names: list[str], meta: ModuleInfo) -> dict[str, str]:
        """``AotModule.launchers()``: each kernel's backend, "cuda", "x64" or "taichi" (with the reason after a colon
        where the own launches leave it to libtaichi), or "refused: ..." for a kernel that returns values no backend
        here gives (its look-up raises NotSupportedError)."""
        out = {}
        for name in names:
            info = meta.kernels.get(name)
            taker = next((b.name for b in self._order if b.takes(name, info)), None)
            if taker is None and self._device is not None:
                out[name] = f"refused: {self._unowned(name)}"
            elif taker is None:
                out[name] = f"refused: returns values, which {self._lost(name)}"
            elif taker == LIBTAICHI:
                reason = self._why_not(name)
                out[name] = f"{LIBTAICHI}: {reason}" if reason else LIBTAICHI
            else:
                out[name] = taker
        return out

    def reverse(self, module: Any, name: str, meta: ModuleInfo, threads: int | None) -> Any:
        """The reverse-mode kernel of kernel ``name`` (``<name>_grad``) as its primal's ``grad`` call
        (``cuda_reverse.GradCall`` or ``cpu.CpuKernel``), made once; NotSupportedError saying why where there is
        none or it cannot run here. ``module`` is the AotModule asking (checked open before one is made), ``threads``
        an x64 runtime's."""
        made = self._reverse.get(name)
        if made is not None:
            return made
        module.ensure_open()
        grad = meta.kernels.get(f"{name}_grad")
        if grad is None or not grad.reverse:
            raise NotSupportedError(f"kernel {name!r} has no reverse-mode kernel in module {module.source} (build "
                                    "exports one, named <kernel>_grad, for kernels whose ndarrays say "
                                    "needs_grad=True, and warns where Taichi could not differentiate one)")
        if self._arch == Arch.CUDA:
            made = self._reverse[name] = self._cuda_reverse(module, name, grad.name, grad.args)
        elif self._arch == Arch.X64 and self._folder is not None:
            from ..ptx import _kernels
            from . import cpu

            made = self._reverse[name] = cpu.compile_kernel(self._folder, grad.name, _kernels(self._folder)[grad.name],
                                                            threads or 1)
        else:
            raise NotSupportedError(f"kernel {name!r}: reverse-mode kernels run on x64 and CUDA only (taichi_aot's "
                                    f"own launches); this is a {self._arch.name} runtime")
        return made

    def _cuda_reverse(self, module: Any, name: str, grad: str, args: list[ArgInfo]) -> GradCall:
        """The own CUDA launcher's reverse kernel ``grad`` of kernel ``name``, where the module's PTX has it."""
        own = self._own
        if own is None or grad not in own.plans:
            why = own.refused.get(grad) if own is not None else None
            raise NotSupportedError(
                f"kernel {name!r}: its reverse-mode kernel runs on taichi_aot's own CUDA launcher only (libtaichi "
                "cannot hand it its gradients), " + (f"which does not take it: {why}" if why else
                                                     "and the module has no PTX for it (build it where llvmlite "
                                                     "is installed, or run `taichi_aot ptx`)"))
        from .cuda_reverse import GradCall

        handle, kernel = module.runtime.handle, module.kernels[grad]
        return GradCall(kernel, kernel.packing(), module.runtime, lambda: module.closed,
                        [a.index for a in args if a.needs_grad],
                        lambda values, count, stream: own.launch_elsewhere(handle, grad, values, count, stream))

    def unload(self) -> None:
        """The module is being released: each backend's code given back (unless a CUDA graph holds it)."""
        for backend in self._order:
            backend.unload()
