"""Which CUDA kernels the own launcher takes: a read of each kernel's LLVM IR (text, as Taichi 1.7.4 writes it)
and its metadata entry, with no LLVM and no GPU.

A kernel's offloaded tasks reach Taichi's runtime through the ``LLVMRuntime`` its ``RuntimeContext`` points to.
The launcher gives each stream a stand-in for it with two fields filled: ``temporaries`` (where a serial task
leaves a loop bound for the next task) and ``rand_states`` (``ti.random``'s generators, set up as Taichi does).
A kernel that touches any other field (SNode roots, allocators, the memory pool, the error code, the profiler),
calls a function the module does not define (``vprintf``: print), reads its context's thread id, returns a
struct or more than the stand-in's result buffer holds, has an argpack, dynamic shared memory or an argument of a
kind the launcher does not pack stays on libtaichi's path; the reason is kept, and ``info`` shows it.

Return values: the launcher hands each task the bytes after its stream's stand-in as ``RuntimeContext``'s
``result_buffer``, where Taichi's code writes them (``ret_type``'s layout); the launch waits and copies them back
(:func:`.plan.results`). On libtaichi's path a returned value is lost (Taichi 1.7.4's C-API gives none):
:data:`VALUE_LOST` says so beside the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..metadata import llvm_ir
from ..metadata.layout import RESULT_BYTES, PlanError, results, returns

#: Fields of LLVMRuntime the stand-in fills (by their index in the IR's struct type).
RUNTIME_TEMPORARIES, RUNTIME_RAND_STATES = 14, 15
#: Fields of RuntimeContext a task may read: the argument buffer, the runtime and the result buffer.
CONTEXT_FIELDS = {0, 1, 3}
#: What the reason of a returning kernel left to libtaichi adds.
VALUE_LOST = "its return value is lost on libtaichi's path (Taichi 1.7.4's C-API gives none: a call returns None)"

_WHY_FIELD = {0: "the runtime's preallocated memory", llvm_ir.ROOTS: "SNode fields (the runtime's roots)",
              11: "SNode element lists", 12: "SNode node allocators"}


@dataclass(frozen=True)
class Gate:
    """What a kernel's IR asks of the runtime: ``reason`` None where the own launcher takes it."""

    reason: str | None
    rand: bool = False


def read_ir(ir: llvm_ir.IrKernel | str) -> Gate:
    """The gate's verdict from one kernel's IR (``NAME.ll``, read once by :mod:`taichi_aot.metadata`)."""
    ir = llvm_ir.IrKernel.of(ir)
    fields = ir.runtime_fields
    other = sorted(fields - {RUNTIME_TEMPORARIES, RUNTIME_RAND_STATES})
    if other:
        what = ", ".join(_WHY_FIELD.get(f, f"field {f}") for f in other)
        return Gate(f"uses Taichi's runtime beyond temporaries and random states: LLVMRuntime {what}")
    if ir.casts_runtime:
        return Gate("reads Taichi's runtime through a cast pointer")
    context = sorted(ir.context_fields - CONTEXT_FIELDS)
    if context:
        names = {2: "the CPU thread id"}
        return Gate("reads " + ", ".join(names.get(f, f"field {f}") for f in context) + " of its RuntimeContext")
    calls = ir.unresolved()  # but LLVM's and NVVM's intrinsics and libdevice's reflection query: the PTX step's
    if calls:
        hint = " (print)" if "vprintf" in calls else ""
        return Gate(f"calls {', '.join(calls)}{hint}, which only Taichi's runtime provides")
    return Gate(None, rand=RUNTIME_RAND_STATES in fields)


def read_entry(entry: dict) -> str | None:
    """Why a kernel's metadata entry keeps it on libtaichi's path, or None."""
    if returns(entry):
        try:
            results(entry)
        except PlanError as e:
            return f"its return values cannot be read: {e}"
        if not 0 < entry.get("ret_size", 0) <= RESULT_BYTES:
            return f"returns {entry.get('ret_size')} bytes of values (the own launcher reads at most {RESULT_BYTES})"
    for _, arg in entry.get("args", []):
        if arg.get("is_argpack"):
            return "has an argpack argument"
    for task in entry.get("compiled_data", {}).get("tasks", []):
        if task.get("dynamic_shared_array_bytes", 0):
            return "uses dynamic shared memory"
    if "compiled_data" in entry and not entry["compiled_data"].get("tasks"):
        return "has no tasks (Taichi compiled its body to nothing): libtaichi launches nothing for it either"
    return None
