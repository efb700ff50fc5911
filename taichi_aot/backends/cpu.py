"""x64 kernels launched without libtaichi_c_api (``_csrc/backends/x64.c``): kernels libtaichi's C-API cannot give all
they need, called as any kernel is (:func:`compile_call`): a reverse-mode (autodiff) kernel, its gradients after its
arguments (libtaichi's ``TiNdArray`` has no field for the gradient pointer its argument struct holds beside each
ndarray's data pointer: a launch crashed); a kernel that returns values, into a result buffer of ours; f64, i64,
u64, u32, i8 and u8 scalars. Each is laid into the argument struct by the CUDA plan's layout, from the arguments
every launch packs (``_arguments.py``): this room takes addresses, never another library's arrays.

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

import functools
import re
import struct
import threading
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .._arguments import GradCall, c_api_passes, gradient_signature
from .._native import ffi, lib
from ..errors import InvalidArgumentError, NotSupportedError, OutOfMemoryError
from ..metadata import llvm_ir
from ..metadata.llvm import is_reverse
from .choice import X64, Choice, own_choice

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata import ArgInfo
    from ..metadata.model import GraphInfo, KernelInfo, LlvmCode

#: LLVMRuntime's fields the stand-in fills: the thread pool (any pointer), parallel_for, the temporaries.
_THREAD_POOL, _PARALLEL_FOR, _TEMPORARIES = 9, 10, 14
TEMPORARIES_BYTES = 64 << 10
#: The C library's math functions the IR may call (Taichi's ti.sin, ti.exp, ...): found in this process.
_LIBM = re.compile(r"(?:a?(?:sin|cos|tan)h?|atan2|exp2?|expm1|log(?:2|10|1p)?|pow|sqrt|cbrt|fabs|floor|ceil|round|"
                   r"trunc|fmod|fmin|fmax|hypot|erfc?|[lt]gamma)f?")
_lock = threading.Lock()


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


def _gate(ir: llvm_ir.IrKernel, returns: bool = False) -> str | None:
    """Why the stand-in cannot run this IR (``returns``: the kernel returns values, into the result buffer the
    launch hands it), or None."""
    other = sorted(ir.runtime_fields - {_THREAD_POOL, _PARALLEL_FOR, _TEMPORARIES})
    if other:
        return f"it uses Taichi's runtime beyond its temporaries and parallel loops (LLVMRuntime fields {other})"
    if ir.casts_runtime:
        return "it reads Taichi's runtime through a cast pointer"
    # its arguments, runtime and thread id: our context's; the result buffer where it returns values
    if sorted(ir.context_fields - ({0, 1, 2, 3} if returns else {0, 1, 2})):
        return "it returns values (its RuntimeContext's result buffer)"
    calls = sorted(n for n in ir.declared if not n.startswith("llvm.") and not _LIBM.fullmatch(n))
    if calls:
        return f"it calls {', '.join(calls)}, which only Taichi's runtime provides"
    return None


class _Code:
    """A kernel's IR compiled for this machine: its tasks' addresses, in order, its stand-in for Taichi's runtime
    (``standin``, with the memory it points to in ``keep``, and the execution engine), and the address of its
    autodiff stacks' overflow flag where its IR has checked accesses (0: none)."""

    def __init__(self, tasks: list[int], standin: np.ndarray, keep: list[Any], overflow: int):
        self.tasks = tasks
        self.standin = standin
        self.keep = keep
        self.overflow = overflow


def _compile(code_: LlvmCode, name: str, entry: dict, threads: int | None, returns: bool) -> _Code:
    """Kernel ``name`` of an x64 module (its IR in ``code_``, ``entry`` its metadata record) compiled for this
    machine, its parallel loops on at most ``threads`` threads (None: one, as built); NotSupportedError saying why
    where the stand-in cannot run it."""
    ir = code_.kernel(name, threads)  # its loops on the runtime's threads, as libtaichi's copy of the module has them
    if ir is None:
        raise NotSupportedError(f"kernel {name!r}: the module has no IR for it ({name}.ll)")
    why = _gate(ir, returns)
    if why:
        raise NotSupportedError(f"kernel {name!r} cannot run on taichi_aot's x64 launch: {why}")
    tasks = [t["name"] for t in entry["compiled_data"]["tasks"]]
    runtime = ir.runtime_struct
    llvm, machine = _llvm()
    text = llvm_ir.with_target(ir.text, llvm.get_process_triple(), str(machine.target_data))
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
    pool = np.array([max(1, threads or 1)], np.int32)  # backends/x64.c's TaichiAotCpuPool: the threads a loop may use
    if offsets:
        words = {_THREAD_POOL: pool.ctypes.data, _TEMPORARIES: temporaries.ctypes.data,
                 _PARALLEL_FOR: int(ffi.cast("uintptr_t", lib.taichi_aot_cpu_parallel_for_address()))}
        for field, value in words.items():
            struct.pack_into("<Q", standin.data, offsets[field], value)
    overflow = engine.get_global_value_address(llvm_ir.STACK_OVERFLOW) if guarded else 0
    return _Code(addresses, standin, [temporaries, pool, engine], overflow)


class CpuCall:
    """A kernel of an x64 module called as any kernel is (``kernel(x, 0.5)``, the C call, bound launches,
    replays, a reverse kernel as its primal's ``grad``) and launched by the own x64 launch (``_csrc/backends/x64.c``,
    TAICHI_AOT_KIND_CPU_CALL): kernels libtaichi's C-API cannot give all they need. ``c`` is its TaichiAotCpuKernel
    with its argument plan, ``results`` the reader of the values it returns (or None)."""

    def __init__(self, c: Any, results: Any, keep: list[Any]):
        self.c = c
        self.results = results
        self._keep = keep  # the code, stand-in and plan the C kernel points to: alive with it


def compile_call(code_: LlvmCode, name: str, threads: int | None) -> CpuCall:
    """Kernel ``name`` of an x64 module (``code_``: its kernels' records and IR) compiled for this machine as a
    :class:`CpuCall`, its parallel loops on at most ``threads`` threads; NotSupportedError saying why where the
    own x64 launch cannot run it. A reverse-mode kernel takes its gradients after its arguments
    (:func:`~taichi_aot._arguments.gradient_signature`); where its IR's autodiff stacks are checked, an overflow is
    its launch's error (TAICHI_AOT_STACK_OVERFLOW)."""
    from ..metadata.layout import PlanError, arguments
    from .plan import Results, c_args, gradients_match

    entry = code_.kernels[name]
    try:
        plan = arguments(entry, f"kernel {name!r}")
    except PlanError as e:
        raise NotSupportedError(f"kernel {name!r} cannot run on taichi_aot's x64 launch: {e}") from None
    reverse = is_reverse(entry)
    if reverse and not gradients_match(plan["args"], entry):
        raise NotSupportedError(f"kernel {name!r} cannot run on taichi_aot's x64 launch: its layout's gradient "
                                "pointers are not its arguments that need gradients")
    code = _compile(code_, name, entry, threads, "results" in plan)
    results = Results(plan["results"], plan["result_size"]) if "results" in plan else None
    args, grads = c_args(plan["args"], reverse)
    listed = ffi.new("void *[]", [ffi.cast("void *", a) for a in code.tasks])
    c = ffi.new("TaichiAotCpuKernel *", {
        "standin": ffi.cast("void *", code.standin.ctypes.data), "tasks": listed, "count": len(code.tasks),
        "args": args, "arg_count": len(plan["args"]), "args_size": plan["args_size"],
        "result": results.host if results is not None else ffi.NULL, "grad_count": grads,
        "overflow": ffi.cast("int32_t *", code.overflow),
        "result_size": plan["result_size"] if results is not None else 0})
    if results is not None:  # each thread reads its own launch's values (taichi_aot_cpu_values)
        results.source = functools.partial(lib.taichi_aot_cpu_values, c)
    return CpuCall(c, results, [code.standin, listed, args, *code.keep])


class X64Backend:
    """The own x64 launch as a module's backend (``choice.Backend``): the x64 kernels libtaichi's C-API cannot give
    all they need (reverse-mode kernels; kernels that return values or take scalars it cannot pass), compiled at
    their first look-up; the others are libtaichi's."""

    name = X64

    def __init__(self, code: LlvmCode | None, threads: int | None):
        self._code = code  # the module's kernels' records and IR (metadata/, read once): compiled here
        self._threads = threads  # the runtime's CPU threads (None: unknown): parallel loops use as many
        self._calls: dict[str, CpuCall] = {}
        self._refused: dict[str, str] = {}  # why a kernel it wanted is not its own

    @staticmethod
    def wants(info: KernelInfo) -> bool:
        """Whether a kernel needs the own x64 launch: a reverse-mode kernel, or one that returns values or takes
        scalars libtaichi cannot pass."""
        return info.reverse or info.returns or not all(c_api_passes(a) for a in info.args)

    def _call(self, name: str, info: KernelInfo) -> CpuCall | None:
        """Kernel ``name`` compiled (once), or None with the reason noted."""
        made = self._calls.get(name)
        if made is not None or name in self._refused or not self.wants(info):
            return made
        why = "the module has no IR files"
        if self._code is not None and name in self._code.kernels:
            try:
                made = self._calls[name] = compile_call(self._code, name, self._threads)
            except NotSupportedError as e:
                why = str(e)
        if made is None:
            self._refused[name] = why
        return made

    def kernel(self, name: str, info: KernelInfo, library: Callable[[], Any]) -> tuple[Choice, list[ArgInfo]] | None:
        call = self._call(name, info)
        if call is None:
            return None
        if info.reverse:  # libtaichi, which cannot run it, is not asked for it: its gradients follow its arguments
            return own_choice(X64, lib.TAICHI_AOT_KIND_CPU_CALL, call.c, None), gradient_signature(info.args)
        return own_choice(X64, lib.TAICHI_AOT_KIND_CPU_CALL, call.c, library(), results=call.results), info.args

    def graph(self, info: GraphInfo, library: Any) -> Choice | None:
        return None  # a graph's kernels are libtaichi's

    def takes(self, name: str, info: KernelInfo | None) -> bool:
        return info is not None and self._call(name, info) is not None

    def why_not(self, name: str) -> str | None:
        return self._refused.get(name)

    def reverse(self, module: Any, name: str, grad: KernelInfo, threads: int | None) -> GradCall | None:
        """Kernel ``name``'s reverse-mode kernel ``grad`` (compiled from the module's IR with llvmlite) as its
        primal's ``grad`` call, launched as any of its kernels is (the module's ``kernels[grad.name]``);
        NotSupportedError saying why where it cannot run; None where the module has no IR."""
        if self._code is None:
            return None
        if self._call(grad.name, grad) is None:
            why = re.sub(rf"^kernel {re.escape(repr(grad.name))}(?: cannot run on taichi_aot's x64 launch)?: ", "",
                         self._refused[grad.name])
            raise NotSupportedError(f"kernel {name!r}: its reverse-mode kernel {grad.name!r} cannot run on "
                                    f"taichi_aot's x64 launch: {why}")
        kernel = module.kernels[grad.name]
        return GradCall(kernel, [a.index for a in grad.args if a.needs_grad])

    def unload(self) -> None:
        pass  # the compiled code lives as long as the calls that hold it


def returns_refused(why: str | None) -> str:
    """The end of "kernel 'k' returns values, which ..." on x64 where this launch does not take the kernel."""
    return f"only taichi_aot's x64 launch gives, and it cannot take it: {why or ''}"


def reverse_refused(name: str) -> str:
    """Why kernel ``name``'s reverse-mode kernel does not run on x64 where no backend made it: the own x64 launch runs
    it from the module's IR, which this module does not have."""
    return (f"kernel {name!r}: its reverse-mode kernel runs on taichi_aot's own x64 launch, from the module's LLVM IR, "
            "which this module does not give it (libtaichi cannot hand it its gradients)")


def load(runtime: Any, state: Any, what: str, folder: str | None, choice: str, meta: Any) -> X64Backend:
    """The own x64 launch as a backend of a module just loaded in ``runtime`` (its registration's ``load``): for the
    kernels libtaichi cannot give all they need, whatever ``choice``."""
    return X64Backend(meta.llvm, runtime.cpu_threads)


def launch_error(code: int, what: str) -> Exception:
    """The exception for an error code of the own x64 launch (``_csrc/backends/x64.c``; the library's own, for an
    ndarray's memory it could not map, are libtaichi's to read)."""
    if code == lib.TAICHI_AOT_PLAN_BAD_ARGS:
        return InvalidArgumentError(f"{what}: an argument is not of the kind the x64 kernel's argument plan lays "
                                    "out (a gradient: an ndarray of its array's shape)")
    if code == lib.TAICHI_AOT_STACK_OVERFLOW:
        return OutOfMemoryError(f"{what} {llvm_ir.STACK_OVERFLOWED}")
    from .libtaichi import launch_error as library_error

    return library_error(code, what)
