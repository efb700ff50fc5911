"""Every C enum and bit field of the C-API as ``IntEnum`` / ``IntFlag``.

Values are read from the compiled extension (``lib``), so they always match the
vendored headers. Member names drop the C prefix: ``TI_ARCH_VULKAN`` is
``Arch.VULKAN``, ``TI_MEMORY_USAGE_STORAGE_BIT`` is ``MemoryUsage.STORAGE``.
Image dimensions, whose C names start with a digit, are ``ImageDimension.DIM_1D`` etc.
"""

from __future__ import annotations

import enum

from ._native import lib


def _members(prefix: str, suffix: str = "", rename=None) -> dict[str, int]:
    members = {}
    for name in dir(lib):
        if not name.startswith(prefix) or name.endswith("_MAX_ENUM"):
            continue
        short = name[len(prefix) :]
        if suffix:
            if not short.endswith(suffix):
                continue
            short = short[: -len(suffix)]
        if rename:
            short = rename(short)
        members[short] = getattr(lib, name)
    return dict(sorted(members.items(), key=lambda kv: kv[1]))


def _make(cls_name: str, base, prefix: str, doc: str, **kw):
    cls = base(cls_name, _members(prefix, **kw), module=__name__)
    cls.__doc__ = doc
    return cls


Error = _make("Error", enum.IntEnum, "TI_ERROR_", "TiError: result codes of the C-API (SUCCESS is 0, errors are negative).")
Arch = _make("Arch", enum.IntEnum, "TI_ARCH_", "TiArch: backends a runtime can be created for.")
Capability = _make("Capability", enum.IntEnum, "TI_CAPABILITY_", "TiCapability: device capabilities (SPIR-V features).")
DataType = _make("DataType", enum.IntEnum, "TI_DATA_TYPE_", "TiDataType: element types of ndarrays and scalars.")
ArgumentType = _make("ArgumentType", enum.IntEnum, "TI_ARGUMENT_TYPE_", "TiArgumentType: kinds of kernel argument.")
MemoryUsage = _make(
    "MemoryUsage", enum.IntFlag, "TI_MEMORY_USAGE_", "TiMemoryUsageFlagBits: how device memory is used.", suffix="_BIT"
)
ImageUsage = _make(
    "ImageUsage", enum.IntFlag, "TI_IMAGE_USAGE_", "TiImageUsageFlagBits: how an image is used.", suffix="_BIT"
)
ImageDimension = _make(
    "ImageDimension",
    enum.IntEnum,
    "TI_IMAGE_DIMENSION_",
    "TiImageDimension: 1D, 2D, 3D, arrays and cube maps (DIM_1D, DIM_2D, DIM_3D, DIM_1D_ARRAY, DIM_2D_ARRAY, CUBE).",
    rename=lambda s: s if s[0].isalpha() else "DIM_" + s,
)
ImageLayout = _make("ImageLayout", enum.IntEnum, "TI_IMAGE_LAYOUT_", "TiImageLayout: image layouts for transitions.")
Format = _make("Format", enum.IntEnum, "TI_FORMAT_", "TiFormat: texel formats.")
Filter = _make("Filter", enum.IntEnum, "TI_FILTER_", "TiFilter: sampler filters.")
AddressMode = _make("AddressMode", enum.IntEnum, "TI_ADDRESS_MODE_", "TiAddressMode: sampler address modes.")

__all__ = [
    "AddressMode",
    "ArgumentType",
    "Arch",
    "Capability",
    "DataType",
    "Error",
    "Filter",
    "Format",
    "ImageDimension",
    "ImageLayout",
    "ImageUsage",
    "MemoryUsage",
]
