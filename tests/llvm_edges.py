"""An x64 module of what Taichi 1.7.4 writes at the LLVM format's edges, for tests/test_llvm_checks.py: a kernel on an
SNode field (the metadata's "fields" map, whose keys the text serializer quotes), a kernel named in Cyrillic (LLVM
quotes and escapes its functions' names), a kernel without arguments.

    python tests/llvm_edges.py OUT_FOLDER
"""

import sys

import taichi as ti

ti.init(arch=ti.x64, log_level=ti.ERROR, offline_cache=False)
field = ti.field(ti.f32, shape=8)


@ti.kernel
def fill_field(v: ti.f32):
    for i in field:
        field[i] = v + i


@ti.kernel
def read_field(out: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    for i in out:
        out[i] = field[i]


@ti.kernel
def ядро(x: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    for i in x:
        x[i] = 2.0 * i


@ti.kernel
def nothing():
    pass


module = ti.aot.Module(ti.x64)
module.add_field("field", field)
for kernel in (fill_field, read_field, ядро, nothing):
    module.add_kernel(kernel)
module.save(sys.argv[1])
