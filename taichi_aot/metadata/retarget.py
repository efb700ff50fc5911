"""A CPU module's parallel loops retargeted to the threads of the runtime that runs them.

Taichi compiles a CPU range-for into a task over ``T`` chunks, ``T`` the thread count of the machine that built the
module (``cpu_max_num_threads``): the kernel's entry hands ``parallel_for(pool, T, T, context, task)`` a loop over
``[0, T)`` (its range-for context's ``end``), and the task's body, given its chunk ``i``, works on
``[i * chunk, min(i * chunk + chunk, n))`` with ``chunk`` made from ``T``: ``max(ceil(n / T), 512)`` for a loop over
an ndarray's run-time length ``n``, ``ceil(N / T)`` folded into constants for a loop of constant length ``N``. A
runtime of more threads than ``T`` leaves the rest idle. :func:`retarget` writes each loop over a run-time length of
a module's LLVM IR (text) for ``threads`` chunks instead: the entry's two counts and the context's end, and the
body's chunk, computed anew from ``threads`` (still at least the floor the body keeps, so nothing the compiler
derived from it breaks); nothing else changes (each element is still computed once, by the same code). A file with
any other loop (a constant range, whose constant chunk the compiler may have unrolled the loop for) is left as it
was: its kernel runs as built.
"""

from __future__ import annotations

import re

__all__ = ["CPU_CAP", "cap", "cap_of", "on_threads", "retarget", "threads_for"]

#: The key of a CPU part's sidecar (``taichi_aot.json``) that ``build --max-cpu-threads N`` writes: the most threads its
#: loops are spread over wherever it runs (without it, as many as the runtime has).
CPU_CAP = "cpu_threads"

_ENTRY_CALL = re.compile(
    r"(call void %[\w.]+\(i8\* noundef %[\w.]+, i32 noundef )(\d+)(, i32 noundef )(\d+)"
    r"(, i8\* noundef nonnull %[\w.]+, void \(i8\*, i32, i32\)\* noundef nonnull @[\w.$]+\))")
_CONTEXT = re.compile(r"(store <4 x i32> <i32 0, i32 )(\d+)(, i32 1, i32 1>)")
_BODY = re.compile(r"define internal void @function_body[\w.$]*\([^)]*, i32 (%[\w.]+)\) [^{]*\{\n(.*?)\n\s*br ",
                   re.S)
_DYNAMIC_MAX = re.compile(r"^(\s*)(%[\w.]+) = tail call i32 @llvm\.smax\.i32\(i32 (%[\w.]+), i32 (\d+)\)$", re.M)
_DYNAMIC_END = re.compile(r"@llvm\.smin\.i32\(i32 (%[\w.]+), i32 %[\w.]+\)")


def _body(preamble: str, index: str, built: int, threads: int, n: int) -> str | None:
    """The preamble of a task body (up to its first branch) with its chunk made for ``threads``; None where it is
    not a loop over a run-time length (``n``: a number for the names of the instructions added). A loop of a
    constant length is left as built: its chunk is a constant the compiler may have unrolled the loop for (a chunk of
    4096 unrolled by 8 with no remainder: another chunk would run past its end)."""
    if "%taichi_aot." in preamble:  # rewritten already (a private copy loaded again): left as it is
        return None
    dynamic = _DYNAMIC_MAX.findall(preamble)
    ends = _DYNAMIC_END.findall(preamble)
    if len(dynamic) == 1 and len(ends) == 1:  # a loop over a run-time length
        indent, name, operand, _floor = dynamic[0]
        total = ends[0]
        if not _from_total(preamble, operand, total, built) or \
                not re.search(rf"mul i32 {re.escape(name)}, {re.escape(index)}\b", preamble):
            return None
        line = _DYNAMIC_MAX.search(preamble)
        assert line is not None
        # ceil(total / threads) as a quotient and a remainder: no sum that could wrap past 2**31 - 1
        q, r, c, z, up = (f"%taichi_aot.{part}{n}" for part in ("q", "r", "c", "z", "up"))
        added = (f"{indent}{q} = sdiv i32 {total}, {threads}\n{indent}{r} = srem i32 {total}, {threads}\n"
                 f"{indent}{c} = icmp ne i32 {r}, 0\n{indent}{z} = zext i1 {c} to i32\n"
                 f"{indent}{up} = add nsw i32 {q}, {z}\n")
        chunk = line.group(0).replace(f"(i32 {operand},", f"(i32 {up},", 1)
        return preamble[:line.start()] + added + chunk + preamble[line.end():]
    return None


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


def retarget(text: str, threads: int) -> tuple[str, int] | None:
    """``text`` (a CPU module's LLVM IR file) with each parallel loop on ``threads`` chunks, and how many loops it
    changed; None where it has none, where its loops were built for ``threads`` already, or where any loop's IR is not
    of the shapes the module docstring gives (the file is then used as it was)."""
    calls = list(_ENTRY_CALL.finditer(text))
    if not calls or threads < 1:
        return None
    counts = {(int(c.group(2)), int(c.group(4))) for c in calls}
    contexts = _CONTEXT.findall(text)
    bodies = list(_BODY.finditer(text))
    if len(counts) != 1 or len(contexts) != len(calls) or len(bodies) != len(calls):
        return None
    splits, built = counts.pop()
    if splits != built or {int(c[1]) for c in contexts} != {built} or built == threads:
        return None
    out, last = [], 0
    for n, body in enumerate(bodies):
        changed = _body(body.group(2), body.group(1), built, threads, n)
        if changed is None:
            return None
        out += [text[last:body.start(2)], changed]
        last = body.end(2)
    text = "".join(out) + text[last:]
    text = _ENTRY_CALL.sub(lambda m: f"{m.group(1)}{threads}{m.group(3)}{threads}{m.group(5)}", text)
    text = _CONTEXT.sub(lambda m: f"{m.group(1)}{threads}{m.group(3)}", text)
    return text, len(calls)


def cap(folder: str) -> int | None:
    """The most threads the CPU module ``folder`` asks its loops to run on (:data:`CPU_CAP`), None where it asks no
    cap (a module of Taichi's own ``ti.aot.Module``, or built without ``--max-cpu-threads``)."""
    import json
    import os

    try:
        with open(os.path.join(folder, "taichi_aot.json"), encoding="utf-8") as f:
            return cap_of(json.load(f))
    except (OSError, ValueError):
        return None


def cap_of(sidecar: object) -> int | None:
    """The cap a module's ``taichi_aot.json`` (read: ``sidecar``) records (:func:`cap`), None where it records none."""
    value = sidecar.get(CPU_CAP) if isinstance(sidecar, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def threads_for(threads: int, cap_: int | None) -> int:
    """The chunks a CPU module's loops run in on a runtime of ``threads`` threads: as many, at most the module's cap
    (``build --max-cpu-threads``, :func:`cap`) where it records one."""
    return min(threads, cap_ or threads)


def on_threads(text: str, threads: int, cap_: int | None) -> str:
    """``text`` (a kernel's IR) with its loops on the chunks :func:`threads_for` gives, or as it is where
    :func:`retarget` leaves it."""
    done = retarget(text, threads_for(threads, cap_))
    return done[0] if done is not None else text
