"""The inputs tests/test_autodiff.py and tests/autodiff_kernels.py share (no Taichi here: the tests import it)."""

import numpy as np

N = 16
X = np.linspace(-1.0, 1.5, N).astype(np.float32)  # the input
SEED = np.linspace(0.5, 2.0, N).astype(np.float32)  # the output's gradient
INDEX = ((np.arange(N) * 5) % N)[::-1].astype(np.int32)  # gather's indices: some read twice, none past N
INDEX[3] = INDEX[7]
#: Each kernel: its output's length and its scalar arguments.
CASES = {"sq": (N, ()), "poly": (N, (0.75,)), "total": (1, ()), "tanh_loop": (N, (3,))}
