"""Images, samplers and textures (Vulkan and the other gfx backends)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from . import capi
from ._lifetime import Child, Owned, Parent, unpicklable
from ._native import ffi
from .enums import AddressMode, ArgumentType, Filter, Format, ImageDimension, ImageLayout, ImageUsage
from .errors import ArgumentTypeError, InvalidArgumentError, NotSupportedError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable


__all__ = ["Image", "Sampler", "Texture"]

_DIMS_OF = {
    ImageDimension.DIM_1D: 1,
    ImageDimension.DIM_2D: 2,
    ImageDimension.DIM_3D: 3,
    ImageDimension.DIM_1D_ARRAY: 2,
    ImageDimension.DIM_2D_ARRAY: 3,
    ImageDimension.CUBE: 2,
}


def _dimension(value: object) -> ImageDimension:
    if isinstance(value, str):
        key = value.strip().upper()
        key = key if key in ImageDimension.__members__ else "DIM_" + key
        if key in ImageDimension.__members__:
            return ImageDimension[key]
        raise InvalidArgumentError(f"unknown image dimension {value!r} (1d, 2d, 3d, 1d_array, 2d_array, cube)")
    return capi.enum_arg(ImageDimension, value, "image dimension")


def _format(value: object) -> Format:
    if isinstance(value, str):
        try:
            return Format[value.strip().upper()]
        except KeyError:
            raise InvalidArgumentError(f"unknown image format {value!r}") from None
    return capi.enum_arg(Format, value, "image format")


class Image(Child):
    """An image of one runtime: ``Image(rt, "2d", (w, h), "rgba8")`` or :meth:`Runtime.allocate_image`.

    Attributes: ``dimension``, ``extent`` (width, height, depth), ``format``, ``mip_level_count``, ``usage``.
    Pass it to kernels as ``Texture(image)`` (or the Image itself). Vulkan and the other gfx backends.

    Raises:
        ArgumentTypeError: an extent that is not 1 to 3 ints, an unknown kind of dimension/format/usage.
        InvalidArgumentError: an unknown dimension or format name, an extent that does not fit the dimension.
        NotSupportedError: the backend has no images (x64, CUDA).
    """

    __reduce_ex__ = unpicklable("send its texels as a numpy array and make an image there")

    def __init__(
        self,
        runtime: Parent,
        dimension: ImageDimension | int | str,
        extent: Iterable[int] | int,
        format: Format | int | str,
        *,
        mip_level_count: int = 1,
        usage: ImageUsage | int = ImageUsage.STORAGE | ImageUsage.SAMPLED,
    ):
        runtime.ensure_open()
        if runtime.device.traits.no_images:  # taichi_aot's own CUDA runtime: no libtaichi runtime to ask
            raise NotSupportedError(f"allocate_image: {runtime.device.traits.no_images}")
        dim = _dimension(dimension)
        fmt = _format(format)
        given: Any = (extent,) if isinstance(extent, int) and not isinstance(extent, bool) else extent
        try:
            sides = [int(v) for v in given]
        except (TypeError, ValueError):
            raise ArgumentTypeError(f"image extent must be a tuple of ints, got {extent!r}") from None
        if not 1 <= len(sides) <= 3 or any(isinstance(v, bool) for v in given):
            raise ArgumentTypeError(f"image extent must have 1 to 3 ints, got {extent!r}")
        if len(sides) != _DIMS_OF[dim] and dim not in (ImageDimension.CUBE,):
            raise InvalidArgumentError(f"a {dim.name} image needs an extent of {_DIMS_OF[dim]} sides, got {extent!r}")
        if any(not 0 < v < 2**31 for v in sides):
            raise InvalidArgumentError(f"image extent {tuple(sides)}: every side must be positive")
        sides = [*sides, 1, 1][:3]
        usage = ImageUsage(capi.enum_arg(ImageUsage, usage, "image usage"))
        rt = runtime.handle
        handle = capi.allocate_image(
            rt,
            dimension=dim,
            extent={"width": sides[0], "height": sides[1], "depth": sides[2], "array_layer_count": 1},
            mip_level_count=mip_level_count,
            format=fmt,
            usage=usage,
        ).cdata
        self._handle = handle
        self._dimension = dim
        self._extent: tuple[int, int, int] = (sides[0], sides[1], sides[2])
        self._format = fmt
        self._mip_level_count = mip_level_count
        self._usage = usage
        self._attach(runtime, Owned(functools.partial(capi.free_image, rt, handle), runtime.owned))

    _kind = "image"

    @property
    def dimension(self) -> ImageDimension:
        return self._dimension

    @property
    def extent(self) -> tuple[int, int, int]:
        return self._extent

    @property
    def format(self) -> Format:
        return self._format

    @property
    def mip_level_count(self) -> int:
        return self._mip_level_count

    @property
    def usage(self) -> ImageUsage:
        return self._usage

    def transition(self, layout: ImageLayout | int | str) -> None:
        """Move the image to ``layout`` (e.g. ``ImageLayout.SHADER_READ``)."""
        self.ensure_open()
        capi.transition_image(self._runtime.handle, self._handle, capi.enum_arg(ImageLayout, layout, "transition"))

    def track(self, layout: ImageLayout | int | str) -> None:
        """Tell the runtime the image is in ``layout`` now (after outside use)."""
        self.ensure_open()
        capi.track_image(self._runtime.handle, self._handle, capi.enum_arg(ImageLayout, layout, "track"))

    def _region(self) -> dict:
        w, h, d = self._extent
        return {"image": self._handle, "offset": {}, "extent": {"width": w, "height": h, "depth": d,
                "array_layer_count": 1}, "mip_level": 0}

    def copy_to(self, dst: Image) -> None:
        """Copy the whole image into ``dst`` (same runtime and extent)."""
        self.ensure_open()
        if not isinstance(dst, Image):
            raise ArgumentTypeError(f"copy_to: dst must be an Image, got {type(dst).__name__}")
        dst.ensure_open()
        if dst.runtime is not self._runtime:
            raise InvalidArgumentError("copy_to: the images belong to different runtimes")
        if dst._extent != self._extent:
            raise InvalidArgumentError(f"copy_to: extents differ ({self._extent} -> {dst._extent})")
        capi.copy_image_device_to_device(self._runtime.handle, dst._region(), self._region())

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Image {self._dimension.name} {self._extent} {self._format.name} ({state})>"


class Sampler(Child):
    """A sampler. libtaichi_c_api 1.7.4 implements samplers on no backend, so creating one
    raises NotSupportedError there; kernels sample textures with their default sampler."""

    __reduce_ex__ = unpicklable("make the sampler there")

    def __init__(
        self,
        runtime: Parent,
        mag_filter: Filter | int | str = Filter.LINEAR,
        min_filter: Filter | int | str = Filter.LINEAR,
        address_mode: AddressMode | int | str = AddressMode.CLAMP_TO_EDGE,
        max_anisotropy: float = 1.0,
    ):
        runtime.ensure_open()
        if runtime.device.traits.no_images:
            raise NotSupportedError(f"create_sampler: no images to sample: {runtime.device.traits.no_images}")
        info = {
            "mag_filter": capi.enum_arg(Filter, mag_filter, "mag_filter"),
            "min_filter": capi.enum_arg(Filter, min_filter, "min_filter"),
            "address_mode": capi.enum_arg(AddressMode, address_mode, "address_mode"),
            "max_anisotropy": float(max_anisotropy),
        }
        rt = runtime.handle
        handle = capi.create_sampler(rt, info).cdata
        self._handle = handle
        self._attach(runtime, Owned(functools.partial(capi.destroy_sampler, rt, handle), runtime.owned))

    _kind = "sampler"


class Texture:
    """An image (and optional sampler) passed to a kernel's texture or rw_texture argument."""

    __reduce_ex__ = unpicklable("send its image's texels as a numpy array and make a texture there")

    __slots__ = ("_arg", "image", "sampler")

    def __init__(self, image: Image, sampler: Sampler | None = None):
        if not isinstance(image, Image):
            raise ArgumentTypeError(f"Texture needs an Image, got {type(image).__name__}")
        if sampler is not None and not isinstance(sampler, Sampler):
            raise ArgumentTypeError(f"Texture sampler must be a Sampler or None, got {type(sampler).__name__}")
        image.ensure_open()
        self.image = image
        self.sampler = sampler
        arg = ffi.new("TiArgument *")
        arg.type = ArgumentType.TEXTURE
        tex = arg.value.texture
        tex.image = image._handle
        tex.sampler = sampler._handle if sampler is not None else ffi.NULL
        tex.dimension = image.dimension
        tex.extent.width, tex.extent.height, tex.extent.depth = image.extent
        tex.extent.array_layer_count = 1
        tex.format = image.format
        self._arg = arg

    def __repr__(self) -> str:
        return f"<Texture of {self.image!r}>"
