"""The live-handle registry: every handle the flat API created and has not destroyed.

Private to :mod:`taichi_aot.capi`. Its functions look a handle up here before it
reaches C, so a destroyed or foreign handle raises
:class:`~taichi_aot.errors.ClosedError` (1.7.4 segfaults on use after destroy),
and destroying a runtime or module retires its children. The object layer never
reads it; tests ask :func:`is_live` and :func:`live_handle_count`.

Keys are tuples of cffi pointers (they hash and compare by address): memory,
images and samplers are keyed with their runtime, because the x64 backend numbers
memory 0x1, 0x2, ... in every runtime; modules, kernels and graphs are unique in
the process and keyed by their handle alone.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .._native import ffi
from ..enums import GFX_ARCHS, Arch
from ..errors import ClosedError, InvalidArgumentError, InvalidStateError
from .coerce import handle_arg, plain

NULL = ffi.NULL


class HandleRecord:
    """What the registry knows about one live handle."""

    __slots__ = (
        "arch", "children", "fields", "handle", "host", "imported", "kind", "mapped", "name", "parent", "pending",
        "refused", "runtime", "size", "threads",
    )

    def __init__(
        self, kind: str, runtime: Any = None, parent: tuple | None = None, arch: Arch = Arch.RESERVED, size: int = 0,
        name: str = "",
    ) -> None:
        self.kind = kind
        self.runtime = runtime
        self.parent = parent
        self.arch = arch  # runtimes: their arch (RESERVED for the others)
        self.size = size
        self.threads = 0  # CPU runtimes: the threads they started
        self.mapped = False
        self.host = False  # allocated host-visible: mapping it is known to be quiet
        self.imported = False  # memory the caller owns (ti_import_*_memory): freeing it only forgets the handle
        self.handle: Any = None  # memory: the very object handed to the caller (values repeat across runtimes)
        self.refused: dict[tuple[str, str], str] = {}  # modules: {(kind, name): why} of what drivers cannot run
        # runtimes: a C int set when work is enqueued (also by the extension's launch helpers) and
        # cleared by wait(), so a host copy waits only when something may still be running
        # a runtime's counts, read by the C launch: [0] work may be running (until the next wait): the launches
        # since; [1] launches through libtaichi are refused (a non-blocking CUDA stream is set:
        # Runtime.set_cuda_stream); [2] the most launches queued before a launch waits for them (0: no bound)
        self.pending: Any = ffi.new("int32_t[3]") if kind == "runtime" else None
        self.children: set[tuple] = set()
        self.name = name
        # runtimes: the layout of the global fields its kernels share, (root size, description), once a module set
        # it: on gfx backends the first module loaded (its root buffer is the one every kernel binds), on LLVM ones
        # the first with fields
        self.fields: tuple[int, str] | None = None


_live: dict[tuple, HandleRecord] = {}
_lock = threading.RLock()


def _fresh_lock_in_child() -> None:
    """A forked child's lock anew: another thread of the parent may have held it at the fork (recording or dropping
    a handle), and the child has no such thread to let it go."""
    global _lock
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_fresh_lock_in_child)
# (kind, handle value) -> how many runtimes have a live handle of that value: x64 numbers its memory
# 1, 2, ... in every runtime, so a value alone may not say whose memory it is
_shared: dict[tuple, int] = {}


def add(key: tuple, record: HandleRecord, parent_key: tuple | None) -> None:
    """Record a live handle (and make it a child of ``parent_key``'s). ClosedError where the parent is gone: a
    runtime closed on another thread while this thread made something on it (gone with it)."""
    with _lock:
        parent = _live.get(parent_key) if parent_key is not None else None
        if parent_key is not None and parent is None:
            raise ClosedError(f"{key[0]}: its {parent_key[0]} was closed (on another thread) while it was made")
        _live[key] = record
        if parent is not None:
            parent.children.add(key)
        if len(key) == 3:
            _shared[key[0], key[2]] = _shared.get((key[0], key[2]), 0) + 1


def runtimes_holding(kind: str, value: Any) -> int:
    """How many runtimes have a live ``kind`` handle of this value."""
    return _shared.get((kind, value), 0)


def retire(key: tuple) -> None:
    """Forget a handle and, first, all its children."""
    with _lock:
        record = _live.pop(key, None)
        if record is None:
            return
        if len(key) == 3:
            left = _shared.pop((key[0], key[2]), 1) - 1
            if left:
                _shared[key[0], key[2]] = left
        for child in list(record.children):
            retire(child)
        if record.parent is not None and record.parent in _live:
            _live[record.parent].children.discard(key)


def mapped_memory(runtime: Any) -> list[Any]:
    """The memory of live ``runtime`` that is mapped now (allocated by the library, not imported)."""
    with _lock:
        children = [_live.get(key) for key in _live[("runtime", runtime)].children]
    return [c.handle for c in children if c is not None and c.kind == "memory" and c.mapped and not c.imported]


def find(key: tuple) -> HandleRecord | None:
    """The record of a live handle, or None (no checks: for the hot paths)."""
    return _live.get(key)


def is_live(kind: str, *handle: Any) -> bool:
    """Whether the handle is alive: ``is_live("runtime", rt)``, ``is_live("memory", rt, mem)`` (cffi pointers or
    the flat API's Handles)."""
    return (kind, *(plain(h) for h in handle)) in _live


def live_handle_count(kind: str | None = None) -> int:
    """How many handles created through this module are alive (for leak checks)."""
    with _lock:
        return sum(1 for e in _live.values() if kind is None or e.kind == kind)


def has_runtime(arch: Arch) -> bool:
    """Whether a runtime on ``arch`` is alive."""
    with _lock:
        return any(e.kind == "runtime" and e.arch == arch for e in _live.values())


#: The variable that sets how many launches a gfx runtime queues before a launch waits for them.
QUEUE_VARIABLE = "TAICHI_AOT_MAX_QUEUED"
#: Its default: libtaichi 1.7.4 keeps about 2 KB a launch on Vulkan until a wait, 8 MB at most so.
DEFAULT_QUEUED = 4096


def max_queued() -> int:
    """How many launches a gfx runtime queues before a launch waits for them (``TAICHI_AOT_MAX_QUEUED``, 0: no
    bound); a value that is no count raises InvalidArgumentError."""
    text = os.environ.get(QUEUE_VARIABLE, "").strip()
    if not text:
        return DEFAULT_QUEUED
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**31:
        raise InvalidArgumentError(f"{QUEUE_VARIABLE}={text!r}: expected a count of launches (0: no bound)")
    return value


def mark_enqueued(runtime: Any) -> None:
    """Set the runtime's pending count: work may be running until the next wait."""
    mark_pending(pending_of(runtime))


def pending_of(runtime: Any) -> Any:
    """The runtime's pending count (its ``int32_t[3]``), which :func:`mark_pending` sets (None: no live runtime of that
    handle), for a caller that marks it at every call and finds it once."""
    record = _live.get(("runtime", runtime))
    return None if record is None else record.pending


def mark_pending(pending: Any) -> None:
    """Set a pending count :func:`pending_of` gave (nothing for None): work may be running until the next wait."""
    if pending is not None and not pending[0]:
        pending[0] = 1


def count_launch(runtime: Any) -> bool:
    """Count a launch in the runtime's pending count (work may be running until the next wait); whether the runtime
    bounds its queue and this launch found it full: the caller then waits after it (as the C launch does)."""
    record = _live.get(("runtime", runtime))
    if record is None:
        return False
    pending = record.pending
    if 0 < pending[2] <= pending[0]:
        return True
    pending[0] = min(pending[0] + 1, 2**31 - 1)
    return False


# ---------------------------------------------------------------------------
# Lookups: the handle checked for its cffi type, then found alive, or ClosedError.


def lookup_runtime(runtime: Any, what: str) -> HandleRecord:
    """The record of a live runtime."""
    handle_arg(runtime, "TiRuntime", what)
    record = _live.get(("runtime", runtime))
    if record is None:
        raise ClosedError(f"{what}: runtime {runtime} is not alive (destroyed, or not created by taichi_aot)")
    return record


def lookup_runtime_child(kind: str, ctype: str, runtime: Any, value: Any, what: str) -> tuple[tuple, HandleRecord]:
    """Key and record of live memory, an image or a sampler of ``runtime``."""
    handle_arg(value, ctype, what)
    key = (kind, runtime, value)
    record = _live.get(key)
    if record is None:
        raise ClosedError(f"{what}: {kind} {value} is not alive in runtime {runtime} (freed, or from another runtime)")
    return key, record


def lookup_module_or_child(kind: str, ctype: str, value: Any, what: str) -> tuple[tuple, HandleRecord]:
    """Key and record of a live module, or of a kernel or graph of one (keyed without their runtime)."""
    handle_arg(value, ctype, what)
    key = (kind, value)
    record = _live.get(key)
    if record is None:
        raise ClosedError(f"{what}: {kind} {value} is not alive (destroyed, or its module or runtime was)")
    return key, record


# ---------------------------------------------------------------------------
# Registration of what the library returned (NULL: it returned nothing).


def register_runtime(runtime: Any, arch: Arch, what: str, threads: int = 0) -> Any:
    """Record a new runtime (``threads``: the CPU threads it started, 0 on a GPU); returns it."""
    if runtime == NULL:
        raise InvalidStateError(f"{what}: the library returned no runtime")
    record = HandleRecord("runtime", runtime=runtime, arch=arch)
    record.threads = threads
    if arch in GFX_ARCHS:  # libtaichi keeps every submitted command buffer until a wait
        record.pending[2] = max_queued()
    add(("runtime", runtime), record, None)
    return runtime


def register_in_runtime(
    kind: str, runtime: Any, handle: Any, what: str, size: int = 0, host: bool = False, imported: bool = False
) -> Any:
    """Record new memory (``size`` bytes, ``host``-visible or not, ``imported`` from the caller or allocated),
    an image or a sampler of ``runtime``."""
    if handle == NULL:
        raise InvalidStateError(f"{what}: the library returned no {kind}")
    record = HandleRecord(kind, runtime=runtime, parent=("runtime", runtime), size=size)
    record.host = host
    record.imported = imported
    record.handle = handle
    add((kind, runtime, handle), record, ("runtime", runtime))
    return handle


def register_module(runtime: Any, module: Any, what: str, refused: dict[tuple[str, str], str]) -> Any:
    """Record a new AOT module of ``runtime`` and the kernels and graphs in it that drivers cannot run
    (``refused``: {(kind, name): why}); returns it."""
    if module == NULL:
        raise InvalidStateError(f"{what}: the library returned no module")
    record = HandleRecord("module", runtime=runtime, parent=("runtime", runtime))
    record.refused = refused
    add(("module", module), record, ("runtime", runtime))
    return module


def register_module_child(kind: str, module_key: tuple, module: HandleRecord, handle: Any, name: str) -> None:
    """Record a kernel or graph ``name`` of a module, unless already recorded (the library returns the same one)."""
    key = (kind, handle)
    if key not in _live:
        add(key, HandleRecord(kind, runtime=module.runtime, parent=module_key, name=name), module_key)
