"""Rows of ``taichi-aot bench``'s gpus section: one process driving two GPUs, against one GPU (CUDA).

The work is the bench's n-body kernel (``bench_kernels.py``'s ``nbody``, O(n^2), GPU-bound: BODIES bodies a GPU,
STEPS launches a sample), the same on each GPU, so two GPUs do twice one GPU's work; a row's ratio is the speed-up,
``2 x (one GPU's time / two GPUs' time)``, in paired rounds (measure.py), target at least TARGET (0.95 x 2):

* JAX: a jitted step calling the kernel as a JAX op under ``jax.shard_map`` over two GPUs (each GPU its own shard of
  the bodies: the op's twin there), against the same step jitted on one GPU; the shards' forces checked against the
  one GPU's first;
* threads: two threads, each driving a runtime of its own GPU (taichi_aot's own CUDA runtime, both made on this
  thread: any thread may use them), against one thread driving one GPU.

With fewer than two GPUs the section says why and has no rows; the JAX row needs JAX with two GPUs.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from taichi_aot import Runtime
from taichi_aot.enums import Arch

from .measure import measure
from .row import Row

if TYPE_CHECKING:
    from .harness import Bench

__all__ = ["gpus"]

TARGET = 1.9  # 0.95 x 2: two GPUs' speed-up over one
BODIES = 16384  # a GPU's bodies: about 2 ms a launch on an H100
ONE_THREAD, TWO_THREADS = "threads: one thread driving GPU 0", "threads: two threads, a GPU's runtime each"
ONE_JAX, TWO_JAX = "jax: jitted n-body step on GPU 0", "jax: the step under shard_map over 2 GPUs"


def _bodies(count: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((count, 3)).astype(np.float32)


def _threads_timed(works: list[Callable[[], object]], steps: int) -> Callable[[], float]:
    """A method: ms a step of ``works`` run at once, a thread each (each launches its steps and waits)."""
    def one() -> float:
        threads = [threading.Thread(target=work) for work in works]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return (time.perf_counter() - t0) / steps * 1e3
    return one


def _thread_rows(bench: Bench, steps: int, rounds: int) -> list[Row]:
    runtimes = [Runtime(Arch.CUDA, device_index=k) for k in (0, 1)]  # made here, driven by a thread each
    try:
        works: list[Callable[[], object]] = []
        for rt in runtimes:
            nbody = rt.load_module(bench.module_path).kernels["nbody"]
            p = rt.ndarray_from_numpy(_bodies(BODIES), elem_ndim=1)
            f = rt.ndarray((BODIES,), np.float32, (3,))

            def work(rt: Any = rt, nbody: Any = nbody, p: Any = p, f: Any = f) -> None:
                for _ in range(steps):
                    nbody(p, f, BODIES)
                rt.wait()
            works.append(work)
        measured = measure({ONE_THREAD: _threads_timed(works[:1], steps),
                            TWO_THREADS: _threads_timed(works, steps)}, None, rounds, reps=1)
    finally:
        for rt in runtimes:
            rt.close()
    return _rows(bench, measured, ONE_THREAD, TWO_THREADS, {"steps": steps, "rounds": rounds, "bodies": BODIES})


def _jax_rows(bench: Bench, steps: int, rounds: int) -> list[Row]:
    try:
        import jax
        import jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        from taichi_aot import jax as tj
    except ImportError:
        bench.log("  gpus: no JAX here: no shard_map row")
        return []
    devices = [d for d in jax.devices() if d.platform == "gpu"][:2]
    if len(devices) < 2:
        bench.log(f"  gpus: JAX has {len(devices)} GPU(s) here: no shard_map row (it needs two)")
        return []
    shard_map: Any = getattr(jax, "shard_map", None)
    if shard_map is None:  # before JAX 0.7
        from jax.experimental import shard_map as experimental

        shard_map = experimental.shard_map
    op = tj.op(bench.mod.kernels["nbody"], {1: 0})  # the forces, shaped as the bodies
    mesh, spec = Mesh(np.array(devices), ("g",)), PartitionSpec("g")
    one_step = jax.jit(lambda p: op(p, BODIES))
    two_step = jax.jit(shard_map(lambda p: op(p, BODIES), mesh=mesh, in_specs=spec, out_specs=spec))
    bodies = _bodies(BODIES)
    p1 = jax.device_put(jnp.asarray(bodies), devices[0])
    p2 = jax.device_put(jnp.asarray(np.concatenate([bodies, bodies])), NamedSharding(mesh, spec))
    want = np.asarray(one_step(p1))
    got = np.asarray(two_step(p2))
    for half in (got[:BODIES], got[BODIES:]):  # each GPU's shard: the one GPU's forces
        np.testing.assert_allclose(half, want, rtol=1e-3, atol=1e-3)

    def timed(step: Callable[[Any], Any], p: Any) -> Callable[[], float]:
        def one() -> float:
            t0 = time.perf_counter()
            for _ in range(steps):
                out = step(p)
            out.block_until_ready()
            return (time.perf_counter() - t0) / steps * 1e3
        return one

    measured = measure({ONE_JAX: timed(one_step, p1), TWO_JAX: timed(two_step, p2)}, None, rounds, reps=1)
    return _rows(bench, measured, ONE_JAX, TWO_JAX, {"steps": steps, "rounds": rounds, "bodies": BODIES,
                                                     "jax": jax.__version__})


def _rows(bench: Bench, measured: Any, one: str, two: str, params: dict) -> list[Row]:
    """The two rows of a pair: two GPUs' row rated by its speed-up over one GPU, round by round."""
    rows = {k: Row("gpus", bench.name, k, "ms/step", v, params=params) for k, v in measured.bests.items()}
    paired = measured.pair(one, two)
    if paired is not None:
        row = rows[two]
        row.limit, row.ratio, row.spread = one, 2 * paired[0], paired[1]
        row.target, row.met = f">= {TARGET:g}", row.ratio >= TARGET
        row.note = "speed-up: 2 x one GPU's time a step / two GPUs' (twice the work)"
    if measured.warnings:
        rows[one].note = "; ".join(measured.warnings)
    return list(rows.values())


def gpus(bench: Bench) -> list[Row]:
    """The gpus rows on CUDA with two GPUs or more (see the module docstring); none elsewhere, saying why."""
    if bench.rt.arch != Arch.CUDA:
        bench.log(f"  gpus: the section is CUDA's (no rows on {bench.name})")
        return []
    from taichi_aot.drivers import cudart as _cudart

    count = _cudart.device_count()
    if count < 2:
        bench.log(f"  gpus: {count} GPU(s) here: the section needs two (no rows)")
        return []
    if "nbody" not in bench.mod.kernels:
        bench.log("  gpus: the bench module has no nbody kernel (compiled before it had it): no rows")
        return []
    steps, rounds = (5, 3) if bench.quick else (50, 7)
    return [*_thread_rows(bench, steps, rounds), *_jax_rows(bench, steps, rounds)]
