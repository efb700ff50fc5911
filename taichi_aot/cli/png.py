"""A minimal PNG writer (8-bit RGB), so pictures need no imaging library."""

from __future__ import annotations

import struct
import zlib

import numpy as np


def write_png(path: str, rgb: np.ndarray) -> None:
    """Write an ``(height, width, 3)`` uint8 array as a PNG file."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected an (height, width, 3) array, got shape {rgb.shape}")
    height, width = rgb.shape[:2]
    raw = np.zeros((height, width * 3 + 1), np.uint8)  # filter byte 0 on every row
    raw[:, 1:] = rgb.reshape(height, width * 3)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", header))
        f.write(chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)))
        f.write(chunk(b"IEND", b""))


def colormap(values: np.ndarray) -> np.ndarray:
    """Map values in [0, 1] to a dark-blue -> teal -> yellow palette (uint8 RGB)."""
    stops = np.array([[8, 12, 40], [20, 90, 140], [40, 170, 150], [250, 230, 90]], np.float32)
    t = np.clip(values, 0.0, 1.0) * (len(stops) - 1)
    i = np.minimum(t.astype(np.int32), len(stops) - 2)
    f = (t - i)[..., None]
    return (stops[i] * (1 - f) + stops[i + 1] * f).astype(np.uint8)
