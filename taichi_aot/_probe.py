"""Find out, without risking this process, which archs can really create a runtime.

libtaichi_c_api 1.7.4's own ``ti_get_available_archs`` segfaults when libcuda is
absent, creating an OpenGL runtime without a display segfaults, and a CUDA
runtime without a driver silently falls back to x64. So each GPU arch is tried
in a child process (running :func:`_child`) that creates and
destroys a runtime and prints one line; a crash there only fails that arch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import subprocess
import sys
import threading
from typing import NamedTuple

from .enums import CPU_ARCHS, Arch

_MARK = "taichi_aot-probe:"


class ArchStatus(NamedTuple):
    """What the probe found for one arch."""

    arch: Arch
    available: bool
    device_count: int | None  # None where the C-API gives no way to count
    reason: str  # why not, when not available


def cuda_device_count() -> tuple[int, str]:
    """Devices libcuda reports, or (0, why not)."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        cuda = ctypes.CDLL(name)
    except OSError as e:
        return 0, f"libcuda not found ({e})"
    try:
        if cuda.cuInit(0) != 0:
            return 0, "cuInit failed (no usable NVIDIA driver)"
        count = ctypes.c_int(0)
        if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0, "cuDeviceGetCount failed"
    except AttributeError as e:
        return 0, f"libcuda lacks {e}"
    return count.value, "" if count.value else "no CUDA device"


def host_cpu_arch() -> Arch | None:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return Arch.X64
    if machine in ("aarch64", "arm64"):
        return Arch.ARM64
    return None


def _probe_in_child(arch: Arch, timeout: float) -> tuple[bool, str]:
    cmd = [sys.executable, "-c", f"import sys; from taichi_aot._probe import _child; sys.exit(_child({int(arch)}))"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
    except subprocess.TimeoutExpired:
        return False, f"probe timed out after {timeout:.0f} s"
    for line in proc.stdout.splitlines():
        if line.startswith(_MARK):
            status, _, why = line[len(_MARK) :].partition(" ")
            return status == "ok", why
    tail = (proc.stderr or "").strip().splitlines()[-1:] or [""]
    return False, f"probe process died (exit code {proc.returncode}) {tail[0]}".strip()


def probe(timeout: float = 60.0) -> dict[Arch, ArchStatus]:
    """Probe every arch the C-API knows; GPU archs in child processes, in parallel."""
    results: dict[Arch, ArchStatus] = {}
    cpu = host_cpu_arch()
    for arch in sorted(CPU_ARCHS):
        if arch != cpu:
            results[arch] = ArchStatus(arch, False, None, f"this machine is {platform.machine()}")
    cuda_count, cuda_why = cuda_device_count()
    children: dict[Arch, threading.Thread] = {}
    found: dict[Arch, tuple[bool, str]] = {}

    def run(a: Arch) -> None:
        found[a] = _probe_in_child(a, timeout)

    wanted = [a for a in (cpu, Arch.VULKAN, Arch.CUDA, Arch.OPENGL, Arch.GLES, Arch.METAL) if a is not None]
    for arch in wanted:
        if arch == Arch.CUDA and cuda_count == 0:
            results[arch] = ArchStatus(arch, False, 0, cuda_why)
            continue
        if arch == Arch.METAL and sys.platform != "darwin":
            results[arch] = ArchStatus(arch, False, None, "Metal needs macOS")
            continue
        children[arch] = threading.Thread(target=run, args=(arch,), daemon=True)
        children[arch].start()
    for arch, thread in children.items():
        thread.join()
        ok, why = found.get(arch, (False, "probe did not report"))
        count = cuda_count if arch == Arch.CUDA else (1 if ok else 0)
        if arch in CPU_ARCHS:
            count = 1 if ok else 0
        results[arch] = ArchStatus(arch, ok, count if arch == Arch.CUDA or arch in CPU_ARCHS else None, why)
    return {a: results[a] for a in Arch if a in results}


def _child(arch_value: int) -> int:
    # Runs in the child: load the library, create and destroy one runtime.
    from . import errors
    from ._library import Quiet
    from ._native import ffi, lib

    arch = Arch(arch_value)
    q = Quiet()
    with q:
        runtime = lib.ti_create_runtime(arch, 0)
    code, message = errors.take_last_error()
    if code != 0 or runtime == ffi.NULL:
        print(f"{_MARK}no {message or 'runtime creation failed'}", flush=True)
        return 0
    with Quiet():
        lib.ti_destroy_runtime(runtime)
    code, message = errors.take_last_error()
    print(f"{_MARK}ok" if code == 0 else f"{_MARK}no destroy failed: {message}", flush=True)
    return 0

