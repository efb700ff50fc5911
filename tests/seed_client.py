"""The C structures as a client of the flat API's design document (seed 001) writes them for itself, from
``taichi_core.h``: plain ctypes, every handle a ``c_void_p`` (which takes an int or None, never a cffi pointer), a
name a ``c_char_p``. tests/test_seed001.py runs the client's walk of all 29 functions with these."""

from __future__ import annotations

import ctypes as c

TiRuntime = TiMemory = TiImage = TiSampler = TiAotModule = TiKernel = TiComputeGraph = c.c_void_p
TiEnum = c.c_int32  # the C enums are 32-bit


class TiMemoryAllocateInfo(c.Structure):
    _fields_ = [("size", c.c_uint64), ("host_write", c.c_uint32), ("host_read", c.c_uint32),
                ("export_sharing", c.c_uint32), ("usage", c.c_uint32)]


class TiMemorySlice(c.Structure):
    _fields_ = [("memory", TiMemory), ("offset", c.c_uint64), ("size", c.c_uint64)]


class TiNdShape(c.Structure):
    _fields_ = [("dim_count", c.c_uint32), ("dims", c.c_uint32 * 16)]


class TiNdArray(c.Structure):
    _fields_ = [("memory", TiMemory), ("shape", TiNdShape), ("elem_shape", TiNdShape), ("elem_type", TiEnum)]


class TiImageOffset(c.Structure):
    _fields_ = [("x", c.c_uint32), ("y", c.c_uint32), ("z", c.c_uint32), ("array_layer_offset", c.c_uint32)]


class TiImageExtent(c.Structure):
    _fields_ = [("width", c.c_uint32), ("height", c.c_uint32), ("depth", c.c_uint32), ("array_layer_count", c.c_uint32)]


class TiImageAllocateInfo(c.Structure):
    _fields_ = [("dimension", TiEnum), ("extent", TiImageExtent), ("mip_level_count", c.c_uint32), ("format", TiEnum),
                ("export_sharing", c.c_uint32), ("usage", c.c_uint32)]


class TiImageSlice(c.Structure):
    _fields_ = [("image", TiImage), ("offset", TiImageOffset), ("extent", TiImageExtent), ("mip_level", c.c_uint32)]


class TiSamplerCreateInfo(c.Structure):
    _fields_ = [("mag_filter", TiEnum), ("min_filter", TiEnum), ("address_mode", TiEnum), ("max_anisotropy", c.c_float)]


class TiTexture(c.Structure):
    _fields_ = [("image", TiImage), ("sampler", TiSampler), ("dimension", TiEnum), ("extent", TiImageExtent),
                ("format", TiEnum)]


class TiScalar(c.Structure):
    _fields_ = [("type", TiEnum), ("value", c.c_uint64)]


class TiTensorValueWithLength(c.Structure):
    _fields_ = [("length", c.c_uint32), ("data", c.c_uint64 * 16)]  # data: a union of 128 bytes, 8-byte aligned


class TiTensor(c.Structure):
    _fields_ = [("type", TiEnum), ("contents", TiTensorValueWithLength)]


class TiArgumentValue(c.Union):
    _fields_ = [("i32", c.c_int32), ("f32", c.c_float), ("ndarray", TiNdArray), ("texture", TiTexture),
                ("scalar", TiScalar), ("tensor", TiTensor)]


class TiArgument(c.Structure):
    _fields_ = [("type", TiEnum), ("value", TiArgumentValue)]


class TiNamedArgument(c.Structure):
    _fields_ = [("name", c.c_char_p), ("argument", TiArgument)]


class TiCapabilityLevelInfo(c.Structure):
    _fields_ = [("capability", TiEnum), ("level", c.c_uint32)]
