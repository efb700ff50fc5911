"""Load a precompiled module and launch a kernel, without Taichi: ``python examples/quickstart.py``.

The module, physics.tcm, holds an x64 and a Vulkan part (physics.py is its Taichi source);
``Runtime.for_module`` opens a runtime on the fastest backend both this machine and the module have.
"""

import os

import numpy as np

from taichi_aot import Runtime

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "physics.tcm")

with Runtime.for_module(MODULE) as rt:
    mod = rt.load_module(MODULE)                  # the part for rt's arch
    print(f"{rt.arch.name} runtime; kernels {', '.join(mod.kernels)}; graphs {', '.join(mod.graphs)}")
    step = mod.kernels["step"]
    print("step takes", ", ".join(f"{a.name}: {a.describe()}" for a in step.signature))
    x = rt.ndarray((1024,), np.float32)           # zero-filled device memory
    step(x, dt=0.5)                               # checked against the module's metadata, then one C call
    rt.wait()
    print("x[:4] =", x.to_numpy()[:4])            # [0.  0.5 1.  1.5]
    y = rt.ndarray((1024,), np.float32, host_access="readwrite")  # memory the host maps too (host memory on a
    with y.map() as view:                         # discrete GPU): a zero-copy numpy view of it
        view[:] = 1.0
    step(y, 0.25)
    rt.wait()
    print("after map and another step:", y.to_numpy()[:4])   # [1.   1.25 1.5  1.75]
