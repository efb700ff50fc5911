"""The bandwidth sections of ``taichi-aot bench``, in GB/s: memory-bound kernels (throughput) and copies between
numpy arrays and ndarrays (transfers).

Kernels are compared with the raw C driver and with the backend's own plain copy (``np.copyto`` on the CPU, the
driver's or torch's device copy on CUDA, ``ti_copy_memory_device_to_device`` elsewhere); transfers with
``np.copyto``/``np.copy`` on the host and, on CUDA, with torch's copies from and to pinned memory. torch is
measured in a process of its own (:func:`torch_server`): it brings its own CUDA runtime.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable

import numpy as np

from taichi_aot import Arch

from .harness import Bench, Methods, Server, interleave
from .row import Row

if TYPE_CHECKING:
    from taichi_aot import BoundLaunch, NdArray

#: GB/s that from_numpy and to_numpy of pageable arrays reach on CUDA from 16 MiB up (half of torch's
#: pinned copy on an H200)
CUDA_PAGEABLE_GBS = 26


# -- throughput ----------------------------------------------------------------------------------------


def throughput(bench: Bench, torch_copy: Server | None) -> list[Row]:
    """Memory-bound kernels (copy, saxpy) from 2^10 elements up, against raw C and a plain copy."""
    rows: list[Row] = []
    for e in [10, 14] if bench.quick else list(range(10, 27, 2)):
        rows += _throughput_at(bench, e, torch_copy)
    return rows


def _throughput_at(bench: Bench, e: int, torch_copy: Server | None) -> list[Row]:
    """The throughput rows of one size: 2^e f32 elements."""
    rt = bench.rt
    repeats = 3 if bench.quick else 5
    size = 1 << e
    x = rt.ndarray((size,), np.float32, host_access="none" if bench.gpu else "readwrite")
    y = rt.ndarray((size,), np.float32, host_access="none" if bench.gpu else "readwrite")
    copy, saxpy = bench.mod.kernels["copy"].bind(x, y), bench.mod.kernels["saxpy"].bind(x, y, 0.5)
    per = _launches_per_sample(bench, saxpy)
    methods = _kernel_methods(bench, copy, saxpy, size, per)
    limit = _copy_limit(bench, methods, x, y, size, per, torch_copy)
    samples = interleave(methods, repeats)
    group = [Row("throughput", bench.name, f"{k} @2^{e}", "GB/s", [s / 1e9 for s in v],
                 params={"elements": size, "launches": per}) for k, v in samples.items()]
    by = {r.name.rsplit(" @", 1)[0]: r for r in group}
    _rate_kernels(by, saxpy_target=bench.gpu and e >= 24)
    _note_share_of(by, limit)
    x.close()
    y.close()
    return group


def _launches_per_sample(bench: Bench, saxpy: BoundLaunch) -> int:
    """Launches of a kernel per sample: enough work to time (calibrated on one timed batch), at least 3."""
    budget = 5e-3 if bench.quick else 3e-2  # seconds of work per sample, roughly
    saxpy()
    bench.rt.wait()

    def three() -> None:
        for _ in range(3):
            saxpy()

    t1 = max(bench.timed(three) / 3, 1e-7)
    return max(3, min(2000, int(budget / t1)))


def _kernel_methods(bench: Bench, copy: BoundLaunch, saxpy: BoundLaunch, size: int, per: int) -> Methods:
    """Copy and saxpy of ``size`` f32, ``per`` launches a sample, by the raw C driver and by taichi_aot (bytes/s:
    read + written)."""
    nbytes = size * 4
    methods: Methods = {}
    driver = bench.driver
    if driver is not None:
        methods["raw C copy"] = lambda: 2 * nbytes * per / driver.seconds(f"stream copy {size} {per}")
        methods["raw C saxpy"] = lambda: 3 * nbytes * per / driver.seconds(f"stream saxpy {size} {per}")
    cp, sx = _launches_timed(bench, copy, per), _launches_timed(bench, saxpy, per)
    methods["taichi_aot copy"] = lambda: 2 * nbytes * per / cp()
    methods["taichi_aot saxpy"] = lambda: 3 * nbytes * per / sx()
    return methods


def _launches_timed(bench: Bench, bound: BoundLaunch, per: int) -> Callable[[], float]:
    """Seconds of ``per`` launches of ``bound`` and a wait."""
    def f() -> float:
        def loop() -> None:
            for _ in range(per):
                bound()
        return bench.timed(loop)
    return f


def _rate_kernels(by: dict[str, Row], saxpy_target: bool) -> None:
    """Compare taichi_aot's copy and saxpy with raw C's (rows by name without the size); with ``saxpy_target``
    (a GPU, 2^24 elements up) saxpy is to reach 0.97 of raw C."""
    for name in ("taichi_aot copy", "taichi_aot saxpy"):
        raw = "raw C " + name.split()[-1]
        if raw not in by or name not in by:
            continue
        r = by[name]
        r.limit, r.ratio = by[raw].name, r.median / by[raw].median
        if saxpy_target and name.endswith("saxpy"):
            r.target, r.met = ">= 0.97", r.ratio >= 0.97


def _note_share_of(by: dict[str, Row], limit: str) -> None:
    """Note on each kernel row what share of the plain copy ``limit`` it reaches."""
    if limit not in by:
        return
    for name in ("raw C copy", "raw C saxpy", "taichi_aot copy", "taichi_aot saxpy"):
        if name in by:
            by[name].note = f"{by[name].median / by[limit].median:.2f} of {limit}"


def _copy_limit(bench: Bench, methods: Methods, x: NdArray, y: NdArray, size: int, per: int,
                torch_copy: Server | None) -> str:
    """Add this backend's plain copy of ``size`` f32 (bytes/s, ``per`` a sample) to ``methods``; its name."""
    nbytes = size * 4
    if not bench.gpu:
        src = np.ones(size, np.float32)
        dst = np.empty_like(src)

        def host_copy() -> float:
            t0 = time.perf_counter()
            for _ in range(per):
                np.copyto(dst, src)
            return 2 * nbytes * per / (time.perf_counter() - t0)

        methods["memcpy (np.copyto)"] = host_copy
        return "memcpy (np.copyto)"
    if bench.arch == Arch.CUDA:  # 1.7.4 has no device copy on CUDA: the driver's cuMemcpyDtoD
        from taichi_aot.drivers import cuda as _cuda

        dst_ptr, src_ptr = y.memory.cuda_pointer(), x.memory.cuda_pointer()

        def dtod() -> float:
            def loop() -> None:
                for _ in range(per):
                    _cuda.dtod(dst_ptr, src_ptr, nbytes)
            return 2 * nbytes * per / bench.timed(loop)

        methods["device copy (cuMemcpyDtoD)"] = dtod
        if torch_copy is None:
            return "device copy (cuMemcpyDtoD)"
        methods["torch device-to-device copy"] = (
            lambda: 2 * nbytes * per / torch_copy.seconds(f"copy {size} {per}"))
        return "torch device-to-device copy"
    driver = bench.driver
    if driver is not None:
        methods["device copy (ti_copy_memory_device_to_device)"] = (
            lambda: 2 * nbytes * per / driver.seconds(f"d2d {size} {per}"))
    return "device copy (ti_copy_memory_device_to_device)"


# -- transfers -----------------------------------------------------------------------------------------


def transfers(bench: Bench, torch_copy: Server | None = None) -> list[Row]:
    """to_numpy, from_numpy and mapped views against np.copyto, from 1 KiB up; on CUDA also page-locked
    arrays (``rt.host_array``) against torch's copies from and to pinned memory (``torch_copy``)."""
    sizes = [1 << 10, 1 << 20] if bench.quick else [1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24,
                                                    1 << 26, 1 << 28]
    if bench.arch == Arch.CUDA:  # host-visible ndarrays are CUDA managed memory there: keep them small
        sizes = [n for n in sizes if n <= 1 << 26]
    rows: list[Row] = []
    for nbytes in sizes:
        rows += _transfers_at(bench, nbytes, torch_copy)
    return rows


def _transfers_at(bench: Bench, nbytes: int, torch_copy: Server | None = None) -> list[Row]:
    """The transfer rows of one size, in GB/s."""
    repeats = 3 if bench.quick else 5
    count = nbytes // 4
    nd = bench.rt.ndarray((count,), np.float32)
    src = np.random.default_rng(0).random(count, dtype=np.float32)
    dst = np.empty_like(src)
    per = max(1, min(2000, int((2e-3 if bench.quick else 2e-2) / max(nbytes / 8e9, 1e-6))))
    # views of memory the host maps: the default ndarray's, else (Vulkan's device memory) one made for them
    viewed = nd if nd.memory.host_read or bench.arch == Arch.CUDA else bench.rt.ndarray((count,), np.float32,
                                                                                        host_access="readwrite")
    methods = _copy_methods(nd, viewed, src, dst, nbytes, per)
    pinned_pairs: list[tuple[str, str]] = []
    if bench.arch == Arch.CUDA:  # page-locked arrays, copied directly, against torch's pinned copies
        pinned_pairs = _pinned_methods(bench, methods, nd, src, nbytes, per, torch_copy)
    samples = interleave(methods, repeats)
    label = _size_label(nbytes)
    group = [Row("transfers", bench.name, f"{k} @{label}", "GB/s", v, params={"bytes": nbytes, "per": per})
             for k, v in samples.items()]
    by = {r.name.rsplit(" @", 1)[0]: r for r in group}
    _rate_copies(by, nbytes)
    if bench.arch == Arch.CUDA:
        _cuda_targets(by, nbytes, pinned_pairs)
    nd.close()
    viewed.close()
    return group


def _gbs(f: Callable[[], object], nbytes: int, per: int) -> Callable[[], float]:
    """GB/s of ``per`` calls of ``f``, each moving ``nbytes``."""
    def g() -> float:
        t0 = time.perf_counter()
        for _ in range(per):
            f()
        return nbytes * per / (time.perf_counter() - t0) / 1e9
    return g


def _copy_methods(nd: NdArray, viewed: NdArray, src: np.ndarray, dst: np.ndarray, nbytes: int, per: int) -> Methods:
    """from_numpy and to_numpy of ``nd`` and mapped views of ``viewed`` against numpy's own copies (GB/s)."""
    def mapped_write() -> None:
        with viewed.map() as view:
            np.copyto(view, src)

    def mapped_read() -> None:
        with viewed.map() as view:
            np.copyto(dst, view)

    methods = {
        "np.copyto (host to host)": _gbs(lambda: np.copyto(dst, src), nbytes, per),
        "from_numpy": _gbs(lambda: nd.from_numpy(src), nbytes, per),
        "to_numpy(out=)": _gbs(lambda: nd.to_numpy(out=dst), nbytes, per),
        "to_numpy() (new array)": _gbs(nd.to_numpy, nbytes, per),
        "np.copy (new array)": _gbs(src.copy, nbytes, per),
    }
    if viewed.memory.host_read:  # CUDA's memory has no views (host-visible memory is managed memory there)
        methods["mapped view write (np.copyto)"] = _gbs(mapped_write, nbytes, per)
        methods["mapped view read (np.copyto)"] = _gbs(mapped_read, nbytes, per)
    return methods


def _pinned_methods(bench: Bench, methods: Methods, nd: NdArray, src: np.ndarray, nbytes: int, per: int,
                    torch_copy: Server | None) -> list[tuple[str, str]]:
    """Add copies from and to a page-locked array (``rt.host_array``) to ``methods``, and torch's copies from and
    to pinned memory where ``torch_copy`` runs; the (ours, torch's) pairs to compare."""
    count = nbytes // 4
    pinned = bench.rt.host_array((count,), np.float32)
    pinned[:] = src
    methods["from_numpy (rt.host_array)"] = _gbs(lambda: nd.from_numpy(pinned), nbytes, per)
    methods["to_numpy(out=rt.host_array)"] = _gbs(lambda: nd.to_numpy(out=pinned), nbytes, per)
    if torch_copy is None:
        return []
    server = torch_copy
    methods["torch pinned to device"] = lambda: nbytes * per / server.seconds(f"h2d {count} {per}") / 1e9
    methods["torch device to pinned"] = lambda: nbytes * per / server.seconds(f"d2h {count} {per}") / 1e9
    return [("from_numpy (rt.host_array)", "torch pinned to device"),
            ("to_numpy(out=rt.host_array)", "torch device to pinned")]


def _rate_copies(by: dict[str, Row], nbytes: int) -> None:
    """Compare the copies with numpy's (rows by name without the size); from 1 MiB up from_numpy and
    to_numpy(out=) are to reach 0.9 of np.copyto."""
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


def _size_label(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


# -- torch's copies ------------------------------------------------------------------------------------

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


def torch_server(log: Callable[[str], None]) -> Server | None:
    """torch's device-to-device copy, measured in its own process (it brings its own CUDA runtime)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None
    try:
        return Server([sys.executable, "-c", _TORCH_SERVER], "torch copy")
    except (RuntimeError, OSError) as e:
        log(f"torch's copy not measured: {e}")
        return None
