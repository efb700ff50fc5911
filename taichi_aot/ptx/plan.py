"""A CUDA kernel's launch plan: its tasks in order (entry, grid, block) and where each argument goes in the
launch parameters (:mod:`taichi_aot.metadata.layout`: the byte offsets Taichi laid out for NVPTX), read from its
metadata entry, and checked again when a module is loaded (the manifest is a file anyone can edit: nothing in it may
make the C launcher write outside the parameter buffer or launch an impossible grid).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import CorruptedDataError
from ..metadata.layout import check_arguments, checked_int, laid_out, results_of

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata.llvm_ir import IrKernel

MAX_GRID = 2**31 - 1
MAX_BLOCK = 1024
MAX_TASKS = 64


def from_entry(entry: dict, ir: IrKernel | str | None = None) -> dict:
    """The plan of one metadata kernel entry: ``{"tasks": [...], "args": [...], "args_size": N}``; given the
    kernel's IR (read, or its text), only the tasks launched once its pure serial tasks fold into the others
    (:mod:`.fold`)."""
    tasks = []
    for task in (entry.get("compiled_data") or {}).get("tasks") or []:
        tasks.append({"name": str(task["name"]), "grid": int(task["grid_dim"]), "block": int(task["block_dim"])})
    if ir is not None:
        from .fold import launched

        tasks = launched(tasks, ir)
    plan = {"tasks": tasks, **laid_out(entry), **results_of(entry)}
    check(plan, "metadata")
    return plan


def check(plan: Any, where: str) -> dict:
    """``plan`` (from :func:`from_entry`, or read back from a manifest) is one the C launcher may use as it is:
    every write inside ``args_size``, aligned, grids and blocks possible; else CorruptedDataError."""
    if not isinstance(plan, dict) or not isinstance(plan.get("tasks"), list) or not isinstance(plan.get("args"), list):
        raise CorruptedDataError(f"{where}: a kernel plan without tasks and args")
    checked_int(len(plan["tasks"]), 1, MAX_TASKS, f"{where}: the number of tasks")
    for task in plan["tasks"]:
        if not isinstance(task, dict) or not isinstance(task.get("name"), str) or not task["name"]:
            raise CorruptedDataError(f"{where}: a task without a name")
        checked_int(task.get("grid"), 1, MAX_GRID, f"{where}: task {task['name']}'s grid")
        checked_int(task.get("block"), 1, MAX_BLOCK, f"{where}: task {task['name']}'s block")
    return check_arguments(plan, where)
