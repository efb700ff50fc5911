"""``taichi-aot bench``'s validation section (Vulkan): what SPIRV-Tools' validation adds to a module's load.

A 20-kernel module (``many_kernels.py``) is loaded with every task validated (what a process's first load of
that content does) and again with the verdicts kept (what later loads of the same content do: a task's SPIR-V is
checked once per process, by its digest), in interleaved rounds (measure.py); and each task's validation
is timed alone. The loads are loads again in one runtime, which shares the loaded module by content: what they
time is taichi_aot's own checks, libtaichi_c_api's load aside.
"""

from __future__ import annotations

import os
import struct
import time
from typing import TYPE_CHECKING

from taichi_aot import metadata
from taichi_aot.enums import Arch
from taichi_aot.metadata import spirv

from .compile import taichi_module
from .measure import measure
from .row import Row

if TYPE_CHECKING:
    from taichi_aot.runtime import Runtime

__all__ = ["validation"]

#: What a load again in one runtime is: the loaded module is shared by content, so the figure is the checks'.
_AGAIN = "the runtime's loaded module reused: taichi_aot's own checks (metadata, SPIR-V)"


def _load_ms(rt: Runtime, path: str, validate: bool) -> float:
    if validate:
        metadata.forget_shaders()
    start = time.perf_counter()
    rt.load_module(path).close()
    return (time.perf_counter() - start) * 1e3


def validation(rt: Runtime, quick: bool) -> list[Row]:
    """Rows: the module's load validated and with kept verdicts (ms), and the validator's time per task (ms), on
    Vulkan (none elsewhere: only gfx modules carry SPIR-V)."""
    if rt.arch != Arch.VULKAN:
        return []
    path = taichi_module("many", rt.arch.name.lower())
    rounds = 3 if quick else 10
    loads = measure({"kept": lambda: _load_ms(rt, path, False), "validated": lambda: _load_ms(rt, path, True)},
                    "kept", rounds, reps=1)
    per_task = []
    tasks = sorted(n for n in os.listdir(path) if n.endswith(".spv"))
    for name in tasks:
        with open(os.path.join(path, name), "rb") as f:
            code = f.read()
        words = struct.unpack(f"<{len(code) // 4}I", code)
        fixed = spirv.taichi_fixes(words, spirv.instructions(words, name))
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            spirv.validate(fixed, name)
            times.append((time.perf_counter() - start) * 1e3)
        per_task.append(min(times))
    params = {"kernels": 20, "tasks": len(tasks), "validator": spirv.validator().version}
    kept = Row("validation", rt.arch.name.lower(), "load a 20-kernel module again, verdicts kept", "ms",
               loads.bests["kept"], params=params, note=_AGAIN)
    checked = Row("validation", rt.arch.name.lower(), "load a 20-kernel module again, every task validated",
                  "ms", loads.bests["validated"], limit=kept.name, params=params, ratio=loads.ratio("validated"),
                  spread=loads.spread("validated"), note=_AGAIN)
    task = Row("validation", rt.arch.name.lower(), "SPIRV-Tools' validation of one task", "ms/task", per_task,
               params=params, note=f"median of {len(tasks)} tasks, each its best of {rounds}")
    return [kept, checked, task]
