"""Kernels the test suite compiles with Taichi 1.7.4 into real AOT modules.

Run as a script (in its own process: Taichi allows one AOT module per ti.init):

    python tests/kernels.py --arch vulkan --out DIR_OR_FILE.tcm

(No "from __future__ import annotations" here: Taichi reads the annotations.)
"""


import argparse
import os
import sys

import taichi as ti

# SPIR-V capabilities asked for on gfx backends so every scalar type compiles.
GFX_CAPS = ["spirv_has_int8", "spirv_has_int16", "spirv_has_int64", "spirv_has_float16", "spirv_has_float64"]


def define_kernels(arch: str):
    kernels = {}

    @ti.kernel
    def add(x: ti.types.ndarray(dtype=ti.f32, ndim=1), y: ti.types.ndarray(dtype=ti.f32, ndim=1), a: ti.f32):
        for i in x:
            x[i] = x[i] + a * y[i]

    @ti.kernel
    def fill_i32(x: ti.types.ndarray(dtype=ti.i32, ndim=2), v: ti.i32):
        for i, j in x:
            x[i, j] = v + i * 100 + j

    @ti.kernel
    def scale_vec3(x: ti.types.ndarray(dtype=ti.types.vector(3, ti.f32), ndim=1), s: ti.types.vector(3, ti.f32)):
        for i in x:
            x[i] = s * (i + 1)

    @ti.kernel
    def mat_apply(x: ti.types.ndarray(dtype=ti.types.matrix(2, 2, ti.f32), ndim=1), m: ti.types.matrix(2, 2, ti.f32)):
        for i in x:
            x[i] = m @ x[i]

    @ti.kernel
    def typed_scalars(out: ti.types.ndarray(dtype=ti.f64, ndim=1), a: ti.i16, b: ti.u16, c: ti.f16, d: ti.i32):
        out[0] = a
        out[1] = b
        out[2] = c
        out[3] = d

    @ti.kernel
    def half_scale(x: ti.types.ndarray(dtype=ti.f16, ndim=1), s: ti.f16):
        for i in x:
            x[i] = x[i] * s

    @ti.kernel
    def iota_u8(x: ti.types.ndarray(dtype=ti.u8, ndim=1)):
        for i in x:
            x[i] = ti.u8(i % 256)

    @ti.kernel
    def sum_i64(x: ti.types.ndarray(dtype=ti.i64, ndim=1), out: ti.types.ndarray(dtype=ti.i64, ndim=1)):
        for i in x:
            ti.atomic_add(out[0], x[i])

    @ti.kernel
    def accumulate(total: ti.types.ndarray(dtype=ti.f32, ndim=0), x: ti.types.ndarray(dtype=ti.f32, ndim=1),
                   v: ti.types.ndarray(dtype=ti.types.vector(3, ti.f32), ndim=0)):
        for i in x:
            total[None] += x[i]
        v[None] = v[None] * 2.0

    kernels.update(
        accumulate=accumulate,
        add=add,
        fill_i32=fill_i32,
        scale_vec3=scale_vec3,
        mat_apply=mat_apply,
        typed_scalars=typed_scalars,
        half_scale=half_scale,
        iota_u8=iota_u8,
        sum_i64=sum_i64,
    )

    if arch == "vulkan":

        @ti.kernel
        def tex_write(
            tex: ti.types.rw_texture(num_dimensions=2, fmt=ti.Format.r32f, lod=0), v: ti.f32, w: ti.i32, h: ti.i32
        ):
            for i, j in ti.ndrange(w, h):
                tex.store(ti.Vector([i, j]), ti.Vector([v + i * 10.0 + j, 0.0, 0.0, 0.0]))

        @ti.kernel
        def tex_read(tex: ti.types.texture(num_dimensions=2), out: ti.types.ndarray(dtype=ti.f32, ndim=2)):
            for i, j in out:
                out[i, j] = tex.fetch(ti.Vector([i, j]), 0).x

        kernels.update(tex_write=tex_write, tex_read=tex_read)
    return kernels


def define_graphs(kernels):
    x = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "x", ti.f32, ndim=1)
    y = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "y", ti.f32, ndim=1)
    a = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "a", ti.f32)
    builder = ti.graph.GraphBuilder()
    builder.dispatch(kernels["add"], x, y, a)
    builder.dispatch(kernels["add"], x, y, a)
    total = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "total", ti.f32, ndim=0)
    v = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "v", ti.types.vector(3, ti.f32), ndim=0)
    zero_d = ti.graph.GraphBuilder()
    zero_d.dispatch(kernels["accumulate"], total, x, v)
    graphs = {"add_twice": builder.compile(), "accumulate_graph": zero_d.compile()}
    if "tex_write" in kernels:  # textures in graphs (gfx backends)
        tex = ti.graph.Arg(ti.graph.ArgKind.RWTEXTURE, "tex", fmt=ti.Format.r32f, ndim=2)
        v = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "v", ti.f32)
        w = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "w", ti.i32)
        h = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "h", ti.i32)
        write = ti.graph.GraphBuilder()
        write.dispatch(kernels["tex_write"], tex, v, w, h)
        sampled = ti.graph.Arg(ti.graph.ArgKind.TEXTURE, "tex", ndim=2)
        out = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "out", ti.f32, ndim=2)
        read = ti.graph.GraphBuilder()
        read.dispatch(kernels["tex_read"], sampled, out)
        graphs.update(tex_write_graph=write.compile(), tex_read_graph=read.compile())
    return graphs


def build(arch: str, out: str, caps: list[str] | None = None) -> None:
    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=False)
    kernels = define_kernels(arch)
    graphs = define_graphs(kernels)
    gfx = sorted(set(GFX_CAPS) | set(caps or []))
    module = ti.aot.Module(getattr(ti, arch), caps=gfx if arch == "vulkan" else None)
    for name, kernel in kernels.items():
        module.add_kernel(kernel, name=name)
    for name, graph in graphs.items():
        module.add_graph(name, graph)
    if out.endswith(".tcm"):
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        module.archive(out)
    else:
        os.makedirs(out, exist_ok=True)
        module.save(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", required=True, choices=["x64", "vulkan", "cuda"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--caps", nargs="*", default=[], help="capabilities beside GFX_CAPS (Vulkan)")
    args = parser.parse_args()
    build(args.arch, args.out, args.caps)
    # Taichi 1.7.4 can abort in its CUDA teardown at exit on multi-GPU hosts (CUDA_ERROR_INVALID_CONTEXT in
    # cuMemFreeAsync) after the module is written: leave without it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
