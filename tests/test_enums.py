"""The enums written out in taichi_aot.enums equal the C header's values, and their tables agree."""

from __future__ import annotations

import numpy as np

from taichi_aot import enums
from taichi_aot._native import lib


def _c_members(prefix: str, suffix: str) -> dict[str, int]:
    out = {}
    for name in dir(lib):
        if not name.startswith(prefix) or name.endswith("_MAX_ENUM"):
            continue
        short = name[len(prefix):]
        if suffix:
            if not short.endswith(suffix):
                continue
            short = short[: -len(suffix)]
        if not short[0].isalpha():
            short = "DIM_" + short
        out[short] = getattr(lib, name)
    return out


def test_every_enum_equals_the_header():
    assert len(enums.C_NAMES) == 12
    for cls, (prefix, suffix) in enums.C_NAMES.items():
        python = {m.name: int(m) for m in cls}
        assert python == _c_members(prefix, suffix), cls.__name__


def test_members_print_as_names():
    assert str(enums.Arch.VULKAN) == "VULKAN"
    assert f"{enums.Arch.X64}" == "X64"
    assert f"{enums.Error.OUT_OF_MEMORY:d}" == "-11"
    assert str(enums.MemoryUsage.STORAGE | enums.MemoryUsage.UNIFORM) in ("STORAGE|UNIFORM", "UNIFORM|STORAGE")
    assert int(enums.Arch.CUDA) == lib.TI_ARCH_CUDA


def test_tables_agree():
    assert enums.CPU_ARCHS <= enums.LLVM_ARCHS
    assert not enums.LLVM_ARCHS & enums.GFX_ARCHS
    assert set(enums.ARCH_PREFERENCE) == set(enums.Arch) - {enums.Arch.RESERVED}
    for dt, np_dtype in enums.NUMPY_DTYPES.items():
        assert enums.DATA_TYPES[np_dtype] is dt
        assert enums.DATA_TYPE_SIZE[dt] == np_dtype.itemsize
    assert enums.NUMPY_DTYPES[enums.DataType.U1] == np.dtype(bool)
    assert enums.DataType.GEN not in enums.NUMPY_DTYPES
