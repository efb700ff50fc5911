"""The benchmark harness of ``taichi-aot bench``: launch overhead, kernel throughput, transfers and
graphs, side by side.

Every figure is measured in one run with interleaved repeats after a warm-up, reported as the
median with min-max, and as a ratio to its limit: the raw C loop (a driver compiled here with the
system compiler, linked against the same libtaichi_c_api), ``memcpy``/``np.copyto`` on the host,
or the device's own copy bandwidth. Times of a method include a final ``wait``, as in C.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any, Callable

import numpy as np

from .. import Arch, Runtime, capi
from ..enums import CPU_ARCHS
from .bench_measure import machine_warnings, measure
from .bench_row import Row
from .bench_sim import c_loop, simulation
from .cache import CompileError, bench_driver, taichi_module

if TYPE_CHECKING:
    from .. import Kernel, NdArray

HERE = os.path.dirname(os.path.abspath(__file__))
GRAPH_DISPATCHES = 16
#: GB/s that from_numpy and to_numpy of pageable arrays reach on CUDA from 16 MiB up (half of torch's
#: pinned copy on an H200)
CUDA_PAGEABLE_GBS = 26


class _Server:
    """A child process answering one JSON line per command line (the C driver, or Taichi's JIT)."""

    def __init__(self, argv: list[str], what: str):
        self.what = what
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr  # all three are pipes
        self._stdin: IO[str] = self.proc.stdin
        self._stdout: IO[str] = self.proc.stdout
        self._stderr: IO[str] = self.proc.stderr
        first = self._read()
        if not first.get("ready"):
            raise RuntimeError(f"{what} did not start: {first}")

    def _read(self) -> dict:
        while True:
            line = self._stdout.readline()
            if not line:
                err = self._stderr.read()[-1500:] if self.proc.poll() is not None else ""
                raise RuntimeError(f"{self.what} stopped: {err}")
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)

    def seconds(self, command: str) -> float:
        """Send one command line; the seconds it took, as the child measured them."""
        self._stdin.write(command + "\n")
        self._stdin.flush()
        answer = self._read()
        if "seconds" not in answer:
            raise RuntimeError(f"{self.what}: {command!r} failed: {answer}")
        return float(answer["seconds"])

    def close(self) -> None:
        """Ask the child to quit (kill it if it does not)."""
        try:
            self._stdin.write("quit\n")
            self._stdin.flush()
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()


def _interleave(methods: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run each method once as warm-up, then ``repeats`` rounds of all methods in turn."""
    for f in methods.values():
        f()
    out: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, f in methods.items():
            out[name].append(f())
    return out


def _ratio(rows: list[Row], name: str, limit: str, target: float | None = None, higher_is_better: bool = False,
           op: str = "<=") -> None:
    """Set ``ratio`` of row ``name`` against row ``limit`` (same section and arch)."""
    by = {r.name: r for r in rows}
    if name not in by or limit not in by or not by[limit].samples or not by[name].samples:
        return
    row = by[name]
    row.limit = limit
    row.ratio = row.median / by[limit].median
    row.min_ratio = min(row.samples) / min(by[limit].samples)
    if target is not None:
        row.target = f"{op} {target:g}"
        row.met = row.ratio >= target if higher_is_better else row.ratio <= target


def _foreign_kinds(arch: Arch) -> list[tuple[str, Callable[[], Any], bool]]:
    """(label, a maker of one 16-element f32 array, shared without a copy?) of each library here whose arrays a
    kernel on ``arch`` takes."""
    kinds: list[tuple[str, Callable[[], Any], bool]] = []
    if arch != Arch.CUDA:
        shared = arch in CPU_ARCHS
        kinds.append((f"numpy ({'zero-copy' if shared else 'staged copies'})", lambda: np.zeros(16, np.float32),
                      shared))
        return kinds
    try:
        import torch
        if torch.cuda.is_available():
            kinds.append(("torch CUDA tensor", lambda: torch.zeros(16, device="cuda"), True))
    except ImportError:
        pass
    try:
        import cupy
        kinds.append(("CuPy array", lambda: cupy.zeros(16, cupy.float32), True))
    except ImportError:
        pass
    try:
        import jax
        import jax.numpy as jnp
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        if gpus:
            kinds.append(("JAX array", lambda: jax.device_put(jnp.zeros(16, jnp.float32), gpus[0]), True))
    except (ImportError, RuntimeError):
        pass
    return kinds


class Bench:
    """Runs the sections on one arch."""

    def __init__(self, arch: Arch, quick: bool, log: Callable[[str], None]):
        self.arch = arch
        self.name = arch.name.lower()
        self.quick = quick
        self.log = log
        self.gpu = arch not in CPU_ARCHS
        self.device = _device_name(arch)
        self.software = "lavapipe" in self.device or "llvmpipe" in self.device  # a CPU behind Vulkan
        self.module_path = taichi_module("bench", self.name)
        self.driver: _Server | None = None
        self.driver_note = ""
        try:
            exe = bench_driver(capi.library.path)
            self.driver = _Server([exe, str(int(arch)), self.module_path], f"raw C driver ({self.name})")
        except (CompileError, RuntimeError, OSError) as e:
            self.driver_note = f"no raw C reference: {e}"
            log(self.driver_note)
        self.rt = Runtime(arch)
        self.mod = self.rt.load_module(self.module_path)

    def close(self) -> None:
        """Stop the raw C driver and close the runtime."""
        if self.driver is not None:
            self.driver.close()
        self.rt.close()

    def _timed(self, loop: Callable[[], object]) -> float:
        t0 = time.perf_counter()
        loop()
        self.rt.wait()
        return time.perf_counter() - t0

    # -- launch overhead --------------------------------------------------------------

    def launch_overhead(self, jit: bool) -> list[Row]:
        """Per-launch cost of a trivial kernel, each way taichi_aot can launch it, against raw C and Taichi's JIT.

        The reference is a C loop in this process on this runtime (``taichi_aot_steps``: plain ``ti_launch_kernel``
        calls over the same handle and packed arguments), measured in paired rounds (:mod:`.bench_measure`); the
        compiled driver in a process of its own is shown beside it."""
        fast = not self.gpu or self.arch == Arch.CUDA  # launches are cheap there: more of them
        n = (1000 if self.quick else 4000) if fast else (150 if self.quick else 600)
        reps = 3
        if self.arch == Arch.CUDA and not self.quick:  # a GPU host's noise comes in bursts: more, shorter repeats
            n, reps = n // 3, 8  # find its quiet moments for every method alike (its round bests); not on Vulkan,
        elif self.gpu and not self.quick:  # whose final wait (0.5 ms on an H100) would weigh on a shorter repeat
            reps = 5
        rounds = 5 if self.quick else 21
        methods: dict[str, Callable[[], float]] = {}
        tiny = self.mod.kernels["tiny"]
        x = self.rt.ndarray((16,), np.float32, host_access="none")  # as the raw C driver allocates
        methods["raw C"] = self._c_launches(tiny.bind(x, 1.0), n)
        driver = self.driver
        if driver is not None:
            methods["raw C, own process"] = lambda: driver.seconds(f"launch {n}") / n * 1e6
        methods.update(self._launch_methods(tiny, x, n))
        methods.update(self._launch_parts(tiny, x, n))
        jit_server = None
        if jit:
            try:
                jit_server = _Server([sys.executable, os.path.join(HERE, "bench_kernels.py"), "jit", self.name],
                                     f"Taichi JIT ({self.name})")
                jn, server = max(n // 4, 100), jit_server
                methods["Taichi JIT (ti.kernel call)"] = lambda: server.seconds(f"launch {jn}") / jn * 1e6
            except (RuntimeError, OSError) as e:
                self.log(f"Taichi JIT path not measured on {self.name}: {e}")
        try:
            measured = measure(methods, "raw C", rounds, reps)
        finally:
            if jit_server is not None:
                jit_server.close()
        params = {"launches": n, "rounds": rounds, "reps": reps}
        rows = [Row("launch", self.name, k, "us/launch", v, params=params) for k, v in measured.bests.items()]
        for r in rows:
            if r.name != "raw C":
                r.limit, r.ratio, r.spread = "raw C", measured.ratio(r.name), measured.spread(r.name)
        if measured.warnings:
            rows[0].note = "; ".join(measured.warnings)
        self._rate_launches(rows)
        return rows

    def _c_launches(self, bound: Any, n: int) -> Callable[[], float]:
        """``n`` launches of ``bound`` by the extension's raw C loop, then a wait (us per launch)."""
        loop = c_loop([bound])
        return lambda: loop(n, 0) * 1e6

    def _launch_methods(self, tiny: Kernel, x: NdArray, n: int) -> dict[str, Callable[[], float]]:
        """Each way the objects launch ``tiny(x, 1.0)``, timed over ``n`` launches (us per launch)."""
        rt = self.rt
        bound = tiny.bind(x, 1.0)
        with rt.record() as seq:
            tiny(x, 1.0)

        def dynamic() -> float:
            def loop() -> None:
                for _ in range(n):
                    tiny(x, 1.0)
            return self._timed(loop) / n * 1e6

        def prebound() -> float:
            launch = bound.launch

            def loop() -> None:
                for _ in range(n):
                    launch()
            return self._timed(loop) / n * 1e6

        def prebound_call() -> float:
            def loop() -> None:
                for _ in range(n):
                    bound()
            return self._timed(loop) / n * 1e6

        def recorded() -> float:
            return self._timed(lambda: seq.replay(n)) / n * 1e6

        return {"recorded sequence (C replay)": recorded, "pre-bound launch": prebound,
                "pre-bound launch, bound() form": prebound_call, "dynamic call (validated)": dynamic}

    def _launch_parts(self, tiny: Kernel, x: NdArray, n: int) -> dict[str, Callable[[], float]]:
        """What the dynamic call saves: the flat capi launch, and the same call checked and packed in Python (the
        path a call takes that the C call leaves to Python)."""
        rt = self.rt
        keep = tiny.bind(x, 1.0)
        rh, kh, array = rt.handle, tiny._handle, keep._packed.array
        slow = tiny._slow_call

        def flat() -> float:
            launch = capi.launch_kernel

            def loop() -> None:
                for _ in range(n):
                    launch(rh, kh, array)
            return self._timed(loop) / n * 1e6

        def checked_in_python() -> float:
            def loop() -> None:
                for _ in range(n):
                    slow(x, 1.0)
            return self._timed(loop) / n * 1e6

        return {"flat capi.launch_kernel": flat, "dynamic call checked in Python": checked_in_python}

    def _rate_launches(self, rows: list[Row]) -> None:
        """Set the launch rows' targets (their ratios are set); add the speed-up over Taichi's JIT when measured."""
        targets = {"recorded sequence (C replay)": 1.05, "pre-bound launch": 1.3 if not self.gpu else 1.05,
                   "dynamic call (validated)": 1.5 if not self.gpu else (None if self.software else 1.05)}
        by = {r.name: r for r in rows}
        for name, target in targets.items():
            row = by.get(name)
            if row is not None and target is not None and row.ratio is not None:
                row.target, row.met = f"<= {target:g}", row.ratio <= target
        if "Taichi JIT (ti.kernel call)" in by:
            jit_row, dyn = by["Taichi JIT (ti.kernel call)"], by["dynamic call (validated)"]
            speedup = jit_row.median / dyn.median
            target = 7.0 if self.arch == Arch.X64 else None
            rows.append(Row("launch", self.name, "speed-up of dynamic call over Taichi JIT", "x", [speedup],
                            limit="Taichi JIT (ti.kernel call)", ratio=speedup,
                            target=f">= {target:g}" if target else None,
                            met=(speedup >= target) if target else None))

    # -- graph against kernels ------------------------------------------------------------

    def graph_vs_kernels(self) -> list[Row]:
        """A 16-dispatch graph against the same 16 kernels launched one by one, per dispatch."""
        rt = self.rt
        x = rt.ndarray((16,), np.float32, host_access="none")  # as the raw C driver allocates
        graph, tiny = self.mod.graphs["tiny16"], self.mod.kernels["tiny"]
        n = 100 if self.quick else 1000
        if self.gpu and self.arch != Arch.CUDA:
            n = max(n // 10, 20)
        repeats = 3 if self.quick else 9
        bound_graph = graph.bind(x=x, a=1.0)
        bound = tiny.bind(x, 1.0)
        d = GRAPH_DISPATCHES

        def per_dispatch(loop: Callable[[], None]) -> Callable[[], float]:
            return lambda: self._timed(loop) / (n * d) * 1e6

        def graph_loop():
            for _ in range(n):
                bound_graph()

        def graph_dynamic_loop():
            for _ in range(n):
                graph(x=x, a=1.0)

        def kernels_bound_loop():
            for _ in range(n):
                for _ in range(d):
                    bound()

        def kernels_dynamic_loop():
            for _ in range(n):
                for _ in range(d):
                    tiny(x, 1.0)

        methods: dict[str, Callable[[], float]] = {}
        driver = self.driver
        if driver is not None:
            methods["raw C: graph"] = lambda: driver.seconds(f"graph {n}") / (n * d) * 1e6
            methods["raw C: 16 kernel launches"] = lambda: driver.seconds(f"kernels16 {n}") / (n * d) * 1e6
        methods.update({"graph (bound)": per_dispatch(graph_loop), "graph (dynamic call)":
                        per_dispatch(graph_dynamic_loop), "16 kernels (bound)": per_dispatch(kernels_bound_loop),
                        "16 kernels (dynamic calls)": per_dispatch(kernels_dynamic_loop)})
        samples = _interleave(methods, repeats)
        rows = [Row("graph", self.name, k, "us/dispatch", v, params={"dispatches": d, "launches": n})
                for k, v in samples.items()]
        _ratio(rows, "graph (bound)", "raw C: graph")
        _ratio(rows, "graph (dynamic call)", "raw C: graph")
        _ratio(rows, "16 kernels (bound)", "raw C: 16 kernel launches")
        _ratio(rows, "16 kernels (dynamic calls)", "raw C: 16 kernel launches")
        return rows

    # -- throughput -----------------------------------------------------------------------

    def throughput(self, torch_copy: _Server | None) -> list[Row]:
        """Memory-bound kernels (copy, saxpy) from 2^10 elements up, against raw C and a plain copy."""
        rows: list[Row] = []
        for e in [10, 14] if self.quick else list(range(10, 27, 2)):
            rows += self._throughput_at(e, torch_copy)
        return rows

    def _throughput_at(self, e: int, torch_copy: _Server | None) -> list[Row]:
        """The throughput rows of one size: 2^e f32 elements."""
        rt = self.rt
        repeats = 3 if self.quick else 5
        budget = 5e-3 if self.quick else 3e-2  # seconds of work per sample, roughly
        size = 1 << e
        nbytes = size * 4
        x = rt.ndarray((size,), np.float32, host_access="none" if self.gpu else "readwrite")
        y = rt.ndarray((size,), np.float32, host_access="none" if self.gpu else "readwrite")
        copy, saxpy = self.mod.kernels["copy"].bind(x, y), self.mod.kernels["saxpy"].bind(x, y, 0.5)
        # launches per sample: enough work to time (calibrated on one timed batch), at least 3
        saxpy()
        rt.wait()
        def three() -> None:
            for _ in range(3):
                saxpy()

        t1 = max(self._timed(three) / 3, 1e-7)
        per = max(3, min(2000, int(budget / t1)))
        methods: dict[str, Callable[[], float]] = {}
        driver = self.driver
        if driver is not None:
            methods["raw C copy"] = lambda: 2 * nbytes * per / driver.seconds(f"stream copy {size} {per}")
            methods["raw C saxpy"] = lambda: 3 * nbytes * per / driver.seconds(f"stream saxpy {size} {per}")

        def run(bound: Callable[[], object]) -> Callable[[], float]:
            def f() -> float:
                def loop() -> None:
                    for _ in range(per):
                        bound()
                return self._timed(loop)
            return f

        cp, sx = run(copy), run(saxpy)
        methods["taichi_aot copy"] = lambda: 2 * nbytes * per / cp()
        methods["taichi_aot saxpy"] = lambda: 3 * nbytes * per / sx()
        limit = self._copy_limit(methods, x, y, size, per, torch_copy)
        samples = _interleave(methods, repeats)
        group = [Row("throughput", self.name, k, "GB/s", [s / 1e9 for s in v],
                     params={"elements": size, "launches": per}) for k, v in samples.items()]
        for r in group:
            r.name = f"{r.name} @2^{e}"
        by = {r.name.rsplit(" @", 1)[0]: r for r in group}
        for name in ("taichi_aot copy", "taichi_aot saxpy"):
            raw = "raw C " + name.split()[-1]
            if raw in by and name in by:
                r = by[name]
                r.limit, r.ratio = by[raw].name, r.median / by[raw].median
                if self.gpu and name.endswith("saxpy") and e >= 24:
                    r.target, r.met = ">= 0.97", r.ratio >= 0.97
        for name in ("raw C copy", "raw C saxpy", "taichi_aot copy", "taichi_aot saxpy"):
            if name in by and limit in by:
                by[name].note = f"{by[name].median / by[limit].median:.2f} of {limit}"
        x.close()
        y.close()
        return group

    def _copy_limit(self, methods: dict[str, Callable[[], float]], x: NdArray, y: NdArray, size: int, per: int,
                    torch_copy: _Server | None) -> str:
        """Add this backend's plain copy of ``size`` f32 (bytes/s, ``per`` a sample) to ``methods``; its name."""
        nbytes = size * 4
        if not self.gpu:
            src = np.ones(size, np.float32)
            dst = np.empty_like(src)

            def host_copy() -> float:
                t0 = time.perf_counter()
                for _ in range(per):
                    np.copyto(dst, src)
                return 2 * nbytes * per / (time.perf_counter() - t0)

            methods["memcpy (np.copyto)"] = host_copy
            return "memcpy (np.copyto)"
        if self.arch == Arch.CUDA:  # 1.7.4 has no device copy on CUDA: the driver's cuMemcpyDtoD
            from .. import _cuda

            dst_ptr, src_ptr = y.memory.cuda_pointer(), x.memory.cuda_pointer()

            def dtod() -> float:
                def loop() -> None:
                    for _ in range(per):
                        _cuda.dtod(dst_ptr, src_ptr, nbytes)
                return 2 * nbytes * per / self._timed(loop)

            methods["device copy (cuMemcpyDtoD)"] = dtod
            if torch_copy is None:
                return "device copy (cuMemcpyDtoD)"
            methods["torch device-to-device copy"] = (
                lambda: 2 * nbytes * per / torch_copy.seconds(f"copy {size} {per}"))
            return "torch device-to-device copy"
        driver = self.driver
        if driver is not None:
            methods["device copy (ti_copy_memory_device_to_device)"] = (
                lambda: 2 * nbytes * per / driver.seconds(f"d2d {size} {per}"))
        return "device copy (ti_copy_memory_device_to_device)"

    # -- transfers ------------------------------------------------------------------------

    def transfers(self, torch_copy: _Server | None = None) -> list[Row]:
        """to_numpy, from_numpy and mapped views against np.copyto, from 1 KiB up; on CUDA also page-locked
        arrays (``rt.host_array``) against torch's copies from and to pinned memory (``torch_copy``)."""
        sizes = [1 << 10, 1 << 20] if self.quick else [1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24,
                                                       1 << 26, 1 << 28]
        if self.arch == Arch.CUDA:  # host-visible ndarrays are CUDA managed memory there: keep them small
            sizes = [n for n in sizes if n <= 1 << 26]
        rows: list[Row] = []
        for nbytes in sizes:
            rows += self._transfers_at(nbytes, torch_copy)
        return rows

    def _transfers_at(self, nbytes: int, torch_copy: _Server | None = None) -> list[Row]:
        """The transfer rows of one size, in GB/s."""
        repeats = 3 if self.quick else 5
        count = nbytes // 4
        nd = self.rt.ndarray((count,), np.float32)
        src = np.random.default_rng(0).random(count, dtype=np.float32)
        dst = np.empty_like(src)
        per = max(1, min(2000, int((2e-3 if self.quick else 2e-2) / max(nbytes / 8e9, 1e-6))))

        def timed(f: Callable[[], object]) -> Callable[[], float]:
            def g() -> float:
                t0 = time.perf_counter()
                for _ in range(per):
                    f()
                return nbytes * per / (time.perf_counter() - t0) / 1e9
            return g

        def mapped_write() -> None:
            with nd.map() as view:
                np.copyto(view, src)

        def mapped_read() -> None:
            with nd.map() as view:
                np.copyto(dst, view)

        methods = {
            "np.copyto (host to host)": timed(lambda: np.copyto(dst, src)),
            "from_numpy": timed(lambda: nd.from_numpy(src)),
            "to_numpy(out=)": timed(lambda: nd.to_numpy(out=dst)),
            "to_numpy() (new array)": timed(nd.to_numpy),
            "np.copy (new array)": timed(src.copy),
        }
        if nd.memory.host_read:  # device memory (CUDA's default) has no views
            methods["mapped view write (np.copyto)"] = timed(mapped_write)
            methods["mapped view read (np.copyto)"] = timed(mapped_read)
        pinned_pairs = []
        if self.arch == Arch.CUDA:  # page-locked arrays, copied directly, against torch's pinned copies
            pinned = self.rt.host_array((count,), np.float32)
            pinned[:] = src
            methods["from_numpy (rt.host_array)"] = timed(lambda: nd.from_numpy(pinned))
            methods["to_numpy(out=rt.host_array)"] = timed(lambda: nd.to_numpy(out=pinned))
            if torch_copy is not None:
                server = torch_copy
                methods["torch pinned to device"] = lambda: nbytes * per / server.seconds(f"h2d {count} {per}") / 1e9
                methods["torch device to pinned"] = lambda: nbytes * per / server.seconds(f"d2h {count} {per}") / 1e9
                pinned_pairs = [("from_numpy (rt.host_array)", "torch pinned to device"),
                                ("to_numpy(out=rt.host_array)", "torch device to pinned")]
        samples = _interleave(methods, repeats)
        label = _size_label(nbytes)
        group = [Row("transfers", self.name, f"{k} @{label}", "GB/s", v, params={"bytes": nbytes, "per": per})
                 for k, v in samples.items()]
        by = {r.name.rsplit(" @", 1)[0]: r for r in group}
        limit = by["np.copyto (host to host)"]
        for name in ("from_numpy", "to_numpy(out=)", "mapped view write (np.copyto)",
                     "mapped view read (np.copyto)"):
            if name not in by:
                continue
            r = by[name]
            r.limit, r.ratio = limit.name, r.median / limit.median
            if nbytes >= 1 << 20 and name in ("from_numpy", "to_numpy(out=)"):
                r.target, r.met = ">= 0.9", r.ratio >= 0.9
        fresh, ref = by["to_numpy() (new array)"], by["np.copy (new array)"]
        fresh.limit, fresh.ratio = ref.name, fresh.median / ref.median
        if self.arch == Arch.CUDA:
            _cuda_targets(by, nbytes, pinned_pairs)
        nd.close()
        return group

    # -- foreign arrays ---------------------------------------------------------------------

    def interop(self) -> list[Row]:
        """Dynamic launches with the caller's own arrays against the same launches with NdArrays, with 1 and with 3
        array arguments: numpy on the CPU (zero-copy) and on Vulkan (staged copies), torch, CuPy and JAX on CUDA
        (zero-copy), what taking a foreign array costs after its first call. ``tiny3`` writes x and only reads y
        and z (declared here: LLVM modules record no access), so a JAX array, immutable, travels as y or z."""
        fast = not self.gpu or self.arch == Arch.CUDA
        n = (2000 if self.quick else 3000) if fast else (300 if self.quick else 1500)
        rounds = 3 if self.quick else 11
        tiny, tiny3 = self.mod.kernels["tiny"], self.mod.kernels["tiny3"].declare_access({1: "read", 2: "read"})
        nds = [self.rt.ndarray((16,), np.float32) for _ in range(3)]

        def timed(kernel: Any, args: tuple) -> Callable[[], float]:
            def one() -> float:
                def loop() -> None:
                    for _ in range(n):
                        kernel(*args)
                return self._timed(loop) / n * 1e6
            return one

        methods = {"1 array: NdArray": timed(tiny, (nds[0], 1.0)),
                   "3 arrays: NdArray": timed(tiny3, (*nds, 1.0))}
        compared = []
        for kind, make, zero_copy in _foreign_kinds(self.arch):
            try:
                arrays = [make() for _ in range(3)]
            except Exception as e:  # the library cannot allocate here (no GPU for it)
                self.log(f"  interop: {kind} skipped ({type(e).__name__}: {e})")
                continue
            if kind.startswith("JAX"):  # immutable: only for arguments the kernel reads (y, z)
                methods[f"1 array: {kind}"] = timed(tiny3, (nds[0], arrays[1], nds[2], 1.0))
                methods[f"3 arrays: {kind} as y and z, x an NdArray"] = timed(tiny3, (nds[0], *arrays[1:], 1.0))
                compared += [(f"1 array: {kind}", "3 arrays: NdArray", zero_copy),
                             (f"3 arrays: {kind} as y and z, x an NdArray", "3 arrays: NdArray", zero_copy)]
                continue
            methods[f"1 array: {kind}"] = timed(tiny, (arrays[0], 1.0))
            methods[f"3 arrays: {kind}"] = timed(tiny3, (*arrays, 1.0))
            compared += [(f"1 array: {kind}", "1 array: NdArray", zero_copy),
                         (f"3 arrays: {kind}", "3 arrays: NdArray", zero_copy)]
        measured = measure(methods, None, rounds)  # paired rounds: each foreign form against its NdArray form
        rows = [Row("interop", self.name, f"dynamic call, {k}", "us/launch", v,
                    params={"launches": n, "rounds": rounds}) for k, v in measured.bests.items()]
        by = {r.name: r for r in rows}
        for name, limit, zero_copy in compared:
            paired = measured.pair(name, limit)
            if paired is None:
                continue
            row = by[f"dynamic call, {name}"]
            row.limit, (row.ratio, row.spread) = f"dynamic call, {limit}", paired
            if zero_copy:
                row.target, row.met = "<= 1.1", row.ratio <= 1.1
        if measured.warnings:
            rows[0].note = "; ".join(measured.warnings)
        for nd in nds:
            nd.close()
        return rows

    # -- memory growth --------------------------------------------------------------------

    def memory_growth(self) -> list[Row]:
        rt, tiny = self.rt, self.mod.kernels["tiny"]
        x = rt.ndarray((16,), np.float32, host_access="none")  # as the raw C driver allocates
        n = 10_000 if self.quick else 100_000
        bound = tiny.bind(x, 1.0)
        for _ in range(1000):
            tiny(x, 1.0)
        rt.wait()
        tracemalloc.start()
        before_py = tracemalloc.get_traced_memory()[0]
        before_rss = _rss()
        for i in range(n):
            tiny(x, 1.0)
            bound()
            if i % 500 == 499:  # a wait every 1000 launches, as the raw C reference does
                rt.wait()
        rt.wait()
        after_py = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        after_rss = _rss()
        py = (after_py - before_py) / 1024
        rss = (after_rss - before_rss) / 1024
        params = {"launches": 2 * n}
        rows = [Row("memory", self.name, f"Python heap growth over {2 * n} launches", "KiB", [py], target="<= 64",
                    met=py <= 64, params=params)]
        c_rss = None
        if self.driver is not None:  # the library's own growth for as many launches, for comparison
            pid = self.driver.proc.pid
            self.driver.seconds("launch 1000")
            c_before = _rss(pid)
            for _ in range(2 * n // 1000):
                self.driver.seconds("launch 1000")
            c_rss = (_rss(pid) - c_before) / 1024
            rows.append(Row("memory", self.name, f"raw C: RSS growth over {2 * n} launches", "KiB", [c_rss],
                            params=params))
        ours = Row("memory", self.name, f"RSS growth over {2 * n} launches", "KiB", [rss], params=params)
        allowed = 1024 + max(c_rss or 0.0, 0.0)
        ours.target, ours.met = f"<= {allowed:.0f}", rss <= allowed
        if c_rss:
            ours.limit, ours.note = rows[-1].name, "target: raw C's growth + 1 MiB"
        rows.append(ours)
        return rows


def _cuda_targets(by: dict[str, Row], nbytes: int, pinned_pairs: list[tuple[str, str]]) -> None:
    """CUDA's transfer targets: pageable arrays also reach CUDA_PAGEABLE_GBS from 16 MiB up, page-locked
    ones 0.9 of torch's pinned copy from 1 MiB up."""
    if nbytes >= 1 << 24:
        for name in ("from_numpy", "to_numpy(out=)"):
            r = by[name]
            r.target = f">= 0.9 and >= {CUDA_PAGEABLE_GBS} GB/s"
            r.met = r.ratio is not None and r.ratio >= 0.9 and r.median >= CUDA_PAGEABLE_GBS
    for ours, theirs in pinned_pairs:
        r = by[ours]
        r.limit, r.ratio = by[theirs].name, r.median / by[theirs].median
        if nbytes >= 1 << 20:
            r.target, r.met = ">= 0.9", r.ratio >= 0.9


def _rss(pid: int | str = "self") -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _size_label(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


_TORCH_SERVER = r"""
import json, sys, time
import torch
assert torch.cuda.is_available()
a = b = None
print(json.dumps({"ready": True, "device": torch.cuda.get_device_name()}), flush=True)


def timed(dst, src, n):
    dst.copy_(src)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        dst.copy_(src)
    torch.cuda.synchronize()
    print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)


for line in sys.stdin:
    words = line.split()
    if not words or words[0] == "quit":
        break
    size, n = int(words[1]), int(words[2])
    if words[0] in ("h2d", "d2h"):  # pinned host memory to and from the device
        host = torch.ones(size, dtype=torch.float32, pin_memory=True)
        dev = torch.empty(size, dtype=torch.float32, device="cuda")
        timed(*((dev, host) if words[0] == "h2d" else (host, dev)), n)
        continue
    if a is None or a.numel() != size:
        a = torch.ones(size, dtype=torch.float32, device="cuda")
        b = torch.empty_like(a)
    timed(b, a, n)
"""


def _torch_server(log: Callable[[str], None]) -> _Server | None:
    """torch's device-to-device copy, measured in its own process (it brings its own CUDA runtime)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None
    try:
        return _Server([sys.executable, "-c", _TORCH_SERVER], "torch copy")
    except (RuntimeError, OSError) as e:
        log(f"torch's copy not measured: {e}")
        return None


def _section(bench: Bench, section: str, arch: Arch, quick: bool, jit_ok: bool, log: Callable[[str], None]
             ) -> list[Row]:
    """The rows of one section on one arch."""
    if section == "launch":
        return bench.launch_overhead(jit_ok)
    if section == "graph":
        return bench.graph_vs_kernels()
    if section in ("throughput", "transfers"):  # on CUDA against torch's copies, measured in its own process
        torch_server = _torch_server(log) if arch == Arch.CUDA else None
        try:
            return bench.throughput(torch_server) if section == "throughput" else bench.transfers(torch_server)
        finally:
            if torch_server is not None:
                torch_server.close()
    if section == "interop":
        return bench.interop()
    if section == "simulation":
        return simulation(bench.rt, quick)
    if section == "scaling":
        from .bench_scaling import scaling

        return scaling(bench.rt, quick, log)
    return bench.memory_growth()


SECTIONS = ("launch", "simulation", "graph", "throughput", "transfers", "memory", "interop", "scaling")


def run(archs: list[Arch] | None = None, quick: bool = False, sections: Sequence[str] = SECTIONS, jit: bool = True,
        log: Callable[[str], None] = print, saved: Callable[[dict], None] | None = None) -> dict:
    """Run the benchmark sections on every available arch (or ``archs``); returns the results."""
    status = capi.arch_status()
    if archs is None:
        archs = [a for a in (Arch.X64, Arch.VULKAN, Arch.CUDA) if status[a].available]
    jit_ok = jit and _has_taichi()
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": quick, "host": platform.node(),
        "machine": _machine(), "python": platform.python_version(), "numpy": np.__version__,
        "library": capi.library.path, "c_api_version": capi.get_version(), "archs": {}, "rows": [], "errors": [],
        "warnings": machine_warnings(),
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


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def _device_name(arch: Arch) -> str:
    if arch in capi.CPU_ARCHS:
        return _machine()
    if arch == Arch.CUDA:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            return out.stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return "CUDA device"
    if arch == Arch.VULKAN:
        try:
            out = subprocess.run(["vulkaninfo", "--summary"], capture_output=True, text=True, timeout=20)
            for line in out.stdout.splitlines():
                if "deviceName" in line:
                    return line.split("=", 1)[1].strip()
        except (OSError, subprocess.SubprocessError):
            pass
        gpu = _device_name(Arch.CUDA) if shutil.which("nvidia-smi") else None
        if gpu:
            return f"{gpu} (Vulkan)"
        if any(os.path.exists(os.path.join(d, f)) for d in ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d")
               for f in ("lvp_icd.x86_64.json", "lvp_icd.json")):
            return "lavapipe (Mesa's software Vulkan driver)"
        return "Vulkan device (first)"
    return arch.name


def format_rows(rows: Sequence[Row | dict]) -> str:
    """A readable table: median, min-max, ratio to the limit, target and whether it is met."""
    lines = []
    head = f"  {'':52} {'median':>10} {'min-max':>19} {'ratio':>7} {'(mins/±)':>8}  {'target':<8} vs"
    section = None
    for r in rows:
        d = r.to_dict() if isinstance(r, Row) else r
        if d["section"] != section:
            section = d["section"]
            lines.append(f"-- {d['arch']}: {section} ({d['unit']})")
            lines.append(head)
        lo, hi = d["min"], d["max"]
        rng = f"{format_figure(lo)}-{format_figure(hi)}" if lo is not None and hi is not None and lo != hi else ""
        ratio = f"{d['ratio']:.2f}x" if d["ratio"] is not None else ""
        if d.get("spread") is not None:  # paired rounds (bench_measure): the ratios' spread
            mins = f"±{d['spread']:.1%}"
        else:
            mins = f"{d['min_ratio']:.2f}x" if d.get("min_ratio") is not None else ""
        target = d["target"] or ""
        mark = "" if d["met"] is None else (" ok" if d["met"] else " MISSED")
        target = target.replace(" ", "")
        vs = (d["limit"] or "") + (f"; {d['note']}" if d["note"] else "")
        lines.append(f"  {d['name'][:52]:52} {format_figure(d['median']):>10} {rng:>19} {ratio:>7} {mins:>8}  "
                     f"{target + mark:<8} {vs}")
    return "\n".join(lines)


def format_figure(v: float | None) -> str:
    """A figure to three significant digits (thousands grouped); "" for None."""
    if v is None:
        return ""
    if v != v:
        return "nan"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def summary(results: dict) -> str:
    """The target lines only: what the issue asks to see."""
    out = [f"errors: {e}" for e in results.get("errors", [])] + ["targets:"]
    for d in results["rows"]:
        if d["target"]:
            state = "met" if d["met"] else "MISSED"
            value = d["ratio"] if d["ratio"] is not None else d["median"]
            out.append(f"  [{state:6}] {d['arch']:7} {d['name']}: {value:.3g} ({d['target']})"
                       f"{' vs ' + d['limit'] if d['limit'] else ''}")
    return "\n".join(out)


def _empty(ax: Any, title: str, what: str) -> None:
    ax.set_title(title, fontsize=9)
    ax.text(0.5, 0.5, f"no {what} in this run", ha="center", va="center", transform=ax.transAxes, color="grey")
    ax.set_axis_off()


def _plot_launch(ax: Any, launch: list[dict], title: str) -> None:
    """One arch's launch costs: a bar per path, log scale, the min-max as error bars."""
    if not launch:
        return _empty(ax, title, "launch figures")
    ax.barh([d["name"] for d in launch], [d["median"] for d in launch],
            xerr=[[d["median"] - d["min"] for d in launch], [d["max"] - d["median"] for d in launch]])
    ax.set_xscale("log")
    ax.invert_yaxis()  # in the order the section ran them, top down
    ax.set_xlabel("µs per launch (median, min-max; log scale)")
    ax.set_title(title, fontsize=9)
    ax.tick_params(axis="y", labelsize=7)


def _plot_throughput(ax: Any, rows: list[dict], title: str) -> None:
    """One arch's throughput curves: GB/s against the element count, both on log scales (the kernels span
    orders of magnitude, and on a linear scale the small sizes lie on top of each other at the bottom)."""
    series: dict[str, list] = {}
    for d in rows:
        series.setdefault(d["name"].rsplit(" @", 1)[0], []).append((d["params"]["elements"], d["median"]))
    if not series:
        return _empty(ax, title, "throughput figures")
    for name, pts in series.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("f32 elements (log scale)")
    ax.set_ylabel("GB/s, bytes read + written (log scale)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def plot(results: dict, path: str) -> None:
    """Write a PNG of the launch costs and throughput (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    archs = list(results["archs"])
    fig, axes = plt.subplots(2, max(len(archs), 1), figsize=(6.5 * max(len(archs), 1), 9.5), squeeze=False)
    for i, arch in enumerate(archs):
        rows = [d for d in results["rows"] if d["arch"] == arch]
        device = results["archs"][arch]["device"]
        _plot_launch(axes[0][i], [d for d in rows if d["section"] == "launch" and d["unit"] == "us/launch"],
                     f"{arch}: launch cost of a trivial kernel\n{device}")
        _plot_throughput(axes[1][i], [d for d in rows if d["section"] == "throughput"],
                         f"{arch}: memory-bound kernels\n{device}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
