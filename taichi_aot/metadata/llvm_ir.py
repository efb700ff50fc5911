"""One reader of the LLVM IR text Taichi 1.7.4 writes for a kernel (``NAME.ll``), for the metadata checks
(:mod:`.llvm_code`) and the own CUDA launcher's gate and PTX step (:mod:`taichi_aot.ptx`).

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


def bad_thread_count(text: str) -> str | None:
    """The first thread count of a CPU kernel's parallel loops (:data:`_PARALLEL_FOR`, :data:`_RANGE_END`) that is
    not a number from 1 to :data:`MOST_THREADS` nor a value computed at run time, as written; None where all are.
    libtaichi aborts the process at a launch of 0 threads or fewer, and a launch of 2**31 - 1 runs for minutes."""
    counts = [c for m in _PARALLEL_FOR.finditer(text) for c in m.groups()]
    counts += [m.group(2) for m in _RANGE_END.finditer(text)]
    for count in counts:
        if count.startswith("%") and _BARE.fullmatch(count[1:]):  # a register: a count made at run time
            continue
        if not (count.isascii() and count.isdigit() and 1 <= int(count) <= MOST_THREADS):
            return count
    return None


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
    return [(m.start(), unquoted(m)) for m in _DEFINE.finditer(text)]


def declares(text: str) -> set[str]:
    """The names of the functions the IR declares (defined elsewhere)."""
    return {unquoted(m) for m in _DECLARE.finditer(text)}


def tasks(text: str) -> dict[str, str]:
    """{task: the name of its RuntimeContext type} of the functions that take a RuntimeContext by value."""
    return {unquoted(m): m.group(3) for m in _TASK.finditer(text)}


def runtime_fields(text: str) -> set[int]:
    """The LLVMRuntime fields the code takes the address of."""
    return {int(m.group(2)) for m in _RUNTIME_GEP.finditer(text)}


def context_fields(text: str) -> set[int]:
    """The RuntimeContext fields the code takes the address of."""
    return {int(m.group(2)) for m in _CONTEXT_GEP.finditer(text)}


def casts_runtime(text: str) -> bool:
    """Whether the code reads LLVMRuntime through a pointer cast to another type."""
    return _RUNTIME_CAST.search(text) is not None


def reads_roots(text: str) -> bool:
    """Whether the code reads the roots of the fields' SNode trees, directly (optimised code) or through the
    runtime's getter (CUDA's)."""
    return ROOTS in runtime_fields(text) or _ROOTS_GETTER.search(text) is not None


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


def runtime_struct(text: str) -> str | None:
    """The LLVMRuntime type (``%struct.LLVMRuntime.6``) the kernel's tasks reach through their RuntimeContext (its
    field 1), under whatever suffix LLVM gave it; None where the IR defines none."""
    for context in dict.fromkeys(tasks(text).values()):
        pointer = field_type(text, context, 1)
        if pointer and pointer.endswith("*") and re.fullmatch(RUNTIME, pointer[:-1]):
            return pointer[:-1]
    names = re.findall(rf"^({RUNTIME}) = type ", text, re.M)
    return min(names, key=len) if names else None


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
