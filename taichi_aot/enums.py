"""Every C enum and bit field of the C-API as ``IntEnum`` / ``IntFlag``, and the tables about them.

Members are written out so that type checkers and readers see them; a test
(``tests/test_bindings.py``) checks each value against the compiled extension's
``lib``, so they cannot drift from the vendored headers. Member names drop the C
prefix: ``TI_ARCH_VULKAN`` is ``Arch.VULKAN``, ``TI_MEMORY_USAGE_STORAGE_BIT`` is
``MemoryUsage.STORAGE``. Image dimensions, whose C names start with a digit, are
``ImageDimension.DIM_1D`` etc.

Every ``str()`` of a member is its name (``print(rt.arch)`` prints ``VULKAN``).

The tables below are the one place each fact about these enums lives: the
backend families, and the size and numpy dtype of each data type.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


class _Named(enum.IntEnum):
    """An IntEnum that prints as its name (``str``, and ``format`` without a spec)."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return self.name if not spec else int.__format__(self, spec)


class _NamedFlag(enum.IntFlag):
    """An IntFlag that prints as its name, ``A|B`` for a combination."""

    def __str__(self) -> str:
        return self.name or repr(self)

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else int.__format__(self, spec)


class Error(_Named):
    """TiError: result codes of the C-API (SUCCESS is 0, errors are negative)."""

    OUT_OF_MEMORY = -11
    INCOMPATIBLE_MODULE = -10
    INVALID_STATE = -9
    INVALID_INTEROP = -8
    ARGUMENT_NOT_FOUND = -7
    ARGUMENT_OUT_OF_RANGE = -6
    ARGUMENT_NULL = -5
    INVALID_ARGUMENT = -4
    NAME_NOT_FOUND = -3
    CORRUPTED_DATA = -2
    NOT_SUPPORTED = -1
    SUCCESS = 0


class Access(_NamedFlag):
    """How a kernel uses an ndarray argument, as Taichi's analysis records it (gfx modules' ``arr_access``): it
    reads it, writes it, both, or neither. Strings name them too: ``"read"``, ``"write"``, ``"read_write"``
    (or ``"readwrite"``), ``"none"``."""

    NONE = 0
    READ = 1
    WRITE = 2
    READ_WRITE = 3

    @classmethod
    def parse(cls, value: object, what: str) -> Access:
        """``value`` (an Access, or one of the strings above) as an Access; ValueError naming ``what`` else."""
        if isinstance(value, Access):
            if int(value) in (0, 1, 2, 3):
                return value
            raise ValueError(f"{what}: {value!r} is no access (its bits are READ 1 and WRITE 2)")
        if isinstance(value, str):
            key = value.strip().lower().replace("-", "_")
            found = _ACCESS_WORDS.get(key)
            if found is not None:
                return found
        raise ValueError(f"{what}: {value!r} is no access (one of 'read', 'write', 'read_write', 'none', or Access)")


_ACCESS_WORDS = {"read": Access.READ, "write": Access.WRITE, "read_write": Access.READ_WRITE,
                 "readwrite": Access.READ_WRITE, "rw": Access.READ_WRITE, "r": Access.READ, "w": Access.WRITE,
                 "none": Access.NONE}


class Arch(_Named):
    """TiArch: backends a runtime can be created for."""

    RESERVED = 0
    VULKAN = 1
    METAL = 2
    CUDA = 3
    X64 = 4
    ARM64 = 5
    OPENGL = 6
    GLES = 7


class Capability(_Named):
    """TiCapability: device capabilities (SPIR-V features)."""

    RESERVED = 0
    SPIRV_VERSION = 1
    SPIRV_HAS_INT8 = 2
    SPIRV_HAS_INT16 = 3
    SPIRV_HAS_INT64 = 4
    SPIRV_HAS_FLOAT16 = 5
    SPIRV_HAS_FLOAT64 = 6
    SPIRV_HAS_ATOMIC_INT64 = 7
    SPIRV_HAS_ATOMIC_FLOAT16 = 8
    SPIRV_HAS_ATOMIC_FLOAT16_ADD = 9
    SPIRV_HAS_ATOMIC_FLOAT16_MINMAX = 10
    SPIRV_HAS_ATOMIC_FLOAT = 11
    SPIRV_HAS_ATOMIC_FLOAT_ADD = 12
    SPIRV_HAS_ATOMIC_FLOAT_MINMAX = 13
    SPIRV_HAS_ATOMIC_FLOAT64 = 14
    SPIRV_HAS_ATOMIC_FLOAT64_ADD = 15
    SPIRV_HAS_ATOMIC_FLOAT64_MINMAX = 16
    SPIRV_HAS_VARIABLE_PTR = 17
    SPIRV_HAS_PHYSICAL_STORAGE_BUFFER = 18
    SPIRV_HAS_SUBGROUP_BASIC = 19
    SPIRV_HAS_SUBGROUP_VOTE = 20
    SPIRV_HAS_SUBGROUP_ARITHMETIC = 21
    SPIRV_HAS_SUBGROUP_BALLOT = 22
    SPIRV_HAS_NON_SEMANTIC_INFO = 23
    SPIRV_HAS_NO_INTEGER_WRAP_DECORATION = 24


class DataType(_Named):
    """TiDataType: element types of ndarrays and scalars."""

    F16 = 0
    F32 = 1
    F64 = 2
    I8 = 3
    I16 = 4
    I32 = 5
    I64 = 6
    U1 = 7
    U8 = 8
    U16 = 9
    U32 = 10
    U64 = 11
    GEN = 12
    UNKNOWN = 13


class ArgumentType(_Named):
    """TiArgumentType: kinds of kernel argument."""

    I32 = 0
    F32 = 1
    NDARRAY = 2
    TEXTURE = 3
    SCALAR = 4
    TENSOR = 5


class MemoryUsage(_NamedFlag):
    """TiMemoryUsageFlagBits: how device memory is used."""

    STORAGE = 1
    UNIFORM = 2
    VERTEX = 4
    INDEX = 8


class ImageUsage(_NamedFlag):
    """TiImageUsageFlagBits: how an image is used."""

    STORAGE = 1
    SAMPLED = 2
    ATTACHMENT = 4


class ImageDimension(_Named):
    """TiImageDimension: 1D, 2D, 3D, arrays and cube maps."""

    DIM_1D = 0
    DIM_2D = 1
    DIM_3D = 2
    DIM_1D_ARRAY = 3
    DIM_2D_ARRAY = 4
    CUBE = 5


class ImageLayout(_Named):
    """TiImageLayout: image layouts for transitions."""

    UNDEFINED = 0
    SHADER_READ = 1
    SHADER_WRITE = 2
    SHADER_READ_WRITE = 3
    COLOR_ATTACHMENT = 4
    COLOR_ATTACHMENT_READ = 5
    DEPTH_ATTACHMENT = 6
    DEPTH_ATTACHMENT_READ = 7
    TRANSFER_DST = 8
    TRANSFER_SRC = 9
    PRESENT_SRC = 10


class Format(_Named):
    """TiFormat: texel formats."""

    UNKNOWN = 0
    R8 = 1
    RG8 = 2
    RGBA8 = 3
    RGBA8SRGB = 4
    BGRA8 = 5
    BGRA8SRGB = 6
    R8U = 7
    RG8U = 8
    RGBA8U = 9
    R8I = 10
    RG8I = 11
    RGBA8I = 12
    R16 = 13
    RG16 = 14
    RGB16 = 15
    RGBA16 = 16
    R16U = 17
    RG16U = 18
    RGB16U = 19
    RGBA16U = 20
    R16I = 21
    RG16I = 22
    RGB16I = 23
    RGBA16I = 24
    R16F = 25
    RG16F = 26
    RGB16F = 27
    RGBA16F = 28
    R32U = 29
    RG32U = 30
    RGB32U = 31
    RGBA32U = 32
    R32I = 33
    RG32I = 34
    RGB32I = 35
    RGBA32I = 36
    R32F = 37
    RG32F = 38
    RGB32F = 39
    RGBA32F = 40
    DEPTH16 = 41
    DEPTH24STENCIL8 = 42
    DEPTH32F = 43


class Filter(_Named):
    """TiFilter: sampler filters."""

    NEAREST = 0
    LINEAR = 1


class AddressMode(_Named):
    """TiAddressMode: sampler address modes."""

    REPEAT = 0
    MIRRORED_REPEAT = 1
    CLAMP_TO_EDGE = 2


#: The C prefix (and suffix) of each enum's members, for the test that compares them with ``lib``.
C_NAMES: dict[type[enum.IntEnum | enum.IntFlag], tuple[str, str]] = {
    Error: ("TI_ERROR_", ""),
    Arch: ("TI_ARCH_", ""),
    Capability: ("TI_CAPABILITY_", ""),
    DataType: ("TI_DATA_TYPE_", ""),
    ArgumentType: ("TI_ARGUMENT_TYPE_", ""),
    MemoryUsage: ("TI_MEMORY_USAGE_", "_BIT"),
    ImageUsage: ("TI_IMAGE_USAGE_", "_BIT"),
    ImageDimension: ("TI_IMAGE_DIMENSION_", ""),
    ImageLayout: ("TI_IMAGE_LAYOUT_", ""),
    Format: ("TI_FORMAT_", ""),
    Filter: ("TI_FILTER_", ""),
    AddressMode: ("TI_ADDRESS_MODE_", ""),
}

# ---------------------------------------------------------------------------
# Backend families

#: Backends whose modules are LLVM code (x64, arm64, CUDA); their metadata is Taichi's text serializer.
LLVM_ARCHS: frozenset[Arch] = frozenset({Arch.X64, Arch.ARM64, Arch.CUDA})
#: Backends that run on the host CPU; their memory is host memory.
CPU_ARCHS: frozenset[Arch] = frozenset({Arch.X64, Arch.ARM64})
#: Backends whose modules are SPIR-V/shader code with JSON metadata.
GFX_ARCHS: frozenset[Arch] = frozenset({Arch.VULKAN, Arch.METAL, Arch.OPENGL, Arch.GLES})
#: Backends that drive a GPU (CUDA and the gfx APIs).
GPU_ARCHS: frozenset[Arch] = frozenset({Arch.CUDA}) | GFX_ARCHS
#: Preference when ``Runtime(arch=None)``: GPU backends, then the CPU, then OpenGL. A Vulkan backend
#: whose devices are all software rasterizers (no GPU) comes after every other choice.
ARCH_PREFERENCE: tuple[Arch, ...] = (
    Arch.CUDA, Arch.VULKAN, Arch.METAL, Arch.X64, Arch.ARM64, Arch.OPENGL, Arch.GLES,
)

# ---------------------------------------------------------------------------
# Archs in messages: what an error that refuses an arch name or an arch suggests instead

#: The command that lists the archs that work here, with why each other one does not.
ARCHS_COMMAND = "python -m taichi_aot archs"
#: Words for a kind of device (not a backend), and the backends to name for one.
_DEVICE_WORDS = {
    "gpu": "for a GPU use 'cuda' (NVIDIA) or 'vulkan' (any GPU; 'metal' on macOS)",
    "cpu": "for the CPU use 'x64' ('arm64' on ARM machines)",
    "nvidia": "for an NVIDIA GPU use 'cuda' (or 'vulkan')",
    "mps": "for an Apple GPU use 'metal' (or 'vulkan' through MoltenVK)",
}


def arch_name_hint(name: str, names: Sequence[str], archs_command: bool = True) -> str:
    """What to write instead of the unknown arch ``name`` (one of ``names``), as the end of its message: the names
    near it (``: did you mean 'vulkan'?``), or the backends for a kind of device (``"gpu"``), then ``names`` and,
    with ``archs_command``, the command that lists those that work here."""
    import difflib

    key = name.strip().lower()
    lowered = {n.lower(): n for n in names}
    near = difflib.get_close_matches(key, list(lowered), n=2, cutoff=0.6) if key not in _DEVICE_WORDS else []
    if key in _DEVICE_WORDS:
        hint = f": taichi_aot names backends, not device kinds: {_DEVICE_WORDS[key]}"
    elif near:
        hint = f": did you mean {' or '.join(repr(lowered[n]) for n in near)}?"
    else:
        hint = ""
    where = f"; {ARCHS_COMMAND} lists those that work here" if archs_command else ""
    return f"{hint} (expected one of {', '.join(names)}{where})"


def archs_instead(status: Mapping[Arch, Any], reason: str) -> str:
    """The end of a message that refuses an arch this machine lacks (``reason``: why): the archs that work here by
    ``status`` (each arch's probe, its ``available``), in the order a runtime prefers them, and, unless ``reason``
    names it already, the command that lists them."""
    names = [a.name.lower() for a in ARCH_PREFERENCE if a in status and status[a].available]
    listed = "" if ARCHS_COMMAND in reason else f" ({ARCHS_COMMAND} lists them, and why each other one does not work)"
    if not names:
        return f"; no arch works here{listed}"
    return f"; use one that works here: {', '.join(names)}{listed}"

# ---------------------------------------------------------------------------
# Data types

#: numpy dtype of every Taichi data type that can be stored (U1 is stored as a byte).
NUMPY_DTYPES: dict[DataType, np.dtype] = {
    DataType.F16: np.dtype(np.float16),
    DataType.F32: np.dtype(np.float32),
    DataType.F64: np.dtype(np.float64),
    DataType.I8: np.dtype(np.int8),
    DataType.I16: np.dtype(np.int16),
    DataType.I32: np.dtype(np.int32),
    DataType.I64: np.dtype(np.int64),
    DataType.U1: np.dtype(np.bool_),
    DataType.U8: np.dtype(np.uint8),
    DataType.U16: np.dtype(np.uint16),
    DataType.U32: np.dtype(np.uint32),
    DataType.U64: np.dtype(np.uint64),
}
#: The Taichi data type of each numpy dtype that has one.
DATA_TYPES: dict[np.dtype, DataType] = {v: k for k, v in NUMPY_DTYPES.items()}
#: Bytes per element of each storable data type.
DATA_TYPE_SIZE: dict[DataType, int] = {k: v.itemsize for k, v in NUMPY_DTYPES.items()}
#: Types the C-API accepts in a TI_ARGUMENT_TYPE_SCALAR argument (F16 travels as an f32 in ``x32``).
SCALAR_ARGUMENT_TYPES: frozenset[DataType] = frozenset({DataType.I16, DataType.U16, DataType.F16})

__all__ = [
    "ARCHS_COMMAND",
    "ARCH_PREFERENCE",
    "CPU_ARCHS",
    "DATA_TYPES",
    "DATA_TYPE_SIZE",
    "GFX_ARCHS",
    "GPU_ARCHS",
    "LLVM_ARCHS",
    "NUMPY_DTYPES",
    "SCALAR_ARGUMENT_TYPES",
    "Access",
    "AddressMode",
    "Arch",
    "ArgumentType",
    "Capability",
    "DataType",
    "Error",
    "Filter",
    "Format",
    "ImageDimension",
    "ImageLayout",
    "ImageUsage",
    "MemoryUsage",
    "arch_name_hint",
    "archs_instead",
]
