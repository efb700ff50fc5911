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

from .llvm_ir import IrKernel, runtime_chunk, with_loop_threads

__all__ = ["CPU_CAP", "cap", "cap_of", "on_threads", "retarget", "threads_for"]

#: The key of a CPU part's sidecar (``taichi_aot.json``) that ``build --max-cpu-threads N`` writes: the most threads its
#: loops are spread over wherever it runs (without it, as many as the runtime has).
CPU_CAP = "cpu_threads"


def _body(preamble: str, index: str, built: int, threads: int, n: int) -> str | None:
    """The preamble of a task body (up to its first branch) with its chunk made for ``threads``; None where it is
    not a loop over a run-time length (``n``: a number for the names of the instructions added). A loop of a
    constant length is left as built: its chunk is a constant the compiler may have unrolled the loop for (a chunk of
    4096 unrolled by 8 with no remainder: another chunk would run past its end)."""
    chunk = runtime_chunk(preamble, index, built)
    if chunk is None:
        return None
    indent, total = chunk.indent, chunk.total
    # ceil(total / threads) as a quotient and a remainder: no sum that could wrap past 2**31 - 1
    q, r, c, z, up = (f"%taichi_aot.{part}{n}" for part in ("q", "r", "c", "z", "up"))
    added = (f"{indent}{q} = sdiv i32 {total}, {threads}\n{indent}{r} = srem i32 {total}, {threads}\n"
             f"{indent}{c} = icmp ne i32 {r}, 0\n{indent}{z} = zext i1 {c} to i32\n"
             f"{indent}{up} = add nsw i32 {q}, {z}\n")
    line = chunk.line.replace(f"(i32 {chunk.operand},", f"(i32 {up},", 1)
    return preamble[:chunk.start] + added + line + preamble[chunk.end:]


def retarget(ir: IrKernel | str, threads: int) -> tuple[str, int] | None:
    """``ir`` (a CPU module's LLVM IR file, read or as text) with each parallel loop on ``threads`` chunks, and how
    many loops it changed; None where it has none, where its loops were built for ``threads`` already, or where any
    loop's IR is not of the shapes the module docstring gives (the file is then used as it was)."""
    ir = IrKernel.of(ir)
    loops = ir.cpu_loops
    if not loops.counts or threads < 1:
        return None
    counts = set(loops.counts)
    if len(counts) != 1 or len(loops.ends) != len(loops.counts) or len(loops.bodies) != len(loops.counts):
        return None
    splits, built = counts.pop()
    if splits != built or set(loops.ends) != {built} or built == threads:
        return None
    text = ir.text
    out, last = [], 0
    for n, (index, start, end) in enumerate(loops.bodies):
        changed = _body(text[start:end], index, built, threads, n)
        if changed is None:
            return None
        out += [text[last:start], changed]
        last = end
    return with_loop_threads("".join(out) + text[last:], threads), len(loops.counts)


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


def on_threads(ir: IrKernel | str, threads: int, cap_: int | None) -> str:
    """The text of ``ir`` (a kernel's IR) with its loops on the chunks :func:`threads_for` gives, or as it is where
    :func:`retarget` leaves it."""
    ir = IrKernel.of(ir)
    done = retarget(ir, threads_for(threads, cap_))
    return done[0] if done is not None else ir.text
