"""One arch's benchmark harness, and what the sections of ``taichi-aot bench`` measure with.

:class:`Bench` holds an arch's runtime, the benchmark module loaded on it and the raw C driver; each section
is a function of it (launch.py, transfers.py, ...). :class:`Server` is a child process that answers one JSON
line a command (the raw C driver, Taichi's JIT, torch's copies); :func:`interleave` runs methods in turn and
:func:`ratio` compares one row with another.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from typing import IO, Any, Callable

from taichi_aot import Arch, Runtime, capi
from taichi_aot.cli.cache import CompileError
from taichi_aot.enums import CPU_ARCHS

from .compile import bench_driver, taichi_module
from .row import Row

#: named ways to take one sample of a figure, run in turn (interleave, measure.measure)
Methods = dict[str, Callable[[], float]]


class Server:
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


class Bench:
    """One arch's runtime, the benchmark module loaded on it and the raw C driver (None where it cannot be
    built); the sections run on it."""

    def __init__(self, arch: Arch, quick: bool, log: Callable[[str], None]):
        self.arch = arch
        self.name = arch.name.lower()
        self.quick = quick
        self.log = log
        self.gpu = arch not in CPU_ARCHS
        self.device = device_name(arch)
        self.software = "lavapipe" in self.device or "llvmpipe" in self.device  # a CPU behind Vulkan
        self.module_path = taichi_module("bench", self.name)
        self.corpus: str | None = None  # a folder of CUDA modules the launcher section times kernel by kernel
        self.vk_raw: str | None = None  # a build of benchmarks/vk_raw.c (raw Vulkan's floors)
        self.threads_raw: str | None = None  # a build of benchmarks/threads_raw.c (threads sharing a GPU in C alone)
        self.jit = True  # whether rows beside Taichi's JIT are made (bench --no-jit, or no Taichi: not)
        self.driver: Server | None = None
        self.driver_note = ""
        try:
            exe = bench_driver(capi.library.path)
            self.driver = Server([exe, str(int(arch)), self.module_path], f"raw C driver ({self.name})")
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

    def timed(self, loop: Callable[[], object]) -> float:
        """Seconds that ``loop()`` takes, with a final wait on the runtime (as in C)."""
        t0 = time.perf_counter()
        loop()
        self.rt.wait()
        return time.perf_counter() - t0

    def per_call(self, body: Callable[[], object], n: int, sync: Callable[[], object] | None = None
                 ) -> Callable[[], float]:
        """A method for ``measure``: microseconds per call of ``n`` calls of ``body`` (then ``sync``, another
        library's wait, and the runtime's)."""
        def one() -> float:
            def loop() -> None:
                for _ in range(n):
                    body()
                if sync is not None:
                    sync()
            return self.timed(loop) / n * 1e6
        return one


def interleave(methods: Methods, repeats: int) -> dict[str, list[float]]:
    """Run each method once as warm-up, then ``repeats`` rounds of all methods in turn."""
    for f in methods.values():
        f()
    out: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, f in methods.items():
            out[name].append(f())
    return out


def ratio(rows: list[Row], name: str, limit: str, target: float | None = None, higher_is_better: bool = False,
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


def machine() -> str:
    """The host's CPU model and core count."""
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


def device_name(arch: Arch) -> str:
    """The device that runs ``arch``'s kernels, as its tools name it (the CPU on CPU archs)."""
    if arch in capi.CPU_ARCHS:
        return machine()
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
        gpu = device_name(Arch.CUDA) if shutil.which("nvidia-smi") else None
        if gpu:
            return f"{gpu} (Vulkan)"
        if any(os.path.exists(os.path.join(d, f)) for d in ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d")
               for f in ("lvp_icd.x86_64.json", "lvp_icd.json")):
            return "lavapipe (Mesa's software Vulkan driver)"
        return "Vulkan device (first)"
    return arch.name


def torch_here(bench: Bench) -> tuple[Any, str, Callable[[], object] | None] | None:
    """torch, the device its tensors take on this arch ("cuda" or "cpu") and its wait on CUDA (None on the CPU),
    or None where torch (or, on CUDA, torch's CUDA) is missing: the sections that compare with torch skip it."""
    try:
        import torch
    except ImportError:
        return None
    if bench.rt.arch != Arch.CUDA:
        return torch, "cpu", None
    return (torch, "cuda", torch.cuda.synchronize) if torch.cuda.is_available() else None
