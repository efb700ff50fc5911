"""Launch backends, and the one place that decides which launches a kernel.

A launch backend launches a module's kernels (and graphs) its own way. Each is registered here (:func:`register`:
its name, module, the kinds of launch it makes, the arches it loads on, its priority), and its module gives a
:class:`~.choice.Backend` for each module loaded (the contract: a name, a :class:`~.choice.Choice` or None for each
kernel and graph, why it declines one, its reverse-mode kernels, its code unloaded) and reads its launches' error
codes. A module's backends are asked in priority order, the own launches first:

* "cuda", the own CUDA launcher (:mod:`.cuda`): CUDA kernels the module has PTX for, launched from taichi_aot's C
  plans on any stream, capturable into CUDA graphs, 2.5-3x cheaper a launch; the one that gives a CUDA kernel's
  return value (``value = kernel(a)``: libtaichi's C-API cannot);
* "vulkan", the own Vulkan launch (:mod:`.vulkan`): Vulkan kernels dispatched from taichi_aot's C on libtaichi's
  device and queue, pipelines made once, descriptor sets kept for arrays passed again, launches batched into command
  buffers, loops over an ndarray's run-time length dispatched for its elements; it gives return values;
* "x64", the own x64 launch (:mod:`.cpu`): x64 kernels compiled here from the module's IR (llvmlite) where libtaichi
  cannot give them what they need: kernels that return values, kernels that take f64, i64, u64, u32, i8 or u8
  scalars, and reverse-mode kernels (libtaichi cannot hand them their gradients: they take them after their
  arguments, and run as their primal's ``grad``);
* "taichi", libtaichi (:mod:`.libtaichi`): libtaichi_c_api's ``ti_launch_*``, every kernel and graph a module holds
  but those that return values; the reference, and the fallback of the others.

A kernel that returns values on a backend that cannot give them (CUDA without PTX; x64 without llvmlite; Vulkan with
``launcher="taichi"``)
is refused when it is looked up (NotSupportedError), and ``launchers()`` says why: never a call that returns None.

What differs between them is theirs: which kernels they take and why not, the argument layout and which scalar
types they take as they are, stand-ins and streams, their error codes, what may be captured. The rest of the package
asks this room, never a backend's internals:

* :class:`ModuleBackends`, one per loaded module: the :class:`Choice` of each kernel and graph (its backend, the C
  launch's kind, flags and handle, why not the own launches), ``launchers()``, reverse-mode kernels;
* :class:`RuntimeBackends`, one per runtime: what each backend keeps per runtime, by name (the own CUDA launcher's
  stand-ins, the stream selected, what CUDA graphs hold);
* :func:`launch_error`: the exception of a launch's error code, read by the backend whose kind of launch gave it.

Every launch, whatever way it comes in (the C call, the Python call, a replay, XLA's handler, torch's autograd
thread, the flat API's ``ti_launch_*``), is made by ``_csrc/launch.c`` from a ``TaichiAotLaunch`` of the
:class:`Choice`'s kind and flags: ``launch_any`` is the one switch on the kind. A new backend: a module here whose
class keeps the contract, registered below, and, for a launch of its own, a kind in ``_csrc/taichi_aot.h`` launched
in ``launch_any`` (``docs/contributing.md`` lists every step).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from .._native import ffi, lib
from ..enums import Arch
from ..errors import InvalidStateError, NotSupportedError
from . import libtaichi
from .choice import (
    AUTO,
    CUDA,
    LIBTAICHI,
    VULKAN,
    X64,
    Backend,
    BackendModule,
    Choice,
    ContractError,
    RuntimeState,
    checked,
    launchers,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata import ArgInfo, ModuleInfo
    from ..metadata.model import GraphInfo, KernelInfo

__all__ = ["CUDA", "LIBTAICHI", "VULKAN", "X64", "Backend", "BackendModule", "Choice", "ContractError",
           "ModuleBackends", "Registration", "RuntimeBackends", "launch_error", "launchers", "library_kind", "register",
           "registered"]


@dataclass(frozen=True)
class Registration:
    """A launch backend as the room knows it before its module is imported: its ``name``, its ``module`` (a path,
    under ``taichi_aot.backends`` where it starts with a dot, imported when a runtime of one of its ``arches`` first
    loads a module, or when one of its launches fails; or the module or :class:`~.choice.BackendModule` itself), the
    ``kinds`` of ``TaichiAotLaunch`` its choices carry (a launch's error code is its backend's to read), whether
    ``launcher="taichi"`` leaves its kernels to libtaichi (``choosable``), its ``priority`` (higher is asked first;
    libtaichi, the fallback, is 0), and whether its launches are libtaichi's calls (``library_any_thread``: any
    thread may make them only where the device says ``traits.library_any_thread``, not ``any_thread`` alone).

    Its module keeps :class:`~.choice.BackendModule`'s contract, checked when it registers (a module named by its
    path: when it is imported): ``load`` and ``launch_error``, and the refusals of its arch where it has its own."""

    name: str
    module: Any
    kinds: tuple[int, ...]
    arches: frozenset[Arch] | None = None  # None: every arch
    choosable: bool = False
    priority: int = 0
    library_any_thread: bool = False

    def loads_on(self, arch: Arch) -> bool:
        return self.arches is None or arch in self.arches

    def imported(self) -> BackendModule:
        """The backend's module as its contract (imported and checked the first time: the CUDA backend's import is
        not small); ContractError where it does not keep it."""
        read = _read.get(self.name)
        if read is None:
            given = importlib.import_module(self.module, __name__) if isinstance(self.module, str) else self.module
            read = _read[self.name] = checked(given, self.name)
        return read


_registered: list[Registration] = []
_read: dict[str, BackendModule] = {}  # a registered backend's module, checked (Registration.imported)


def register(name: str, module: Any, kinds: tuple[int, ...], arches: frozenset[Arch] | None = None,
             choosable: bool = False, priority: int = 0, library_any_thread: bool = False) -> None:
    """Register a launch backend (:class:`Registration`): a module's backends are asked in priority order, highest
    first. ContractError for a name registered already, or a module (given as itself) that lacks what the contract
    needs (a module given by its path is checked when it is first imported)."""
    if any(r.name == name for r in _registered):
        raise ContractError(f"launch backend {name!r} is registered already (by module {_by_name(name).module!r})")
    if not isinstance(module, str):
        _read[name] = checked(module, name)
    _registered[:] = sorted([*_registered, Registration(name, module, tuple(kinds), arches, choosable, priority,
                                                        library_any_thread)], key=lambda r: -r.priority)


def _by_name(name: str) -> Registration:
    return next(r for r in _registered if r.name == name)


def registered() -> list[Registration]:
    """The launch backends, in the order a module's are asked."""
    return list(_registered)


def library_kind(kind: int) -> bool:
    """Whether a launch of ``kind`` is libtaichi's call (its registration's ``library_any_thread``): any thread may make
    it only where the device's ``traits.library_any_thread`` says so."""
    return any(kind in r.kinds and r.library_any_thread for r in _registered)


register(CUDA, ".cuda", (lib.TAICHI_AOT_KIND_CUDA_KERNEL, lib.TAICHI_AOT_KIND_CUDA_GRAPH), frozenset({Arch.CUDA}),
         choosable=True, priority=300)
register(VULKAN, ".vulkan", (lib.TAICHI_AOT_KIND_VULKAN_KERNEL, lib.TAICHI_AOT_KIND_VULKAN_GRAPH),
         frozenset({Arch.VULKAN}), choosable=True, priority=250)
register(X64, ".cpu", (lib.TAICHI_AOT_KIND_CPU_CALL,), frozenset({Arch.X64}), priority=200)
register(LIBTAICHI, ".libtaichi", (libtaichi.KERNEL, libtaichi.GRAPH), library_any_thread=True)


def launch_error(code: int, what: str, kind: int | None = None) -> Exception:
    """The exception of a launch's non-zero error ``code`` (``what`` names the launch), read by the backend whose
    ``kind`` of launch gave it (None: libtaichi's, as the error a replay finds after its passes is)."""
    if code == lib.TAICHI_AOT_UNKNOWN_KIND:  # a record no backend wrote: the dispatcher launched nothing
        return InvalidStateError(f"{what}: a launch of a kind the dispatcher does not know (nothing was launched)")
    found = next((r for r in _registered if kind in r.kinds), None)
    return (found.imported() if found is not None else libtaichi).launch_error(code, what)


class RuntimeBackends:
    """What the launch backends keep per runtime, by backend name (``state[name]``: the own CUDA launcher's stand-ins,
    one a stream, made with the runtime's first module with PTX), and the lock the launches made in Python take
    (``lock``: any thread may launch on the own CUDA runtime; the runtime's staged copies and cache are one for
    all)."""

    def __init__(self) -> None:
        self._states: dict[str, RuntimeState] = {}
        self.lock = threading.RLock()

    def get(self, name: str) -> Any:
        """Backend ``name``'s state of this runtime, or None."""
        return self._states.get(name)

    def __setitem__(self, name: str, state: RuntimeState) -> None:
        self._states[name] = state

    def select_stream(self, stream: int | None) -> None:
        """Launch on ``stream`` (None: the legacy default stream) from now on (each backend's stand-in for it made
        first: it may fail, out of memory)."""
        for state in self._states.values():
            state.select(stream)

    def xla_record(self) -> Any:
        """The runtime record for launches from XLA's handler (a copy, with a stand-in of XLA's own: XLA's stream is
        not the runtime's) of the backend that keeps one, or NULL where none does yet. The caller keeps it alive."""
        return next((r for r in (s.xla_record() for s in self._states.values()) if r is not None), ffi.NULL)

    def keep_for_graphs(self) -> None:
        """Launches may be captured into CUDA graphs out of the runtime's sight (XLA's command buffers): each
        backend's stand-ins and code stay for the process's life."""
        for state in self._states.values():
            state.keep_for_graphs()


class ModuleBackends:
    """The launch backends of one loaded module, asked in order (the own launches first, libtaichi last): which
    launches each kernel and graph (:meth:`kernel`, :meth:`graph`), and its reverse-mode kernels (:meth:`reverse`)."""

    def __init__(self, arch: Arch, order: list[Backend]):
        self._arch = arch
        self._order = order
        # why libtaichi has no runtime for the module's kernels (a backend's runtime it cannot share), else None
        self._absent = next((b.reason for b in order if isinstance(b, libtaichi.Absent)), None)
        self._reverse: dict[str, Any] = {}  # primal kernel -> its reverse-mode kernel's call, made once

    @staticmethod
    def by_choice(runtime: Any) -> bool:
        """Whether a module's kernels differ with the launchers asked for (``launcher=``) on ``runtime``: a backend
        registered for its arch leaves them to libtaichi when asked (the own CUDA launcher)."""
        return any(r.choosable and r.loads_on(runtime.arch) for r in _registered)

    @classmethod
    def load(cls, runtime: Any, state: RuntimeBackends, what: str, folder: str | None, choice: str,
             meta: ModuleInfo) -> ModuleBackends:
        """The backends of a module of ``folder`` (its files, where it has a folder; ``meta`` its metadata, read and
        checked) just loaded in ``runtime``,
        with ``choice`` (:func:`~.choice.launchers`): each registered backend of the runtime's arch asked in order
        (its module's ``load``: the own CUDA launcher with "auto" where the module has PTX, made at its first load
        where llvmlite is installed; the own x64 launch; libtaichi last)."""
        order = []
        for registration in _registered:  # a choosable one left out where libtaichi is asked for (launcher="taichi")
            if registration.loads_on(runtime.arch) and (choice == AUTO or not registration.choosable):
                backend = registration.imported().load(runtime, state, what, folder, choice, meta)
                if backend is not None:
                    order.append(checked(backend, registration.name, Backend))
        return cls(runtime.arch, order)

    def kernel(self, name: str, info: KernelInfo, library: Callable[[], Any]) -> tuple[Choice, list[ArgInfo]]:
        """The choice of kernel ``name`` and the signature its launches take (a reverse-mode kernel on the own CUDA
        launcher: its arguments, then their gradients): the first backend's that takes it. ``library()`` gives
        libtaichi's handle. A kernel that returns values no backend here gives: NotSupportedError."""
        for backend in self._order:
            got = backend.kernel(name, info, library)
            if got is not None:
                return got
        if self._absent is not None or not info.returns:
            raise NotSupportedError(f"kernel {name!r}: {self._unowned(name)}")
        raise NotSupportedError(f"kernel {name!r} returns values, which {self._lost(name)}")

    def graph(self, info: GraphInfo, library: Any) -> Choice:
        """The choice of a compute graph: the first backend's that takes it (the own CUDA launcher's where it takes
        every kernel the graph dispatches), libtaichi's (``library``, its handle) last."""
        for backend in self._order:
            got = backend.graph(info, library)
            if got is not None:
                return got
        if self._absent is not None:
            kernels = ", ".join(repr(k) for k in info.dispatches)
            why = (self._said(lambda m: m.graph_refused(kernels))
                   or f"no launch backend here takes all of its kernels ({kernels})")
            raise NotSupportedError(f"graph {info.name!r}: {why}, and {self._absent}")
        raise NotSupportedError(f"graph {info.name!r}: no launch backend takes it")  # libtaichi takes every graph

    def _why_not(self, name: str) -> str | None:
        """The first reason a backend gives for not launching kernel ``name``."""
        return next((why for b in self._order if (why := b.why_not(name))), None)

    def needs_library(self, meta: ModuleInfo) -> bool:
        """Whether a kernel or graph of the module is libtaichi's to launch (its module is loaded then): one no own
        backend takes (a reverse kernel or a kernel returning values never is)."""
        own = [b for b in self._order if b.name != LIBTAICHI]
        if any(not info.reverse and not info.returns and not any(b.takes(name, info) for b in own)
               for name, info in meta.kernels.items()):
            return True
        return any(all(b.graph(info, None) is None for b in own) for info in meta.graphs.values())

    def _unowned(self, name: str) -> str:
        """Why a kernel no backend took cannot run where libtaichi has no runtime for it or was not loaded for the
        module (the end of a sentence): the arch's own backend's words for its part, then libtaichi's absence."""
        why = self._why_not(name)
        own = (self._said(lambda m: m.unowned_refused(why))
               or f"no launch backend here takes it{f' ({why})' if why else ''}")
        if self._absent is None:  # libtaichi was not loaded for the module (a reverse kernel is never asked)
            return (f"{own}, and the module was loaded without libtaichi (its kernels all run on the own launcher; a "
                    "reverse-mode kernel runs through its primal's grad)")
        return f"{own}, and {self._absent}"

    def _said(self, question: Callable[[BackendModule], str | None]) -> str | None:
        """The first answer to ``question`` (one of :class:`~.choice.BackendModule`'s refusals, asked of a backend's
        module: ``returns_refused(why)``, ``reverse_refused(name)``, ``unowned_refused(why)``,
        ``graph_refused(kernels)``) of the backends registered for this arch, loaded for the module or not (one a
        module left out, ``launcher="taichi"``, says why it is missing); None: none of them answers (each gives the
        contract's default, None, where it has no words of its own)."""
        for registration in _registered:
            if registration.name != LIBTAICHI and registration.loads_on(self._arch):
                answer = question(registration.imported())
                if answer:
                    return str(answer)
        return None

    def _lost(self, name: str) -> str:
        """Why a kernel that returns values has no backend here that gives them (the end of a sentence): its arch's
        own backend's words, else the library's."""
        why = self._why_not(name)
        return self._said(lambda m: m.returns_refused(why)) or (
            f"libtaichi_c_api 1.7.4 does not give back on {self._arch.name} (its C-API gives no kernel result); "
            f"taichi_aot gives them on {self._givers()}: write them into an ndarray argument here")

    @staticmethod
    def _givers() -> str:
        """The archs where an own backend gives kernels' values, as a message lists them."""
        names = [r.name for r in _registered if r.name != LIBTAICHI]
        return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)

    def launchers(self, names: list[str], meta: ModuleInfo) -> dict[str, str]:
        """``AotModule.launchers()``: each kernel's backend, "cuda", "vulkan", "x64" or "taichi" (with the reason
        after a colon where the own launches leave it to libtaichi), or "refused: ..." for a kernel that returns values
        no backend here gives, or a reverse-mode kernel no own launch takes (its look-up raises NotSupportedError)."""
        out = {}
        for name in names:
            info = meta.kernels.get(name)
            taker = next((b.name for b in self._order if b.takes(name, info)), None)
            if taker is None and info is not None and info.reverse:  # no own launch took it; libtaichi cannot
                why = self._why_not(name)
                out[name] = f"refused: {info.unsupported}" + (f"; the own launch does not: {why}" if why else "")
            elif taker is None and self._absent is not None:
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
        """The reverse-mode kernel of kernel ``name`` (``<name>_grad``) as its primal's ``grad`` call, made once by the
        first backend that runs it (an ``_arguments.GradCall`` of its kernel); NotSupportedError saying why where
        there is none or it cannot run here. ``module`` is the AotModule asking (checked open before one is made),
        ``threads`` an x64 runtime's."""
        made = self._reverse.get(name)
        if made is not None:
            return made
        module.ensure_open()
        grad = meta.kernels.get(f"{name}_grad")
        if grad is None or not grad.reverse:
            raise NotSupportedError(f"kernel {name!r} has no reverse-mode kernel in module {module.source} (build "
                                    "exports one, named <kernel>_grad, for kernels whose ndarrays say "
                                    "needs_grad=True, and warns where Taichi could not differentiate one)")
        for backend in self._order:
            made = backend.reverse(module, name, grad, threads)
            if made is not None:
                self._reverse[name] = made
                return made
        said = self._said(lambda m: m.reverse_refused(name))  # the arch's own backend's words, where it has some
        raise NotSupportedError(said or f"kernel {name!r}: no launch backend on this {self._arch.name} runtime runs "
                                "its reverse-mode kernel (libtaichi cannot hand it its gradients)")

    def unload(self) -> None:
        """The module is being released: each backend's code given back (unless a CUDA graph holds it)."""
        for backend in self._order:
            backend.unload()
