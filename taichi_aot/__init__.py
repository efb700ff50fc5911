"""taichi_aot: run ahead-of-time compiled Taichi kernels from Python through the Taichi C-API."""

from __future__ import annotations

from . import _library  # loads libtaichi_c_api first; raises ImportError if none fits
from . import capi, enums, errors
from .enums import (
    AddressMode,
    ArgumentType,
    Arch,
    Capability,
    DataType,
    Error,
    Filter,
    Format,
    ImageDimension,
    ImageLayout,
    ImageUsage,
    MemoryUsage,
)
from .errors import *  # noqa: F401,F403

__version__ = "0.1.0"
