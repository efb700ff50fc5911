"""What a reverse kernel's call costs on x64 with the arrays users pass: the same arrays again, new ones each call,
slices of one array, arguments by keyword. ``python benchmarks/grad_calls.py MODULE`` (a module with the test suite's
``sq`` kernel and its reverse kernel: tests/autodiff_kernels.py built for x64); median of 7 rounds of 500 calls."""

import sys
import time

import numpy as np

from taichi_aot import Arch, Runtime

N = 16


def main(path: str) -> None:
    with Runtime(Arch.X64) as rt:
        sq = rt.load_module(path).kernels["sq"]
        x, y, xg, yg = (np.ones(N, np.float32) for _ in range(4))
        big = np.ones(2 * N, np.float32)
        calls = {
            "same": lambda: sq.grad(x, y, grads=(xg, yg)),
            "new": lambda: sq.grad(np.ones(N, np.float32), np.zeros(N, np.float32),
                                   grads=(np.zeros(N, np.float32), np.ones(N, np.float32))),
            "slices": lambda: sq.grad(big[:N], big[N:], grads=(xg, yg)),
            "keywords": lambda: sq.grad(x=x, y=y, grads={"x": xg, "y": yg}),
        }
        for name, call in calls.items():
            for _ in range(200):
                call()
            rounds = []
            for _ in range(7):
                start = time.perf_counter()
                for _ in range(500):
                    call()
                rounds.append((time.perf_counter() - start) / 500 * 1e6)
            print(f"{name:9s} {sorted(rounds)[3]:7.1f} us")


if __name__ == "__main__":
    main(sys.argv[1])
