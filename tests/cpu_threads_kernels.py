"""Kernels with each shape of CPU parallel loop Taichi writes (over an ndarray's run-time length, 1-D and 2-D, and
over a constant range), built by tests/test_cpu_threads.py for 1 and 2 threads: the loops over a length are split
anew at load."""

import taichi as ti


@ti.aot.export
@ti.kernel
def saxpy(x: ti.types.ndarray(dtype=ti.f32, ndim=1), y: ti.types.ndarray(dtype=ti.f32, ndim=1), a: ti.f32):
    for i in x:
        y[i] = a * x[i] + y[i]

@ti.aot.export
@ti.kernel
def grid(x: ti.types.ndarray(dtype=ti.f32, ndim=2), v: ti.f32):
    for i, j in x:
        x[i, j] = v + i * 0.5 + j

@ti.aot.export
@ti.kernel
def fixed(x: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    for i in range(4096):
        x[i % x.shape[0]] += 1.0

@ti.aot.export
@ti.kernel
def heavy(x: ti.types.ndarray(dtype=ti.f32, ndim=1), n: ti.i32):
    for i in x:
        s = 0.0
        for k in range(n):
            s = s + ti.sin(s + i * 0.001 + k * 0.0001)
        x[i] = s
