"""Images and textures through the object layer (a Vulkan feature), and their misuse."""

from __future__ import annotations

import numpy as np
import pytest

import taichi_aot as ta
from taichi_aot import Arch, Format, ImageDimension, ImageLayout, Runtime, Texture


def test_texture_kernels(vulkan, modules):
    with Runtime(vulkan) as rt:
        mod = rt.load_module(modules.path(vulkan, tcm=True))
        img = rt.allocate_image("2d", (16, 8), "r32f")
        assert img.dimension == ImageDimension.DIM_2D and img.extent == (16, 8, 1) and img.format == Format.R32F
        img.transition(ImageLayout.SHADER_READ_WRITE)
        mod.kernels["tex_write"](Texture(img), 1.5, 16, 8)
        out = rt.ndarray((16, 8), np.float32)
        mod.kernels["tex_read"](img, out)  # an Image passes as a texture too
        expected = 1.5 + np.arange(16)[:, None] * 10.0 + np.arange(8)[None, :]
        np.testing.assert_allclose(out.to_numpy(), expected)

        copy = rt.allocate_image(ImageDimension.DIM_2D, (16, 8), Format.R32F)
        copy.track(ImageLayout.UNDEFINED)
        img.copy_to(copy)
        out.fill(0)
        mod.kernels["tex_read"](Texture(copy), out)
        np.testing.assert_allclose(out.to_numpy(), expected)

        with pytest.raises(ValueError, match="extents differ"):
            img.copy_to(rt.allocate_image("2d", (4, 4), "r32f"))
        with pytest.raises(TypeError):
            img.copy_to(out)
        copy.close()
        copy.close()
        with pytest.raises(ta.ClosedError):
            mod.kernels["tex_read"](Texture(copy) if False else copy, out)
        with pytest.raises(ta.ClosedError):
            copy.transition(ImageLayout.SHADER_READ)


def test_texture_graphs(vulkan, modules):
    # texture and rw-texture graph arguments: dimension from the graph's record, format from the kernel
    with Runtime(vulkan) as rt:
        mod = rt.load_module(modules.path(vulkan))
        write, read = mod.graphs["tex_write_graph"], mod.graphs["tex_read_graph"]
        tex_w, tex_r = write.signature[0], read.signature[0]
        assert (tex_w.kind, tex_w.ndim, tex_w.format) == ("rw_texture", 2, Format.R32F)
        assert (tex_r.kind, tex_r.ndim) == ("texture", 2)
        img = rt.allocate_image("2d", (16, 8), "r32f")
        img.transition(ImageLayout.SHADER_READ_WRITE)
        write(tex=Texture(img), v=2.5, w=16, h=8)
        out = rt.ndarray((16, 8), np.float32)
        read(tex=img, out=out)
        expected = 2.5 + np.arange(16)[:, None] * 10.0 + np.arange(8)[None, :]
        np.testing.assert_allclose(out.to_numpy(), expected)
        with pytest.raises(ValueError, match="DIM_1D"):
            write(tex=rt.allocate_image("1d", (16,), "r32f"), v=1.0, w=16, h=1)
        with pytest.raises(ValueError, match="R32F texels"):
            write(tex=rt.allocate_image("2d", (16, 8), "rgba8"), v=1.0, w=16, h=8)
        with pytest.raises(ValueError, match="STORAGE usage"):
            write(tex=rt.allocate_image("2d", (16, 8), "r32f", usage=ta.ImageUsage.SAMPLED), v=1.0, w=16, h=8)


def test_image_bad_input(vulkan):
    with Runtime(vulkan) as rt:
        for args, exc in (
            (("4d", (4, 4), "r32f"), ValueError),
            (("2d", (4,), "r32f"), ValueError),
            (("2d", (0, 4), "r32f"), ValueError),
            (("2d", "wide", "r32f"), TypeError),
            (("2d", (4, 4), "rgba99"), ValueError),
            (("2d", (4, 4), 999), ValueError),
            ((None, (4, 4), "r32f"), TypeError),
        ):
            with pytest.raises(exc):
                rt.allocate_image(*args)
        with pytest.raises(ValueError):
            rt.allocate_image("2d", (4, 4), "r32f", usage=1 << 9)
        with pytest.raises(ta.NotSupportedError):  # 1.7.4 refuses mip chains
            rt.allocate_image("2d", (4, 4), "r32f", mip_level_count=2)
        img = rt.allocate_image("2d", (4, 4), "rgba8")
        with pytest.raises(ValueError):
            img.transition(4242)
        with pytest.raises(TypeError):
            Texture("image")
        with pytest.raises(TypeError):
            Texture(img, sampler="linear")
        with pytest.raises(ta.NotSupportedError):  # no backend of 1.7.4 implements samplers
            rt.create_sampler()


def test_images_not_supported_on_x64():
    with Runtime(Arch.X64) as rt:
        with pytest.raises(ta.NotSupportedError):
            rt.allocate_image("2d", (4, 4), "r32f")
        x = rt.ndarray((2,), np.float32)  # the runtime is fine afterwards
        x.fill(1)
        assert x.to_numpy().tolist() == [1, 1]


def test_images_beyond_the_device_are_refused_not_an_abort(vulkan):
    """libtaichi_c_api 1.7.4 aborts the process on an image the device cannot make: checked first, against the
    limits the probe read from the Vulkan loader (each case ran here as a SIGABRT before)."""
    from taichi_aot import capi

    devices = capi.arch_status()[Arch.VULKAN].devices
    side2d = min(d.max_image[1] for d in devices)
    largest = min(d.max_allocation for d in devices)
    assert side2d >= 4096 and largest >= 1 << 28  # what the loader reports (lavapipe: 16384, 2 GiB)
    with Runtime(Arch.VULKAN) as rt:
        with pytest.raises(ta.InvalidArgumentError, match="per side"):
            rt.allocate_image("2d", (2**30, 2**30), "r32f")
        with pytest.raises(ta.InvalidArgumentError, match="per side"):
            rt.allocate_image("2d", (side2d + 1, 4), "r32f")
        with pytest.raises(ta.InvalidArgumentError, match="UNKNOWN"):
            rt.allocate_image("2d", (64, 64), Format.UNKNOWN)
        with pytest.raises(ta.OutOfMemoryError, match="at most"):
            rt.allocate_image("3d", (4096, 4096, 4096), "rgba32f")
        big = int((largest // 16) ** 0.5) + 1  # an rgba32f square just over the largest allocation
        if big <= side2d:
            with pytest.raises(ta.OutOfMemoryError, match="at most"):
                rt.allocate_image("2d", (big, big), "rgba32f")
        image = rt.allocate_image("2d", (1024, 1024), "rgba32f")  # the runtime carries on
        assert image.extent[:2] == (1024, 1024)
