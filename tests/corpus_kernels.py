"""A corpus of CUDA modules as users write them, for the own launcher: one-kernel modules, random numbers, vector
and matrix ndarrays and matrix scalars, block-shared memory, atomics of each width, f16/i8/u8/u64, nested and
serial loops, a compute graph, kernels with no arguments, kernels named in other scripts than Latin, kernels that
return values.

Compiled on a machine with a GPU (Taichi compiles for CUDA only there), one module a folder, and kept as test data
(``tests/data/cuda-modules.tar.xz``, folder ``corpus``), since its IR is text:

    python tests/corpus_kernels.py OUT_DIR

A kernel Taichi does not compile is left out of its module with a line on stderr. Arrays the test fills get
random values (tests/test_corpus.py); kernels whose floats are added atomically are named ``atomic_*`` and get
values their sums hold exactly, in any order.

(No "from __future__ import annotations" here: Taichi reads the annotations.)
"""

import os
import sys

import taichi as ti

F32 = ti.types.ndarray(dtype=ti.f32, ndim=1)
I32 = ti.types.ndarray(dtype=ti.i32, ndim=1)
V3 = ti.types.ndarray(dtype=ti.math.vec3, ndim=1)
V3D = ti.types.ndarray(dtype=ti.types.vector(3, ti.f64), ndim=1)
BLOCK = 64


def one_add():
    @ti.kernel
    def add(x: F32, y: F32, a: ti.f32):
        for i in x:
            x[i] = x[i] + a * y[i]

    return {"add": add}


def one_rand():
    @ti.kernel
    def noise(a: F32):
        for i in a:
            a[i] = ti.random()

    return {"noise": noise}


def one_noargs():
    @ti.kernel
    def idle():  # no arguments and nothing written: a barrier keeps its loop
        for _ in range(64):
            ti.simt.block.sync()

    return {"idle": idle}


def random_numbers():
    @ti.kernel
    def uniform2d(a: ti.types.ndarray(dtype=ti.f64, ndim=2)):
        for i, j in a:
            a[i, j] = ti.random(ti.f64)

    @ti.kernel
    def dice(a: I32, sides: ti.i32):
        for i in a:
            a[i] = ti.random(ti.i32) % sides

    @ti.kernel
    def jitter(p: ti.types.ndarray(dtype=ti.types.vector(2, ti.f32), ndim=1), s: ti.f32):
        for i in p:
            p[i] += s * ti.Vector([ti.random() - 0.5, ti.randn()])

    return {"uniform2d": uniform2d, "dice": dice, "jitter": jitter}


def matrices():
    vec3 = ti.types.vector(3, ti.f32)
    mat3 = ti.types.matrix(3, 3, ti.f32)

    @ti.kernel
    def transform(p: ti.types.ndarray(dtype=vec3, ndim=1), m: mat3, t: vec3):
        for i in p:
            p[i] = m @ p[i] + t

    @ti.kernel
    def matmul2d(a: ti.types.ndarray(dtype=ti.types.matrix(2, 2, ti.f32), ndim=2),
                 b: ti.types.ndarray(dtype=ti.types.matrix(2, 2, ti.f32), ndim=2)):
        for i, j in a:
            a[i, j] = a[i, j] @ b[i, j].transpose() + b[i, j].determinant()

    @ti.kernel
    def normalize64(v: ti.types.ndarray(dtype=ti.types.vector(4, ti.f64), ndim=1), out: ti.types.ndarray(ti.f64, 1)):
        for i in v:
            out[i] = v[i].norm()
            v[i] = v[i] / (out[i] + 1.0)

    @ti.kernel
    def offset_i32(x: ti.types.ndarray(dtype=ti.types.vector(2, ti.i32), ndim=1), o: ti.types.vector(2, ti.i32)):
        for i in x:
            x[i] = x[i] * 3 + o

    return {"transform": transform, "matmul2d": matmul2d, "normalize64": normalize64, "offset_i32": offset_i32}


def shared_memory():
    @ti.kernel
    def block_sum(a: F32, out: F32):
        ti.loop_config(block_dim=BLOCK)
        for i in range(a.shape[0]):
            pad = ti.simt.block.SharedArray((BLOCK,), ti.f32)
            tid = i % BLOCK
            pad[tid] = a[i]
            ti.simt.block.sync()
            stride = BLOCK // 2
            while stride > 0:
                if tid < stride:
                    pad[tid] += pad[tid + stride]
                ti.simt.block.sync()
                stride //= 2
            if tid == 0:
                out[i // BLOCK] = pad[0]

    @ti.kernel
    def block_reverse(a: I32):
        ti.loop_config(block_dim=BLOCK)
        for i in range(a.shape[0]):
            pad = ti.simt.block.SharedArray((BLOCK,), ti.i32)
            tid = i % BLOCK
            pad[tid] = a[i]
            ti.simt.block.sync()
            a[i] = pad[BLOCK - 1 - tid]

    return {"block_sum": block_sum, "block_reverse": block_reverse}


def atomics():
    kernels = {}
    for name, dtype in (("i32", ti.i32), ("u32", ti.u32), ("i64", ti.i64), ("u64", ti.u64), ("f32", ti.f32),
                        ("f64", ti.f64), ("f16", ti.f16), ("i8", ti.i8), ("i16", ti.i16)):
        kernels[f"atomic_add_{name}"] = _atomic_add(dtype)
    for name, dtype in (("i32", ti.i32), ("u64", ti.u64), ("f32", ti.f32)):
        kernels[f"atomic_minmax_{name}"] = _atomic_minmax(dtype)

    @ti.kernel
    def atomic_bits(a: ti.types.ndarray(ti.u32, 1), out: ti.types.ndarray(ti.u32, 1)):
        for i in a:
            ti.atomic_or(out[0], a[i])
            ti.atomic_and(out[1], a[i] | ti.u32(0xFFFF0000))
            ti.atomic_xor(out[2], a[i])

    kernels["atomic_bits"] = atomic_bits
    return kernels


def _atomic_add(dtype):
    @ti.kernel
    def kernel(a: ti.types.ndarray(dtype, 1), out: ti.types.ndarray(dtype, 1)):
        for i in a:
            ti.atomic_add(out[i % 4], a[i])

    return kernel


def _atomic_minmax(dtype):
    @ti.kernel
    def kernel(a: ti.types.ndarray(dtype, 1), out: ti.types.ndarray(dtype, 1)):
        for i in a:
            ti.atomic_max(out[0], a[i])
            ti.atomic_min(out[1], a[i])

    return kernel


def small_types():
    @ti.kernel
    def half_poly(h: ti.types.ndarray(ti.f16, 1), out: F32, s: ti.f16):
        for i in h:
            out[i] = ti.cast(h[i] * h[i] * s, ti.f32)
            h[i] = h[i] + ti.f16(0.5)

    @ti.kernel
    def bytes_wrap(a: ti.types.ndarray(ti.i8, 1), b: ti.types.ndarray(ti.u8, 1)):
        for i in a:
            b[i] = ti.cast(a[i], ti.u8) * ti.u8(3) + b[i]
            a[i] = -a[i] // 2 - ti.i8(100)

    @ti.kernel
    def lcg_u64(a: ti.types.ndarray(ti.u64, 1), k: ti.u64):
        for i in a:
            a[i] = (a[i] * ti.u64(6364136223846793005) + k) >> ti.u64(7)

    @ti.kernel
    def mixed(h: ti.types.ndarray(ti.f16, 1), b: ti.types.ndarray(ti.u8, 1), c: ti.types.ndarray(ti.i8, 1),
              out: ti.types.ndarray(ti.f64, 1), u: ti.i16):
        for i in out:
            out[i] = ti.cast(h[i], ti.f64) + ti.cast(b[i], ti.f64) * ti.cast(c[i], ti.f64) + u

    return {"half_poly": half_poly, "bytes_wrap": bytes_wrap, "lcg_u64": lcg_u64, "mixed": mixed}


def loops():  # noqa: C901 (one kernel a loop form; Taichi's kernels are nested functions)
    @ti.kernel
    def nested(a: ti.types.ndarray(ti.f32, 2), n: ti.i32):
        for i in range(a.shape[0]):
            for j in range(ti.min(n, a.shape[1])):
                a[i, j] = a[i, j] * 0.5 + i * j

    @ti.kernel
    def serial_scan(a: I32, out: I32):
        ti.loop_config(serialize=True)
        s = 0
        for i in range(a.shape[0]):
            s += a[i]
            out[i] = s

    @ti.kernel
    def range_ab(a: F32, lo: ti.i32, hi: ti.i32):
        for i in range(lo, hi):
            a[i] = a[i] * i + lo

    @ti.kernel
    def two_loops(a: F32, b: F32):
        for i in a:
            a[i] = a[i] * 2.0
        for j in b:
            b[j] = b[j] + a[j % a.shape[0]]

    @ti.kernel
    def total_i32(a: I32, out: I32):
        s = 0
        for i in a:
            s += a[i]
        out[0] = s

    @ti.kernel
    def between(a: F32, n: ti.i32):
        for i in a:
            a[i] += 1.0
        a[0] = n * 1.0
        for i in range(n):
            a[i] *= 2.0

    @ti.kernel
    def grouped3(x: ti.types.ndarray(ti.i32, 3)):
        for at in ti.grouped(x):
            x[at] = at[0] * 10000 + at[1] * 100 + at[2]

    @ti.kernel
    def unrolled(a: F32):
        for i in a:
            for k in ti.static(range(4)):
                a[i] = a[i] * 0.5 + k

    @ti.kernel
    def constant_range(a: F32):
        for i in range(256):
            a[i] = i * 0.25

    @ti.kernel
    def collatz(a: I32, steps: I32):
        for i in a:
            n = a[i]
            c = 0
            while n != 1 and c < 1000:
                if n % 2 == 0:
                    n //= 2
                else:
                    n = 3 * n + 1
                c += 1
            steps[i] = c

    @ti.kernel
    def ndrange2(a: ti.types.ndarray(ti.f32, 2), w: ti.i32, h: ti.i32):
        for i, j in ti.ndrange((1, w), (2, h)):
            a[i, j] = a[i - 1, j] + j

    return {"nested": nested, "serial_scan": serial_scan, "range_ab": range_ab, "two_loops": two_loops,
            "total_i32": total_i32, "between": between, "grouped3": grouped3, "unrolled": unrolled,
            "constant_range": constant_range, "collatz": collatz, "ndrange2": ndrange2}


def no_arguments():
    counter = ti.field(ti.i32, shape=())

    @ti.kernel
    def nothing():
        pass

    @ti.kernel
    def count():
        for _ in range(100):
            ti.atomic_add(counter[None], 1)

    @ti.kernel
    def scale(a: F32):
        for i in a:
            a[i] *= 3.0

    return {"nothing": nothing, "count": count, "scale": scale}


def graph_kernels():
    @ti.kernel
    def axpy(x: F32, y: F32, a: ti.f32):
        for i in x:
            x[i] = x[i] + a * y[i]

    @ti.kernel
    def square(x: F32):
        for i in x:
            x[i] = x[i] * x[i]

    return {"axpy": axpy, "square": square}


def graphs(kernels):
    x = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "x", ti.f32, ndim=1)
    y = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "y", ti.f32, ndim=1)
    a = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "a", ti.f32)
    g = ti.graph.GraphBuilder()
    g.dispatch(kernels["axpy"], x, y, a)
    g.dispatch(kernels["square"], x)
    g.dispatch(kernels["axpy"], y, x, a)
    return {"axpy_square": g.compile()}


def names():
    @ti.kernel
    def сложить(x: F32, y: F32):
        for i in x:
            x[i] = x[i] + y[i]

    @ti.kernel
    def 倍(x: F32, k: ti.f32):  # noqa: N802 (a name in Han script is what this module is for)
        for i in x:
            x[i] = x[i] * k

    return {"сложить": сложить, "倍": 倍}


def returns():
    """Kernels that return values (Taichi 1.7.4's C-API gives none; the own launcher reads its result buffer)."""
    @ti.kernel
    def ret_i32(a: I32) -> ti.i32:
        return a[0] + a[1]

    @ti.kernel
    def ret_f64(a: ti.types.ndarray(dtype=ti.f64, ndim=1), k: ti.f64) -> ti.f64:
        return a[0] * k + a[1]

    @ti.kernel
    def atomic_total(a: F32) -> ti.f32:  # a reduction: a loop, then a serial task that returns
        s = 0.0
        for i in a:
            s += a[i]
        return s

    @ti.kernel
    def ret_vec(a: F32) -> ti.types.vector(3, ti.f32):
        return ti.Vector([a[0], a[1] * 2.0, a[2] + 1.0])

    @ti.kernel
    def ret_mat(a: F32) -> ti.types.matrix(2, 3, ti.f32):
        return ti.Matrix([[a[0], a[1], a[2]], [a[3], a[4], a[5]]])

    @ti.kernel
    def ret_pair(a: I32, x: ti.f64) -> (ti.i32, ti.f64):
        return a[0] * 3, x * 0.5

    @ti.kernel
    def ret_const() -> ti.u8:
        return 200

    return {"ret_i32": ret_i32, "ret_f64": ret_f64, "atomic_total": atomic_total, "ret_vec": ret_vec,
            "ret_mat": ret_mat, "ret_pair": ret_pair,
            "ret_const": ret_const}


def roots():
    """Square roots and their reciprocals, f32 and f64, as Taichi's fast math compiles them (``rsqrt.approx`` for a
    reciprocal, ``sqrt.rn`` for a root alone); ``taichi-ptx/roots`` in the test data holds Taichi's own PTX of them."""
    @ti.kernel
    def roots64(a: ti.types.ndarray(dtype=ti.f64, ndim=1), b: ti.types.ndarray(dtype=ti.f64, ndim=1)):
        for i in a:
            x = ti.abs(a[i]) + 0.5
            b[i] = 1.0 / ti.sqrt(x) + ti.sqrt(x) + x / 3.0

    return {"forces32": _forces(V3, ti.f32), "forces64": _forces(V3D, ti.f64), "roots64": roots64}


def _forces(array, dtype):
    @ti.kernel
    def kernel(p: array, f: array):  # an n-body force loop: d / (r2 * sqrt(r2))
        for i in p:
            acc = ti.types.vector(3, dtype)(0.0)
            for j in range(p.shape[0]):
                d = p[j] - p[i]
                r2 = d.dot(d) + 1e-3
                acc += d / (r2 * ti.sqrt(r2))
            f[i] = acc

    return kernel


#: The corpus's modules: folder name -> its kernels (and graphs).
MODULES = {"one_add": one_add, "one_rand": one_rand, "one_noargs": one_noargs, "random": random_numbers,
           "matrices": matrices, "shared": shared_memory, "atomics": atomics, "small_types": small_types,
           "loops": loops, "no_arguments": no_arguments, "graphs": graph_kernels, "names": names,
           "returns": returns, "roots": roots}


def build(name: str, out: str) -> None:
    ti.init(arch=ti.cuda, log_level=ti.ERROR, offline_cache=False)
    kernels = MODULES[name]()  # before the module: it finalizes the fields
    module = ti.aot.Module(ti.cuda)
    for kname, kernel in kernels.items():
        try:
            module.add_kernel(kernel, name=kname)
        except Exception as e:
            print(f"{name}/{kname}: not exported ({type(e).__name__}: {str(e)[:300]})", file=sys.stderr)
    if name == "graphs":
        for gname, graph in graphs(kernels).items():
            module.add_graph(gname, graph)
    os.makedirs(out, exist_ok=True)
    module.save(out)


if __name__ == "__main__":
    # one module a process (Taichi holds one AOT module a ti.init): python corpus_kernels.py OUT [MODULE]
    if len(sys.argv) > 2:
        build(sys.argv[2], os.path.join(sys.argv[1], sys.argv[2]))
    else:
        import subprocess
        for name in MODULES:
            proc = subprocess.run([sys.executable, __file__, sys.argv[1], name])
            print(f"{name}: exit {proc.returncode}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
