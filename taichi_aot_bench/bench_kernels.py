"""Taichi source of the benchmark kernels, and Taichi's own JIT path for the same kernels.

Run in child processes by ``python -m taichi_aot bench``; taichi_aot never imports Taichi.

    python bench_kernels.py build ARCH OUT    compile the benchmark module
    python bench_kernels.py jit ARCH          serve timing requests on stdin for Taichi's JIT path

(No ``from __future__ import annotations`` here: Taichi reads the annotations.)
"""
# mypy: ignore-errors
# (Taichi's DSL: kernel parameters are annotated with Taichi type objects, which are no Python types)

import inspect
import json
import os
import sys
import time

import taichi as ti

GRAPH_DISPATCHES = 16


def define() -> dict:
    """The benchmark kernels by name (after ``ti.init``)."""
    vec = ti.types.ndarray(dtype=ti.f32, ndim=1)

    @ti.kernel
    def tiny(x: vec, a: ti.f32):
        x[0] = x[0] + a  # one serial task: what is left is the cost of a launch

    @ti.kernel
    def tiny3(x: vec, y: vec, z: vec, a: ti.f32):
        x[0] = x[0] + y[0] * z[0] + a  # x read and written, y and z only read

    @ti.kernel
    def copy(src: vec, dst: vec):
        for i in src:
            dst[i] = src[i]

    @ti.kernel
    def saxpy(x: vec, y: vec, a: ti.f32):
        for i in x:
            y[i] = a * x[i] + y[i]

    @ti.kernel
    def tiny32(x: vec, y1: vec, y2: vec, y3: vec, y4: vec, y5: vec, y6: vec, y7: vec, y8: vec, y9: vec, y10: vec,
               y11: vec, y12: vec, y13: vec, y14: vec, y15: vec, y16: vec, y17: vec, y18: vec, y19: vec, y20: vec,
               y21: vec, y22: vec, y23: vec, y24: vec, y25: vec, y26: vec, y27: vec, y28: vec, y29: vec, y30: vec,
               y31: vec, a: ti.f32):
        x[0] = x[0] + a  # 32 arrays a call (the others passed, not read): what taking many arrays costs

    @ti.kernel
    def nbody(p: ti.types.ndarray(dtype=ti.math.vec3, ndim=1), f: ti.types.ndarray(dtype=ti.math.vec3, ndim=1),
              n: ti.i32):
        for i in range(n):  # O(n^2) work in the kernel: what a launch path's code costs, not its launch
            acc = ti.math.vec3(0.0)
            for j in range(n):
                d = p[j] - p[i]
                r2 = d.dot(d) + 1e-3
                acc += d / (r2 * ti.sqrt(r2))
            f[i] = acc

    return {"tiny": tiny, "tiny3": tiny3, "copy": copy, "saxpy": saxpy, "tiny32": tiny32, "nbody": nbody}


def build(arch: str, out: str, caps: list[str] | None = None) -> None:
    """Compile the benchmark kernels, the 16-dispatch graph ``tiny16`` and the 64 dispatches of saxpy ``saxpy64``
    for ``arch`` into folder ``out``."""
    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=False)
    kernels = define()
    x = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "x", ti.f32, ndim=1)
    a = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "a", ti.f32)
    builder = ti.graph.GraphBuilder()
    for _ in range(GRAPH_DISPATCHES):
        builder.dispatch(kernels["tiny"], x, a)
    module = ti.aot.Module(getattr(ti, arch), caps=caps or None)
    for name, kernel in kernels.items():
        module.add_kernel(kernel, name=name)
    module.add_graph("tiny16", builder.compile())
    x, y = (ti.graph.Arg(ti.graph.ArgKind.NDARRAY, name, ti.f32, ndim=1) for name in ("x", "y"))
    steps = ti.graph.GraphBuilder()
    for _ in range(64):  # a step of many small dispatches, as the placement section times it against raw Vulkan's
        steps.dispatch(kernels["saxpy"], x, y, a)
    module.add_graph("saxpy64", steps.compile())
    os.makedirs(out, exist_ok=True)
    module.save(out)
    # the kernels' argument names, as taichi_aot build records them (Taichi's x64 and CUDA metadata has none): the
    # launch section times the call by keyword on every arch
    names = {name: {"args": list(inspect.signature(kernel).parameters)} for name, kernel in kernels.items()}
    with open(os.path.join(out, "taichi_aot.json"), "w", encoding="utf-8") as f:
        json.dump({"taichi_aot": 1, "arch": arch, "kernels": names}, f, indent=1, sort_keys=True)


def jit(arch: str) -> None:
    """Answer 'launch N' with the seconds N launches of ``tiny`` take through Taichi's Python path."""
    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=False)
    kernels = define()
    tiny = kernels["tiny"]
    x = ti.ndarray(ti.f32, 16)
    serve(arch, lambda words: tiny(x, 1.0))


def serve(arch: str, call) -> None:
    """Answer each line 'WORD N ...' with the seconds N calls of ``call(words)`` take, a ``ti.sync`` after them
    (one call and a sync first, unmeasured); 'quit' or the end of input ends it."""
    call(["warm", "1", "1"])
    ti.sync()
    print(json.dumps({"ready": True, "arch": arch}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        n = int(words[1])
        t0 = time.perf_counter()
        for _ in range(n):
            call(words)
        ti.sync()
        print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3], sys.argv[4:])
        # Taichi 1.7.4 can abort in its CUDA teardown at exit on multi-GPU hosts (CUDA_ERROR_INVALID_CONTEXT in
        # cuMemFreeAsync) after the module is written: leave without it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    else:
        jit(sys.argv[2])
