"""What libtaichi_c_api 1.7.4 aborts the process on when it allocates an image (Vulkan): a format that is no
texel format, a side beyond the device's limit, more bytes than the device allocates at once. Checked before C
with the limits the probe read from the Vulkan loader (taichi_aot._probe.VulkanDevice)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..enums import Format, ImageDimension
from ..errors import ArgumentOutOfRangeError, InvalidArgumentError, OutOfMemoryError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from .._probe import VulkanDevice

__all__ = ["check_image", "texel_bytes"]

_DEPTH_BYTES = {Format.DEPTH16: 2, Format.DEPTH24STENCIL8: 4, Format.DEPTH32F: 4}
# which of maxImageDimension1D, 2D, 3D bounds an image's sides
_LIMIT_OF = {ImageDimension.DIM_1D: 0, ImageDimension.DIM_1D_ARRAY: 0, ImageDimension.DIM_2D: 1,
             ImageDimension.DIM_2D_ARRAY: 1, ImageDimension.CUBE: 1, ImageDimension.DIM_3D: 2}


def texel_bytes(fmt: Format) -> int:
    """Bytes of one texel of ``fmt`` (16, the most, where the name says nothing)."""
    if fmt in _DEPTH_BYTES:
        return _DEPTH_BYTES[fmt]
    m = re.fullmatch(r"(R|RG|RGB|RGBA|BGRA)(8|16|32)\D*", fmt.name)
    return len(m.group(1)) * int(m.group(2)) // 8 if m else 16


def check_image(info: Any, devices: Sequence[VulkanDevice], what: str) -> None:
    """Raise where allocating ``info`` (a TiImageAllocateInfo) would abort libtaichi_c_api on these devices: the
    smallest limit of any of them counts (the C-API does not say which it drives)."""
    try:
        fmt = Format(int(info.format))
        dim = ImageDimension(int(info.dimension))
    except ValueError:
        raise InvalidArgumentError(f"{what}: format {int(info.format)} / dimension {int(info.dimension)} "
                                   "is no TiFormat / TiImageDimension") from None
    if fmt == Format.UNKNOWN:
        raise InvalidArgumentError(f"{what}: format UNKNOWN is no texel format: name one (Format.R32F, ...)")
    ext = info.extent
    sides = {ImageDimension.DIM_1D: (ext.width,), ImageDimension.DIM_1D_ARRAY: (ext.width,),
             ImageDimension.DIM_3D: (ext.width, ext.height, ext.depth)}.get(dim, (ext.width, ext.height))
    bounds = [d.max_image[_LIMIT_OF[dim]] for d in devices if d.max_image[_LIMIT_OF[dim]]]
    if bounds and max(sides) > min(bounds):
        raise ArgumentOutOfRangeError(f"{what}: a {dim.name} image of sides {tuple(int(s) for s in sides)}: the "
                                      f"Vulkan device takes at most {min(bounds)} per side")
    layers = max(int(ext.array_layer_count), 1) * (6 if dim == ImageDimension.CUBE else 1)
    nbytes = int(ext.width) * int(ext.height) * int(ext.depth) * layers * texel_bytes(fmt)
    if int(info.mip_level_count) > 1:
        nbytes += nbytes // 3  # a full mip chain adds a third
    largest = [d.max_allocation for d in devices if d.max_allocation]
    if largest and nbytes > min(largest):
        raise OutOfMemoryError(f"{what}: a {fmt.name} image of {nbytes} bytes; the Vulkan device allocates at most "
                               f"{min(largest)} bytes at once")
