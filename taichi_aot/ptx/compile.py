"""PTX from a Taichi 1.7.4 CUDA kernel's LLVM IR, with llvmlite (LLVM with its NVPTX target): no Taichi, no GPU.

The module's ``NAME.ll`` holds each offloaded task (``define void @T(%struct.RuntimeContext* byval ...)``) with
every helper it needs linked in (libdevice's bodies too). Before LLVM reads it:
- a reverse kernel's autodiff stacks are bounded (``llvm_ir.bound_stacks``: Taichi's stack_push, stack_pop and
  stack_top_primal, functions in CUDA's IR, get checked bodies): a push past a stack sets the global
  ``taichi_aot_adstack_overflow``, which the launcher clears before a launch and reads after it;
- the target's data layout is set (Taichi writes none);
- each task gets a kernel of its own, ``T__w(args, runtime)``: the argument bytes by value (they travel in the
  launch's parameters: nothing is copied to the device per launch) and the runtime stand-in's pointer, which
  builds the task's RuntimeContext (its result buffer: the bytes after the stand-in) and calls it; the task
  itself becomes an internal function, inlined;
- Taichi's fast-math settings for CUDA are applied (floating-point contraction on fadd/fsub/fmul/fdiv, division by
  a reciprocal allowed, f32 denormals flushed, libdevice's reflection told so, a square root's reciprocal
  estimated), so the code and values equal libtaichi's (LLVM 15's in Taichi 1.7.4 and llvmlite's may still order a
  sum of products differently);
- atomics made relaxed at the GPU's scope (:func:`_relaxed`), as Taichi's LLVM 15 printed them.
Then LLVM's O3 pipeline (which inlines the helpers and removes their function pointers) and the PTX printer.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from ..errors import TaichiError
from ..metadata import llvm_ir
from . import fold
from .gate import RUNTIME_RAND_STATES, RUNTIME_TEMPORARIES

#: The GPU architecture and PTX ISA the PTX is written for: old enough for every GPU Taichi 1.7.4's CUDA backend
#: runs on that a current driver supports (Pascal on); the driver compiles it for the GPU at hand once and keeps
#: the result in its cache. ISA 6.2: Taichi's IR holds inline assembly of it (``activemask.b32``, in a reduction's
#: warp step), which the driver refuses in PTX that declares 6.0.
TARGET = "sm_60"
PTX_FEATURES = "+ptx62"
TRIPLE = "nvptx64-nvidia-cuda"
#: Every function's attributes: f32 denormals flushed, and a square root's reciprocal (f32 and f64) estimated where
#: fast math allows (``x / (a * sqrt(a))`` becomes ``x * rsqrt.approx(a * a * a)``, as Taichi's LLVM 15 makes it under
#: UnsafeFPMath; a square root alone stays ``sqrt.rn``, as Taichi's does).
_FTZ = '"denormal-fp-math-f32"="preserve-sign,preserve-sign" "reciprocal-estimates"="sqrt:0"'
#: libdevice's reflection told that f32 denormals are flushed (a module flag).
_REFLECT_FTZ = 'i32 4, !"nvvm-reflect-ftz", i32 1'
_PTX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a task name PTX holds as it is (a '$' or '.' would not do)


#: The version of this compile step, recorded in the manifest: PTX made by another is not used (made again at the
#: module's load where llvmlite is, or by ``taichi_aot ptx``). 2: f32 division approximate, as Taichi's. 3: pure
#: serial tasks folded into the tasks after them (:mod:`.fold`); PTX ISA 6.2. 4: divisions may use a reciprocal, as
#: Taichi's UnsafeFPMath lets them. 5: an f32 square root's reciprocal estimated (``rsqrt.approx``) where fast math
#: allows, as Taichi's (an n-body force loop ran 1.91x Taichi's own with ``sqrt.rn`` and a division). 6: atomics
#: relaxed at the GPU's scope, as Taichi's LLVM 15 printed them (a ``membar.sys`` before each system-scope atomic in
#: LLVM 22: an i8 sum's compare-and-swap loop ran 1.74x Taichi's); an f64 square root's reciprocal estimated too
#: (``rsqrt.approx.f64``, as Taichi's PTX has it). 7: fast math set again after the optimiser, on the instructions it
#: wrote (an SPH force loop's divisions were ``div.rn``, its products ``mul.rn``: 1.31x Taichi's GPU time).
VERSION = 7


class PtxError(TaichiError):
    """LLVM could not make PTX of a kernel; the message says why (the kernel stays on libtaichi's path)."""


@dataclass(frozen=True)
class Runtime:
    """The stand-in's layout, from the IR's own ``%struct.LLVMRuntime``: its size and two fields' offsets."""

    size: int
    temporaries: int
    rand_states: int
    rand_state_size: int


def _llvm():
    try:
        import llvmlite.binding as llvm  # type: ignore[import-untyped]  # llvmlite ships no type information
    except ImportError:
        raise PtxError("PTX is made with llvmlite: pip install 'taichi_aot[ptx]'") from None
    if not hasattr(_llvm, "machine"):
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        target = llvm.Target.from_triple(TRIPLE)
        _llvm.machine = target.create_target_machine(cpu=TARGET, features=PTX_FEATURES, opt=3)  # type: ignore
    return llvm, _llvm.machine  # type: ignore


def llvm_version() -> str:
    """LLVM's version inside llvmlite ("22.1.0"), or raise PtxError without llvmlite."""
    llvm, _ = _llvm()
    return ".".join(map(str, llvm.llvm_version_info))


def entry(task: str) -> str:
    """The PTX entry of ``task``: ``<task>__w``, or, for a name PTX cannot hold (a kernel named in Cyrillic),
    ``t<its digest>__w``."""
    if _PTX_NAME.fullmatch(task):
        return f"{task}__w"
    return f"t{hashlib.sha256(task.encode()).hexdigest()[:24]}__w"


def _wrapper(task: str, context: str, args_size: int, attrs: int, before: list[str], runtime: str | None,
             reach: int) -> str:
    """The kernel :func:`entry`: argument bytes by value and the runtime stand-in, made into the task's context
    (its result buffer: the bytes after the stand-in's ``runtime``, where a returning kernel writes its values).
    Where pure serial tasks fold into it (``before``, :mod:`.fold`), it runs them first into temporaries of its own
    thread (``reach`` bytes): a stand-in ``runtime`` on the stack whose temporaries are those and whose random
    states are the stream's."""
    size = max(args_size, 8)
    rt = "%runtime"
    local = ""
    if before:
        rt = "%local"
        local = f"""  %local = alloca {runtime}, align 8
  %temps = alloca [{reach} x i8], align 8
  %lt = getelementptr inbounds {runtime}, ptr %local, i32 0, i32 {RUNTIME_TEMPORARIES}
  store ptr %temps, ptr %lt, align 8
  %rs = getelementptr inbounds {runtime}, ptr %runtime, i32 0, i32 {RUNTIME_RAND_STATES}
  %rsv = load ptr, ptr %rs, align 8
  %ls = getelementptr inbounds {runtime}, ptr %local, i32 0, i32 {RUNTIME_RAND_STATES}
  store ptr %rsv, ptr %ls, align 8
"""
    calls = "".join(f"  call void {llvm_ir.ref(t)}(ptr byval({context}) align 8 %ctx)\n" for t in [*before, task])
    result = "null"
    if runtime is not None:  # the result buffer: the bytes after the stand-in's LLVMRuntime
        local += f"  %result = getelementptr inbounds {runtime}, ptr %runtime, i64 1\n"
        result = "%result"
    return f"""
define void @{entry(task)}(ptr byval([{size} x i8]) align 8 %args, ptr %runtime) #{attrs} {{
{local}  %ctx = alloca {context}, align 8
  %a = getelementptr inbounds {context}, ptr %ctx, i32 0, i32 0
  store ptr %args, ptr %a, align 8
  %r = getelementptr inbounds {context}, ptr %ctx, i32 0, i32 1
  store ptr {rt}, ptr %r, align 8
  %t = getelementptr inbounds {context}, ptr %ctx, i32 0, i32 2
  store i32 0, ptr %t, align 8
  %b = getelementptr inbounds {context}, ptr %ctx, i32 0, i32 3
  store ptr {result}, ptr %b, align 8
{calls}  ret void
}}
"""


def _fast_math(op: str, flags: list[str], kind: str) -> list[str]:
    """The flags of one fadd/fsub/fmul/fdiv with Taichi's CUDA fast math: contracted; a division by a reciprocal
    where that helps (Taichi compiles with UnsafeFPMath, whose code generator divides by a repeated divisor's
    reciprocal: ``rcp.rn.f64`` and multiplies), and an f32 division approximate (``div.approx.ftz.f32``). Flags it has
    are kept, none twice."""
    if "fast" not in flags:
        wanted = ["contract", *(["arcp"] if op == "fdiv" else [])]
        wanted += ["afn"] if op == "fdiv" and kind.split()[-1] == "float" else []
        flags += [f for f in wanted if f not in flags]
    return flags


def _relaxed(text: str) -> str:
    """Each atomicrmw or cmpxchg as Taichi's LLVM 15 made it: relaxed, at the GPU's scope (``atom.global.add``, no
    fence). Taichi writes them ``seq_cst`` at the system's scope, which LLVM 15's NVPTX printed with neither ordering
    nor scope, and LLVM 22 honours: ``membar.sys`` before each ``atom.sys`` (in a contended compare-and-swap loop of an
    i8 sum: 1.74x Taichi's time)."""
    return llvm_ir.with_atomics_at(text, "device", "monotonic")


def prepare(ir: llvm_ir.IrKernel | str, tasks: list[str], args_size: int, layout: str) -> str:
    """The IR of one kernel (read, or its text) made ready for the NVPTX pipeline (see the module's comment)."""
    ir = llvm_ir.IrKernel.of(ir)
    found = ir.tasks
    missing = [t for t in tasks if t not in found]
    if missing:
        raise PtxError(f"the IR defines no task {', '.join(missing)}")
    text, _ = llvm_ir.bound_stacks(ir.text)  # a reverse kernel's autodiff stacks: an overflow noted, not written
    text = llvm_ir.with_datalayout(text, TRIPLE, layout)
    text = llvm_ir.with_fp_flags(text, _fast_math)
    text = _relaxed(text)
    text, attrs = llvm_ir.with_attributes(text, _FTZ)
    text = llvm_ir.with_bare_defines_in(text, attrs)  # every function flushes f32 denormals
    pure = fold.folded(ir, tasks)
    runtime = ir.runtime_struct
    if pure and runtime is None:
        pure = {}
    for i, task in enumerate(tasks):
        # the task: an internal function of the wrapper (inlined), no longer a kernel of its own
        text = llvm_ir.made_internal(text, task, attrs + 1)
        if task in pure:  # run by the entries after it: no entry, no kernel annotations of its own
            text = llvm_ir.without_annotations(text, task)
            continue
        text = llvm_ir.with_kernel_mark_on(text, task, entry(task))
        before = [t for t in tasks[:i] if t in pure]
        text += _wrapper(task, found[task], args_size, attrs, before, runtime,
                         max((pure[t] for t in before), default=8))
    text += f"\nattributes #{attrs} = {{ {_FTZ} }}\nattributes #{attrs + 1} = {{ alwaysinline {_FTZ} }}\n"
    return llvm_ir.with_module_flag(text, _REFLECT_FTZ)


def runtime_layout(ir: llvm_ir.IrKernel | str) -> Runtime | None:
    """The stand-in's layout from one kernel's IR (read, or its text), or None where it declares no LLVMRuntime: the
    runtime type its tasks' context points to and the random state that holds, under whatever suffix LLVM gave their
    names."""
    llvm, machine = _llvm()
    layout = str(machine.target_data)
    ir = llvm_ir.IrKernel.of(ir)
    name = ir.runtime_struct
    rand_pointer = llvm_ir.field_type(ir.text, name, RUNTIME_RAND_STATES) if name else None
    if name is None or not rand_pointer or not rand_pointer.endswith("*"):
        return None
    module = _parse(llvm, prepare(ir, [], 0, layout) if not llvm_ir.has_datalayout(ir.text) else ir.text)
    try:
        runtime = module.get_struct_type(name[1:])
        rand = module.get_struct_type(rand_pointer[1:-1])
    except NameError:
        return None
    data = llvm.create_target_data(layout)
    return Runtime(data.get_abi_size(runtime), data.get_element_offset(runtime, RUNTIME_TEMPORARIES),
                   data.get_element_offset(runtime, RUNTIME_RAND_STATES), data.get_abi_size(rand))


def _parse(llvm, text: str):
    try:
        module = llvm.parse_assembly(text)
        module.verify()
    except RuntimeError as e:
        raise PtxError(f"LLVM could not read the IR: {str(e).strip()[:500]}") from None
    return module


def to_ptx(ir: llvm_ir.IrKernel | str, tasks: list[str], args_size: int) -> str:
    """PTX of one kernel's IR (read, or its text): a ``TASK__w`` entry for each of ``tasks``."""
    llvm, machine = _llvm()
    ir = llvm_ir.IrKernel.of(ir)
    module = _parse(llvm, prepare(ir, tasks, args_size, str(machine.target_data)))
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)
    # Taichi's fast math again on what the pipeline made: an instruction it writes anew (``-(a / r)`` folded into
    # ``(-a) / r``) keeps only the flags its operands share, and LLVM 22 decides a division's precision and a
    # contraction by the instruction's own flags, where Taichi's LLVM 15 read UnsafeFPMath for the whole function
    # (an SPH force loop's six divisions were ``div.rn``: 1.31x Taichi's GPU time)
    module = _parse(llvm, llvm_ir.with_fp_flags(str(module), _fast_math))
    ptx = machine.emit_assembly(module)
    for task in fold.launched([{"name": t} for t in tasks], ir):
        task = task["name"]
        if f".entry {entry(task)}(" not in ptx:
            raise PtxError(f"the PTX has no entry {entry(task)} (task {task!r})")
    if re.search(r"\bcall(?:\.uni)?\b", ptx):
        raise PtxError("the PTX still calls a function after inlining")
    return ptx
