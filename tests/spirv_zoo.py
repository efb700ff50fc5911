"""Kernels of many shapes for the SPIR-V check (tests/test_spirv.py): loops with break and continue, while loops,
functions returning from inside loops, matrices, math, bit operations, every width, 32-bit atomics, textures. Run
as a script (Taichi reads a kernel's source from its file): python tests/spirv_zoo.py OUT_FOLDER. (Taichi 1.7.4's
64-bit and 8-bit atomics are left out: NVIDIA's compiler refuses their pipelines, which the look-up reports as
NotSupportedError.)"""

import sys

import taichi as ti

ti.init(arch=ti.vulkan, log_level=ti.ERROR, offline_cache=False)
vec3 = ti.types.vector(3, ti.f32)
mat3 = ti.types.matrix(3, 3, ti.f32)
F32, I32, U32 = (ti.types.ndarray(dtype=t, ndim=1) for t in (ti.f32, ti.i32, ti.u32))


@ti.func
def collatz(n):
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n //= 2
        else:
            n = 3 * n + 1
        steps += 1
        if steps > 1000:
            break
    return steps


@ti.func
def first_negative(x: ti.template(), i):
    found = -1
    for j in range(i):
        if x[j] < 0:
            found = j
            break
        if x[j] == 0:
            continue
        found = -2
    return found


@ti.kernel
def loops(x: F32, y: I32):
    for i in x:
        y[i] = collatz(i + 1) + first_negative(x, i)
        k = 0
        while True:
            k += 1
            if k * k > i:
                break
        for a in range(3):
            for b in range(a):
                if (a + b) % 2 == 0:
                    continue
                y[i] += a * b
        y[i] += k


@ti.kernel
def maths(x: F32, m: ti.types.ndarray(dtype=mat3, ndim=1), v: ti.types.ndarray(dtype=vec3, ndim=1)):
    for i in x:
        a = x[i]
        x[i] = ti.sin(a) + ti.cos(a) * ti.atan2(a, 1.0) + ti.pow(ti.abs(a), 1.5) + ti.sqrt(ti.abs(a)) + ti.exp(-a)
        x[i] += ti.log(1 + ti.abs(a)) + ti.floor(a) + ti.ceil(a) + ti.round(a) + ti.max(a, 0.5) + ti.min(a, 0.1)
        x[i] += ti.tanh(a) + ti.asin(ti.min(ti.abs(a), 1.0))
        mm = m[i] @ m[i].transpose()
        v[i] = mm @ v[i] + v[i].cross(vec3(1, 0, 0)) + v[i].normalized() * v[i].norm() + v[i].dot(v[i])
        m[i] = mm.inverse() if ti.abs(mm.determinant()) > 1e-3 else mm
        m[i] += v[i].outer_product(v[i])


@ti.kernel
def bits(x: U32, y: ti.types.ndarray(dtype=ti.i64, ndim=1), z: ti.types.ndarray(dtype=ti.u8, ndim=1),
         h: ti.types.ndarray(dtype=ti.f16, ndim=1), d: ti.types.ndarray(dtype=ti.f64, ndim=1)):
    for i in x:
        a = x[i]
        x[i] = (a << 3) ^ (a >> 2) | (a & 0xFF) + ti.bit_cast(ti.f32(a), ti.u32)
        y[i] = ti.i64(a) * 1000000007 % 998244353 - y[i] // 3
        z[i] = ti.u8(a % 256) + z[i]
        h[i] = ti.f16(h[i] * 0.5 + d[i])
        d[i] = ti.f64(a) / 3.0 + ti.sqrt(d[i] * d[i])
        ti.atomic_max(x[0], a)
        ti.atomic_and(x[1], a)
        ti.atomic_or(x[2], a)
        ti.atomic_xor(x[3], a)


@ti.kernel
def grid(a: ti.types.ndarray(dtype=ti.f32, ndim=2), s: ti.f32, n: ti.i32) -> ti.f32:
    total = 0.0
    for i, j in a:
        a[i, j] = a[i, j] * s
        total += a[i, j]
    for k in range(n):
        a[0, 0] += k
    ti.loop_config(serialize=True)
    for k in range(n):
        if a[0, k % 2] > 100:
            break
        a[0, 1] += 1
    return total


@ti.kernel
def textures(t: ti.types.rw_texture(num_dimensions=2, fmt=ti.Format.r32f, lod=0),
             s: ti.types.texture(num_dimensions=2), o: ti.types.ndarray(dtype=ti.f32, ndim=2)):
    for i, j in ti.ndrange(8, 8):
        v = s.fetch(ti.Vector([i, j]), 0) + s.sample_lod(ti.Vector([i / 8.0, j / 8.0]), 0.0)
        t.store(ti.Vector([i, j]), ti.Vector([v.x, 0.0, 0.0, 0.0]))
        o[i, j] = t.load(ti.Vector([i, j])).x


CAPS = ["spirv_has_int8", "spirv_has_int16", "spirv_has_int64", "spirv_has_float16", "spirv_has_float64"]
module = ti.aot.Module(ti.vulkan, caps=CAPS)
for kernel in (loops, maths, bits, grid, textures):
    module.add_kernel(kernel)
module.save(sys.argv[1])
