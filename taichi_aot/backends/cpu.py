"""x64 kernels launched without libtaichi_c_api (``_csrc/backends/x64.c``): a module's reverse-mode (autodiff) kernels
(:func:`compile_kernel`), and kernels called as any is whose values or scalars libtaichi's C-API cannot carry
(:func:`compile_call`: a kernel that returns values, into a result buffer of ours; f64, i64, u64, u32, i8 and u8
scalars, laid into the argument struct by the CUDA plan's layout).

A reverse kernel's argument struct holds, for each ndarray that ``needs_grad``, a gradient pointer after its data
pointer; libtaichi's ``TiNdArray`` has no field for it, so libtaichi cannot run the kernel (a launch crashed).
Taichi's x64 IR is self-contained (its helpers inlined), so the kernel's ``NAME.ll`` is compiled here with llvmlite
(the ``ptx`` extra) for this machine, and its tasks run in order on a stand-in for Taichi's ``LLVMRuntime``: the
temporaries a serial task leaves for the next (field 14), and a ``parallel_for`` of ours (field 10) that runs a
range-for task's splits on threads of its own (as many as the kernel was compiled for and the runtime has). A
kernel that touches any other part of the runtime (SNode fields, random states, allocators, print) is refused with
its reason.

Taichi's autodiff stacks (the values a reverse kernel's loops carry, in arrays of a size fixed when it was compiled:
``ad_stack_size``) have no bound check in its code: a loop that pushes more overflows the stack frame (a bus error
in Taichi's own JIT). Each access at a computed offset into such an array is checked here before it is compiled:
one past the end is redirected to the array's start and noted, and the launch raises OutOfMemoryError saying so.
"""

from __future__ import annotations

import os
import re
import struct
import threading
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .._arguments import c_api_passes, describe_value, gradient_map
from .._arrays import array_like, host_array, on_cuda
from .._native import ffi, lib
from .._nvtx import range_name
from ..enums import NUMPY_DTYPES
from ..errors import ArgumentTypeError, CorruptedDataError, InvalidArgumentError, NotSupportedError, OutOfMemoryError
from ..metadata import llvm_ir
from ..metadata.model import _data_type
from .choice import X64, Choice, own_choice

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata import ArgInfo
    from ..metadata.model import GraphInfo, KernelInfo

#: LLVMRuntime's fields the stand-in fills: the thread pool (any pointer), parallel_for, the temporaries.
_THREAD_POOL, _PARALLEL_FOR, _TEMPORARIES = 9, 10, 14
TEMPORARIES_BYTES = 64 << 10
#: The C library's math functions the IR may call (Taichi's ti.sin, ti.exp, ...): found in this process.
_LIBM = re.compile(r"(?:a?(?:sin|cos|tan)h?|atan2|exp2?|expm1|log(?:2|10|1p)?|pow|sqrt|cbrt|fabs|floor|ceil|round|"
                   r"trunc|fmod|fmin|fmax|hypot|erfc?|[lt]gamma)f?")
_lock = threading.Lock()


class CpuKernel:
    """One reverse kernel compiled for this machine: its tasks' addresses and how its arguments are laid out."""

    def __init__(self, name: str, tasks: list[int], slots: list[tuple], args_size: int, standin: np.ndarray,
                 keep: list[Any]):
        self.name = name
        listed = ffi.new("void *[]", [ffi.cast("void *", a) for a in tasks])  # the tasks, in order
        self.slots = slots  # per argument: ("ndarray", shape offsets, data, grad or None, dtype, ndim, elem) or
        #                     ("scalar", offset, numpy dtype)
        self.args_size = args_size
        self.overflow: Any = None  # int32_t *: the flag of its checked stack accesses, where it has any
        # the launch the dispatcher makes (launch.c, TAICHI_AOT_KIND_CPU_KERNEL): its tasks on the stand-in
        self._kernel = ffi.new("TaichiAotCpuKernel *", {"standin": ffi.cast("void *", standin.ctypes.data),
                                                        "tasks": listed, "count": len(tasks)})
        self._range = range_name(name)  # its NVTX range (_nvtx.py)
        self._launch_c = ffi.new("TaichiAotLaunch *", {"kind": lib.TAICHI_AOT_KIND_CPU_KERNEL, "handle": self._kernel,
                                                       "flags": lib.TAICHI_AOT_LAUNCH_CODES, "name": self._range})
        self._where = ffi.new("TaichiAotElsewhere *")
        self._keep = [standin, listed, *keep]  # the stand-in, its temporaries, the execution engine: alive with it

    def call(self, values: list[Any], grads: Any, names: list[str | None], what: list[str], kernel: str,
             before: Any) -> None:
        """The primal's ``grad(*values, grads=grads)``: every value and gradient checked (``what`` names each
        argument, ``kernel`` the kernel), ``before()`` called, then the launch."""
        arrays = [i for i, slot in enumerate(self.slots) if slot[0] == "ndarray"]
        needing = [i for i in arrays if self.slots[i][3] is not None]
        for i, slot in enumerate(self.slots):
            values[i] = _host_array(values[i], slot, what[i], writable=False) if i in arrays \
                else _host_scalar(values[i], slot[2], what[i])
        checked = {i: _host_array(value, self.slots[i], f"{kernel}: the gradient of argument {i}", writable=True,
                                  like=values[i])
                   for i, value in gradient_map(grads, needing, names, f"{kernel}: grads").items()}
        before()
        self.launch(values, checked)

    def launch(self, values: list[Any], grads: dict[int, np.ndarray]) -> None:
        """Run the kernel (see :meth:`_launch`); OutOfMemoryError where it overflowed an autodiff stack."""
        self._launch(values, grads)
        if self.overflow is not None and self.overflow[0]:
            self.overflow[0] = 0
            raise OutOfMemoryError(f"kernel {self.name!r} {llvm_ir.STACK_OVERFLOWED}")

    def _launch(self, values: list[Any], grads: dict[int, np.ndarray]) -> None:
        """Run the kernel on ``values`` (numpy arrays and numbers, checked by the caller) with ``grads``."""
        buf = bytearray(max(self.args_size, 8))
        for i, (slot, value) in enumerate(zip(self.slots, values)):
            if slot[0] == "scalar":
                _, offset, dtype = slot
                buf[offset:offset + dtype.itemsize] = np.array(value, dtype).tobytes()
                continue
            _, shape_offsets, data, grad, _, ndim, _ = slot
            for off, extent in zip(shape_offsets, value.shape[:ndim] if ndim else (1,)):
                struct.pack_into("<i", buf, off, extent)
            struct.pack_into("<Q", buf, data, value.ctypes.data)
            if grad is not None:
                struct.pack_into("<Q", buf, grad, grads[i].ctypes.data if i in grads else 0)
        launch = ffi.new("TaichiAotLaunch *", self._launch_c[0])  # one a call: calls may come from several threads
        launch.args = ffi.from_buffer(buf)
        lib.taichi_aot_launch_elsewhere(launch, self._where)


def _host_array(value: Any, slot: tuple, what: str, writable: bool, like: Any = None) -> np.ndarray:
    """``value`` as the C-contiguous numpy array the x64 launch hands its address of (a torch CPU tensor's own
    memory), of the slot's dtype and dimensions (``like``'s shape, for a gradient)."""
    value = _host_memory(value, what)
    _, _, _, _, dtype, ndim, elem = slot
    if value.dtype != dtype or value.ndim != ndim + len(elem) or tuple(value.shape[ndim:]) != elem:
        raise ArgumentTypeError(f"{what}: expected {dtype} with {ndim} dimensions (element shape {elem}), got "
                                f"{describe_value(value)}")
    if like is not None and value.shape != like.shape:
        raise InvalidArgumentError(f"{what}: shape {value.shape}, its array's is {like.shape}")
    if not value.flags.c_contiguous or (writable and not value.flags.writeable):
        raise InvalidArgumentError(f"{what}: the array must be C-contiguous{' and writable' if writable else ''}")
    return value


def _host_memory(value: Any, what: str) -> np.ndarray:
    """``value``'s host memory as a numpy array (a torch CPU tensor's, a JAX CPU array's, any array's with DLPack
    or an array interface): its memory, not a copy; CUDA memory and other values refused."""
    if type(value).__module__.startswith("torch") and hasattr(value, "numpy"):
        if value.device.type != "cpu":
            raise ArgumentTypeError(f"{what}: a tensor on {value.device}; the x64 launch takes CPU memory")
        value = value.detach().numpy()
    elif on_cuda(value, what):
        raise ArgumentTypeError(f"{what}: {describe_value(value)} in CUDA memory; the x64 launch takes host memory")
    elif array_like(value) and (hasattr(value, "__array_interface__") or hasattr(value, "__dlpack__")):
        value = host_array(value, what)
    if not isinstance(value, np.ndarray):
        raise ArgumentTypeError(f"{what}: expected a numpy array, a torch CPU tensor or an array of host memory "
                                f"(DLPack, array interface), got {describe_value(value)}")
    return value


def _host_scalar(value: Any, dtype: np.dtype, what: str) -> Any:
    """A scalar argument of the x64 launch, checked: a number of the argument's kind, within its dtype's range."""
    integer = dtype.kind in "iu"
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, kinds):
        raise ArgumentTypeError(f"{what}: expected {dtype} scalar, got {describe_value(value)}")
    if integer and not np.iinfo(dtype).min <= int(value) <= np.iinfo(dtype).max:
        raise InvalidArgumentError(f"{what}: {value} is out of range for {dtype}")
    if not integer:
        with np.errstate(over="ignore"):
            cast = np.array(float(value) if abs(value) < 1e308 else np.inf, dtype)
        if np.isinf(cast) and np.isfinite(float(value)):
            raise InvalidArgumentError(f"{what}: {describe_value(value)} is out of range for {dtype}")
    return value


def _llvm():
    """llvmlite, and a target machine for this host: a new one each time, since an engine made with it takes it
    over (and destroys it with itself)."""
    try:
        import llvmlite.binding as llvm  # type: ignore[import-untyped]  # llvmlite ships no type information
    except ImportError:
        raise NotSupportedError("the x64 kernels libtaichi cannot launch (reverse-mode kernels, kernels that return "
                                "values or take f64, i64, u64, u32, i8 or u8 scalars) are compiled for this machine "
                                "with llvmlite, which is not installed: pip install 'taichi_aot[ptx]'") from None
    with _lock:
        if not hasattr(_llvm, "ready"):
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _llvm.ready = True  # type: ignore[attr-defined]
    return llvm, llvm.Target.from_default_triple().create_target_machine(opt=2)


def _gate(text: str, returns: bool = False) -> str | None:
    """Why the stand-in cannot run this IR (``returns``: the kernel returns values, into the result buffer the
    launch hands it), or None."""
    other = sorted(llvm_ir.runtime_fields(text) - {_THREAD_POOL, _PARALLEL_FOR, _TEMPORARIES})
    if other:
        return f"it uses Taichi's runtime beyond its temporaries and parallel loops (LLVMRuntime fields {other})"
    if llvm_ir.casts_runtime(text):
        return "it reads Taichi's runtime through a cast pointer"
    # its arguments, runtime and thread id: our context's; the result buffer where it returns values
    if sorted(llvm_ir.context_fields(text) - ({0, 1, 2, 3} if returns else {0, 1, 2})):
        return "it returns values (its RuntimeContext's result buffer)"
    calls = sorted(n for n in llvm_ir.declares(text) if not n.startswith("llvm.") and not _LIBM.fullmatch(n))
    if calls:
        return f"it calls {', '.join(calls)}, which only Taichi's runtime provides"
    return None


def _slots(entry: dict) -> list[tuple]:
    """How each argument is written into the argument struct: the plan's layout (``metadata/layout.py``'s ``arguments``,
    every member found by name, as the CUDA launcher's), with what the host needs beside it (an ndarray's dtype and
    element shape)."""
    from ..metadata.layout import PlanError, arguments

    try:
        plan = arguments(entry, "the kernel's metadata")
    except (PlanError, CorruptedDataError) as e:
        raise NotSupportedError(f"its arguments cannot be laid out here: {e}") from None
    params = {int(ids[0]): param for ids, param in entry["args"]}
    out: list[tuple] = []
    for index, laid in enumerate(plan["args"]):
        param = params[index]
        dtype = _data_type(laid["type"]) if "type" in laid else None
        if laid["kind"] == "ndarray":
            if dtype is None:
                raise NotSupportedError(f"argument {index}: an ndarray of vectors or matrices")
            elem = tuple(param["element_shape"])
            dims = [laid["offset"] + 4 * d for d in range(laid["dims"])]
            out.append(("ndarray", dims, laid["data"], laid.get("grad"), NUMPY_DTYPES[dtype],
                        param["total_dim"] - len(elem), elem))
        elif laid["kind"] == "scalar" and dtype is not None:
            out.append(("scalar", laid["offset"], NUMPY_DTYPES[dtype]))
        else:
            kind = "a vector or matrix" if laid["kind"] == "tensor" else f"a scalar of type {laid.get('type')}"
            raise NotSupportedError(f"argument {index}: {kind}")
    return out


class _Code:
    """A kernel's IR compiled for this machine: its tasks' addresses, in order, its stand-in for Taichi's runtime
    (``standin``, with the memory it points to in ``keep``, and the execution engine), and the address of its
    autodiff stacks' overflow flag where its IR has checked accesses (0: none)."""

    def __init__(self, tasks: list[int], standin: np.ndarray, keep: list[Any], overflow: int):
        self.tasks = tasks
        self.standin = standin
        self.keep = keep
        self.overflow = overflow


def _compile(folder: str, name: str, entry: dict, threads: int, returns: bool) -> _Code:
    """Kernel ``name`` of the x64 module in ``folder`` (``entry``: its metadata record) compiled for this machine,
    its parallel loops on at most ``threads`` threads; NotSupportedError saying why where the stand-in cannot run
    it."""
    path = os.path.join(folder, f"{name}.ll")
    if not os.path.isfile(path):
        raise NotSupportedError(f"kernel {name!r}: the module has no IR for it ({name}.ll)")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    why = _gate(text, returns)
    if why:
        raise NotSupportedError(f"kernel {name!r} cannot run on taichi_aot's x64 launch: {why}")
    tasks = [t["name"] for t in entry["compiled_data"]["tasks"]]
    runtime = llvm_ir.runtime_struct(text)
    llvm, machine = _llvm()
    target = f'target triple = "{llvm.get_process_triple()}"\ntarget datalayout = "{machine.target_data}"'
    text = re.sub(r"^target (?:triple|datalayout) = .*\n", "", text, flags=re.M)
    text = text.replace("\n", "\n" + target + "\n", 1)
    text, guarded = llvm_ir.bound_stacks(text)
    try:
        module = llvm.parse_assembly(text)
        module.verify()
    except RuntimeError as e:
        raise NotSupportedError(f"kernel {name!r}: LLVM could not read its IR: {str(e)[:300]}") from None
    size, offsets = 8, {}
    if runtime is not None:
        data = llvm.create_target_data(str(machine.target_data))
        runtime_type = module.get_struct_type(runtime[1:])
        size = data.get_abi_size(runtime_type)
        offsets = {f: data.get_element_offset(runtime_type, f) for f in (_THREAD_POOL, _PARALLEL_FOR, _TEMPORARIES)}
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    addresses = [engine.get_function_address(t) for t in tasks]
    if not all(addresses):
        raise NotSupportedError(f"kernel {name!r}: its IR defines no task {tasks[addresses.index(0)]}")
    standin = np.zeros(size, np.uint8)
    temporaries = np.zeros(TEMPORARIES_BYTES, np.uint8)
    pool = np.array([max(1, threads)], np.int32)  # backends/x64.c's TaichiAotCpuPool: the threads a loop may use
    if offsets:
        words = {_THREAD_POOL: pool.ctypes.data, _TEMPORARIES: temporaries.ctypes.data,
                 _PARALLEL_FOR: int(ffi.cast("uintptr_t", lib.taichi_aot_cpu_parallel_for_address()))}
        for field, value in words.items():
            struct.pack_into("<Q", standin.data, offsets[field], value)
    overflow = engine.get_global_value_address(llvm_ir.STACK_OVERFLOW) if guarded else 0
    return _Code(addresses, standin, [temporaries, pool, engine], overflow)


def compile_kernel(folder: str, name: str, entry: dict, threads: int) -> CpuKernel:
    """Reverse-mode kernel ``name`` of the x64 module in ``folder`` (``entry``: its metadata record) compiled for
    this machine, its parallel loops on at most ``threads`` threads (the runtime's); NotSupportedError saying why
    where the stand-in cannot run it."""
    slots = _slots(entry)
    code = _compile(folder, name, entry, threads, False)
    kernel = CpuKernel(name, code.tasks, slots, entry["args_size"], code.standin, code.keep)
    if code.overflow:
        kernel.overflow = ffi.cast("int32_t *", code.overflow)
    return kernel


class CpuCall:
    """A kernel of an x64 module called as any kernel is (``kernel(x, 0.5)``, the C call, bound launches,
    replays) and launched by the own x64 launch (``_csrc/backends/x64.c``, TAICHI_AOT_KIND_CPU_CALL): kernels
    libtaichi's C-API cannot give all they need, those that return values (``results``: their reader) and those
    that take f64, i64, u64, u32, i8 or u8 scalars. ``c`` is its TaichiAotCpuKernel with its argument plan."""

    def __init__(self, c: Any, results: Any, keep: list[Any]):
        self.c = c
        self.results = results
        self._keep = keep  # the code, stand-in and plan the C kernel points to: alive with it


def compile_call(folder: str, name: str, entry: dict, threads: int) -> CpuCall:
    """Kernel ``name`` of the x64 module in ``folder`` (``entry``: its metadata record) compiled for this machine as
    a :class:`CpuCall`, its parallel loops on at most ``threads`` threads; NotSupportedError saying why where the
    own x64 launch cannot run it."""
    from ..metadata.layout import PlanError, arguments
    from .plan import Results, c_args

    try:
        plan = arguments(entry, f"kernel {name!r}")
    except PlanError as e:
        raise NotSupportedError(f"kernel {name!r} cannot run on taichi_aot's x64 launch: {e}") from None
    code = _compile(folder, name, entry, threads, "results" in plan)
    results = Results(plan["results"], plan["result_size"]) if "results" in plan else None
    args, _ = c_args(plan["args"], False)
    listed = ffi.new("void *[]", [ffi.cast("void *", a) for a in code.tasks])
    c = ffi.new("TaichiAotCpuKernel *", {
        "standin": ffi.cast("void *", code.standin.ctypes.data), "tasks": listed, "count": len(code.tasks),
        "args": args, "arg_count": len(plan["args"]), "args_size": plan["args_size"],
        "result": results.host if results is not None else ffi.NULL})
    return CpuCall(c, results, [code.standin, listed, args, *code.keep])


class X64Backend:
    """The own x64 launch as a module's backend (``choice.Backend``): the x64 kernels libtaichi's C-API cannot give
    all they need (they return values, or take scalars it cannot pass), compiled at their first look-up; the others
    are libtaichi's."""

    name = X64

    def __init__(self, folder: str | None, threads: int):
        self._folder = folder  # the module's files (a .tcm's unpacked): their IR is compiled
        self._threads = threads  # the runtime's CPU threads: parallel loops use as many
        self._calls: dict[str, CpuCall] = {}
        self._refused: dict[str, str] = {}  # why a kernel it wanted is not its own

    @staticmethod
    def wants(info: KernelInfo) -> bool:
        """Whether a kernel needs the own x64 launch: it returns values or takes scalars libtaichi cannot pass."""
        return not info.reverse and (info.returns or not all(c_api_passes(a) for a in info.args))

    def _call(self, name: str, info: KernelInfo) -> CpuCall | None:
        """Kernel ``name`` compiled (once), or None with the reason noted."""
        made = self._calls.get(name)
        if made is not None or name in self._refused or not self.wants(info):
            return made
        why = "the module has no IR files"
        if self._folder is not None:
            from ..ptx import kernel_entries

            try:
                made = self._calls[name] = compile_call(self._folder, name, kernel_entries(self._folder)[name],
                                                        self._threads)
            except NotSupportedError as e:
                why = str(e)
        if made is None:
            self._refused[name] = why
        return made

    def kernel(self, name: str, info: KernelInfo, library: Callable[[], Any]) -> tuple[Choice, list[ArgInfo]] | None:
        call = self._call(name, info)
        if call is None:
            return None
        return own_choice(X64, lib.TAICHI_AOT_KIND_CPU_CALL, call.c, library(), results=call.results), info.args

    def graph(self, info: GraphInfo, library: Any) -> Choice | None:
        return None  # a graph's kernels are libtaichi's

    def takes(self, name: str, info: KernelInfo | None) -> bool:
        return info is not None and self._call(name, info) is not None

    def why_not(self, name: str) -> str | None:
        return self._refused.get(name)

    def reverse(self, module: Any, name: str, grad: KernelInfo, threads: int | None) -> CpuKernel | None:
        """Kernel ``name``'s reverse-mode kernel ``grad`` compiled from the module's IR (llvmlite) as its primal's
        ``grad`` call (NotSupportedError where it cannot be); None where the module has no IR files here."""
        if self._folder is None:
            return None
        from ..ptx import kernel_entries

        return compile_kernel(self._folder, grad.name, kernel_entries(self._folder)[grad.name], threads or 1)

    def unload(self) -> None:
        pass  # the compiled code lives as long as the calls that hold it


def load(runtime: Any, state: Any, what: str, folder: str | None, choice: str) -> X64Backend:
    """The own x64 launch as a backend of a module just loaded in ``runtime`` (its registration's ``load``): for the
    kernels libtaichi cannot give all they need, whatever ``choice``."""
    return X64Backend(folder, runtime.cpu_threads or 1)


def launch_error(code: int, what: str) -> Exception:
    """The exception for an error code of the own x64 launch (``_csrc/backends/x64.c``; the library's own, for an
    ndarray's memory it could not map, are libtaichi's to read)."""
    if code == lib.TAICHI_AOT_PLAN_BAD_ARGS:
        return InvalidArgumentError(f"{what}: an argument is not of the kind the x64 kernel's argument plan lays "
                                    "out")
    from .libtaichi import launch_error as library_error

    return library_error(code, what)
