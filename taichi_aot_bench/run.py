"""A run of the bench: its sections on every arch asked for, their rows and what failed (:func:`run`)."""

from __future__ import annotations

import platform
import time
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from taichi_aot import Arch, capi

from .harness import Bench, machine
from .launch import graph_vs_kernels, interop, launch_overhead, memory_growth
from .measure import machine_warnings, usable_cores
from .report import format_rows
from .row import SECTIONS, Row
from .sim import simulation
from .transfers import throughput, torch_server, transfers


def _section(bench: Bench, section: str, arch: Arch, quick: bool, jit_ok: bool, log: Callable[[str], None]
             ) -> list[Row]:
    """The rows of one section on one arch."""
    if section == "launch":
        return launch_overhead(bench, jit_ok)
    if section == "graph":
        return graph_vs_kernels(bench)
    if section in ("throughput", "transfers"):  # on CUDA against torch's copies, measured in its own process
        torch_copy = torch_server(log) if arch == Arch.CUDA else None
        try:
            return throughput(bench, torch_copy) if section == "throughput" else transfers(bench, torch_copy)
        finally:
            if torch_copy is not None:
                torch_copy.close()
    if section == "interop":
        return interop(bench)
    if section == "simulation":
        return simulation(bench.rt, quick)
    if section == "scaling":
        from .scaling import scaling

        return scaling(bench.rt, quick, log)
    if section in _OF_BENCH:  # a module of its own, imported when asked for: its function of the same name
        import importlib

        return getattr(importlib.import_module(f".{section}", __package__), section)(bench)
    if section == "validation":
        from .validation import validation

        return validation(bench.rt, quick)
    return memory_growth(bench)


#: The sections whose rows a function of the bench alone makes, in a module of the section's name.
_OF_BENCH = ("launcher", "ops", "autodiff", "startup", "placement", "gpus", "cores", "profiler", "sharing")


def run(archs: list[Arch] | None = None, quick: bool = False, sections: Sequence[str] = SECTIONS, jit: bool = True,
        log: Callable[[str], None] = print, saved: Callable[[dict], None] | None = None,
        corpus: str | None = None, vk_raw: str | None = None, threads_raw: str | None = None) -> dict:
    """Run the benchmark sections on every available arch (or ``archs``); returns the results. ``corpus``: a folder
    of CUDA modules whose every kernel the launcher section times on both launch paths (kernel_time.py); ``vk_raw``:
    a build of benchmarks/vk_raw.c, raw Vulkan's floors beside the placement section's launches; ``threads_raw``: a
    build of benchmarks/threads_raw.c, the sharing section's shape in C alone beside its threads."""
    status = capi.arch_status()
    if archs is None:
        archs = [a for a in (Arch.X64, Arch.VULKAN, Arch.CUDA) if status[a].available]
    jit_ok = jit and _has_taichi()
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": quick, "host": platform.node(),
        "machine": machine(), "python": platform.python_version(), "numpy": np.__version__,
        "library": capi.library.path, "c_api_version": capi.get_version(), "archs": {}, "rows": [], "errors": [],
        "warnings": machine_warnings(), "cores": usable_cores(),
    }
    for warning in results["warnings"]:
        log(f"warning: {warning}")
    for arch in archs:
        if not status[arch].available:
            log(f"{arch.name.lower()}: not available ({status[arch].reason})")
            continue
        log(f"== {arch.name.lower()} ==")
        try:
            bench = Bench(arch, quick, log)
            bench.corpus, bench.vk_raw, bench.threads_raw, bench.jit = corpus, vk_raw, threads_raw, jit_ok
        except Exception as e:  # a backend that cannot run the harness: say so, go on with the others
            results["errors"].append(f"{arch.name.lower()}: {type(e).__name__}: {e}")
            log(f"{arch.name.lower()}: cannot run the benchmarks: {type(e).__name__}: {e}")
            continue
        try:
            results["archs"][bench.name] = {"device": bench.device, "raw_c": bench.driver is not None,
                                            "jit": jit_ok}
            for section in sections:
                t0 = time.perf_counter()
                try:
                    rows = _section(bench, section, arch, quick, jit_ok, log)
                except Exception as e:
                    import traceback

                    results["errors"].append(f"{bench.name} {section}: {type(e).__name__}: {e}")
                    log(traceback.format_exc())
                    continue
                results["rows"] += [r.to_dict() for r in rows]
                if saved is not None:
                    saved(results)  # after every section, so a run cut short keeps what it measured
                log(format_rows(rows))
                log(f"   ({section}: {time.perf_counter() - t0:.1f} s)")
        finally:
            bench.close()
    return results


def _has_taichi() -> bool:
    import importlib.util

    return importlib.util.find_spec("taichi") is not None

