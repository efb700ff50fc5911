"""A file for ``taichi-aot build``: exported kernels, a template instance and a graph."""

import taichi as ti

AOT_CAPS = ["spirv_has_float64", "spirv_has_int64"]


@ti.aot.export
@ti.kernel
def saxpy(x: ti.types.ndarray(dtype=ti.f32, ndim=1), y: ti.types.ndarray(dtype=ti.f32, ndim=1), a: ti.f32):
    for i in x:
        y[i] = a * x[i] + y[i]


@ti.aot.export_as("scale_f64")
@ti.kernel
def scale(x: ti.types.ndarray(dtype=ti.f64, ndim=2), s: ti.f32):
    for i, j in x:
        x[i, j] = x[i, j] * s


def export_graphs():
    x = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "x", ti.f32, ndim=1)
    y = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "y", ti.f32, ndim=1)
    a = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "a", ti.f32)
    g = ti.graph.GraphBuilder()
    g.dispatch(saxpy, x, y, a)
    g.dispatch(saxpy, x, y, a)
    return {"saxpy_twice": g.compile()}
