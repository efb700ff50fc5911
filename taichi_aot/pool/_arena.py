"""Large results of a local worker through shared memory, not through its pipe.

A task's result (a simulation's field: an array of a few MiB) pickled into the worker's pipe crossed it at
0.4-0.9 GB/s, in chunks the parent read as they came. Each local worker gets an *arena* instead: a memory file
(Linux's ``memfd``) the parent makes and the worker maps. The worker pickles its reply with protocol 5, puts the
large buffers (numpy arrays' memory, from ``OUT_OF_BAND`` bytes on) in the arena and sends only the pickle and where
they are; the parent copies them out of the arena into memory of their own as it unpickles the reply. A worker runs
one task at a time and the parent reads each reply before it sends the next task, so the arena is never written
while the parent reads it. Buffers that do not fit in what is left of the arena, and every reply where there is no
arena (not Linux, a memory file refused), go through the pipe as before.
"""

from __future__ import annotations

import mmap
import os
import pickle
import struct
import sys
from typing import Any

#: The arena's size (the memory file is sparse: only what replies have written is backed, at most this).
ARENA_BYTES = 64 << 20
#: The bytes of the arena that stay backed after a reply; a larger reply's other pages are given back as it is read.
KEEP = 8 << 20
#: Buffers of at least this many bytes go through the arena.
OUT_OF_BAND = 64 << 10
#: What starts a reply whose buffers are in the arena, followed by their count and (offset, size) each, then the
#: pickle. A pickle (protocol 2 and up) starts with 0x80.
MARK = b"\x00taichi_aot-arena\x00"
_COUNT, _SPAN = struct.Struct("<I"), struct.Struct("<QQ")
#: The memory file's name (``/memfd:<NAME>`` in ``/proc``).
NAME = "taichi_aot-pool-arena"


class Arena:
    """The parent's side: the memory file, mapped; ``where`` tells the worker how to open it (None: no arena)."""

    def __init__(self, size: int | None = None):
        size = size or ARENA_BYTES
        self.where: str | None = None
        self._fd = -1
        self._map: mmap.mmap | None = None
        if not sys.platform.startswith("linux") or not hasattr(os, "memfd_create"):
            return
        try:
            self._fd = os.memfd_create(NAME, os.MFD_CLOEXEC)
            os.ftruncate(self._fd, size)
            self._map = mmap.mmap(self._fd, size)
        except OSError:  # no memory file here: replies go through the pipe
            self.close()
            return
        self.where = f"/proc/{os.getpid()}/fd/{self._fd}"

    def attached(self) -> None:
        """The worker has mapped the arena: the parent's descriptor of it goes (its mapping stays)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def loads(self, data: bytes) -> Any:
        """A reply from the worker: its buffers copied out of the arena where it put them there."""
        if not data.startswith(MARK) or self._map is None:
            return pickle.loads(data)
        at = len(MARK)
        (count,) = _COUNT.unpack_from(data, at)
        at += _COUNT.size
        buffers = []
        view = memoryview(self._map)
        try:
            for _ in range(count):
                offset, size = _SPAN.unpack_from(data, at)
                at += _SPAN.size
                buffers.append(bytearray(view[offset:offset + size]))  # memory of its own: the arena is reused
        finally:
            view.release()
        if offset + size > KEEP:  # a large reply's pages given back: the arena keeps at most KEEP bytes backed
            start = KEEP // mmap.PAGESIZE * mmap.PAGESIZE
            self._map.madvise(mmap.MADV_REMOVE, start, len(self._map) - start)
        return pickle.loads(memoryview(data)[at:], buffers=buffers)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.where = None


def open_arena(where: str | None) -> mmap.mmap | None:
    """The worker's side: the parent's arena mapped (None where there is none or it cannot be opened)."""
    if where is None:
        return None
    try:
        if not os.readlink(where).startswith(f"/memfd:{NAME}"):  # not the parent's arena (its pid taken anew)
            return None
        fd = os.open(where, os.O_RDWR)
    except OSError:
        return None
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def dumps(reply: Any, arena: mmap.mmap | None) -> bytes:
    """``reply`` pickled for the parent: its large buffers written into ``arena`` where they fit."""
    if arena is None:
        return pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)
    head: list[bytes] = []
    offset = 0

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        nonlocal offset
        raw = buffer.raw()
        if raw.nbytes < OUT_OF_BAND or raw.readonly or offset + raw.nbytes > len(arena):
            return True  # in the pickle: small, read-only (bytes come back as bytes), or no room left in the arena
        arena[offset:offset + raw.nbytes] = raw
        head.append(_SPAN.pack(offset, raw.nbytes))
        offset += raw.nbytes
        return False

    data = pickle.dumps(reply, 5, buffer_callback=out_of_band)
    if not head:
        return data
    return b"".join([MARK, _COUNT.pack(len(head)), *head]) + data
