"""numpy (and torch, if installed) arrays as kernel arguments, and what the module says each kernel does with
them: ``python examples/arrays.py``.

On x64 a host array is shared with the kernel (no copy); on Vulkan it travels as a copy, copied in where the
kernel reads it and back where it writes it. An array its owner made immutable (a read-only numpy array, a
JAX array) is never written: passed where the kernel writes, it is a ReadOnlyArrayError.
"""

import importlib.util
import os

import numpy as np

from taichi_aot import ReadOnlyArrayError, Runtime

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "physics.tcm")

with Runtime.for_module(MODULE) as rt:
    mod = rt.load_module(MODULE)
    advance, energy = mod.kernels["advance"], mod.kernels["energy"]
    print("advance:", ", ".join(f"{a.name} ({a.access_word()})" for a in advance.signature if a.kind == "ndarray"))

    x = np.zeros(8, np.float32)
    v = np.arange(8, dtype=np.float32)
    v.flags.writeable = False                     # an input: the kernel only reads v, so this is fine
    advance(x, v, 0.5)
    rt.wait()
    print("x =", x)                               # written in place: [0.  0.5 1.  ... 3.5]

    try:
        advance(v, x, 0.5)                        # v where the kernel writes: refused, v untouched
    except ReadOnlyArrayError as e:
        print("refused:", str(e).split(":")[1].strip())

    total = np.zeros((), np.float32)              # a 0-d array for a 0-d ndarray argument
    energy(v, total)
    rt.wait()
    print("energy of v =", float(total))          # 0.5 * (0 + 1 + 4 + ... + 49) = 70.0

    nd = rt.ndarray_from(x)                       # an NdArray over x (x64: the same memory; elsewhere a copy)
    print("ndarray_from(x):", nd, "sum", float(np.sum(nd)))

    if importlib.util.find_spec("torch") is not None:
        import torch

        t = torch.zeros(8)
        advance(t, torch.ones(8), 2.0)            # a torch CPU tensor, the same way
        rt.wait()
        print("torch:", t.tolist())
    else:
        print("torch: not installed (pip install torch), skipped")
