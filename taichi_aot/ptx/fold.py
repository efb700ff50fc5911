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

import re

from ..metadata import llvm_ir

_VAR = r"%[-\w.$]+"
_TEMP_CALL = re.compile(rf"^\s*({_VAR}) = call i8\* @get_temporary_pointer(?:\.\d+)?\([^,]+\* ({_VAR}), i64 (\d+)\)$")
_GETTER = re.compile(r"@get_temporary_pointer(?:\.\d+)?\(")
_SCALAR = r"(?:i\d+|half|float|double)"
_ARITH = re.compile(rf"^\s*({_VAR}) = (?:add|sub|mul|sdiv|udiv|srem|urem|shl|lshr|ashr|and|or|xor|icmp \w+|"
                    rf"fcmp \w+|fadd|fsub|fmul|fdiv|frem|fneg|select|sext|zext|trunc|fptosi|fptoui|sitofp|uitofp|"
                    rf"fpext|fptrunc)\b(?: (?:nuw|nsw|exact|reassoc|nnan|ninf|nsz|arcp|contract|afn|fast))* (.*)$")
_TERMINATOR = re.compile(rf"^\s*(?:br label {_VAR}|br i1 ({_VAR}|true|false), label {_VAR}, label {_VAR}|ret void)$")
_LABEL = re.compile(r"^[-\w.$]+:(?:\s*;.*)?$")


def _body(text: str, name: str) -> str | None:
    """The body of function ``name`` (between its ``{`` line and ``}``), or None."""
    m = re.search(rf"^define [^\n]*{re.escape(llvm_ir.ref(name))}\([^\n]*\{{\n(.*?)^\}}", text, re.M | re.S)
    return m.group(1) if m else None


#: The forms of a pure serial task's lines that define a value: (form, the group naming its operand (0: none), the
#: kinds that operand may be, the kind of the value defined (group 1)). A value's kind: "slot" (the context's
#: argument slot), "args" (the argument buffer), "field" (an argument's address), "value" (a number read from the
#: arguments or the temporaries, or computed from such), "runtime", "temp" (an address in the temporaries).
_FORMS: list[tuple[re.Pattern[str], int, tuple[str, ...], str]] = [
    (re.compile(rf"^\s*({_VAR}) = getelementptr (?:inbounds )?{llvm_ir.CONTEXT}, {llvm_ir.CONTEXT}\* %context, "
                r"i32 0, i32 0$"), 0, (), "slot"),
    (re.compile(rf"^\s*({_VAR}) = bitcast i8\*\* ({_VAR}) to [^\n]*\*\*$"), 2, ("slot",), "slot"),
    (re.compile(rf"^\s*({_VAR}) = load [^\n]*\*, [^\n]*\*\* ({_VAR}), align \d+$"), 2, ("slot",), "args"),
    (re.compile(rf"^\s*({_VAR}) = getelementptr (?:inbounds )?[^\n]*\* ({_VAR})((?:, i32 \d+)+)$"), 2, ("args",),
     "field"),
    (re.compile(rf"^\s*({_VAR}) = load ({_SCALAR}), {_SCALAR}\* ({_VAR}), align \d+$"), 3, ("field", "temp"),
     "value"),
    (re.compile(rf"^\s*({_VAR}) = call {llvm_ir.RUNTIME}\* @RuntimeContext_get_runtime(?:\.\d+)?\("
                rf"{llvm_ir.CONTEXT}\* %context\)$"), 0, (), "runtime"),
    (_TEMP_CALL, 2, ("runtime",), "temp"),
    (re.compile(rf"^\s*({_VAR}) = bitcast i8\* ({_VAR}) to {_SCALAR}\*$"), 2, ("temp",), "temp"),
]
_STORE = re.compile(rf"^\s*store {_SCALAR} ({_VAR}|-?[\d.e+]+|true|false), {_SCALAR}\* ({_VAR}), align \d+$")


def _numeric(operand: str, kind: dict[str, str]) -> bool:
    """Whether ``operand`` is a constant or a value of kind "value"."""
    return not operand.startswith("%") or kind.get(operand) == "value"


def _line(line: str, kind: dict[str, str]) -> tuple[str | None, str, re.Match[str]] | None:
    """What a line of a pure serial task does: (the value it defines or None, that value's kind, its match), or None
    where it is not one of a pure task's forms (its operands' kinds checked in ``kind``)."""
    for form, operand, allowed, made in _FORMS:
        m = form.match(line)
        if m is not None and (operand == 0 or kind.get(m.group(operand)) in allowed):
            return m.group(1), made, m
    m = _STORE.match(line)  # a number stored into the temporaries
    if m is not None and kind.get(m.group(2)) == "temp" and _numeric(m.group(1), kind):
        return None, "", m
    m = _TERMINATOR.match(line)
    if m is not None and (not m.group(1) or _numeric(m.group(1), kind)):
        return None, "", m
    m = _ARITH.match(line)
    if m is not None and all(kind.get(v) == "value" for v in re.findall(_VAR, m.group(2))):
        return m.group(1), "value", m
    return None


def _pure(body: str) -> int | None:
    """Whether a serial task's body only reads its arguments and the temporaries and only writes the
    temporaries: the bytes of temporaries it reaches (at least 8), or None. Every line must be one of a short
    list of forms (:data:`_FORMS`, a store into the temporaries, a branch), each value's origin followed (a load
    through anything but the argument buffer or the temporaries, a call other than the runtime's two getters, an
    atomic or a store elsewhere: not pure)."""
    kind: dict[str, str] = {}  # value -> its kind (see _FORMS)
    reach = 8
    for line in body.splitlines():
        line = line.split(";", 1)[0].rstrip() if not line.lstrip().startswith(";") else ""
        if not line.strip() or _LABEL.match(line):
            continue
        found = _line(line, kind)
        if found is None:
            return None
        defined, made, m = found
        if defined is not None:
            kind[defined] = made
        if m.re is _TEMP_CALL:
            reach = max(reach, int(m.group(3)) + 8)
    return reach


def _reads_temporaries_only(text: str, skip: set[str]) -> bool:
    """Whether every function but those in ``skip`` (the pure tasks) and the getter itself only loads from the
    temporaries it reaches: each pointer the getter gives is cast once and only loaded from."""
    for start, name in llvm_ir.defines(text):
        if name in skip or re.fullmatch(r"get_temporary_pointer(?:\.\d+)?", name):
            continue
        end = text.find("\n}\n", start)
        part = text[start:end if end >= 0 else len(text)]
        if re.search(rf"getelementptr(?: inbounds)? {llvm_ir.RUNTIME}, {llvm_ir.RUNTIME}\* {_VAR}, "
                     rf"i(?:32|64) 0, i32 {RUNTIME_TEMPORARIES}\b", part):
            return False  # the temporaries reached other than through the getter
        for line in part.splitlines():
            if _GETTER.search(line) and not _TEMP_CALL.match(line):
                return False
            m = _TEMP_CALL.match(line)
            if m is None:
                continue
            cast = _only_use(part, m.group(1), rf"({_VAR}) = bitcast i8\* {re.escape(m.group(1))} to {_SCALAR}\*")
            if cast is None:
                return False
            uses = _uses(part, cast)
            if not all(re.match(rf"^\s*{_VAR} = load {_SCALAR}, {_SCALAR}\* {re.escape(cast)}, align \d+$", u)
                       for u in uses):
                return False
    return True


def _uses(part: str, var: str) -> list[str]:
    """The lines of ``part`` that use ``var`` (not the one that defines it)."""
    pattern = re.compile(rf"{re.escape(var)}(?![-\w.$])")
    return [line for line in part.splitlines()
            if pattern.search(line) and not re.match(rf"^\s*{re.escape(var)} = ", line)]


def _only_use(part: str, var: str, form: str) -> str | None:
    """The value ``var``'s one use defines, where that use is of ``form`` (its group 1), else None."""
    uses = _uses(part, var)
    m = re.match(rf"^\s*{form}$", uses[0]) if len(uses) == 1 else None
    return m.group(1) if m else None


#: LLVMRuntime's field of the temporaries (gate.RUNTIME_TEMPORARIES; repeated here: the gate imports this module's
#: neighbours, not the other way round).
RUNTIME_TEMPORARIES = 14


def folded(text: str, tasks: list[str]) -> dict[str, int]:
    """{pure serial task: bytes of temporaries it reaches} of the kernel whose IR is ``text`` and whose tasks are
    ``tasks`` (in launch order): the tasks the other tasks' entries run themselves. Empty where none folds: a
    serial task that is not pure, anything else that writes the temporaries, a kernel whose tasks take contexts
    of more than one type, or one whose every task is pure (something must be launched)."""
    contexts = llvm_ir.tasks(text)
    if len({contexts.get(t) for t in tasks}) != 1 or None in {contexts.get(t) for t in tasks}:
        return {}
    pure: dict[str, int] = {}
    for task in tasks:
        body = _body(text, task)
        reach = _pure(body) if body is not None and task.endswith("_serial") else None
        if reach is not None:
            pure[task] = reach
    if not pure or len(pure) == len(tasks) or not _reads_temporaries_only(text, set(pure)):
        return {}
    return pure


def launched(tasks: list[dict], text: str) -> list[dict]:
    """The plan's ``tasks`` that are launched once the pure ones fold into the others (:func:`folded`)."""
    fold = folded(text, [t["name"] for t in tasks])
    return [t for t in tasks if t["name"] not in fold]
