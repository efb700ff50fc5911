"""The placement section of ``taichi-aot bench`` (Vulkan): what the default placement of ndarrays costs kernels and
host copies, beside the placements a user could choose and beside CUDA on the same GPU.

* A memory-bound kernel (saxpy, read twice and written once) over ndarrays made with the default ``host_access``,
  with ``"none"`` (device memory) and with ``"readwrite"`` (host-visible memory), and the same kernel on CUDA's
  runtime where this machine has one: the default against ``"none"`` (target >= 0.9 on a GPU) and against CUDA
  (target >= 0.8 on a discrete GPU).
* Host copies of 64 MiB (``from_numpy``, ``to_numpy(out=)``) from a pageable numpy array and from ``rt.host_array``,
  beside CUDA's copies of the same arrays: each of Vulkan's against CUDA's (target >= 0.7).
* A launch and a wait, a step of many small dispatches (64 launches of a kernel, then a wait) and a compute graph of
  the same 64 dispatches, of a kernel over 16 elements (one workgroup) and, on a GPU, over 4096; with ``--vk-raw``,
  beside raw Vulkan's (benchmarks/vk_raw.c: one dispatch of an empty shader, one workgroup, recorded, submitted and
  waited for; 64 dispatches with barriers between them; each waited for in vkWaitForFences and with its fence polled,
  the GPU's own floor): for the one-workgroup rows on a GPU, targets against the polled floor: <= 1.15 for the
  launch, <= 1.05 for the 64 launches, <= 1.2 for the graph; <= 3 for the 64 launches against the blocking floor on a
  CPU device (lavapipe), where a wait blocks. Beside them, raw Vulkan's floors for the kernel the rows launch:
  vk_raw's SPEC of the same saxpy task @16 (its SPIR-V and bindings as the module has them, one workgroup), one
  dispatch and 64 recorded, submitted and polled (no target: each set against the empty shader's, what the kernel
  itself costs; each launch row's note gives its ratio to them).

On a CPU device (lavapipe) the rows are measured and no target is set: its memory is the host's either way.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from functools import partial
from typing import TYPE_CHECKING, Callable

import numpy as np

from taichi_aot import Arch, Runtime, capi
from taichi_aot.placement.vulkan import facts

from .compile import taichi_module
from .harness import interleave, ratio
from .profiler import raw_spec
from .row import Row

if TYPE_CHECKING:
    from .harness import Bench

SECTION = "placement"
DEFAULT, NONE, READWRITE, CUDA = ("saxpy, default ndarrays", "saxpy, host_access='none'",
                                  "saxpy, host_access='readwrite'", "saxpy on CUDA (same GPU)")


def placement(bench: Bench) -> list[Row]:
    """The section's rows on a Vulkan bench (none on the other archs)."""
    if bench.arch != Arch.VULKAN:
        return []
    cuda = _cuda_runtime(bench)
    try:
        rows = _kernels(bench, cuda) + _copies(bench, cuda) + _dispatches(bench)
    finally:
        if cuda is not None:
            cuda[0].close()
    policy = bench.rt.device.describe()
    for row in rows:
        row.params.setdefault("policy", policy["policy"])
    return rows


def _cuda_runtime(bench: Bench) -> tuple[Runtime, object] | None:
    """CUDA's runtime and the bench module on it, where this machine has CUDA (None elsewhere)."""
    if bench.software or Arch.CUDA not in capi.get_available_archs()[1]:
        return None
    try:
        rt = Runtime(Arch.CUDA)
        return rt, rt.load_module(taichi_module("bench", "cuda"))
    except Exception as e:
        bench.log(f"placement: no CUDA beside Vulkan ({type(e).__name__}: {e})")
        return None


def _saxpy_rate(rt: Runtime, mod: object, size: int, per: int, **access: str) -> Callable[[], float]:
    """GB/s of ``per`` saxpy launches over ``size`` f32 (12 bytes an element), waited for."""
    x = rt.ndarray((size,), np.float32, **access)  # type: ignore[arg-type]
    y = rt.ndarray((size,), np.float32, **access)  # type: ignore[arg-type]
    launch = mod.kernels["saxpy"].bind(x, y, 0.5)  # type: ignore[attr-defined]

    def sample() -> float:
        t0 = time.perf_counter()
        for _ in range(per):
            launch()
        rt.wait()
        return 12 * size * per / (time.perf_counter() - t0) / 1e9

    return sample


def _kernels(bench: Bench, cuda: tuple[Runtime, object] | None) -> list[Row]:
    e = 16 if bench.quick else 24
    size, per = 1 << e, 3 if bench.quick else 20
    methods = {DEFAULT: _saxpy_rate(bench.rt, bench.mod, size, per),
               NONE: _saxpy_rate(bench.rt, bench.mod, size, per, host_access="none"),
               READWRITE: _saxpy_rate(bench.rt, bench.mod, size, max(1, per // 10), host_access="readwrite")}
    if cuda is not None:
        methods[CUDA] = _saxpy_rate(cuda[0], cuda[1], size, per)
    samples = interleave(methods, 3 if bench.quick else 5)
    rows = [Row(SECTION, bench.name, f"{name} @2^{e}", "GB/s", v, params={"elements": size, "launches": per})
            for name, v in samples.items()]
    gpu = not bench.software
    ratio(rows, f"{DEFAULT} @2^{e}", f"{NONE} @2^{e}", 0.9 if gpu else None, higher_is_better=True, op=">=")
    ratio(rows, f"{READWRITE} @2^{e}", f"{NONE} @2^{e}")
    if cuda is not None:
        by = {r.name: r for r in rows}
        ratio(rows, f"{DEFAULT} @2^{e}", f"{CUDA} @2^{e}", 0.8, higher_is_better=True, op=">=")
        by[f"{DEFAULT} @2^{e}"].note = f"against {NONE} (>= 0.9): " + _share(by, f"{DEFAULT} @2^{e}", f"{NONE} @2^{e}")
    return rows


def _share(by: dict[str, Row], name: str, limit: str) -> str:
    return f"{by[name].median / by[limit].median:.2f}x"


def _copy_rate(copy: Callable[[], object], nbytes: int, per: int, wait: Callable[[], object]) -> Callable[[], float]:
    def sample() -> float:
        t0 = time.perf_counter()
        for _ in range(per):
            copy()
        wait()
        return nbytes * per / (time.perf_counter() - t0) / 1e9

    return sample


def _copies(bench: Bench, cuda: tuple[Runtime, object] | None) -> list[Row]:
    nbytes = (1 << 20) if bench.quick else (64 << 20)
    per = 2 if bench.quick else 5
    n = nbytes // 4
    label = f"{nbytes >> 20} MiB"
    methods = {}
    for name, rt in (("Vulkan", bench.rt), ("CUDA", cuda[0] if cuda else None)):
        if rt is None:
            continue
        nd = rt.ndarray((n,), np.float32)
        fast = rt.host_array((n,), np.float32)
        plain = np.ones(n, np.float32)
        for kind, array in (("host_array", fast), ("numpy array", plain)):
            methods[f"{name} from_numpy {label}, {kind}"] = _copy_rate(partial(nd.from_numpy, array), nbytes, per,
                                                                      rt.wait)
            methods[f"{name} to_numpy {label}, {kind}"] = _copy_rate(partial(nd.to_numpy, array), nbytes, per,
                                                                    rt.wait)
    samples = interleave(methods, 3 if bench.quick else 5)
    rows = [Row(SECTION, bench.name, name, "GB/s", v, params={"bytes": nbytes}) for name, v in samples.items()]
    for way in ("from_numpy", "to_numpy"):
        for kind in ("host_array", "numpy array"):
            target = 0.7
            ratio(rows, f"Vulkan {way} {label}, {kind}", f"CUDA {way} {label}, {kind}", target,
                  higher_is_better=True, op=">=")
    return rows


def _dispatches(bench: Bench) -> list[Row]:
    """A launch and a wait, a step of 64 small dispatches and a wait, and a compute graph of the same 64 and a wait,
    in microseconds, of a kernel over 16 elements (one workgroup, as raw Vulkan's one dispatch of an empty shader)
    and, on a GPU, over 4096 (32 workgroups: the kernel's own work shows); beside raw Vulkan's where the bench has a
    build of vk_raw.c, the targets on the one-workgroup rows."""
    rt = bench.rt
    steps = 5 if bench.quick else 50
    methods: dict[str, Callable[[], float]] = {}
    names: dict[int, tuple[str, str, str]] = {}
    for size in (16,) if bench.software else (16, 4096):
        x, y = rt.ndarray((size,), np.float32), rt.ndarray((size,), np.float32)
        launch = bench.mod.kernels["saxpy"].bind(x, y, 0.5)
        graph = bench.mod.graphs["saxpy64"].bind(x=x, y=y, a=0.5) if "saxpy64" in bench.mod.graphs else None
        one, many = f"a launch of saxpy @{size}, then a wait", f"step of 64 dispatches of saxpy @{size}, then a wait"
        graphed = f"a graph of 64 dispatches of saxpy @{size}, then a wait"
        names[size] = (one, many, graphed)
        methods[one] = partial(_steps, rt, launch, 1, steps * 20)
        methods[many] = partial(_steps, rt, launch, 64, steps)
        if graph is not None:
            methods[graphed] = partial(_steps, rt, graph, 1, steps)
    samples = interleave(methods, 3 if bench.quick else 5)
    rows = [Row(SECTION, bench.name, name, "us/step", v, params={"dispatches": 64 if "64" in name else 1})
            for name, v in samples.items()]
    raw = _raw_vulkan(bench, 200 if bench.quick else 2000)
    if raw:
        rows += _raw_rows(bench, raw)
        polled = "dispatch_polled" in raw and "dispatch_64_polled" in raw  # a build of vk_raw.c before them: none
        _against_raw(rows, names, set(samples), not bench.software, polled)
        _against_same(rows, names[16], polled and not bench.software)
    return rows


def _raw_rows(bench: Bench, raw: dict) -> list[Row]:
    """Raw Vulkan's floors from vk_raw's answer: the empty shader's, waited for and polled, and the same kernel's
    (its SPEC's task), polled; those a build of vk_raw.c before them did not measure left out."""
    floors = [(RAW_ONE, raw.get("dispatch"), 1), (RAW_64, raw.get("dispatch_64"), 64),
              (RAW_ONE_POLLED, raw.get("dispatch_polled"), 1), (RAW_64_POLLED, raw.get("dispatch_64_polled"), 64),
              (RAW_SAME_ONE, raw.get("stamped", {}).get("polled"), 1),
              (RAW_SAME_64, raw.get("stamped", {}).get("polled_64"), 64)]
    return [Row(SECTION, bench.name, name, "us/step", [value], params={"dispatches": n})
            for name, value, n in floors if value is not None]


def _against_same(rows: list[Row], names: tuple[str, str, str], gpu_polled: bool) -> None:
    """The floors of the same kernel set against the empty shader's (what the kernel costs raw Vulkan), and each
    launch row's ratio to them in its note, on a GPU (``gpu_polled``; a CPU device's waits block)."""
    if not gpu_polled:
        return
    ratio(rows, RAW_SAME_ONE, RAW_ONE_POLLED)
    ratio(rows, RAW_SAME_64, RAW_64_POLLED)
    by = {r.name: r for r in rows}
    for name, floor in ((names[0], RAW_SAME_ONE), (names[1], RAW_SAME_64), (names[2], RAW_SAME_64)):
        if name in by and floor in by and by[name].samples and by[floor].samples:
            by[name].note = f"{by[name].median / by[floor].median:.2f}x raw Vulkan's same kernel, polled"


def _against_raw(rows: list[Row], names: dict[int, tuple[str, str, str]], measured: set[str], gpu: bool,
                 polled: bool) -> None:
    """Each dispatch row set against raw Vulkan's floor (a row has one ratio): on a GPU the polled one (a wait at the
    GPU's own floor, issue "vkwait"), where vk_raw measured it, with the targets on the one-workgroup rows; on a CPU
    device (lavapipe), where a wait blocks, the blocking one. Both floors are rows of their own beside them."""
    one_floor, many_floor = (RAW_ONE_POLLED, RAW_64_POLLED) if gpu and polled else (RAW_ONE, RAW_64)
    for size, (one, many, graphed) in names.items():
        like = size == 16
        ratio(rows, one, one_floor, (1.15 if polled else 1.1) if gpu and like else None)
        ratio(rows, many, many_floor, ((1.05 if polled else 1.3) if gpu else 3.0) if like else None)
        if graphed in measured:
            ratio(rows, graphed, many_floor, 1.2 if gpu and like else None)


def _steps(rt: Runtime, step: Callable[[], object], dispatches: int, repeats: int) -> float:
    """Microseconds of ``dispatches`` calls of ``step`` and a wait, the mean of ``repeats``."""
    t0 = time.perf_counter()
    for _ in range(repeats):
        for _ in range(dispatches):
            step()
        rt.wait()
    return (time.perf_counter() - t0) / repeats * 1e6


RAW_ONE, RAW_64 = ("raw Vulkan: a dispatch recorded, submitted, waited",
                   "raw Vulkan: 64 dispatches and barriers, submitted, waited")
RAW_SAME_ONE, RAW_SAME_64 = ("raw Vulkan: saxpy's task @16, a dispatch recorded, submitted, its fence polled",
                              "raw Vulkan: saxpy's task @16, 64 dispatches and barriers, submitted, its fence polled")
RAW_ONE_POLLED, RAW_64_POLLED = ("raw Vulkan: a dispatch recorded, submitted, its fence polled",
                                 "raw Vulkan: 64 dispatches and barriers, submitted, its fence polled")


def _raw_vulkan(bench: Bench, rounds: int) -> dict | None:
    """vk_raw's figures on the bench's device (microseconds a round), or None without a build (a line in the log
    where it fails)."""
    if not bench.vk_raw:
        return None
    try:
        name = facts(bench.rt.handle).name  # the runtime's own Vulkan device
        with tempfile.TemporaryDirectory(prefix="vk_raw_spec_") as folder:
            spec = raw_spec(bench, 1, folder, 16)  # the rows' kernel @16: one workgroup
            run = subprocess.run([bench.vk_raw, name, str(rounds), spec], capture_output=True, text=True,
                                 timeout=600)
        raw = json.loads(run.stdout) if run.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        run, raw = None, {"error": str(e)}
    if "dispatch" not in raw or "dispatch_64" not in raw:
        why = raw.get("error") or (run.stderr.strip()[-300:] if run is not None else "") or "no dispatch rounds"
        bench.log(f"  placement: vk_raw gave no dispatch figures: {why}")
        return None
    return raw
