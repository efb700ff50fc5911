"""The own CUDA launcher, a launch backend: PTX loaded once per module, the runtime stand-ins, the C plans.

A CUDA module with PTX (``ptx.json``, see :mod:`taichi_aot.ptx`) has its kernels launched by ``_csrc/backends/cuda.c``
instead of libtaichi: the PTX of each kernel is loaded once (``cuModuleLoadData``, in device 0's primary
context, which is the context Taichi 1.7.4 itself runs in), and each kernel gets a C plan: its tasks'
functions, grids and blocks, and where each argument goes in the launch parameters (read again from the
metadata and checked, :func:`taichi_aot.ptx.plan.check`; the argument layout is
:mod:`taichi_aot.metadata.layout`'s, laid into C by :mod:`.plan`).

The kernels' code reads Taichi's runtime for two things: ``temporaries`` (a serial task leaves a loop bound
there for the next) and, for ``ti.random``, ``rand_states``. Each stream kernels run on gets a stand-in of its
own (zeroed device memory laid out as the IR's ``LLVMRuntime``, with those two fields set, and after it the result
buffer where a kernel that returns values writes them), so launches on two streams never share temporaries or
results; random states are made as Taichi makes them (seed 0) for as many threads as
the largest grid launched.

A kernel that returns values (``-> ti.f32``; vectors and matrices; several as a tuple) is launched as any, then
the stream is waited for and its results copied back (``_csrc/backends/cuda.c``): ``value = kernel(a)`` returns them
(:class:`Results`). Such a launch waits, so it is refused on a stream being captured into a CUDA graph
(NotSupportedError), as a reverse kernel's whose autodiff stacks are checked.

``TAICHI_AOT_CUDA_LAUNCHER=taichi`` (or ``load_module(..., cuda_launcher="taichi")``) keeps every kernel on
libtaichi's path.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .._arguments import GradCall, gradient_signature
from .._native import ffi, lib
from .._nvtx import range_name
from ..drivers import cuda as _cuda
from ..drivers import cuda_host as _cuda_host
from ..errors import CorruptedDataError, InvalidArgumentError, InvalidStateError, NotSupportedError, OutOfMemoryError
from ..metadata.layout import RESULT_BYTES
from ..metadata.llvm import is_reverse
from ..metadata.llvm_ir import STACK_OVERFLOW, STACK_OVERFLOWED
from ..ptx import MANIFEST, gate, kernel_ptx, manifest_in
from ..ptx.plan import check, from_entry
from .choice import CUDA, OWN_FLAGS, Choice, own_choice
from .plan import Results, c_args, dispatch_maps, dispatch_names, gradients_match

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata import ArgInfo
    from ..metadata.model import GraphInfo, KernelInfo, LlvmCode

#: Bytes of Taichi's temporaries buffer (taichi_global_tmp_buffer_size).
TEMPORARIES_BYTES = 1 << 20
#: Stand-ins kept for streams selected before (one each: about 1 MiB, and random states where kernels use them).
STANDINS = 8
#: The key of the stand-in XLA's stream uses (no stream handle is negative): never given back before the runtime closes.
XLA_STANDIN = -1
AUTOGRAD_STANDIN = -2  # the stand-in of launches from another thread than the runtime's (torch's autograd)
_SIDE = (XLA_STANDIN, AUTOGRAD_STANDIN)
#: The most threads random states are made for (Taichi makes saturating grid x max block dim: about 1.1M on an H100).
MAX_RAND_THREADS = 1 << 24
GRAPH_ARGS = 64  # TAICHI_AOT_CUDA_GRAPH_ARGS: the most arguments of one kernel a graph of the own launcher passes




def launch_error(code: int, what: str) -> Exception:
    """The exception for an error code of the own launcher (``_csrc/backends/cuda.c``; the library's own codes, for
    an ndarray's memory it does not know, are libtaichi's to read)."""
    if code == lib.TAICHI_AOT_PLAN_BAD_ARGS:
        return InvalidArgumentError(f"{what}: an argument is not of the kind the kernel's argument plan lays out")
    if code == lib.TAICHI_AOT_STACK_OVERFLOW:
        return OutOfMemoryError(f"{what}: {STACK_OVERFLOWED}")
    if code == lib.TAICHI_AOT_CUDA_CAPTURE_REFUSED:
        return NotSupportedError(
            f"{what}: its autodiff stacks are checked after each launch, a wait no CUDA graph capture may hold; "
            "launch it outside the capture")
    if code == lib.TAICHI_AOT_CUDA_RESULT_CAPTURE_REFUSED:
        return NotSupportedError(
            f"{what}: it returns a value, which is read back after each launch, a wait no CUDA graph capture may "
            "hold; launch it outside the capture")
    if code == lib.TAICHI_AOT_REFUSED:  # a launch made elsewhere before the runtime had a launcher's record
        return InvalidStateError(f"{what}: launched outside its runtime's thread and stream before taichi_aot's own "
                                 "CUDA launcher had a record for it")
    from .libtaichi import launch_error as library_error  # the driver's codes, and the library's own

    return library_error(code, what)


def _alloc(cu: Any, nbytes: int, what: str) -> int:
    ptr = ctypes.c_uint64()
    code = cu.cuMemAlloc_v2(ctypes.byref(ptr), nbytes)
    if code != 0:
        raise OutOfMemoryError(f"{what}: {nbytes} bytes of device memory (the CUDA driver returned error "
                               f"{_cuda.error_name(code)})")
    return int(ptr.value)


def _free(cu: Any, pointers: tuple[int, ...]) -> None:
    with _cuda.relaxed_capture():  # given back while another library may capture a CUDA graph
        for ptr in pointers:
            if ptr:
                cu.cuMemFree_v2(ptr)


class Launcher:
    """One CUDA runtime's own-launcher state: the C runtime record and a stand-in per stream.

    CUDA graphs: a launch captured into a graph (``torch.cuda.graph``, ``mode="reduce-overhead"``, XLA's command
    buffers) leaves the stand-in's address in the graph, which may be replayed for the process's life. Such a
    stand-in is *kept* (never given back, nor the modules' code unloaded, even once the runtime closes), and a
    stream first seen while it is being captured gets the spare stand-in made ahead (nothing is allocated, copied
    or waited for while a stream captures)."""

    def __init__(self, layout: dict[str, int], device: int):
        cu = _cuda.driver()
        self.layout = layout
        self.device = device  # the CUDA device (ordinal) whose primary context its launches run in
        self.c = ffi.new("TaichiAotCudaRuntime *")
        self.c.driver = _cuda.table()
        self._context = _cuda.retain_primary(cu, device)
        self.c.context = ffi.cast("void *", self._context.value)
        # stream -> (runtime, temporaries, rand states), the most recently selected last
        self._standins: dict[int, tuple[int, int, int]] = {}
        self._rand_threads = 0
        self._key = 0  # the stream selected
        self._spare: tuple[int, int, int] | None = None  # for a stream first selected while it captures
        self._kept: set[int] = set()  # the streams whose stand-ins a CUDA graph holds
        self.captured = False  # a launch was captured: its code and stand-ins stay for the process

    def _standin(self, cu: Any) -> tuple[int, int, int]:
        layout = self.layout
        made: list[int] = []
        try:
            made.append(_alloc(cu, layout["size"] + RESULT_BYTES, "a CUDA runtime stand-in"))
            made.append(_alloc(cu, TEMPORARIES_BYTES, "a CUDA runtime stand-in's temporaries"))
            runtime, temporaries = made
            image = np.zeros(layout["size"] + RESULT_BYTES, np.uint8)
            image[layout["temporaries"]:layout["temporaries"] + 8] = np.frombuffer(
                np.uint64(temporaries).tobytes(), np.uint8)
            _cuda_host.htod(runtime, image, 0)
            _cuda_host.htod(temporaries, np.zeros(TEMPORARIES_BYTES, np.uint8), 0)
            standin = (runtime, temporaries, 0)
            return self._rand(cu, standin, self._rand_threads) if self._rand_threads else standin
        except BaseException:
            for ptr in made:
                cu.cuMemFree_v2(ptr)
            raise

    def note_captured(self) -> None:
        """Keep the selected stream's stand-in where a launch on it was captured since (the C launch sets
        ``captured``): a graph holds its address."""
        if self.c.captured:
            self.c.captured = 0
            self._kept.add(self._key)
            self.captured = True

    def select(self, stream: int | None) -> None:
        """Launch on ``stream`` (None: the legacy default stream) from now on, with that stream's stand-in (made
        for it, or the spare where the stream is being captured; the least recently selected of more than STANDINS
        not kept for a graph is given back, the device synchronized first)."""
        self.note_captured()
        key = stream or 0
        capturing = _cuda.capturing(stream)
        with _cuda.primary_context(self.device) as cu:
            if key not in self._standins:
                if not capturing:
                    self._standins[key] = self._standin(cu)
                elif self._spare is not None:
                    self._standins[key], self._spare = self._spare, None
                else:
                    raise InvalidStateError(
                        "a second new CUDA stream is being captured before any launch outside a capture: select "
                        "it (rt.set_cuda_stream, or a warm-up call of the kernel on it) before its capture begins")
            self._standins[key] = self._standins.pop(key)  # most recent last
            if capturing:  # its launches go into a graph: its stand-in is kept
                self._kept.add(key)
                self.captured = True
            else:
                while len(self._standins) - sum(k in self._standins for k in (*_SIDE, *self._kept)) > STANDINS:
                    cu.cuCtxSynchronize()
                    old = next(k for k in self._standins if k not in _SIDE and k not in self._kept)
                    _free(cu, self._standins.pop(old))
                if self._spare is None:
                    self._spare = self._standin(cu)
        self._key = key
        self.c.stream = ffi.cast("void *", key)
        self.c.standin = self._standins[key][0]

    def _rand(self, cu: Any, standin: tuple[int, int, int], threads: int) -> tuple[int, int, int]:
        """``standin`` with random states for ``threads`` threads (its old ones given back)."""
        runtime, temporaries, old = standin
        size = self.layout["rand_state_size"]
        states = _alloc(cu, threads * size, "random states")
        try:
            i = np.arange(threads, dtype=np.uint64)
            image = np.zeros((threads, size // 4), np.uint32)  # x, y, z, w, lock: as Taichi seeds them (seed 0)
            image[:, 0] = (np.uint64(123456789) * i * np.uint64(1000000007)) & np.uint64(0xFFFFFFFF)
            image[:, 1:4] = (362436069, 521288629, 88675123)
            _cuda_host.htod(states, image, 0)
            if old:  # queued kernels, on any stream, may still use the states replaced
                cu.cuCtxSynchronize()
            _cuda_host.htod(runtime + self.layout["rand_states"], np.array([states], np.uint64), 0)
            # both copies done before a kernel on any stream reads them; a new stand-in's states need no wait for the
            # whole context, which a twin made inside XLA's command buffer capture could not make
            cu.cuStreamSynchronize(None)
        except BaseException:
            cu.cuMemFree_v2(states)
            raise
        if old:
            cu.cuMemFree_v2(old)
        return runtime, temporaries, states

    def xla_standin(self) -> int:
        """The stand-in of the kernels XLA launches on its own stream (taichi_aot.jax: one stream at a time, its
        compute stream), made once and kept until :meth:`free`; random states as the others'."""
        return self.side_standin(XLA_STANDIN)

    def xla_record(self) -> Any:
        """The runtime record for launches from XLA's handler (``backends.RuntimeBackends.xla_record``): a copy of
        the launcher's, with XLA's stand-in."""
        record = ffi.new("TaichiAotCudaRuntime *", self.c[0])
        record.standin = self.xla_standin()
        return record

    def keep_for_graphs(self) -> None:
        """Launches may be captured out of the runtime's sight (XLA's command buffers): code and stand-ins stay."""
        self.captured = True

    def side_standin(self, key: int) -> int:
        """The stand-in of launches made outside the runtime's thread and streams (``key``: XLA_STANDIN, or
        AUTOGRAD_STANDIN: one stream at a time each), made once and kept until :meth:`free`."""
        with _cuda.primary_context(self.device) as cu:
            if key not in self._standins:
                self._standins = {key: self._standin(cu), **self._standins}
        return self._standins[key][0]

    def need_rand(self, threads: int) -> None:
        """Random states for ``threads`` threads on every stand-in (made once, as Taichi makes them)."""
        if threads <= self._rand_threads:
            return
        self._rand_threads = threads
        with _cuda.primary_context(self.device) as cu:
            for key, standin in self._standins.items():  # graphs read the states through the stand-in: kept ones too
                self._standins[key] = self._rand(cu, standin, threads)
            if self._spare is not None:
                self._spare = self._rand(cu, self._spare, threads)

    def free(self) -> None:
        """Give the stand-ins' memory back (the runtime is closed: nothing runs on them any more), but those a
        CUDA graph holds (XLA's too, where a launch was captured): graphs outlive the runtime."""
        self.note_captured()
        standins, self._standins = self._standins, {}
        spare, self._spare = self._spare, None
        keep = (*self._kept, *_SIDE) if self.captured else ()
        with _cuda.primary_context(self.device) as cu:
            cu.cuCtxSynchronize()  # queued kernels may still read the stand-ins
            for key, standin in standins.items():
                if key not in keep:
                    _free(cu, standin)
            if spare is not None:
                _free(cu, spare)


class Kernels:
    """A module's kernels on the own launcher: their loaded PTX and C plans; ``refused`` says why the others are
    not."""

    def __init__(self, launcher: Launcher, folder: str, manifest: dict[str, Any], code: LlvmCode, where: str):
        self.plans: dict[str, Any] = {}
        self.results: dict[str, Results] = {}  # the kernels that return values: their results' reader
        self.refused: dict[str, str] = dict(manifest["refused"])
        self._modules: list[int] = []
        self._keep: list[Any] = []
        self._ranges: dict[str, Any] = {}  # the NVTX ranges of launches made elsewhere (reverse kernels)
        self._launcher: Launcher | None = launcher
        cu = _cuda.driver()
        try:
            with _cuda.primary_context(launcher.device):
                for name, k in manifest["kernels"].items():
                    reason = self._add(cu, launcher, folder, code, name, k, where)
                    if reason is not None:
                        entry = code.kernels.get(name)
                        returns = entry is not None and gate.returns(entry)
                        self.refused[name] = f"{reason}; {gate.VALUE_LOST}" if returns else reason
        except BaseException:
            self.unload()
            raise

    @classmethod
    def none(cls, refused: dict[str, str]) -> Kernels:
        """No kernel on the own launcher, each with the reason why."""
        self = cls.__new__(cls)
        self.plans, self.refused, self._modules, self._keep, self._ranges = {}, dict(refused), [], [], {}
        self.results = {}
        self._launcher = None
        return self

    def _add(self, cu: Any, launcher: Launcher, folder: str, llvm: LlvmCode, name: str, k: dict, where: str
             ) -> str | None:
        """Load kernel ``name``'s PTX and make its C plan; the reason where it stays on libtaichi."""
        read = _read(folder, llvm, name, k, where)
        if isinstance(read, str):
            return read
        ptx, plan, rand = read
        module = ctypes.c_void_p()
        code = cu.cuModuleLoadData(ctypes.byref(module), ptx + b"\0")
        if code != 0:
            return f"the CUDA driver could not load its PTX ({_cuda.error_name(code)})"
        self._modules.append(int(module.value or 0))
        tasks = _tasks(cu, module, plan["tasks"])
        if isinstance(tasks, str):
            return tasks
        entry = llvm.kernels[name]
        reverse = is_reverse(entry)  # a reverse kernel takes its gradients after its arguments
        if reverse and not gradients_match(plan["args"], entry):
            return "its layout's gradient pointers are not its arguments that need gradients"
        args, grads = c_args(plan["args"], reverse)
        c = ffi.new("TaichiAotCudaKernel *")
        c.runtime, c.tasks, c.args = launcher.c, tasks, args
        c.task_count, c.arg_count, c.args_size = len(plan["tasks"]), len(plan["args"]), plan["args_size"]
        c.grad_count = grads
        self._keep += [tasks, args]
        if rand:
            launcher.need_rand(max(t["grid"] * t["block"] for t in plan["tasks"]))
        if reverse:  # where its autodiff stacks are bounded: the flag an overflow sets, read after a launch
            c.overflow = _overflow_flag(cu, module)
        if "results" in plan:  # read back after each launch into host memory the plan holds
            self.results[name] = Results(plan["results"], plan["result_size"])
            c.result_at, c.result_size, c.result = launcher.layout["size"], plan["result_size"], \
                self.results[name].host
        self.plans[name] = c
        return None

    def launch_elsewhere(self, runtime: Any, name: str, args: Any, count: int, stream: int | None) -> None:
        """Launch kernel ``name`` with ``count`` TiArguments ``args`` (every array a device pointer: libtaichi is not
        called) from another thread than its runtime's (``runtime``: the TiRuntime), on ``stream``, with a stand-in
        of its own, through the dispatcher (``taichi_aot_launch_elsewhere``): torch's autograd runs CUDA backward on
        a thread of its own while the runtime's thread waits for it."""
        launcher = self._launcher
        assert launcher is not None  # a kernel with a plan has its launcher
        record = ffi.new("TaichiAotCudaRuntime *", launcher.c[0])
        record.standin = launcher.side_standin(AUTOGRAD_STANDIN)
        launch = ffi.new("TaichiAotLaunch *")
        launch.runtime, launch.kind, launch.handle = runtime, lib.TAICHI_AOT_KIND_CUDA_KERNEL, self.plans[name]
        launch.flags, launch.name = OWN_FLAGS, self._range(name)
        launch.arg_count, launch.args = count, args
        where = ffi.new("TaichiAotElsewhere *")
        where.stream, where.own = ffi.cast("void *", stream or 0), record
        code = lib.taichi_aot_launch_elsewhere(launch, where)
        if record.captured:  # into a CUDA graph (torch's backward under capture): the stand-in stays
            launcher.captured = True
        if code != 0:
            raise launch_error(code, f"kernel {name!r}")

    def _range(self, name: str) -> Any:
        """Kernel ``name``'s NVTX range (_nvtx.py), made once."""
        made = self._ranges.get(name)
        if made is None:
            made = self._ranges[name] = range_name(name)
        return made

    def graph(self, info: Any) -> Any:
        """A TaichiAotCudaGraph for compute graph ``info`` (a GraphInfo) where every kernel it dispatches is on the
        own launcher, with each dispatch's arguments mapped to the graph's; else None (libtaichi launches it)."""
        kernels: list[Any] = [self.plans.get(k) for k in info.dispatches]
        if any(k is None or k.grad_count or k.arg_count > GRAPH_ARGS for k in kernels):
            return None
        maps = dispatch_maps(info, [k.arg_count for k in kernels])
        if maps is None:
            return None
        c = ffi.new("TaichiAotCudaGraph *")
        listed = ffi.new("TaichiAotCudaKernel *[]", kernels)
        mapped = ffi.new("uint32_t[]", maps or [0])
        named, names = dispatch_names(info)  # a profile's rows
        c.dispatch_count, c.kernels, c.maps, c.names = len(kernels), listed, mapped, named
        self._keep += [listed, mapped, named, *names]
        return c

    def unload(self) -> None:
        """Unload the modules' code, unless a launch of the runtime was captured into a CUDA graph, which may run
        it again (:class:`Launcher`)."""
        launcher = self._launcher
        if launcher is not None:
            launcher.note_captured()
        modules, self._modules = self._modules, []
        if not modules or launcher is None or launcher.captured:  # modules are loaded through a launcher only
            return
        with _cuda.primary_context(launcher.device) as cu:
            cu.cuCtxSynchronize()  # queued kernels may still run the modules' code
            for m in modules:
                cu.cuModuleUnload(ctypes.c_void_p(m))


class CudaBackend:
    """The own CUDA launcher as a module's backend (``choice.Backend``): the kernels and graphs its PTX covers."""

    name = CUDA

    def __init__(self, kernels: Kernels):
        self.kernels = kernels

    def kernel(self, name: str, info: KernelInfo, library: Callable[[], Any]) -> tuple[Choice, list[ArgInfo]] | None:
        plan = self.kernels.plans.get(name)
        if plan is None:
            return None
        if info.reverse:  # libtaichi, which cannot run it, gives it no handle
            return own_choice(CUDA, lib.TAICHI_AOT_KIND_CUDA_KERNEL, plan, None), gradient_signature(info.args)
        results = self.kernels.results.get(name)
        return own_choice(CUDA, lib.TAICHI_AOT_KIND_CUDA_KERNEL, plan, library(), not plan.overflow and results is None,
                          results), info.args

    def graph(self, info: GraphInfo, library: Any) -> Choice | None:
        plan = self.kernels.graph(info)
        return None if plan is None else own_choice(CUDA, lib.TAICHI_AOT_KIND_CUDA_GRAPH, plan, library)

    def takes(self, name: str, info: KernelInfo | None) -> bool:
        return name in self.kernels.plans

    def why_not(self, name: str) -> str | None:
        return self.kernels.refused.get(name)

    def reverse(self, module: Any, name: str, grad: KernelInfo, threads: int | None) -> GradCall:
        """Kernel ``name``'s reverse-mode kernel ``grad`` as its primal's ``grad`` call, where the module's PTX has
        it; NotSupportedError saying why not (libtaichi cannot run it either)."""
        own = self.kernels
        if grad.name not in own.plans:
            why = own.refused.get(grad.name)
            raise NotSupportedError(
                f"kernel {name!r}: its reverse-mode kernel runs on taichi_aot's own CUDA launcher only (libtaichi "
                "cannot hand it its gradients), " + (f"which does not take it: {why}" if why else
                                                     "and the module has no PTX for it (build it where llvmlite "
                                                     "is installed, or run `taichi_aot ptx`)"))
        handle, kernel = module.runtime.handle, module.kernels[grad.name]
        return GradCall(kernel, [a.index for a in grad.args if a.needs_grad], lambda: module.closed,
                        lambda values, count, stream: own.launch_elsewhere(handle, grad.name, values, count, stream))

    def unload(self) -> None:
        self.kernels.unload()


def _entry(task: str) -> str:
    """A task's PTX entry (the PTX step's name for it: ``ptx.compile`` is imported when a module with PTX loads)."""
    from ..ptx.compile import entry

    return entry(task)


def _tasks(cu: Any, module: Any, tasks: list[dict]) -> Any:
    """The C tasks of a plan's ``tasks`` (each one's function in the loaded ``module``, grid, block, and whether it
    is a grid-stride range_for), or why one has no entry in the PTX."""
    out = ffi.new("TaichiAotCudaTask[]", len(tasks))
    for t, task in zip(out, tasks):
        function = ctypes.c_void_p()
        code = cu.cuModuleGetFunction(ctypes.byref(function), module, _entry(task["name"]).encode())
        if code != 0:
            return f"its PTX has no entry for task {task['name']} ({_cuda.error_name(code)})"
        t.function = ffi.cast("void *", function.value)
        t.grid, t.block, t.trim = task["grid"], task["block"], int(task["name"].endswith("_range_for"))
    return out


def _overflow_flag(cu: Any, module: Any) -> int:
    """The device address of the autodiff stacks' overflow flag in the loaded ``module``, 0 where it has none."""
    flag, size = ctypes.c_uint64(), ctypes.c_size_t()
    found = cu.cuModuleGetGlobal_v2(ctypes.byref(flag), ctypes.byref(size), module, STACK_OVERFLOW.encode())
    return int(flag.value) if found == 0 and size.value == 4 else 0


def _read(folder: str, code: LlvmCode, name: str, k: dict, where: str) -> str | tuple[bytes, dict[str, Any], bool]:
    """Kernel ``name``'s PTX (in ``folder``), checked plan and whether it uses random numbers, or why it stays on
    libtaichi: the manifest's digest and verdict are not taken on trust: the module's IR (``code``, as metadata/ read
    it) is gated again and its metadata laid out again."""
    entry, ir = code.kernels.get(name), code.kernel(name)  # the IR as metadata/ read it
    if entry is None:
        return "the metadata has no entry for it"
    if ir is None:
        return "the module has no IR for it"
    ptx = kernel_ptx(folder, k)
    if isinstance(ptx, str):
        return ptx
    if hashlib.sha256(code.ir[name]).hexdigest() != k["ir_sha256"]:
        return "its PTX was made from other IR than the module's (run `taichi_aot ptx` again)"
    verdict = gate.read_ir(ir)
    if verdict.reason is not None:
        return verdict.reason
    try:
        plan = check(from_entry(entry, ir), f"{where}: kernel {name!r}")
    except (CorruptedDataError, KeyError, TypeError, ValueError, AttributeError) as e:
        return f"its metadata cannot be laid out: {type(e).__name__}: {e}"
    if verdict.rand and max(t["grid"] * t["block"] for t in plan["tasks"]) > MAX_RAND_THREADS:
        return f"it uses random numbers on more than {MAX_RAND_THREADS} threads"
    return _ptx_fits(ptx, plan) or (ptx, plan, verdict.rand)


_ENTRY = re.compile(rb"\.entry (\w+)\(\s*\.param \.align \d+ \.b8 \w+\[(\d+)\],\s*\.param \.u64[^,)]*\)")


def _ptx_fits(ptx: bytes, plan: dict[str, Any]) -> str | None:
    """Why the PTX's entries do not take what the plan launches them with (cuLaunchKernel reads as many parameter
    bytes as an entry declares), or None."""
    entries = {m.group(1).decode(): int(m.group(2)) for m in _ENTRY.finditer(ptx)}
    size = max(plan["args_size"], 8)
    for task in plan["tasks"]:
        if entries.get(_entry(task["name"])) != size:
            return f"its PTX has no entry {_entry(task['name'])} taking {size} argument bytes and the runtime"
    return None


def _kernels_in(state: Any, runtime: Any, folder: str, code: LlvmCode, where: str) -> Kernels | None:
    """The own launcher's kernels of a CUDA module (``code``: its kernels' records and IR) whose PTX is in ``folder``
    (None where it has none); the caller asked :func:`choice` for the own launcher. ``state`` is the runtime's
    backends record (``backends.RuntimeBackends``): its ``state.get(CUDA)`` is the runtime's :class:`Launcher`, made
    here with its first module with PTX."""
    manifest = manifest_in(folder, where)
    if manifest is None or not manifest["kernels"]:
        return None
    from ..ptx.compile import VERSION

    if manifest.get("compile") != VERSION:  # an older compile step's PTX: every kernel stays on libtaichi
        why = "its PTX was made by another version of taichi_aot's PTX step (run `taichi_aot ptx` again)"
        return Kernels.none({**manifest["refused"], **{name: why for name in manifest["kernels"]}})
    launcher = state.get(CUDA)
    if launcher is None:
        launcher = state[CUDA] = Launcher(manifest["runtime"], runtime.device_index)
        runtime.foreign.unmaps[id(launcher)] = launcher.free  # before the runtime goes, however it goes
        launcher.select(runtime.cuda_stream)
    elif launcher.layout != manifest["runtime"]:
        raise CorruptedDataError(f"{where}: {MANIFEST} lays Taichi's runtime out unlike the modules loaded before")
    return Kernels(launcher, folder, manifest, code, where)


def returns_refused(why: str | None) -> str:
    """The end of "kernel 'k' returns values, which ..." on CUDA where no backend gives them (``why``: this launcher's
    reason for not taking the kernel, where it was loaded)."""
    return ("only taichi_aot's own CUDA launcher gives (libtaichi_c_api 1.7.4 gives no kernel result), "
            + (f"and it does not take it: {why}" if why else
               "which needs the module's PTX (build it where llvmlite is installed, or run `taichi_aot ptx`) "
               "and the own launcher (not launcher='taichi')"))


def reverse_refused(name: str) -> str:
    """Why kernel ``name``'s reverse-mode kernel does not run where no backend made it: this launcher did not load the
    module (launcher="taichi", or no PTX)."""
    return (f"kernel {name!r}: its reverse-mode kernel runs on taichi_aot's own CUDA launcher only (libtaichi cannot "
            "hand it its gradients), and the module has no PTX for it (build it where llvmlite is installed, or run "
            "`taichi_aot ptx`), or was loaded with launcher='taichi'")


def unowned_refused(why: str | None) -> str:
    """Why a kernel no backend took cannot run where libtaichi has no runtime beside this launcher's (the own CUDA
    runtime of a device but 0) or was not loaded: this launcher does not take it (``why``, its reason)."""
    return f"taichi_aot's own CUDA launcher does not take it ({why or 'no PTX'})"


def graph_refused(kernels: str) -> str:
    """Why a graph cannot run where libtaichi has no runtime beside this launcher's: one of ``kernels`` is not on it."""
    return f"one of its kernels is not on taichi_aot's own CUDA launcher ({kernels}; module.launchers() says why)"


def load(runtime: Any, state: Any, what: str, folder: str | None, choice: str, meta: Any) -> CudaBackend | None:
    """The own CUDA launcher as the backend of a module of ``folder`` just loaded in ``runtime`` (its registration's
    ``load``; asked only where ``choice`` is "auto": it is registered choosable): its kernels the module has PTX for
    (a module saved without PTX gets it at its first load where llvmlite is installed, kept in the cache); None where
    the module has none to give."""
    if folder is None or meta.llvm is None:
        return None
    from ..ptx import ptx_folder

    source, why = ptx_folder(folder, meta.llvm)  # the module's PTX, else made at its first load (of its code) and kept
    own = _kernels_in(state, runtime, source, meta.llvm, what) if source is not None else \
        Kernels.none(dict.fromkeys(meta.llvm.kernels, why))
    return CudaBackend(own) if own is not None else None
