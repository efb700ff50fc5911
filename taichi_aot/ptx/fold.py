"""One launch per loop: the serial tasks that only compute what later tasks read, run inside those tasks' launches.

Taichi 1.7.4 offloads a range-for whose bound is read from the arguments as two tasks: a serial task (one thread)
that stores the bound into the runtime's temporaries, then the loop, which reads it back. On its own that is two
``cuLaunchKernel`` calls for one loop. Where a kernel's serial tasks are *pure* (they read only the argument
buffer and the temporaries, and write only the temporaries) and nothing else in the kernel writes the
temporaries, each other task's PTX entry runs the pure tasks before it itself, in every thread, into temporaries of
its own thread (a stand-in runtime on the thread's stack whose ``temporaries`` points to a local buffer;
``rand_states`` is the stream's): the values are the ones the serial tasks would have stored, computed by the same
instructions, so the loop's are bit for bit the same, and no thread writes memory another reads. The pure tasks
are then not launched at all.

Which tasks fold is read from the IR alone (:func:`folded`), by the PTX step and again when a module is loaded;
a kernel where any of it is in doubt keeps every launch.
"""

from __future__ import annotations

from ..metadata import llvm_ir
from ..metadata.llvm_ir import IrKernel

#: What each form of a pure serial task's lines that defines a value (:data:`.llvm_ir._FORMS`) may take as its operand,
#: and the kind of the value it defines. A value's kind: "slot" (the context's argument slot), "args" (the argument
#: buffer), "field" (an argument's address), "value" (a number read from the arguments or the temporaries, or computed
#: from such), "runtime", "temp" (an address in the temporaries).
_FORMS: dict[str, tuple[tuple[str, ...], str]] = {
    "args_slot": ((), "slot"),
    "slot_cast": (("slot",), "slot"),
    "pointer_load": (("slot",), "args"),
    "field": (("args",), "field"),
    "scalar_load": (("field", "temp"), "value"),
    "runtime": ((), "runtime"),
    "temporary": (("runtime",), "temp"),
    "scalar_cast": (("temp",), "temp"),
}


def _numeric(operand: str, kind: dict[str, str]) -> bool:
    """Whether ``operand`` is a constant or a value of kind "value"."""
    return not operand.startswith("%") or kind.get(operand) == "value"


def _line(line: llvm_ir.SerialLine, kind: dict[str, str]) -> tuple[str | None, str, int] | None:
    """What a line of a pure serial task does: (the value it defines or None, that value's kind, the bytes of
    temporaries it reaches), or None where it is not one of a pure task's forms (its operands' kinds checked in
    ``kind``)."""
    for form, defined, operand, offset in line.forms:
        allowed, made = _FORMS[form]
        if operand is None or kind.get(operand) in allowed:
            return defined, made, offset + 8 if form == "temporary" else 0
    if line.store is not None and kind.get(line.store[1]) == "temp" and _numeric(line.store[0], kind):
        return None, "", 0  # a number stored into the temporaries
    if line.branch is not None and (not line.branch or _numeric(line.branch, kind)):
        return None, "", 0
    if line.arith is not None and all(kind.get(v) == "value" for v in line.arith[1]):
        return line.arith[0], "value", 0
    return None


def _pure(body: str) -> int | None:
    """Whether a serial task's body only reads its arguments and the temporaries and only writes the
    temporaries: the bytes of temporaries it reaches (at least 8), or None. Every line must be one of a short
    list of forms (:data:`_FORMS`, a store into the temporaries, a branch), each value's origin followed (a load
    through anything but the argument buffer or the temporaries, a call other than the runtime's two getters, an
    atomic or a store elsewhere: not pure)."""
    kind: dict[str, str] = {}  # value -> its kind (see _FORMS)
    reach = 8
    for line in llvm_ir.serial_lines(body):
        found = _line(line, kind)
        if found is None:
            return None
        defined, made, reaches = found
        if defined is not None:
            kind[defined] = made
        reach = max(reach, reaches)
    return reach


#: LLVMRuntime's field of the temporaries (gate.RUNTIME_TEMPORARIES; repeated here: the gate imports this module's
#: neighbours, not the other way round).
RUNTIME_TEMPORARIES = 14


def folded(ir: IrKernel | str, tasks: list[str]) -> dict[str, int]:
    """{pure serial task: bytes of temporaries it reaches} of the kernel whose IR is ``ir`` (read, or its text) and
    whose tasks are ``tasks`` (in launch order): the tasks the other tasks' entries run themselves. Empty where none
    folds: a serial task that is not pure, anything else that writes the temporaries, a kernel whose tasks take
    contexts of more than one type, or one whose every task is pure (something must be launched)."""
    ir = IrKernel.of(ir)
    contexts = ir.tasks
    if len({contexts.get(t) for t in tasks}) != 1 or None in {contexts.get(t) for t in tasks}:
        return {}
    pure: dict[str, int] = {}
    for task in tasks:
        body = ir.body(task)
        reach = _pure(body) if body is not None and task.endswith("_serial") else None
        if reach is not None:
            pure[task] = reach
    if not pure or len(pure) == len(tasks) or not llvm_ir.reads_temporaries_only(ir, set(pure), RUNTIME_TEMPORARIES):
        return {}
    return pure


def launched(tasks: list[dict], ir: IrKernel | str) -> list[dict]:
    """The plan's ``tasks`` that are launched once the pure ones fold into the others (:func:`folded`)."""
    fold = folded(ir, [t["name"] for t in tasks])
    return [t for t in tasks if t["name"] not in fold]
