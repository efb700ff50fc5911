"""``taichi-aot sweep``: a Gray-Scott parameter map, one simulation per (feed, kill) pair, spread over a pool.

Every tile of the picture is one simulation of the demo's module (``demo_kernels.py``) with its own
feed rate F (rows, top to bottom) and kill rate k (columns, left to right), the classic map of
spots, stripes, mazes and waves. The task function lives here, at module level, so workers (local
processes or Ray actors) reach it by name; the benchmark's scaling section runs the same sweep.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .cache import demo_start

#: The parameter window of the map: F (feed) and k (kill) ranges where Gray-Scott shows its patterns.
FEED = (0.010, 0.090)
KILL = (0.040, 0.070)


def params(grid: int, size: int, steps: int) -> list[tuple[float, float, int, int]]:
    """``grid x grid`` tasks ``(feed, kill, size, steps)``, row by row (F grows down, k grows right)."""
    feeds = np.linspace(FEED[0], FEED[1], grid)
    kills = np.linspace(KILL[0], KILL[1], grid)
    return [(float(f), float(k), size, steps) for f in feeds for k in kills]


def _fields(worker: Any, size: int) -> tuple[Any, Any]:
    """The worker's two ping-pong fields of this size, allocated once and kept in ``worker.cache``."""
    key = f"gray-scott-{size}"
    if key not in worker.cache:
        rt = worker.runtime
        worker.cache[key] = tuple(rt.ndarray((size, size), np.float32, (2,), host_access="none") for _ in range(2))
    return worker.cache[key]


def simulate(worker: Any, task: tuple[float, float, int, int]) -> tuple[np.ndarray, float]:
    """One simulation: the demo's first state (``cache.demo_start``), ``steps`` steps (16 per graph launch); returns
    (v field, seconds on device)."""
    feed, kill, size, steps = task
    a, b = _fields(worker, size)
    mod = worker.module
    started = time.perf_counter()
    a.from_numpy(demo_start(size))
    step16 = mod.graphs["steps16"]
    for _ in range(max(steps // 16, 1)):
        step16(a=a, b=b, feed=feed, kill=kill)
    worker.runtime.wait()
    seconds = time.perf_counter() - started
    return a.to_numpy()[..., 1], seconds


def timed(worker: Any, task: tuple[float, float, int, int]) -> tuple[tuple[np.ndarray, float], float]:
    """``simulate``, and the seconds the whole task took in the worker (its read-back included): what a pool's
    cost per task is measured against."""
    started = time.perf_counter()
    out = simulate(worker, task)
    return out, time.perf_counter() - started


def array_back(worker: Any, count: int) -> np.ndarray:
    """A task that sends back an array of ``count`` f32 and does nothing else: what a large result costs the pool."""
    return np.ones(count, np.float32)


def warm_up(worker: Any) -> None:
    """A pool's ``setup``: one short simulation, so the first real task pays no pipeline or kernel compilation."""
    simulate(worker, (0.037, 0.06, 32, 16))


def noop(worker: Any, item: Any) -> Any:
    """A task that does nothing: what the pool itself costs per task."""
    return item


def mosaic(tiles: list[np.ndarray], grid: int, gap: int = 1) -> np.ndarray:
    """The tiles (row by row) as one RGB picture, coloured on one scale, with a dark ``gap`` between tiles."""
    from .png import colormap

    size = tiles[0].shape[0]
    hi = max(float(max(t.max() for t in tiles)), 1e-6)
    side = grid * size + (grid + 1) * gap
    out = np.zeros((side, side, 3), np.uint8)
    for n, tile in enumerate(tiles):
        r, c = divmod(n, grid)
        y, x = gap + r * (size + gap), gap + c * (size + gap)
        out[y:y + size, x:x + size] = colormap(np.clip(tile, 0, None) / hi)
    return out


def run_sweep(module: str, arch: str | None, grid: int, size: int, steps: int, workers: int | None,
              devices: list[int] | None, backend: str, baseline: int, out: str | None,
              log: Any = print) -> dict[str, Any]:
    """Run the sweep (after a one-worker baseline of ``baseline`` tasks); write the mosaic; return the figures."""
    from ..pool import Pool

    tasks = params(grid, size, steps)
    figures: dict[str, Any] = {"tasks": len(tasks), "size": size, "steps": steps}
    if baseline:
        t0 = time.perf_counter()
        with Pool(module, arch=arch, workers=1, devices=devices[:1] if devices else None, backend=backend,
                  setup=warm_up) as one:
            t1 = time.perf_counter()
            one.map(simulate, tasks[:baseline], progress=False)
            t2 = time.perf_counter()
        figures["one_worker_s_per_sim"] = (t2 - t1) / baseline
        log(f"  one worker: {baseline} simulations in {t2 - t1:.2f} s ({(t2 - t1) / baseline * 1e3:.1f} ms each; "
            f"pool start {t1 - t0:.2f} s)")
    t0 = time.perf_counter()
    with Pool(module, arch=arch, workers=workers, devices=devices, backend=backend, setup=warm_up) as pool:
        t1 = time.perf_counter()
        where = sorted({f"{w['arch']}" + (f":{w['device']}" if w["device"] is not None else "") for w in pool.workers})
        log(f"  {pool.size} workers ({backend}; {', '.join(where)}) started in {t1 - t0:.2f} s")
        results = pool.map(simulate, tasks)
        t2 = time.perf_counter()
        figures["workers"] = pool.size
    wall = t2 - t1
    device = [r[1] for r in results]
    figures.update(wall_s=wall, s_per_sim=wall / len(tasks), sims_per_s=len(tasks) / wall,
                   device_s_per_sim=float(np.median(device)))
    log(f"  {len(tasks)} simulations ({size}x{size}, {steps} steps each) in {wall:.2f} s: "
        f"{wall / len(tasks) * 1e3:.1f} ms per simulation, {len(tasks) / wall:.1f} simulations/s "
        f"(median {figures['device_s_per_sim'] * 1e3:.1f} ms inside a worker)")
    if baseline:
        speedup = figures["one_worker_s_per_sim"] / figures["s_per_sim"]
        figures["speedup"] = speedup
        log(f"  speed-up over one worker: {speedup:.2f}x with {figures['workers']} workers "
            f"(efficiency {speedup / figures['workers']:.2f})")
    if out:
        picture = mosaic([r[0] for r in results], grid)
        labelled = _labelled(out, picture, grid, f"{len(tasks)} simulations ({size}x{size}, {steps} steps) on "
                             f"{figures['workers']} {arch or 'best'} workers, {wall:.1f} s")
        if not labelled:  # no matplotlib: the tiles alone, their axes said here
            from .png import write_png

            write_png(out, picture)
        log(f"  wrote {out}: F {FEED[0]}..{FEED[1]} down, k {KILL[0]}..{KILL[1]} across, {grid}x{grid} tiles"
            f"{'' if labelled else ' (pip install matplotlib for labelled axes)'}")
    return figures


def _labelled(out: str, picture: np.ndarray, grid: int, subtitle: str) -> bool:
    """Draw the mosaic with its axes named and ticked (F down, k across) where matplotlib is installed;
    False where it is not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    side = picture.shape[0]
    centres = (np.arange(grid) + 0.5) * side / grid
    fig, ax = plt.subplots(figsize=(7, 7.6))
    ax.imshow(picture, interpolation="nearest")
    ax.set_xticks(centres, [f"{k:.3f}" for k in np.linspace(KILL[0], KILL[1], grid)], rotation=60, fontsize=7)
    ax.set_yticks(centres, [f"{f:.3f}" for f in np.linspace(FEED[0], FEED[1], grid)], fontsize=7)
    ax.set_xlabel("kill rate k")
    ax.set_ylabel("feed rate F")
    ax.set_title(f"Gray-Scott patterns: the v field after each simulation (dark: 0, yellow: the largest)\n"
                 f"{subtitle}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True
