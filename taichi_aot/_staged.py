"""Host arrays a kernel takes as copies (:mod:`._foreign`'s policy: any host array on a GPU backend, a strided or
byte-swapped one on the CPU): each launch's copies (:class:`Staged`), made or taken from spares of the same layout,
filled where the kernel reads the argument and copied back where it writes it, after the launch's one wait; then
kept as spares, those queued kernels may still read in flight until the runtime waits. One :class:`StagedCopies` a
runtime, held by its :class:`~taichi_aot._foreign.ForeignArgs`."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ._arrays import (
    array_like,
    byte_span,
    host_array,
    overlaps_itself,
    same_layout,
    share,
    why_copy,
)
from ._native import ffi
from .enums import DATA_TYPES, Arch
from .errors import ArgumentTypeError, InvalidArgumentError
from .ndarray import NdArray

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from ._lifetime import Parent
    from .metadata import ArgInfo

__all__ = ["FLIGHT_BYTES", "FLIGHT_COUNT", "SPARE_BYTES", "SPARE_COUNT", "Staged", "StagedCopies", "fill_copy",
           "takes_directly"]

#: How many ndarrays of staged copies a runtime keeps for the next launches, and the largest it keeps.
SPARE_COUNT = 8
SPARE_BYTES = 16 << 20
#: How many staged copies, and bytes, queued kernels may still read (none is refilled before a wait) before the
#: next copy waits for them.
FLIGHT_COUNT = 256
FLIGHT_BYTES = 64 << 20


def _clash(what: str, other: str) -> str:
    return (f"{what} shares memory with {other}; the backend takes each as its own copy, and copying them "
            "back would undo one's writes: pass one array, or NdArrays")


def _nothing() -> None:
    pass


def takes_directly(a: np.ndarray, nd: NdArray) -> bool:
    """Whether ``nd``'s bytes may be read straight into ``a`` (``to_numpy(out=a)``): C-contiguous, writeable, of its
    dtype and shape."""
    flags = a.flags
    return bool(flags.c_contiguous and flags.writeable) and a.dtype == nd.dtype and a.shape == nd.shape + nd.elem_shape


def _copy_back(s: Staged, read: tuple[Callable[[], np.ndarray], Callable[[], None]] | None) -> None:
    """A staged copy the kernel wrote, into its array once the runtime has waited: straight into it where the device
    reads into it as it is (no second host copy), else from its mapped view, its enqueued read (``read``) or a read
    now."""
    if s.view is None and read is None and takes_directly(s.array, s.nd):
        s.nd.to_numpy(out=s.array)
        return
    data = s.view if s.view is not None else s.nd.to_numpy() if read is None else read[0]()
    np.copyto(s.array, data, casting="equiv")


def _waits_first(s: Staged, later: dict[int, Any]) -> bool:
    """Whether a written copy's read back needs the runtime waited for first: a mapped view, or a read enqueued now
    (``later``); a copy read by ``to_numpy`` after the launch orders itself after it (it waits first where its device
    must)."""
    return s.view is not None or later.get(id(s)) is not None


def fill_copy(nd: NdArray, view: np.ndarray | None, a: np.ndarray | None) -> None:
    """Write ``a``'s values (None: zeros) into a staged copy, through its mapped ``view`` where it has one."""
    if view is None:
        if a is None:
            nd.fill(False if nd.dtype == np.bool_ else 0)
        else:
            nd.from_numpy(a)
    elif a is None:
        view[...] = 0
    else:
        np.copyto(view, a, casting="equiv")


@dataclass
class Staged:
    """A host array the backend takes as a copy for one launch: copied in where a kernel reads it (``filled``),
    copied back after the launch where one writes it (``write_back``); ``view``, the copy's memory as mapped for
    good (None where the host cannot map it: CUDA)."""

    nd: NdArray
    view: np.ndarray | None
    array: np.ndarray
    dims: int  # the element dims the copy was made with
    what: str  # which argument, for messages
    filled: bool
    write_back: bool


class StagedCopies:
    """A runtime's staged copies: the launch being packed's (``staged``: the policy's launch path reads this list,
    never rebound), the spares free to fill, and those in flight. ``rt()`` gives the runtime; ``wait()`` waits for
    it keeping the CUDA arrays the launch holds; a copy is made in device memory where ``on_device`` (host-visible
    memory is slow for kernels there), else in host-visible memory kept mapped; ``unmaps`` is the policy's, where a
    copy's mapping kept for good is ended when the runtime closes."""

    __slots__ = ("_arch", "_flight", "_flight_bytes", "_kept", "_on_device", "_rt", "_shares", "_spare", "_wait",
                 "staged", "unmaps")

    def __init__(self, arch: Arch, shares: bool, on_device: bool, rt: Callable[[], Parent], wait: Callable[[], None],
                 unmaps: dict[int, Any]):
        self._arch, self._shares, self._on_device = arch, shares, on_device
        self._rt, self._wait, self.unmaps = rt, wait, unmaps
        self.staged: list[Staged] = []
        # (shape, dtype, element dims) -> spare copies (ndarray, its mapped view), free to fill; those queued kernels
        # may read until the next wait (which frees them)
        self._spare: dict[tuple[Any, ...], list[tuple[NdArray, np.ndarray | None]]] = {}
        self._flight: list[tuple[tuple[Any, ...], NdArray, np.ndarray | None]] = []
        self._flight_bytes = 0  # the bytes of those in flight
        # copies call plans keep for their next call (_callplan.KeptCopies), by id: weakly (a plan collected lets its
        # copies go)
        self._kept: weakref.WeakValueDictionary[int, NdArray] = weakref.WeakValueDictionary()

    def stage(self, a: np.ndarray, dims: int, spec: ArgInfo, what: str) -> NdArray:
        """A copy of ``a`` for this launch: filled where the kernel reads it, copied back where it writes it. The
        same array given again shares its copy; copies that are both copied back may not share memory (one
        would undo the other's writes)."""
        reads, writes = spec.reads, spec.may_write
        same = next((s for s in self.staged if s.dims == dims and (s.array is a or same_layout(a, s.array))), None)
        try:
            if writes:
                self._check_copied_back(a, same, what)
            if same is not None:  # the same array again: one copy, as one memory
                if reads and not same.filled:
                    fill_copy(same.nd, same.view, a)
                    same.filled = True
                same.write_back = same.write_back or writes
                return same.nd
        except InvalidArgumentError:
            self.discard()
            raise
        nd, view = self._staging(a, dims, reads, what)
        self.staged.append(Staged(nd, view, a, dims, what, reads, writes))
        return nd

    def _check_copied_back(self, a: np.ndarray, same: Staged | None, what: str) -> None:
        """``a``'s copy can be copied back: no other copy copied back shares its memory, nor do its own elements."""
        for s in self.staged:
            if s is not same and s.write_back and share(a, s.array):
                raise InvalidArgumentError(_clash(what, s.what))
        if overlaps_itself(a):
            raise InvalidArgumentError(
                f"{what}: elements of this array share memory (a broadcast or stride-0 view), so what a kernel "
                "writes to it cannot be copied back: pass a contiguous copy, or a read-only view of an input")

    def _staging(self, a: np.ndarray, dims: int, fill: bool, what: str) -> tuple[NdArray, np.ndarray | None]:
        """An ndarray for a staged copy of ``a`` (filled with its values, or zeros) and its mapped view: a spare one of
        the same layout that no queued kernel reads where there is one (allocating device memory costs more than
        copying a small array), written through a mapping kept for good (mapping memory waits for the device on
        Vulkan); where the copies queued kernels may read are many, they are waited for first."""
        dtype = a.dtype if a.dtype.isnative else a.dtype.newbyteorder("=")
        key = (a.shape, dtype, dims)
        if not self._spare.get(key) and (len(self._flight) >= FLIGHT_COUNT or self._flight_bytes >= FLIGHT_BYTES):
            self._wait()  # frees those in flight (release); the CUDA arrays this launch packed already stay held
        spare = self._spare.get(key)
        while spare:
            nd, view = spare.pop()
            if nd.closed:
                self._drop(nd, view)
                continue
            try:
                fill_copy(nd, view, a if fill else None)
            except BaseException:
                self._drop(nd, view)
                raise
            return nd, view
        split = a.ndim - dims
        if dtype not in DATA_TYPES:
            raise ArgumentTypeError(f"{what}: {a.dtype} has no Taichi data type")
        if self._on_device:  # host-visible memory is slow for kernels there: device memory, copied by the device
            nd = NdArray(self._rt(), a.shape[:split], dtype, a.shape[split:])  # zeros, or its values
            if fill:
                nd.from_numpy(a)
            return nd, None
        nd = NdArray._unfilled(self._rt(), a.shape[:split], dtype, a.shape[split:])
        address, unmap = nd.memory.keep_mapped()  # for good: the view is made over the address, holding nothing
        view = np.frombuffer(ffi.buffer(ffi.cast("char *", address), nd.nbytes), dtype).reshape(a.shape)
        self.unmaps[id(view)] = unmap
        fill_copy(nd, view, a if fill else None)
        return nd, view

    def _drop(self, nd: NdArray, view: np.ndarray | None) -> None:
        """Close a staged copy's ndarray, its mapping ended first."""
        if view is not None:
            self.unmaps.pop(id(view), _nothing)()
        nd.close()

    def close(self) -> None:
        """The runtime closes: the spares and the copies in flight closed, their mappings ended first."""
        spares = [x for spare in self._spare.values() for x in spare] + [(nd, view) for _, nd, view in self._flight]
        spares += [(nd, None) for nd in list(self._kept.values())]
        self._spare, self._flight, self._flight_bytes = {}, [], 0
        self._kept.clear()
        for nd, view in spares:
            self._drop(nd, view)

    def _retire(self, s: Staged, in_flight: bool) -> None:
        """A staged copy its launch is done with: kept as a spare (SPARE_COUNT, SPARE_BYTES; ``in_flight``: not to be
        filled before the next wait), else closed."""
        nd = s.nd
        if nd.closed or nd.nbytes > SPARE_BYTES or sum(map(len, self._spare.values())) >= SPARE_COUNT + FLIGHT_COUNT:
            self._drop(nd, s.view)
            return
        key = (nd.full_shape, nd.dtype, s.dims)  # the array's shape: the copy was made of it
        if in_flight:
            self._flight.append((key, nd, s.view))
            self._flight_bytes += nd.nbytes
        else:
            self._spare.setdefault(key, []).append((nd, s.view))

    def before_launch(self, values: Sequence[Any], specs: Sequence[ArgInfo]) -> None:
        """Before a launch with staged copies: refuse an argument shared without a copy (an ndarray's host memory,
        a host array on the CPU) whose memory overlaps a copy that is written back (its write-back would undo
        the kernel's writes there)."""
        spans = [(byte_span(s.array), s) for s in self.staged if s.write_back]
        if not spans:
            return
        try:
            for value, spec in zip(values, specs):
                if spec.kind != "ndarray":
                    continue
                shared = self._lent(value)
                if shared is None:
                    continue
                start, end = shared if isinstance(shared, tuple) else byte_span(shared)
                for (first, last), s in spans:
                    if start < last and first < end and (isinstance(shared, tuple) or share(shared, s.array)):
                        raise InvalidArgumentError(_clash(s.what, "another argument of this launch"))
        except InvalidArgumentError:
            self.discard()
            raise

    def _lent(self, value: Any) -> np.ndarray | tuple[int, int] | None:
        """The host memory a kernel argument lends the kernel directly: an array over it, its (start, end), or
        None (nothing of the host's, or a copy)."""
        if isinstance(value, NdArray):
            return value.host_span()
        if not self._shares or not array_like(value):
            return None
        try:
            a = host_array(value, "")
        except ArgumentTypeError:
            return None
        return None if why_copy(a, self._arch, self._shares) else a

    def discard(self) -> None:
        """Drop the staged copies of a launch that will not run."""
        pending = self.staged[:]
        self.staged.clear()  # in place: the policy reads this list (ForeignArgs.staged)
        for s in pending:
            self._retire(s, False)

    def after_launch(self, keep: Callable[[StagedCopies, list[Staged]], Any] | None = None) -> Any:
        """After a launch with staged copies: where one is written, wait, and copy each written one back into its
        array (copies of device memory queued after the kernel, read after that one wait). Copies only read are left
        to the kernel: none is filled again before the next wait. Where copies live in device memory, ``keep`` (a call
        plan's) is handed these copies and the launch's, and gives what keeps them for its next call (None: nothing
        kept), which this returns; copies not kept are retired."""
        pending = self.staged[:]
        self.staged.clear()
        waited, kept = False, None
        try:
            waited = self.write_back(pending)
            if keep is not None and self._on_device:
                kept = keep(self, pending)
        finally:
            if kept is None:
                for s in pending:
                    self._retire(s, not waited)
        return kept

    def write_back(self, pending: list[Staged]) -> bool:
        """Each written copy of ``pending`` read back into its array after the launch: one wait for the reads made
        after it, none where each read orders itself after the kernel (``to_numpy``: a wait first would cost one more
        trip). Whether the launch's work was waited for."""
        written = [s for s in pending if s.write_back]
        if not written:
            return False
        if len(written) == 1 and written[0].view is None:  # one read, which orders itself after the kernel and waits
            _copy_back(written[0], None)
        else:
            self._read_back(written)
        return True  # by the wait, or by the reads (each waits for all that is queued)

    def _read_back(self, written: list[Staged]) -> None:
        """Several written copies read back: the device's reads queued now after the kernel where it queues them,
        one wait, then each read (or mapped view copied)."""
        later: dict[int, Any] = {}
        try:
            for s in written:
                if s.view is None:  # the caller's array where it is read into as it is
                    later[id(s)] = s.nd._read_later(s.array if takes_directly(s.array, s.nd) else None)
            if any(_waits_first(s, later) for s in written):
                self._rt().wait()
            for s in written:
                _copy_back(s, later.pop(id(s), None))
        finally:
            for unread in later.values():
                if unread is not None:
                    unread[1]()

    def keep(self, staged: list[Staged]) -> None:
        """Copies a call plan keeps for its next call (``_callplan.KeptCopies``): closed with the runtime, until given
        back."""
        for s in staged:
            self._kept[id(s.nd)] = s.nd

    def give_back(self, staged: list[Staged]) -> None:
        """Copies a call plan kept, free once queued kernels are done with them."""
        for s in staged:
            self._kept.pop(id(s.nd), None)
            self._retire(s, True)

    def in_flight(self) -> list[tuple[tuple[Any, ...], NdArray, np.ndarray | None]]:
        """The copies queued kernels read, taken before a wait (their launches enqueued): what :meth:`release` frees
        after it, where another thread may queue more meanwhile."""
        if not self._flight:
            return []
        flight, self._flight, self._flight_bytes = self._flight, [], 0
        return flight

    def unwaited(self, flight: list[tuple[tuple[Any, ...], NdArray, np.ndarray | None]]) -> None:
        """Copies taken by :meth:`in_flight` for a wait that did not happen: in flight again, for the next wait."""
        self._flight[:0] = flight
        self._flight_bytes += sum(nd.nbytes for _, nd, _ in flight)

    def release(self, flight: list[tuple[tuple[Any, ...], NdArray, np.ndarray | None]] | None = None) -> None:
        """The runtime waited: the copies queued kernels read (``flight``, taken before the wait; None: all) are free
        to fill again."""
        if flight is None:
            flight = self.in_flight()
        for key, nd, view in flight:
            self._spare.setdefault(key, []).append((nd, view))
