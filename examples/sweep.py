"""A parameter sweep over worker processes: ``python examples/sweep.py``.

``Pool`` starts one worker per device (here CPU workers, one core each: physics.tcm's x64 kernels were built
with ``--cpu-threads 1``), each with a runtime and the module loaded once, and spreads the tasks over them.
On GPUs: ``Pool(MODULE, arch="cuda", devices=[0, 1, 2, 3])``; on Ray: ``backend="ray"``.
"""

import os

import numpy as np

from taichi_aot.pool import Pool

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "physics.tcm")


def simulate(worker, dt):                         # at module level: the workers import it by name
    rt, mod = worker.runtime, worker.module
    x = rt.ndarray((4096,), np.float32)
    for _ in range(25):
        mod.graphs["step4"](x=x, dt=dt)           # 100 steps
    return float(x.to_numpy()[1])                 # plain values and numpy arrays come back


if __name__ == "__main__":                        # the workers are spawned processes
    dts = np.linspace(0.001, 0.008, 8)
    with Pool(MODULE, arch="x64", workers=2) as pool:
        results = pool.map(simulate, dts)         # in input order
        print(f"{len(results)} simulations on {len(pool.workers)} workers, {pool.threads} CPU thread(s) each")
    for dt, r in zip(dts, results):
        print(f"  dt={dt:.3f}: x[1] = {r:.3f}")   # 100 * dt
