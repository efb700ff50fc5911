"""Launch backends, and the one place that decides which launches a kernel.

A launch backend launches a module's kernels (and graphs) its own way:

* libtaichi (:mod:`.libtaichi`): libtaichi_c_api's ``ti_launch_*``, every kernel and graph a module holds; the
  reference, and the fallback of the others;
* the own CUDA launcher (:mod:`.cuda`, reverse-mode kernels in :mod:`.cuda_reverse`): CUDA kernels the module has
  PTX for, launched from taichi_aot's C plans on any stream, capturable into CUDA graphs, 2.5-3x cheaper a launch;
  the one that gives a kernel's return value (``value = kernel(a)``: libtaichi's C-API cannot);
* the own x64 launch (:mod:`.cpu`): x64 kernels compiled here from the module's IR (llvmlite) where libtaichi
  cannot give them what they need: reverse-mode kernels (libtaichi cannot hand them their gradients), kernels that
  return values (``value = kernel(a)``) and kernels that take f64, i64, u64, u32, i8 or u8 scalars.

A kernel that returns values on a backend that cannot give them (Vulkan; CUDA without PTX; x64 without llvmlite)
is refused when it is looked up (NotSupportedError), and ``launchers()`` says why: never a call that returns None.

What differs between them is theirs: which kernels they take and why not, the argument layout and which scalar
types they take as they are, stand-ins and streams, their error codes, what may be captured. The rest of the package
asks this room, never a backend's internals:

* :class:`ModuleBackends`, one per loaded module: the :class:`Choice` of each kernel and graph (its backend, the C
  launch's kind and handle, why not the own launcher), ``launchers()``, reverse-mode kernels;
* :class:`RuntimeBackends`, one per runtime: what a backend keeps per runtime (the own CUDA launcher's stand-ins,
  the stream selected, what CUDA graphs hold);
* :func:`launch_error`: the exception of a launch's error code, by the backend that gave it.

Every launch, whatever way it comes in (the C call, the Python call, a replay, XLA's handler, torch's autograd
thread, the flat API's ``ti_launch_*``), is made by ``_csrc/launch.c`` from a ``TaichiAotLaunch`` of the
:class:`Choice`'s kind. A new backend: a module here with its load step and error mapping, a kind in
``_csrc/taichi_aot.h`` launched in launch.c's ``launch_any``, and its choice in :meth:`ModuleBackends.kernel`
(``docs/contributing.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from .._arguments import c_api_passes
from .._native import ffi, lib
from ..enums import Arch
from ..errors import InvalidStateError, NotSupportedError
from . import cuda, libtaichi
from .cuda_reverse import GradCall, gradient_signature

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata import ArgInfo, ModuleInfo
    from ..metadata.model import GraphInfo, KernelInfo

__all__ = ["OWN", "Choice", "ModuleBackends", "RuntimeBackends", "cuda_launcher", "launch_error"]

#: The own launches' name, as ``Kernel.launcher`` and ``AotModule.launchers()`` say it (libtaichi's: "taichi").
OWN = "own"
#: The error codes of the own launches (ptx.c) and of launch.c's refusal, beside libtaichi's TiError codes.
_OWN_CODES = (lib.TAICHI_AOT_CUDA_BAD_ARGS, lib.TAICHI_AOT_REFUSED, lib.TAICHI_AOT_CUDA_STACK_OVERFLOW,
              lib.TAICHI_AOT_CUDA_CAPTURE_REFUSED, lib.TAICHI_AOT_CUDA_RESULT_CAPTURE_REFUSED)


def launch_error(code: int, what: str) -> Exception:
    """The exception of a launch's non-zero error ``code`` (``what`` names the launch), by the backend that gave it."""
    if code == lib.TAICHI_AOT_UNKNOWN_KIND:  # a record no backend wrote: the dispatcher launched nothing
        return InvalidStateError(f"{what}: a launch of a kind the dispatcher does not know (nothing was launched)")
    if code <= lib.TAICHI_AOT_CUDA_ERROR or code in _OWN_CODES:
        return cuda.own_launch_error(code, what)
    return libtaichi.launch_error(code, what)


def cuda_launcher(given: str | None) -> str:
    """The CUDA launcher asked for: ``given`` (``load_module(cuda_launcher=)``), else ``TAICHI_AOT_CUDA_LAUNCHER``,
    else "own"; InvalidArgumentError for another word."""
    return cuda.choice(given)


@dataclass(frozen=True)
class Choice:
    """Which backend launches one kernel or graph, and what its launches need."""

    backend: str  # OWN or libtaichi.NAME
    kind: int  # the TaichiAotLaunch kind (_csrc/taichi_aot.h)
    handle: Any  # what that kind launches: a TaichiAotCudaKernel / TaichiAotCudaGraph, or libtaichi's handle
    library: Any  # libtaichi's handle (TiKernel, TiComputeGraph); None where libtaichi cannot launch it
    widens: bool = False  # takes every scalar type as it is (the own launches), not only the C-API's
    graphable: bool = False  # its launch never waits: XLA may capture it into a command buffer (a CUDA graph)
    results: Any = None  # a kernel that returns values on the own CUDA launcher: their reader (cuda.Results)
    pointers: bool = False  # an ndarray may be passed as a tagged pointer (the own launches), not only a TiMemory
    codes: bool = False  # it reports its errors by its return code (the own launches), not libtaichi's error slot

    @property
    def flags(self) -> int:
        """What the launch record tells C of it (``TaichiAotLaunch.flags``, ``_csrc/taichi_aot.h``): C switches on
        these, never on the order of the kind numbers."""
        return ((lib.TAICHI_AOT_LAUNCH_POINTERS if self.pointers else 0) | (lib.TAICHI_AOT_LAUNCH_CODES if self.codes
                else 0) | (lib.TAICHI_AOT_LAUNCH_GRAPHABLE if self.graphable else 0))

    def elsewhere(self) -> tuple[int, int, Any]:
        """The kind, flags and handle of its launch from XLA's handler: a graph of the own launcher goes through
        libtaichi's (one dispatch's record is all a launch made elsewhere carries)."""
        if self.kind == lib.TAICHI_AOT_KIND_CUDA_GRAPH:
            return libtaichi.GRAPH, 0, self.library
        return self.kind, self.flags, self.handle


def _library(kind: int, handle: Any) -> Choice:
    return Choice(libtaichi.NAME, kind, handle, handle)


def _own(kind: int, handle: Any, library: Any, graphable: bool = False, results: Any = None) -> Choice:
    """A choice of the own launches: every scalar type, tagged pointers, errors by code."""
    return Choice(OWN, kind, handle, library, True, graphable, results, pointers=True, codes=True)


class RuntimeBackends:
    """What the launch backends keep per runtime: the own CUDA launcher's state (``cuda``: its stand-ins, one a
    stream, made with the runtime's first module with PTX)."""

    def __init__(self) -> None:
        self.cuda: cuda.Launcher | None = None

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
    """The launch backends of one loaded module: which launches each kernel and graph (:meth:`kernel`,
    :meth:`graph`), and its reverse-mode kernels (:meth:`reverse`)."""

    def __init__(self, arch: Arch, folder: str | None, own: cuda.Kernels | None, threads: int | None = None):
        self._arch = arch
        self._folder = folder  # the module's files (a .tcm's unpacked): the x64 launch compiles their IR
        self._own = own  # its kernels on the own CUDA launcher, or None
        self._threads = threads  # an x64 runtime's CPU threads: the own x64 launch's parallel loops use as many
        self._reverse: dict[str, Any] = {}  # primal kernel -> its reverse-mode kernel's call, made once
        self._cpu: dict[str, Any] = {}  # x64 kernels on the own x64 launch (cpu.CpuCall), made at their look-up
        self._refused: dict[str, str] = {}  # kernels libtaichi launches: why not the own x64 launch

    @classmethod
    def load(cls, runtime: Any, state: RuntimeBackends, what: str, folder: str | None, choice: str) -> ModuleBackends:
        """The backends of a module of ``folder`` (its files, where it has a folder) just loaded in ``runtime``:
        on CUDA, with ``choice`` "own" (:func:`cuda_launcher`), its kernels with PTX loaded on the own launcher
        (a module saved without PTX gets it at its first load where llvmlite is installed, kept in the cache)."""
        own = None
        if runtime.arch == Arch.CUDA and choice == OWN and folder is not None:
            from ..ptx import _kernels, ptx_folder

            source, why = ptx_folder(folder)  # the module's PTX, else made at its first load and kept
            entries = _kernels(folder)
            own = cuda.load(state, runtime, source, entries, what) if source is not None else \
                cuda.Kernels.none(dict.fromkeys(entries, why))
        return cls(runtime.arch, folder, own, runtime.cpu_threads if runtime.arch == Arch.X64 else None)

    def kernel(self, name: str, info: KernelInfo, library: Callable[[], Any]) -> tuple[Choice, list[ArgInfo]]:
        """The choice of kernel ``name`` and the signature its launches take (a reverse-mode kernel on the own CUDA
        launcher: its arguments, then their gradients); ``library()`` gives libtaichi's handle."""
        plan = self._own.plans.get(name) if self._own is not None else None
        if plan is None and self._x64_own(info):
            call = self._cpu_call(name, info)
            if call is not None:
                return _own(lib.TAICHI_AOT_KIND_CPU_CALL, call.c, library(), results=call.results), info.args
        if plan is None:
            if info.returns:
                raise NotSupportedError(f"kernel {name!r} returns values, which {self._lost(name)}")
            return _library(libtaichi.KERNEL, library()), info.args
        if info.reverse:  # libtaichi, which cannot run it, gives it no handle
            return _own(lib.TAICHI_AOT_KIND_CUDA_KERNEL, plan, None), gradient_signature(info.args)
        results = self._own.results.get(name)  # type: ignore[union-attr]  # a plan: the own launcher's
        return (_own(lib.TAICHI_AOT_KIND_CUDA_KERNEL, plan, library(), not plan.overflow and results is None,
                     results), info.args)

    def _x64_own(self, info: KernelInfo) -> bool:
        """Whether a kernel is for the own x64 launch: it returns values or takes scalars libtaichi cannot pass."""
        return self._arch == Arch.X64 and not info.reverse and (
            info.returns or not all(c_api_passes(a) for a in info.args))

    def _cpu_call(self, name: str, info: KernelInfo) -> Any:
        """Kernel ``name`` on the own x64 launch (a ``cpu.CpuCall``, made once), or None with the reason noted."""
        made = self._cpu.get(name)
        if made is not None or name in self._refused:
            return made
        folder, why = self._folder, "the module has no IR files"
        if folder is not None:
            from ..ptx import _kernels
            from . import cpu

            try:
                made = self._cpu[name] = cpu.compile_call(folder, name, _kernels(folder)[name], self._threads or 1)
            except NotSupportedError as e:
                why = str(e)
        if made is None:
            self._refused[name] = why
        return made

    def _lost(self, name: str) -> str:
        """Why a kernel that returns values has no backend here that gives them (the end of a sentence)."""
        if self._arch == Arch.X64:
            return f"only taichi_aot's x64 launch gives, and it cannot take it: {self._refused.get(name, '')}"
        if self._arch == Arch.CUDA:
            why = self._own.refused.get(name) if self._own is not None else None
            return ("only taichi_aot's own CUDA launcher gives (libtaichi_c_api 1.7.4 gives no kernel result), "
                    + (f"and it does not take it: {why}" if why else
                       "which needs the module's PTX (build it where llvmlite is installed, or run `taichi_aot ptx`) "
                       "and the own launcher (not cuda_launcher='taichi')"))
        return (f"libtaichi_c_api 1.7.4 does not give back on {self._arch.name} (its C-API gives no kernel result); "
                "taichi_aot gives them on x64 and CUDA: write them into an ndarray argument here")

    def graph(self, info: GraphInfo, library: Any) -> Choice:
        """The choice of a compute graph: the own CUDA launcher's where it takes every kernel the graph dispatches,
        else libtaichi's (``library``, its handle)."""
        plan = self._own.graph(info) if self._own is not None else None
        if plan is None:
            return _library(libtaichi.GRAPH, library)
        return _own(lib.TAICHI_AOT_KIND_CUDA_GRAPH, plan, library)

    def launchers(self, names: list[str], meta: ModuleInfo) -> dict[str, str]:
        """``AotModule.launchers()``: each kernel's launcher, "own" or "taichi" (with the reason after a colon where
        the own launches leave it to libtaichi), or "refused: ..." for a kernel that returns values no backend here
        gives (its look-up raises NotSupportedError)."""
        own, out = self._own, {}
        for name in names:
            info = meta.kernels.get(name)
            if info is not None and self._x64_own(info):
                self._cpu_call(name, info)
            if (own is not None and name in own.plans) or name in self._cpu:
                out[name] = OWN
            elif info is not None and info.returns:
                out[name] = f"refused: returns values, which {self._lost(name)}"
            else:
                reason = own.refused.get(name) if own is not None else self._refused.get(name)
                out[name] = f"{libtaichi.NAME}: {reason}" if reason else libtaichi.NAME
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
        handle = module.runtime.handle
        return GradCall(module.kernels[grad], [a.index for a in args if a.needs_grad],
                        lambda values, count, stream: own.launch_elsewhere(handle, grad, values, count, stream))

    def unload(self) -> None:
        """The module is being released: the own launcher's code unloaded (unless a CUDA graph holds it)."""
        if self._own is not None:
            self._own.unload()
