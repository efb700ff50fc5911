"""Compute graphs, bound launches and recorded sequences: ``python examples/graph.py``.

A graph runs several kernel launches as one call (``step4`` is four ``step`` launches); a bound launch is
checked and packed once; a recorded sequence is replayed by C with no Python in between.
"""

import os
import time

import numpy as np

from taichi_aot import Runtime

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "physics.tcm")

with Runtime.for_module(MODULE) as rt:
    mod = rt.load_module(MODULE)
    step, step4, drift8 = mod.kernels["step"], mod.graphs["step4"], mod.graphs["drift8"]
    x = rt.ndarray((4096,), np.float32)
    v = rt.ndarray_from_numpy(np.ones(4096, np.float32))
    step4(x=x, dt=0.25)                           # graphs take their arguments by name
    drift8(x=x, v=v, dt=0.125)                    # eight launches of advance: x += 8 * 0.125 * v
    rt.wait()
    print("after step4 and drift8:", x.to_numpy()[:3])       # [1. 2. 3.]

    run = step.bind(x, 0.001).launch              # checked and packed once; run() is one C call
    t0 = time.perf_counter()
    for _ in range(1000):
        run()
    rt.wait()
    print(f"1000 bound launches: {(time.perf_counter() - t0) * 1e3:.1f} ms")

    with rt.record() as seq:                      # launches recorded (checked now), not run ...
        step(x, 0.001)
        step4(x=x, dt=0.001)
    t0 = time.perf_counter()
    seq.replay(200)                               # ... and replayed from C: 200 passes of both
    rt.wait()
    print(f"200 replays of {len(seq)} launches: {(time.perf_counter() - t0) * 1e3:.1f} ms")
    print("x[1] =", round(float(x.to_numpy()[1]), 3))        # 2 + 1000 * 0.001 + 200 * 5 * 0.001 = 4.0
