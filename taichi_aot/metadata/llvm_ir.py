"""The one reader of the LLVM IR text Taichi 1.7.4 writes for a kernel (``NAME.ll``): every pattern of its text is
here, and the rooms that read the IR take what this room reads of it, :class:`IrKernel`, made once when
:mod:`taichi_aot.metadata` reads the module (:class:`.model.LlvmCode`). They are the metadata checks
(:mod:`.llvm_code`), the access inference (:mod:`.llvm_access`), the CPU loops' retargeting (:mod:`.retarget`), the
x64 launch (``backends/cpu.py``) and the own CUDA launcher's gate, fold and PTX step (:mod:`taichi_aot.ptx`), which
also writes its edits of the text through the functions here. A Taichi or LLVM that writes the text otherwise
changes this room alone.

Two habits of LLVM's text decide how names are read:

* a global's name is bare (``@add_c80_0_kernel_0_range_for``) where it is made of letters, digits, ``$._-``, and
  quoted with ``\\XX`` escapes for its other bytes otherwise (``@"\\D1\\8F\\D0\\B4..."``: a kernel named in
  Cyrillic);
* Taichi links each kernel's IR from several LLVM modules, and LLVM renames the struct types that clash:
  ``%struct.LLVMRuntime.6``, ``%struct.RuntimeContext.7``, ``%struct.RandState.5`` (a one-kernel module's IR holds
  only such names).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Callable, NamedTuple

_ESCAPE = re.compile(rb"\\([0-9A-Fa-f]{2})")
#: A global's name after ``@``: bare (group 1) or quoted (group 2).
NAME = r'(?:([-\w.$]+)|"((?:[^"\\\n]|\\[0-9A-Fa-f]{2})*)")'
_DEFINE = re.compile(rf"^define [^@\n]*@{NAME}\(", re.M)
_DECLARE = re.compile(rf"^declare [^@\n]*@{NAME}\(", re.M)
_BARE = re.compile(r"[-\w.$]+", re.ASCII)


def struct(base: str) -> str:
    """A regex of the struct type ``%struct.<base>`` under any suffix LLVM gave it."""
    return rf"%struct\.{re.escape(base)}(?:\.\d+)?"


RUNTIME, CONTEXT = struct("LLVMRuntime"), struct("RuntimeContext")
#: A task: a function taking its RuntimeContext by value (group 3: the context's type name).
_TASK = re.compile(rf"^define (?:dso_local )?void @{NAME}\(({CONTEXT})\* byval", re.M)
_RUNTIME_GEP = re.compile(rf"getelementptr(?: inbounds)? ({RUNTIME}), \1\* %[\w.]+, i(?:32|64) 0, i32 (\d+)")
_CONTEXT_GEP = re.compile(rf"getelementptr(?: inbounds)? ({CONTEXT}), \1\* %[\w.]+, i(?:32|64) 0, i32 (\d+)")
_RUNTIME_CAST = re.compile(rf"bitcast {RUNTIME}\* ")
#: LLVMRuntime's field holding the roots of the fields' SNode trees (Taichi 1.7.4's layout), and its getter.
ROOTS = 7
_ROOTS_GETTER = re.compile(r"@LLVMRuntime_get_roots\(")
#: Where the code reads the argument buffer, the first field of the RuntimeContext: optimised code casts the
#: context itself; unoptimised code (CUDA) takes the field's address first.
_FIELD0 = re.compile(rf"^\s*(%[\w.]+) = getelementptr {CONTEXT}, {CONTEXT}\* %[\w.]+, i32 0, i32 0$", re.M)
_ARGS_CAST = re.compile(rf"^\s*%[\w.]+ = bitcast (?:{CONTEXT}\* %[\w.]+|i8\*\* (%[\w.]+)) to (\{{.*\}})\*\*$", re.M)
_TRIPLE = re.compile(rb'target triple = "([^"]+)"')
#: Declarations the PTX step resolves: LLVM's and NVVM's intrinsics, and libdevice's reflection query.
_RESOLVED = re.compile(r"llvm\.|__nvvm_reflect$")


#: The most threads a CPU kernel's parallel loops may be built for: as many as a CPU runtime may start
#: (``_cpus.MAX_THREADS``; Taichi writes the thread count of the machine that built the module, or its
#: ``cpu_max_num_threads``).
MOST_THREADS = 4096
#: A CPU kernel's entry handing its parallel loop to the runtime's thread pool, ``parallel_for(pool, splits, threads,
#: context, task)`` (groups 1 and 2: the two counts, as written), and the store of its range-for context's ``begin,
#: end, block size, step`` (group 2: the end, which Taichi makes the thread count).
_PARALLEL_FOR = re.compile(r"call void %[\w.]+\(i8\* noundef %[\w.]+, i32 noundef ([^,\n]*), i32 noundef ([^,\n]*), "
                           r"i8\* noundef nonnull %[\w.]+, void \(i8\*, i32, i32\)\* noundef nonnull @")
_RANGE_END = re.compile(r"= getelementptr inbounds %[\w.]+, %[\w.]+\* %[\w.]+, i64 0, i32 5\n"
                        r"\s*(%[\w.]+) = bitcast i32\* %[\w.]+ to <4 x i32>\*\n"
                        r"\s*store <4 x i32> <i32 0, i32 ([^,\n]*), i32 1, i32 1>, <4 x i32>\* \1,")
#: The same call with both counts numbers, as written (groups 2 and 4), and the range-for context's end a number
#: (group 2): what retargeting rewrites (:mod:`.retarget`), the text around the numbers kept.
_ENTRY_CALL = re.compile(
    r"(call void %[\w.]+\(i8\* noundef %[\w.]+, i32 noundef )(\d+)(, i32 noundef )(\d+)"
    r"(, i8\* noundef nonnull %[\w.]+, void \(i8\*, i32, i32\)\* noundef nonnull @[\w.$]+\))")
_RANGE_CONTEXT = re.compile(r"(store <4 x i32> <i32 0, i32 )(\d+)(, i32 1, i32 1>)")
#: A range-for task's body (group 1: its chunk's index; group 2: its preamble, up to its first branch).
_LOOP_BODY = re.compile(r"define internal void @function_body[\w.$]*\([^)]*, i32 (%[\w.]+)\) [^{]*\{\n(.*?)\n\s*br ",
                        re.S)
_DYNAMIC_MAX = re.compile(r"^(\s*)(%[\w.]+) = tail call i32 @llvm\.smax\.i32\(i32 (%[\w.]+), i32 (\d+)\)$", re.M)
_DYNAMIC_END = re.compile(r"@llvm\.smin\.i32\(i32 (%[\w.]+), i32 %[\w.]+\)")
#: A CPU module's parallel_for calls with constant counts (group 2: the threads), as bytes (:func:`built_threads`).
_BUILT = re.compile(
    rb"call void %\d+\(i8\* noundef %\d+, i32 noundef (\d+), i32 noundef (\d+), i8\* noundef nonnull %\d+, "
    rb"void \(i8\*, i32, i32\)\* noundef nonnull @[\w.$]+\)"
)


class IrKernel:
    """One kernel's IR (its ``NAME.ll``), read once: what the rooms that consume it ask of it, each read at its first
    ask and kept (the functions it defines and declares, its tasks, the fields of Taichi's runtime and context it
    reaches, its parallel loops, its functions' instructions tokenized)."""

    def __init__(self, text: str):
        self.text = text

    @classmethod
    def of(cls, ir: IrKernel | str) -> IrKernel:
        """``ir`` itself, or the IR text read as a kernel."""
        return ir if isinstance(ir, IrKernel) else cls(ir)

    @cached_property
    def defines(self) -> list[tuple[int, str]]:
        """(offset, name) of each function the IR defines, in order."""
        return [(m.start(), unquoted(m)) for m in _DEFINE.finditer(self.text)]

    @cached_property
    def defined(self) -> set[str]:
        return {name for _, name in self.defines}

    @cached_property
    def declared(self) -> set[str]:
        """The names of the functions the IR declares (defined elsewhere)."""
        return {unquoted(m) for m in _DECLARE.finditer(self.text)}

    @cached_property
    def tasks(self) -> dict[str, str]:
        """{task: the name of its RuntimeContext type} of the functions that take a RuntimeContext by value."""
        return {unquoted(m): m.group(3) for m in _TASK.finditer(self.text)}

    @cached_property
    def runtime_fields(self) -> set[int]:
        """The LLVMRuntime fields the code takes the address of."""
        return {int(m.group(2)) for m in _RUNTIME_GEP.finditer(self.text)}

    @cached_property
    def context_fields(self) -> set[int]:
        """The RuntimeContext fields the code takes the address of."""
        return {int(m.group(2)) for m in _CONTEXT_GEP.finditer(self.text)}

    @cached_property
    def casts_runtime(self) -> bool:
        """Whether the code reads LLVMRuntime through a pointer cast to another type."""
        return _RUNTIME_CAST.search(self.text) is not None

    @cached_property
    def reads_roots(self) -> bool:
        """Whether the code reads the roots of the fields' SNode trees, directly (optimised code) or through the
        runtime's getter (CUDA's)."""
        return ROOTS in self.runtime_fields or _ROOTS_GETTER.search(self.text) is not None

    @cached_property
    def runtime_struct(self) -> str | None:
        """The LLVMRuntime type (``%struct.LLVMRuntime.6``) the kernel's tasks reach through their RuntimeContext (its
        field 1), under whatever suffix LLVM gave it; None where the IR defines none."""
        for context in dict.fromkeys(self.tasks.values()):
            pointer = field_type(self.text, context, 1)
            if pointer and pointer.endswith("*") and re.fullmatch(RUNTIME, pointer[:-1]):
                return pointer[:-1]
        names = re.findall(rf"^({RUNTIME}) = type ", self.text, re.M)
        return min(names, key=len) if names else None

    def unresolved(self, also: Callable[[str], bool] = lambda name: False) -> list[str]:
        """The functions it declares that are neither LLVM's or NVVM's intrinsics (nor libdevice's reflection query)
        nor names ``also`` accepts, sorted: what only Taichi's runtime provides."""
        return sorted(n for n in self.declared if not _RESOLVED.match(n) and not also(n))

    def targets(self, triple: str) -> bool:
        """Whether the IR is written for the target ``triple``."""
        return f'target triple = "{triple}"' in self.text

    def argument_types(self) -> list[tuple[str, str]]:
        """(function, type) of each place a function reads the argument buffer (its RuntimeContext's first field),
        in order: the struct type it reads the buffer as."""
        out = []
        for i, (start, fn) in enumerate(self.defines):
            body = self.text[start:self.defines[i + 1][0] if i + 1 < len(self.defines) else len(self.text)]
            fields = set(_FIELD0.findall(body))
            out += [(fn, m.group(2)) for m in _ARGS_CAST.finditer(body) if m.group(1) is None or m.group(1) in fields]
        return out

    def bad_thread_count(self) -> str | None:
        """The first thread count of a CPU kernel's parallel loops (:data:`_PARALLEL_FOR`, :data:`_RANGE_END`) that is
        not a number from 1 to :data:`MOST_THREADS` nor a value computed at run time, as written; None where all
        are. libtaichi aborts the process at a launch of 0 threads or fewer, and a launch of 2**31 - 1 runs for
        minutes."""
        counts = [c for m in _PARALLEL_FOR.finditer(self.text) for c in m.groups()]
        counts += [m.group(2) for m in _RANGE_END.finditer(self.text)]
        for count in counts:
            if count.startswith("%") and _BARE.fullmatch(count[1:]):  # a register: a count made at run time
                continue
            if not (count.isascii() and count.isdigit() and 1 <= int(count) <= MOST_THREADS):
                return count
        return None

    # -- what the access inference reads (:mod:`.llvm_access`) ------------------------------------------------------

    @cached_property
    def functions(self) -> list[Function]:
        """Each defined function: its header line, its name as written, its RuntimeContext parameters and its
        instructions (labels, blank lines and comments left out)."""
        out: list[Function] = []
        lines: list[Instruction] | None = None
        for line in self.text.splitlines():
            if line.startswith("define "):
                lines = []
                callee = _CALLEE.search(line)
                out.append(Function(line, callee.group(1) if callee is not None else None, _context_params(line),
                                    lines))
            elif line.startswith("}"):
                lines = None
            elif lines is not None:
                stripped = line.split(";", 1)[0].rstrip() if ";" in line and '"' not in line else line.rstrip()
                if stripped.strip() and not (stripped.endswith(":") and not stripped.startswith(" ")):
                    lines.append(instruction(stripped))
        return out

    @cached_property
    def loop_arguments(self) -> list[list[str]]:
        """The globals named among the arguments of each call of a parallel-for helper (as written)."""
        out = []
        for line in self.text.splitlines():
            callee = _CAST_CALLEE.search(line) or _CALLEE.search(line)
            if callee is not None and "call " in line and _LOOPS.fullmatch(callee.group(1)):
                out.append(_POINTED.findall(line[callee.end():]))
        return out

    # -- what retargeting reads (:mod:`.retarget`) -----------------------------------------------------------------

    @cached_property
    def cpu_loops(self) -> CpuLoops:
        """The parallel loops of a CPU kernel, as retargeting reads them."""
        return CpuLoops([(int(c.group(2)), int(c.group(4))) for c in _ENTRY_CALL.finditer(self.text)],
                        [int(c[1]) for c in _RANGE_CONTEXT.findall(self.text)],
                        [(b.group(1), b.start(2), b.end(2)) for b in _LOOP_BODY.finditer(self.text)])

    # -- what the PTX step's fold reads (:mod:`taichi_aot.ptx.fold`) ------------------------------------------------

    def body(self, name: str) -> str | None:
        """The body of function ``name`` (between its ``{`` line and ``}``), or None."""
        m = re.search(rf"^define [^\n]*{re.escape(ref(name))}\([^\n]*\{{\n(.*?)^\}}", self.text, re.M | re.S)
        return m.group(1) if m else None


def unquoted(match: re.Match, group: int = 1) -> str:
    """The name a :data:`NAME` match at ``group`` (bare) and ``group + 1`` (quoted) stands for."""
    bare = match.group(group)
    if bare is not None:
        return bare
    raw = match.group(group + 1).encode("utf-8", "surrogateescape")
    return _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw).decode("utf-8", "replace")


def ref(name: str) -> str:
    """``@name`` as LLVM writes it: bare, or quoted with the bytes it cannot hold bare escaped."""
    if _BARE.fullmatch(name):
        return "@" + name
    return '@"' + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}"
                         for b in name.encode()) + '"'


def defines(text: str) -> list[tuple[int, str]]:
    """(offset, name) of each function the IR defines, in order."""
    return IrKernel(text).defines


def declares(text: str) -> set[str]:
    """The names of the functions the IR declares (defined elsewhere)."""
    return IrKernel(text).declared


def tasks(text: str) -> dict[str, str]:
    """{task: the name of its RuntimeContext type} of the functions that take a RuntimeContext by value."""
    return IrKernel(text).tasks


def runtime_struct(text: str) -> str | None:
    """:attr:`IrKernel.runtime_struct` of the IR ``text``."""
    return IrKernel(text).runtime_struct


def bad_thread_count(text: str) -> str | None:
    """:meth:`IrKernel.bad_thread_count` of the IR ``text``."""
    return IrKernel(text).bad_thread_count()


def field_type(text: str, name: str, index: int) -> str | None:
    """The type of field ``index`` of the struct ``name`` (``%struct.X.6``) as the IR defines it, or None."""
    m = re.search(rf"^{re.escape(name)} = type \{{ (.*) \}}$", text, re.M)
    if m is None:
        return None
    fields, depth, start = [], 0, 0
    body = m.group(1)
    for i, c in enumerate(body):
        depth += c in "{[(<"
        depth -= c in "}])>"
        if c == "," and depth == 0:
            fields.append(body[start:i].strip())
            start = i + 1
    fields.append(body[start:].strip())
    return fields[index] if 0 <= index < len(fields) else None


def triple(head: bytes) -> str | None:
    """The target triple the start of an IR file (its bytes) names, or None."""
    m = _TRIPLE.search(head)
    return m.group(1).decode("ascii", "replace") if m else None


def built_threads(raw: bytes) -> list[int]:
    """The threads each parallel loop of a CPU kernel's IR (its file's bytes) was built for, where a number."""
    return [int(m.group(2)) for m in _BUILT.finditer(raw)]


# ---------------------------------------------------------------------------
# Instructions, tokenized (what the access inference follows values through)

#: A global's name as written: bare, or quoted (compared as written, never unquoted).
GLOBAL = r'@(?:[-\w.$]+|"(?:[^"\\\n]|\\[0-9A-Fa-f]{2})*")'
#: The runtime's functions Taichi's code calls with the context, and its parallel-for helpers.
_CONTEXT_CALLS = re.compile(r"@(?:RuntimeContext_get_(?:runtime|result_buffer)|[gc]pu_parallel_range_for"
                            r"|parallel_for|rand_\w+|linear_thread_idx|StructMeta_set_context)")
_LOOPS = re.compile(r"@(?:[gc]pu_parallel_range_for|parallel_for)")
#: A local value's name as written: bare, or quoted.
_LOCAL = r'%[-\w.$]+|%"[^"]*"'
_VALUE = re.compile(_LOCAL)
_RESULT = re.compile(rf"^\s*({_LOCAL}) = (?:(?:tail|musttail|notail) )?(\w+)")
_OPCODE = re.compile(r"^\s*(?:(?:tail|musttail|notail) )?(\w+)")
_CALLEE = re.compile(rf"({GLOBAL})\(")
#: A call of a global through a cast of its type (the linker's, between renamed struct types).
_CAST_CALLEE = re.compile(rf"call [^@%(]*bitcast \([^@]*({GLOBAL}) to ")
_POINTED = re.compile(rf"({GLOBAL})(?![-\w.$(\"])")
_CONTEXT_TYPE = re.compile(rf"^{CONTEXT}\*$")
_CONTEXT_PARAM = re.compile(rf"{CONTEXT}\*(?!\*)")
_PARAMS = re.compile(rf"{GLOBAL}\((.*)\)")
_GEP = re.compile(rf"getelementptr(?: inbounds)? (.+?), \1\* ({_LOCAL})((?:, i(?:32|64) -?\d+)+)$")
_GEP_INDEX = re.compile(r"i(?:32|64) (-?\d+)")
_LOAD = re.compile(r"load (.+?), \1\* ")
_VALUE_CAST = re.compile(rf"bitcast (.+?) ({_LOCAL}) to (.+)$")
_ALLOCA = re.compile(rf"alloca {CONTEXT}\*(?:,|$)")


class Instruction(NamedTuple):
    """One line of a function's body, tokenized: the local values it names (in order, once each), the value it makes
    (None: none), its opcode (None: a line not read, which names an ``=`` before its first ``(`` but makes no value)
    and what follows the opcode (the whole line where it makes no value)."""

    line: str
    values: tuple[str, ...]
    result: str | None
    opcode: str | None
    body: str


class Function(NamedTuple):
    """A defined function: its header line, its name as written (None: none read), the names of its parameters that
    are RuntimeContext pointers, and its instructions."""

    header: str
    name: str | None
    context_params: list[str]
    instructions: list[Instruction]


def instruction(line: str) -> Instruction:
    """``line`` tokenized."""
    values = tuple(dict.fromkeys(_VALUE.findall(line)))
    result = _RESULT.match(line)
    if result is None:
        opcode = _OPCODE.match(line)
        if opcode is None or "=" in line.split("(", 1)[0]:
            return Instruction(line, values, None, None, line)
        return Instruction(line, values, None, opcode.group(1), line)
    return Instruction(line, values, result.group(1), result.group(2), line[result.end(2):].strip())


def _params(header: str) -> list[str]:
    """A function's parameters, each as written (type, attributes, name), split at the commas between them."""
    found = _PARAMS.search(header)
    out, depth, start = [], 0, 0
    text = found.group(1) if found else ""
    for i, ch in enumerate(text):
        depth += ch in "({[<"
        depth -= ch in ")}]>"
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    return [*out, text[start:]] if text else out


def _context_params(header: str) -> list[str]:
    """The names of a function's parameters that are RuntimeContext pointers (a task takes it by value)."""
    out = []
    for param in _params(header):
        names = _VALUE.findall(param)
        if names and _CONTEXT_PARAM.match(param.strip()):
            out.append(names[-1])
    return out


def gep(body: str) -> tuple[str, list[int]] | None:
    """A ``getelementptr``'s source type and constant indices (None: not all constant, or not one)."""
    m = _GEP.search(body)
    return (m.group(1), [int(i) for i in _GEP_INDEX.findall(m.group(3))]) if m else None


def loaded(body: str) -> str | None:
    """The type a ``load`` reads, or None."""
    m = _LOAD.search(body)
    return m.group(1) if m else None


def cast_to(body: str) -> str | None:
    """The type a ``bitcast`` of a local value casts to, or None."""
    m = _VALUE_CAST.search(body)
    return m.group(3) if m else None


def is_context_pointer(type_: str) -> bool:
    """Whether ``type_`` is a RuntimeContext pointer (under any suffix)."""
    return _CONTEXT_TYPE.match(type_) is not None


def allocates_context_slot(line: str) -> bool:
    """Whether ``line`` allocates a slot of a RuntimeContext pointer."""
    return _ALLOCA.search(line) is not None


def callee(body: str) -> tuple[str | None, bool]:
    """The global a call calls (as written; None: through a pointer), and whether through a cast of its type."""
    cast = _CAST_CALLEE.search(body if body.startswith("call") else "call " + body)
    direct = _CALLEE.search(body)
    return (cast.group(1), True) if cast else (direct.group(1) if direct else None, False)


def context_call(name: str) -> bool:
    """Whether ``name`` (as written) is one of the runtime's functions Taichi's code calls with the context (none of
    them writes an ndarray or reads the argument buffer), or a parallel-for helper."""
    return _CONTEXT_CALLS.fullmatch(name) is not None


def loop_helper(name: str | None) -> bool:
    """Whether ``name`` (as written) is one of the runtime's parallel-for helpers."""
    return name is not None and _LOOPS.fullmatch(name) is not None


# ---------------------------------------------------------------------------
# A CPU kernel's parallel loops (what retargeting reads and writes)


class CpuLoops(NamedTuple):
    """A CPU kernel's parallel loops: each parallel_for call's two counts (splits, threads), each range-for context's
    end, and each range-for task's body: its chunk's index and its preamble's span in the text."""

    counts: list[tuple[int, int]]
    ends: list[int]
    bodies: list[tuple[str, int, int]]


class Chunk(NamedTuple):
    """A range-for task's chunk made from a run-time length: ``name = smax(operand, floor)`` (its line, at
    ``start:end`` of the preamble, indented by ``indent``), ``operand`` being ``ceil(total / built)``."""

    indent: str
    name: str
    operand: str
    total: str
    start: int
    end: int
    line: str


def runtime_chunk(preamble: str, index: str, built: int) -> Chunk | None:
    """The chunk of a range-for task's ``preamble`` (its index ``index``) where it is made from a run-time length for
    ``built`` threads as Taichi writes it for a loop from 0; None where it is not (a constant length, another start)
    or where the preamble was rewritten already (``%taichi_aot.`` values: a private copy loaded again)."""
    if "%taichi_aot." in preamble:
        return None
    dynamic = _DYNAMIC_MAX.findall(preamble)
    ends = _DYNAMIC_END.findall(preamble)
    if len(dynamic) != 1 or len(ends) != 1:
        return None
    indent, name, operand, _floor = dynamic[0]
    total = ends[0]
    if not _from_total(preamble, operand, total, built) or \
            not re.search(rf"mul i32 {re.escape(name)}, {re.escape(index)}\b", preamble):
        return None
    line = _DYNAMIC_MAX.search(preamble)
    assert line is not None
    return Chunk(indent, name, operand, total, line.start(), line.end(), line.group(0))


def _from_total(preamble: str, operand: str, total: int | str, built: int) -> bool:
    """Whether the chunk's operand ``operand`` is ``ceil(total / built)`` as Taichi writes it for a loop from 0:
    ``total`` itself where built for 1, else made from exactly ``add i32 total, built - 1`` divided by ``built`` (a
    loop with another start adds another number, and is left as built)."""
    if built == 1:
        return operand == total
    added = re.findall(rf"^\s*(%[\w.]+) = add(?: nsw)? i32 {re.escape(str(total))}, {built - 1}$", preamble, re.M)
    if len(added) != 1:
        return False
    divided = re.findall(rf"^\s*(%[\w.]+) = sdiv i32 {re.escape(added[0])}, {built}$", preamble, re.M)
    return len(divided) == 1 and (operand == divided[0] or
                                  re.search(rf"{re.escape(operand)} = add nsw i32 {re.escape(divided[0])}, ", preamble)
                                  is not None)


def with_loop_threads(text: str, threads: int) -> str:
    """``text`` with every parallel_for call's two counts and every range-for context's end ``threads``."""
    text = _ENTRY_CALL.sub(lambda m: f"{m.group(1)}{threads}{m.group(3)}{threads}{m.group(5)}", text)
    return _RANGE_CONTEXT.sub(lambda m: f"{m.group(1)}{threads}{m.group(3)}", text)


def with_target(text: str, triple_: str, layout: str) -> str:
    """``text`` with its target triple and data layout those given (at its first line's end)."""
    target = f'target triple = "{triple_}"\ntarget datalayout = "{layout}"'
    text = re.sub(r"^target (?:triple|datalayout) = .*\n", "", text, flags=re.M)
    return text.replace("\n", "\n" + target + "\n", 1)


# ---------------------------------------------------------------------------
# A serial task's lines, by the forms a pure one may have (what the PTX step's fold reads)

_VAR = r"%[-\w.$]+"
_TEMP_CALL = re.compile(rf"^\s*({_VAR}) = call i8\* @get_temporary_pointer(?:\.\d+)?\([^,]+\* ({_VAR}), i64 (\d+)\)$")
_GETTER = re.compile(r"@get_temporary_pointer(?:\.\d+)?\(")
_GETTER_NAME = re.compile(r"get_temporary_pointer(?:\.\d+)?")
_SCALAR = r"(?:i\d+|half|float|double)"
_ARITH = re.compile(rf"^\s*({_VAR}) = (?:add|sub|mul|sdiv|udiv|srem|urem|shl|lshr|ashr|and|or|xor|icmp \w+|"
                    rf"fcmp \w+|fadd|fsub|fmul|fdiv|frem|fneg|select|sext|zext|trunc|fptosi|fptoui|sitofp|uitofp|"
                    rf"fpext|fptrunc)\b(?: (?:nuw|nsw|exact|reassoc|nnan|ninf|nsz|arcp|contract|afn|fast))* (.*)$")
_TERMINATOR = re.compile(rf"^\s*(?:br label {_VAR}|br i1 ({_VAR}|true|false), label {_VAR}, label {_VAR}|ret void)$")
_LABEL = re.compile(r"^[-\w.$]+:(?:\s*;.*)?$")
#: The forms of a line that defines a value, by name: (its pattern, the group naming its operand (0: none)).
_FORMS: list[tuple[str, re.Pattern[str], int]] = [
    ("args_slot", re.compile(rf"^\s*({_VAR}) = getelementptr (?:inbounds )?{CONTEXT}, {CONTEXT}\* %context, "
                             r"i32 0, i32 0$"), 0),
    ("slot_cast", re.compile(rf"^\s*({_VAR}) = bitcast i8\*\* ({_VAR}) to [^\n]*\*\*$"), 2),
    ("pointer_load", re.compile(rf"^\s*({_VAR}) = load [^\n]*\*, [^\n]*\*\* ({_VAR}), align \d+$"), 2),
    ("field", re.compile(rf"^\s*({_VAR}) = getelementptr (?:inbounds )?[^\n]*\* ({_VAR})((?:, i32 \d+)+)$"), 2),
    ("scalar_load", re.compile(rf"^\s*({_VAR}) = load ({_SCALAR}), {_SCALAR}\* ({_VAR}), align \d+$"), 3),
    ("runtime", re.compile(rf"^\s*({_VAR}) = call {RUNTIME}\* @RuntimeContext_get_runtime(?:\.\d+)?\("
                           rf"{CONTEXT}\* %context\)$"), 0),
    ("temporary", _TEMP_CALL, 2),
    ("scalar_cast", re.compile(rf"^\s*({_VAR}) = bitcast i8\* ({_VAR}) to {_SCALAR}\*$"), 2),
]
_STORE = re.compile(rf"^\s*store {_SCALAR} ({_VAR}|-?[\d.e+]+|true|false), {_SCALAR}\* ({_VAR}), align \d+$")


class SerialLine(NamedTuple):
    """A line of a serial task's body by the forms a pure one may have: each defining form it matches, in the order
    of :data:`_FORMS` (form, the value defined, its operand or None, the temporaries' offset a ``temporary`` reads or
    0); the value and pointer of a scalar store; whether it ends a block (and its condition, "" where none); an
    arithmetic instruction's value and its local operands."""

    forms: list[tuple[str, str, str | None, int]]
    store: tuple[str, str] | None
    branch: str | None
    arith: tuple[str, list[str]] | None


def serial_lines(body: str) -> list[SerialLine]:
    """A serial task's body (:meth:`IrKernel.body`) as :class:`SerialLine`s, comments, blank lines and labels left
    out."""
    out = []
    for line in body.splitlines():
        line = line.split(";", 1)[0].rstrip() if not line.lstrip().startswith(";") else ""
        if not line.strip() or _LABEL.match(line):
            continue
        forms = []
        for name, form, operand in _FORMS:
            m = form.match(line)
            if m is not None:
                forms.append((name, m.group(1), m.group(operand) if operand else None,
                              int(m.group(3)) if form is _TEMP_CALL else 0))
        store, branch, arith = _STORE.match(line), _TERMINATOR.match(line), _ARITH.match(line)
        out.append(SerialLine(forms, (store.group(1), store.group(2)) if store else None,
                              (branch.group(1) or "") if branch else None,
                              (arith.group(1), re.findall(_VAR, arith.group(2))) if arith else None))
    return out


def reads_temporaries_only(ir: IrKernel, skip: set[str], field: int) -> bool:
    """Whether every function of ``ir`` but those in ``skip`` and the temporaries' getter itself only loads from the
    temporaries it reaches: none reaches LLVMRuntime's field ``field`` (the temporaries) but through the getter, and
    each pointer the getter gives is cast once (to a scalar's pointer) and only loaded from."""
    text = ir.text
    for start, name in ir.defines:
        if name in skip or _GETTER_NAME.fullmatch(name):
            continue
        end = text.find("\n}\n", start)
        part = text[start:end if end >= 0 else len(text)]
        if re.search(rf"getelementptr(?: inbounds)? {RUNTIME}, {RUNTIME}\* {_VAR}, i(?:32|64) 0, i32 {field}\b", part):
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


# ---------------------------------------------------------------------------
# The PTX step's edits of a CUDA kernel's text (:mod:`taichi_aot.ptx.compile` says which, and why)

_FP_OP = re.compile(r"= (fadd|fsub|fmul|fdiv) ((?:(?:fast|reassoc|nnan|ninf|nsz|arcp|contract|afn) )*)"
                    r"((?:<\d+ x )?(?:float|double|half|bfloat))\b")
_ATOMIC = re.compile(r"^[^\n]*\b(?:atomicrmw|cmpxchg)\b[^\n]*$", re.M)
_ORDERING = re.compile(r" (?:seq_cst|acq_rel|acquire|release|monotonic)(?: (?:seq_cst|acquire|monotonic))?(?=,|$)")
_ORDER_WORD = re.compile(r"\w+")
_ATTR_GROUP = re.compile(r"^attributes #(\d+) = \{ ", re.M)
_FLAGS = re.compile(r"^!llvm\.module\.flags = !\{([^}]*)\}", re.M)
_METADATA_ID = re.compile(r"^!(\d+) = ", re.M)
_BARE_DEFINE = re.compile(r"^(define [^\n]*\))(?: \{)$", re.M)
_ANNOTATIONS = re.compile(r"^!nvvm\.annotations = !\{([^}]*)\}", re.M)


def with_fp_flags(text: str, flags_for: Callable[[str, list[str], str], list[str]]) -> str:
    """``text`` with each fadd, fsub, fmul and fdiv's fast-math flags those ``flags_for(op, flags, type)`` gives."""
    return _FP_OP.sub(lambda m: f"= {m.group(1)} {' '.join(flags_for(m.group(1), m.group(2).split(), m.group(3)))} "
                                f"{m.group(3)}", text)


def with_atomics_at(text: str, scope: str, ordering: str) -> str:
    """``text`` with each atomicrmw and cmpxchg of no scope given the scope ``scope`` and its orderings
    ``ordering``."""
    def one(m: re.Match) -> str:
        line = m.group(0)
        if "syncscope" in line:
            return line
        return _ORDERING.sub(lambda o: f' syncscope("{scope}")' + _ORDER_WORD.sub(ordering, o.group(0)), line, count=1)
    return _ATOMIC.sub(one, text)


def with_attributes(text: str, attributes: str) -> tuple[str, int]:
    """``text`` with ``attributes`` first in each attribute group, and the first group number it does not use."""
    text = _ATTR_GROUP.sub(lambda m: f"attributes #{m.group(1)} = {{ {attributes} ", text)
    return text, max((int(n) for n in _ATTR_GROUP.findall(text)), default=0) + 1


def with_bare_defines_in(text: str, group: int) -> str:
    """``text`` with each function defined without attribute groups given the group ``group``."""
    return _BARE_DEFINE.sub(lambda m: f"{m.group(1)} #{group} {{", text)


def with_datalayout(text: str, triple_: str, layout: str) -> str:
    """``text`` with the data layout ``layout`` after its target triple ``triple_``, where it gives none."""
    if "target datalayout" in text:
        return text
    target = f'target triple = "{triple_}"'
    return text.replace(target, f'{target}\ntarget datalayout = "{layout}"', 1)


def has_datalayout(text: str) -> bool:
    """Whether ``text`` gives a data layout."""
    return "target datalayout" in text


def made_internal(text: str, name: str, group: int) -> str:
    """``text`` with the function ``name`` (a task: it returns nothing) made internal, of the attribute group
    ``group`` alone."""
    at = ref(name)
    internal = f"define internal void {at}".replace("\\", "\\\\")  # a replacement template: \XX kept
    return re.sub(rf"^define (?:dso_local )?void {re.escape(at)}(\(.*\)) (?:#\d+ )?\{{", rf"{internal}\1 #{group} {{",
                  text, count=1, flags=re.M)


def with_kernel_mark_on(text: str, name: str, entry: str) -> str:
    """``text`` with the ``!nvvm.annotations`` nodes of the function ``name`` naming the function ``entry`` (a bare
    name) instead."""
    return re.sub(rf"!\{{void \([^)]*\)\* {re.escape(ref(name))}, ", f"!{{ptr @{entry}, ", text)


def without_annotations(text: str, name: str) -> str:
    """``text`` with the ``!nvvm.annotations`` entries of the function ``name`` (its kernel mark, thread bounds) left
    out of the list (the nodes stay, unlisted)."""
    ids = set(re.findall(rf"^!(\d+) = !\{{void \([^)]*\)\* {re.escape(ref(name))}, ", text, re.M))

    def keep(m: re.Match) -> str:
        kept = [n for n in m.group(1).split(", ") if n.lstrip("!") not in ids]
        return f"!nvvm.annotations = !{{{', '.join(kept)}}}"
    return _ANNOTATIONS.sub(keep, text, count=1)


def with_module_flag(text: str, flag: str) -> str:
    """``text`` with the module flag ``flag`` (a metadata node's body) added to ``!llvm.module.flags``."""
    flag_id = max((int(n) for n in _METADATA_ID.findall(text)), default=0) + 1
    node = f"!{flag_id} = !{{{flag}}}\n"
    if _FLAGS.search(text):
        return _FLAGS.sub(lambda m: f"!llvm.module.flags = !{{{m.group(1)}, !{flag_id}}}", text, count=1) + node
    return text + f"!llvm.module.flags = !{{!{flag_id}}}\n" + node


#: The flag a bounded stack access sets where it would leave its array (a global :func:`bound_stacks` adds).
STACK_OVERFLOW = "taichi_aot_adstack_overflow"
#: What a launch that set it raises (an OutOfMemoryError), after the kernel's name.
STACK_OVERFLOWED = ("overflowed its autodiff stacks: its loops carry more values than the stacks Taichi sized when it "
                    "was compiled hold (none was written past them). Set AD_STACK_SIZE (Taichi's ad_stack_size) in "
                    "the kernel's file to more entries and build again; the gradient arrays hold no valid result")
_STACK = re.compile(r"^\s*(%[-\w.$]+) = alloca \[(\d+) x i8\]", re.M)
_STACK_AT = re.compile(r"^(\s*)(%[-\w.$]+) = getelementptr inbounds \[(\d+) x i8\], \[\d+ x i8\]\* (%[-\w.$]+), "
                       r"i64 0, i64 (%[-\w.$]+)$", re.M)
_CAST = re.compile(r"= bitcast i8\* (%[-\w.$]+) to (.+)\*$", re.M)
_SIZES = {"i1": 1, "i8": 1, "i16": 2, "half": 2, "i32": 4, "float": 4, "i64": 8, "double": 8}
#: Taichi's runtime functions that move an autodiff stack's top or find it, where the IR defines them (unoptimized,
#: CUDA's).
_STACK_HELPER = re.compile(r"define internal (void|i8\*) (@stack_(push|pop|top_primal)(?:\.\d+)?)\(i8\* noundef %0"
                           r"(?:, i64 noundef %1(?:, i64 noundef %2)?)?\) #\d+ \{\n")
_OFFSET = re.compile(r"^\s*(%[-\w.$]+) = getelementptr inbounds i8, i8\* (%[-\w.$]+), i64 (\d+)$", re.M)
#: stack_top_primal(stack, element_size), checked: entry n-1 of a stack of n entries, entry 0 of an empty one (its
#: pushes refused), so every top lies in the stack.
_TOP = """define internal i8* {name}(i8* noundef %0, i64 noundef %1) alwaysinline {{
  %count = bitcast i8* %0 to i64*
  %n = load i64, i64* %count, align 8
  %empty = icmp eq i64 %n, 0
  %n1 = add i64 %n, -1
  %entry = select i1 %empty, i64 0, i64 %n1
  %pair = mul i64 %1, 2
  %skip = mul i64 %entry, %pair
  %at = add i64 %skip, 8
  %top = getelementptr inbounds i8, i8* %0, i64 %at
  ret i8* %top
}}
"""
#: stack_push(stack, max_num_elements, element_size), checked: a stack of N entries holds its count (i64) and N
#: (primal, adjoint) pairs, in 4 + max_num_elements * 2 * element_size bytes (Taichi's AdStackAllocaStmt); a push
#: that would end past them sets the flag and leaves the stack as it was.
_PUSH = """define internal void {name}(i8* noundef %0, i64 noundef %1, i64 noundef %2) alwaysinline {{
  %count = bitcast i8* %0 to i64*
  %n = load i64, i64* %count, align 8
  %n1 = add i64 %n, 1
  %pair = mul i64 %2, 2
  %used = mul i64 %n1, %pair
  %end = add i64 %used, 4
  %size = mul i64 %1, %pair
  %full = icmp ugt i64 %end, %size
  br i1 %full, label %over, label %push
over:
  store i32 1, i32* @{flag}, align 4
  ret void
push:
  store i64 %n1, i64* %count, align 8
  %at = add i64 %used, 8
  %start = sub i64 %at, %pair
  %top = getelementptr inbounds i8, i8* %0, i64 %start
  call void @llvm.memset.p0i8.i64(i8* align 1 %top, i8 0, i64 %pair, i1 false)
  ret void
}}
"""
#: stack_pop(stack), checked: an empty stack (its pushes refused) stays empty.
_POP = """define internal void {name}(i8* noundef %0) alwaysinline {{
  %count = bitcast i8* %0 to i64*
  %n = load i64, i64* %count, align 8
  %empty = icmp eq i64 %n, 0
  %n1 = add i64 %n, -1
  %m = select i1 %empty, i64 0, i64 %n1
  store i64 %m, i64* %count, align 8
  ret void
}}
"""


def _widths(text: str) -> dict[str, int]:
    """{byte pointer: the bytes an access through it may reach}: the widest type it is cast to, or a constant
    offset from it plus what is reached through that (one level: Taichi reaches an entry's adjoint so)."""
    widths: dict[str, int] = {}
    for m in _CAST.finditer(text):
        kind = m.group(2).strip()
        vector = re.fullmatch(r"<(\d+) x (\w+)>", kind)
        width = int(vector.group(1)) * _SIZES.get(vector.group(2), 8) if vector else _SIZES.get(kind, 8)
        widths[m.group(1)] = max(widths.get(m.group(1), 0), width)
    for m in _OFFSET.finditer(text):
        derived, base, offset = m.groups()
        widths[base] = max(widths.get(base, 0), int(offset) + widths.get(derived, 8))
    return widths


def bound_stacks(text: str) -> tuple[str, int]:
    """The IR (Taichi's, as it writes it: typed pointers) with each access at a computed offset into a byte array
    on the stack checked, and how many were. Taichi's autodiff stacks are such arrays, of a size fixed when the
    kernel was compiled (``ad_stack_size``), and its code pushes onto them with no bound check: a loop that pushes
    more writes past them, into the stack frame. An access that would end past its array goes to the array's
    start instead and stores 1 into :data:`STACK_OVERFLOW` (a global added to the module); one in bounds stores
    into a slot on its own thread's stack, so threads share no memory but on an overflow. Each access's width is
    the widest type its address is cast to or the farthest byte a constant offset from it reaches (8 bytes where
    it is used uncast). Where Taichi's stack_push, stack_pop and stack_top_primal are functions of their own (CUDA's
    unoptimized IR), they get checked bodies instead: a push past the stack's bytes sets the flag and leaves it
    as it was, a pop of an empty stack leaves it empty, and an empty stack's top is its first entry."""
    stacks: dict[str, int] = {}
    widths: dict[str, int] = {}
    count = 0

    def checked(m: re.Match) -> str:
        nonlocal count
        indent, result, size, base, at = m.groups()
        last = int(size) - widths.get(result, 8)
        if stacks.get(base) != int(size) or last < 0:
            return m.group(0)
        count += 1
        v = f"%taichi_aot.{count}"
        return "\n".join(f"{indent}{line}" for line in (
            f"{v}.bad = icmp ugt i64 {at}, {last}",
            f"{v}.at = select i1 {v}.bad, i64 0, i64 {at}",
            f"{v}.flag = select i1 {v}.bad, i32* @{STACK_OVERFLOW}, i32* %taichi_aot.sink",
            f"store i32 1, i32* {v}.flag, align 4",
            f"{result} = getelementptr inbounds [{size} x i8], [{size} x i8]* {base}, i64 0, i64 {v}.at"))

    out = []
    for part in re.split(r"(?m)^(?=define )", text):  # each function (and what comes before the first)
        before = count
        helper = _STACK_HELPER.match(part)
        if helper:  # Taichi's stack helpers where they are not inlined (CUDA's IR): checked bodies
            count += 1
            body = {"push": _PUSH, "pop": _POP, "top_primal": _TOP}[helper.group(3)]
            out.append(body.format(name=helper.group(2), flag=STACK_OVERFLOW))
            out.append(part[part.index("\n}\n") + 3:])
            continue
        stacks = {m.group(1): int(m.group(2)) for m in _STACK.finditer(part)}  # names are the function's own
        widths = _widths(part)
        part = _STACK_AT.sub(checked, part)
        if count > before:  # the function's sink, first in its entry block
            head, _, body = part.partition("{\n")
            label = re.match(r"[-\w.$]+:[^\n]*\n", body)
            cut = label.end() if label else 0
            part = f"{head}{{\n{body[:cut]}  %taichi_aot.sink = alloca i32, align 4\n{body[cut:]}"
        out.append(part)
    text = "".join(out)
    if count:
        text += f"\n@{STACK_OVERFLOW} = global i32 0, align 4\n"
    return text, count
