"""Other libraries' arrays (numpy, torch, CuPy, JAX) as a runtime's ndarrays and kernel arguments: the room
where that policy lives (:class:`ForeignArgs`, one per runtime), and the helpers it uses.

The policy, for an ndarray argument whose access (:class:`~taichi_aot.enums.Access`) the module records or
the caller declares; an unknown access is taken as "may be written":

* **Shared, without a copy,** where the backend addresses the memory: host arrays on CPU backends
  (C-contiguous, native byte order), CUDA arrays on CUDA.
* **Never written behind its owner's back, never a write dropped:** an array its owner made immutable (a
  read-only numpy array or export, a JAX array) passed for an argument the kernel may write is a
  :class:`~taichi_aot.errors.ReadOnlyArrayError`; for an argument the kernel only reads it is shared
  (or copied in).
* **Elsewhere, a staged copy** (any host array on a GPU backend; a strided or byte-swapped one on the CPU):
  copied in where the kernel reads the argument, copied back where it writes it, as Taichi's own
  kernels do. A write-only argument's copy starts zero-filled, so what the kernel leaves unwritten comes
  back as zeros (declare it ``"read_write"`` to keep those elements).

An argument goes one way: described once (:func:`~taichi_aot._arrays.describe`: an ``ArrayView``), decided from
that view alone (:func:`decide`: share, stage with the reason, or refuse), then carried out (shared over its memory,
or a copy made by :mod:`taichi_aot._staged`, which calls nothing here back).

The cache. Ndarrays made for arrays shared without a copy are kept, held weakly (their records are
:mod:`taichi_aot._seen`'s): an entry is dropped in the array's weak-reference callback, which runs before the
array's memory goes back, so an id found in the cache is that array's and its memory is still there; a temporary
passed to a kernel is not kept alive by the cache. CUDA kernels run after the launch returns, so on CUDA an entry
also holds its array until the runtime is waited for (:meth:`ForeignArgs.release`).
"""

from __future__ import annotations

import collections
import functools
import sys
import weakref
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ._arrays import (
    ArrayView,
    CudaArray,
    cuda_interface,
    describe,
    forget_print,
    is_jax,
    print_of,
    refuse_lazy,
    why_copy,
)
from ._call import FreshSlot  # the C call's record (_csrc/records.c)
from ._dtypes import check_copy, ndarray_argument
from ._lifetime import Parent
from ._native import ffi, lib
from ._seen import ARRAY_KEYS, Entry, forget, layout_key, numpy_hit, print_hit
from ._staged import Staged, StagedCopies
from .drivers import cuda as _cuda
from .enums import DATA_TYPES, NUMPY_DTYPES
from .errors import ArgumentTypeError, InvalidArgumentError, ReadOnlyArrayError, TaichiError
from .ndarray import NdArray

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Sequence

    from .enums import Arch
    from .metadata import ArgInfo
    from .ndarray import HostAccess

__all__ = ["CACHE_SIZE", "HELD_LIMIT", "SHARE", "STAGE", "Decision", "ForeignArgs", "argument_elsewhere", "decide",
           "torch_stream"]

#: How many ndarrays made for foreign kernel arguments a runtime keeps at least; a runtime keeps twice the most
#: arrays one of its kernels or graphs takes where that is more (ForeignArgs.fit), so a call of many arrays never
#: evicts its own.
CACHE_SIZE = 16
#: How many CUDA arrays passed to kernels a runtime holds before it lets them go in a batch, once an event recorded
#: after the kernels queued so far completes (no wait); and how many such batches may be pending before the oldest
#: is waited for.
HELD_LIMIT = 64
HELD_BATCHES = 64

def _read_only(what: str, spec: ArgInfo, reason: str, remedy: str) -> ReadOnlyArrayError:
    if spec.access is None:
        how = f"{spec.name}='read'" if spec.name else f"{{{spec.index}: 'read'}}"
        why = "the module records no access for it, so the kernel may write it"
        remedy += f", or, if the kernel only reads it, declare so: .declare_access({how})"
    else:
        why = f"the kernel writes it (its access is {spec.access_word()})"
    return ReadOnlyArrayError(f"{what}: {reason}, and {why}: {remedy}")


#: A :class:`Decision`'s ways: the memory passed as it is, or a copy for the launch.
SHARE, STAGE = "share", "stage"


class Decision(NamedTuple):
    """What the policy makes of a host array for an ndarray argument (:func:`decide`): ``how``, SHARE or STAGE
    (``reason``: why a copy), or a refusal (``error``, raised by the caller)."""

    how: str
    reason: str = ""
    error: TaichiError | None = None


_SHARED = Decision(SHARE)


def decide(view: ArrayView, spec: ArgInfo, arch: Arch, shares: bool, allow_copies: bool, what: str) -> Decision:
    """The policy (the module docstring) for a host array's ``view`` passed for ``spec``, on a runtime of ``arch``
    whose device imports host memory where ``shares``, copies allowed where ``allow_copies``; from the view alone,
    calling nothing back. (A CUDA array on a CUDA runtime is shared: its own checks are made as it is taken.)"""
    a = view.host
    assert a is not None, "a host array's view"
    if spec.may_write and view.read_only:
        jax = is_jax(view.owner)
        kind = "numpy array" if isinstance(view.owner, np.ndarray) else type(view.owner).__name__
        reason = "a JAX array (JAX arrays are immutable)" if jax else f"this {kind} is read-only"
        return Decision("", error=_read_only(what, spec, reason, "pass a writable copy (np.array(a))"))
    if a.size == 0:  # before any path's own checks, which an empty array's strides can mislead
        return Decision("", error=InvalidArgumentError(f"{what}: the array is empty (shape {a.shape}); a kernel takes "
                                                       "at least one element"))
    why = why_copy(a, arch, shares)
    if not why:
        return _SHARED
    if not allow_copies:
        return Decision("", error=InvalidArgumentError(f"{what}: {why}; this runtime's allow_array_copies is "
                                                       "False"))
    return Decision(STAGE, why)


# ---------------------------------------------------------------------------
# The room


class ForeignArgs:
    """One runtime's policy for other libraries' arrays (the module docstring gives it), and its state.

    What the launch path calls: :meth:`argument` (an array for an ndarray argument, to the NdArray it travels
    in), ``hits`` (``id -> NumpyHit``, read by the packers' fast path), ``staged`` (the copies of the
    launch being packed: non-empty means the launch must call :meth:`before_launch` and :meth:`after_launch`),
    :meth:`discard`. The runtime calls :meth:`ndarray_from` and :meth:`release`. The weak-reference callbacks
    may run in any thread: the cache's own changes tolerate theirs.
    """

    __slots__ = ("__weakref__", "_arch", "_batches", "_cai_classes", "_device", "_entries", "_held", "_on_cuda",
                 "_on_device", "_runtime", "_shares", "allow_copies", "copies", "held_limit", "hits", "imports",
                 "size", "staged", "unmaps")

    def __init__(self, runtime: Parent):
        self._runtime = weakref.ref(runtime)  # the runtime owns this room, not the other way round
        self._arch = runtime.arch
        self._shares = runtime.device.traits.imports_host_memory  # the caller's host memory passed as it is (the CPU's)
        self._on_cuda = runtime.device.traits.addresses_cuda_arrays
        self._on_device = runtime.device.traits.kernel_copies_on_device  # a host array's copy lives in device memory
        self._device = runtime.device_index  # the CUDA device whose memory kernels take
        self._entries: collections.OrderedDict[Any, Entry] = collections.OrderedDict()
        self.size = CACHE_SIZE  # the arrays shared before that are remembered (entries, hits): see fit
        self.held_limit = HELD_LIMIT
        self.hits: dict[int, Any] = {}  # NumpyHit or PrintHit of arrays shared before, by id
        self._held: dict[int, Any] = {}  # id -> CUDA array passed since the runtime was last waited for (or spilled)
        self._batches: collections.deque[tuple[int, list[Any]]] = collections.deque()  # (CUDA event, arrays): spill
        # id(view) -> the unmap of a staged copy's mapping (Memory.keep_mapped): the runtime's finalizer calls those
        # left (the views hold no reference back, so a runtime dropped unclosed is still collected)
        self.unmaps: dict[int, Any] = {}
        #: the host arrays taken as copies (_staged.py); ``staged``, the launch's, is its list
        self.copies = StagedCopies(self._arch, self._shares, self._on_device, self._rt, self._wait_keeping_held,
                                   self.unmaps)
        self.staged: list[Staged] = self.copies.staged
        self.allow_copies = True
        # The pool of imported memory (Device.pooled): address -> (bytes, TiMemory as an int), read by the C call too
        self.imports = runtime.device.imports
        # classes of CUDA arrays (not torch's) taken by their __cuda_array_interface__ -> immutable (JAX)?
        self._cai_classes: dict[type, bool | int] = {}

    @property
    def held(self) -> dict[int, Any] | None:
        """The CUDA arrays held until the runtime is waited for, by id (None off CUDA): a torch op lets go of its
        tensors after its launch, as torch's own ops do (torch's allocator reuses their memory in the order of the
        stream they ran on, which the op launches on)."""
        return self._held if self._on_cuda else None

    def fresh_plan(self, specs: Sequence[ArgInfo]) -> dict[str, Any] | None:
        """The arguments of a launcher's ``_fresh`` (``_csrc/call.c``): what lets its C call take a numpy array (on
        a CPU) or a plain torch tensor (on the CPU or the runtime's GPU) it was never given before, found over
        memory in its device's pool (``Device.pooled``); None where this runtime takes none so (Vulkan: host arrays
        are staged)."""
        if not self._shares and not self._on_cuda:
            return None
        slots: list[Any] = []
        for spec in specs:
            dt = spec.dtype
            dtype = NUMPY_DTYPES.get(dt) if spec.kind == "ndarray" and dt is not None else None
            if dt is None or dtype is None:
                slots.append(None)
                continue
            arg = ndarray_argument(ffi.NULL, (0,) * spec.ndim, tuple(spec.elem_shape), dt)  # dims written per launch
            slots.append(FreshSlot(dtype=np.dtype(dtype), typestr=np.dtype(dtype).str, data_type=int(dt),
                                   itemsize=dtype.itemsize, ndim=spec.ndim, element_shape=tuple(spec.elem_shape),
                                   argument=bytes(ffi.buffer(arg))))
        cpu = not self._on_cuda  # numpy's array objects are read in place where ARRAY_KEYS says they can be
        return {"imports": self.imports, "host_numpy": int(cpu and ARRAY_KEYS), "torch_device": 0 if cpu else 1,
                "torch_index": self._device, "held": None if cpu else self._held, "held_limit": self.held_limit,
                "cai_classes": None if cpu else self._cai_classes,
                "pointer_device": 0 if cpu else _cuda.pointer_attribute_address(),
                "spill": None if cpu else self.spill, "slots": slots}

    def fit(self, count: int) -> None:
        """A kernel or graph of ``count`` array arguments is prepared on the runtime: remember at least twice as
        many arrays shared before (a call, and the next with others), and hold on CUDA four times that before a
        :meth:`spill`."""
        if 2 * count > self.size:
            self.size = 2 * count
            self.held_limit = max(HELD_LIMIT, 4 * self.size)

    def before_pack(self, count: int) -> None:
        """Before a launch of ``count`` arguments is packed in Python: where the CUDA arrays held and its own could
        pass the held limit, :meth:`spill` (now, while none of this launch's is held yet)."""
        if self._on_cuda and len(self._held) + count >= self.held_limit:
            self.spill()

    def spill(self) -> None:
        """Many CUDA arrays held (the held limit): hand all but the newest ``size`` (which a launch being packed may
        hold) to a batch let go once an event recorded now on the runtime's stream completes, that is, once the
        kernels queued so far that read them have run; no wait, unless HELD_BATCHES batches are pending. Let go of
        the batches whose kernels have run."""
        held, keep = self._held, self.size
        if len(held) > keep:
            items = list(held.items())
            batch = [v for _, v in items[:-keep]]
            self._batches.append((_cuda.event_after(self._rt().cuda_stream, self._device), batch))
            held.clear()
            held.update(items[-keep:])
        batches = self._batches
        while batches and _cuda.event_done(batches[0][0], wait=len(batches) > HELD_BATCHES):
            batches.popleft()

    def _rt(self) -> Parent:
        rt = self._runtime()
        if rt is None:  # pragma: no cover - the runtime holds this object
            raise InvalidArgumentError("the runtime is gone")
        return rt

    # -- rt.ndarray_from ----------------------------------------------------------------

    def ndarray_from(self, obj: Any, elem_ndim: Any, copy: bool | None, host_access: HostAccess | None) -> NdArray:
        """See :meth:`Runtime.ndarray_from`."""
        check_copy(copy, "ndarray_from")
        if isinstance(elem_ndim, bool) or not isinstance(elem_ndim, (int, np.integer)):
            raise ArgumentTypeError(f"ndarray_from: elem_ndim must be an int, got {elem_ndim!r}")
        elem_ndim = int(elem_ndim)
        view = describe(obj, "ndarray_from", self._on_cuda)
        if view.cuda:
            return self._cuda(obj, view.iface, elem_ndim, copy, "ndarray_from")
        a = view.host
        assert a is not None  # a host array's view
        if copy is not True and view.read_only and not self._copy_needed(a):
            if copy is False:  # shared, it could be written: numpy 2 would refuse the same
                raise ReadOnlyArrayError("ndarray_from(copy=False): the array is read-only (or a JAX array), and "
                                         "an ndarray's memory is written by kernels: pass a writable array")
            copy = True
        return self._from_host(a, elem_ndim, copy, host_access, "ndarray_from", owner=a)

    def _copy_needed(self, a: np.ndarray) -> bool:
        return bool(why_copy(a, self._arch, self._shares))

    def _from_host(self, a: np.ndarray, elem_ndim: int, copy: bool | None, host_access: HostAccess | None,
                   what: str, owner: Any, fill: bool = True, pooled: bool = False) -> NdArray:
        """An ndarray over host array ``a``, or a copy of it (``fill``: with its values, else zeros); ``owner``:
        what keeps ``a``'s memory alive, held as long as the ndarray (None: the caller sees to it); ``pooled``: over
        the pool's import (:meth:`pooled`: a kernel argument's)."""
        if not 0 <= elem_ndim <= a.ndim:
            raise InvalidArgumentError(f"{what}: elem_ndim {elem_ndim} for an array of {a.ndim} dims")
        dtype = a.dtype if a.dtype.isnative else a.dtype.newbyteorder("=")
        if dtype not in DATA_TYPES:
            raise ArgumentTypeError(f"{what}: {a.dtype} has no Taichi data type")
        if a.size == 0:
            raise InvalidArgumentError(f"{what}: the array is empty (shape {a.shape})")
        split = a.ndim - elem_ndim
        why = why_copy(a, self._arch, self._shares)
        if copy is False and why:
            raise InvalidArgumentError(f"{what}(copy=False): {why}")
        rt = self._rt()
        if copy or why:
            nd = NdArray(rt, a.shape[:split], dtype, a.shape[split:], host_access=host_access)
            if fill:
                nd.from_numpy(a)
            return nd
        return NdArray.over_host(rt, a, a.shape[:split], dtype, a.shape[split:], owner, pooled)

    def _cuda(self, obj: Any, iface: dict | None, elem_ndim: int, copy: bool | None, what: str,
              weak: bool = False, spec: ArgInfo | None = None) -> NdArray:
        """An ndarray over another library's CUDA array (``iface``, its ``__cuda_array_interface__``, else
        ``__dlpack__``) on this runtime: shared, its owner kept alive, or a copy on the device where ``copy`` is
        True (or where ``obj`` is immutable and no kernel argument, ``spec``, is for it: ndarrays are written).
        ``weak``: the caller keeps ``obj`` alive as long as the ndarray is used (the kernel-argument cache)."""
        refuse_lazy(obj, what)
        stream = self._rt().cuda_stream
        c = (CudaArray.from_interface(obj, iface, what, weak, stream) if iface is not None
             else CudaArray.from_dlpack(obj, what, stream))
        if c.read_only and spec is not None and spec.may_write:
            kind = "a JAX array (JAX arrays are immutable)" if is_jax(obj) else "the array is read-only"
            raise _read_only(what, spec, kind, "pass a writable array (for JAX, a buffer of another library, "
                                               "or the result of a kernel's own output argument)")
        if c.read_only and spec is None and not copy:  # an ndarray (which kernels write) over it: a copy
            if copy is False:
                raise ReadOnlyArrayError(f"{what}(copy=False): the array is read-only (or a JAX array), and an "
                                         "ndarray's memory is written by kernels: pass copy=None (a copy on the "
                                         "device) or a writable array")
            copy = True
        c.check(elem_ndim, what, self._device)
        split = len(c.shape) - elem_ndim
        rt = self._rt()
        if copy:
            nd = NdArray(rt, c.shape[:split], c.dtype, c.shape[split:])
            _cuda.dtod(nd.__cuda_array_interface__["data"][0], c.ptr, nd.nbytes)
            return nd
        return NdArray.over_cuda(rt, c.ptr, c.shape[:split], c.dtype, c.shape[split:], c.owner, weak)

    # -- kernel arguments -------------------------------------------------------------------

    def argument(self, value: Any, spec: ArgInfo, what: str) -> NdArray:
        """The ndarray kernel argument ``spec`` gets for ``value`` (a numpy or other array), in one direction: the
        array described (:func:`~taichi_aot._arrays.describe`), the policy's decision (:func:`decide`), carried out:
        shared where the backend can address it (cached: a repeated argument costs one lookup), else a staged copy
        (``staged``)."""
        view = describe(value, what, self._on_cuda)
        if view.cuda:
            return self._cuda_argument(value, view.iface, spec, len(spec.elem_shape), what)
        a = view.host
        assert a is not None  # a host array's view
        key: tuple[Any, ...] = ()
        if self._shares:  # shared before: found in the cache, decided then (an immutable array written: decided anew)
            key = (id(value), a.__array_interface__["data"][0], a.shape, a.strides, a.dtype, len(spec.elem_shape))
            entry = self._entries.get(key)
            if entry is not None and not entry.nd.closed and not (view.read_only and spec.may_write):
                try:
                    self._entries.move_to_end(key)
                except KeyError:  # its array was collected meanwhile (another thread)
                    pass
                return entry.nd
        decision = decide(view, spec, self._arch, self._shares, self.allow_copies, what)
        if decision.error is not None:
            raise decision.error
        dims = min(len(spec.elem_shape), a.ndim)  # the element dims the ndarray is made with
        if decision.how == STAGE:
            return self.copies.stage(a, dims, spec, what)
        return self._shared_host(view, key, dims, what)

    def bound_argument(self, value: Any, spec: ArgInfo, what: str) -> NdArray:
        """The ndarray a bound launch holds for ``value`` (:meth:`argument`), refused where it would be a staged
        copy (copied once, at bind: the launch would read stale values)."""
        nd = self.argument(value, spec, what)
        if self.staged:
            self.discard()
            raise InvalidArgumentError(f"{what}: {self._arch.name} cannot address this array, and a bound launch would "
                                       "copy it once; pass an NdArray (rt.ndarray_from(array))")
        return nd

    def _shared_host(self, view: ArrayView, key: tuple[Any, ...], dims: int, what: str) -> NdArray:
        """An ndarray over the host array ``view`` describes, kept in the cache under ``key``, and remembered for the
        packer (:class:`NumpyHit`, :class:`PrintHit`). The cache holds its owner weakly (CPU kernels have run when
        the launch returns), so the ndarray holds nothing of it where the owner can be referenced weakly."""
        value, a = view.owner, view.host
        assert a is not None  # a host array's view
        ref = self._weak(key, value)
        nd = self._from_host(a, dims, False, None, what, owner=None if ref is not None else a, pooled=True)
        self._keep(key, Entry(nd, ref, None if ref is not None else value))
        c_key = ffi.new("TaichiAotArrayKey *") if ARRAY_KEYS and value.__class__ is np.ndarray else None
        if ref is not None and c_key is not None and lib.taichi_aot_array_key(id(value), c_key):
            self.hits[id(value)] = numpy_hit(c_key, ref, nd)  # the packer finds it without this call
            self._trim_hits()
        elif ref is not None and value.__class__ is not np.ndarray:  # a torch (or JAX) array on the host
            self._print_hit(value, ref, nd, view.read_only, None)
        return nd

    def _wait_keeping_held(self) -> None:
        """Wait for the runtime; the CUDA arrays this launch packed already stay held."""
        held = dict(self._held)
        self._rt().wait()
        self._held.update(held)

    def _weak(self, key: Any, value: Any) -> weakref.ref[Any] | None:
        try:
            return weakref.ref(value, functools.partial(forget, self._entries, self.hits, key))
        except TypeError:  # no weak references to it: held by the cache, so its id is not reused while cached
            return None

    def _keep(self, key: Any, entry: Entry) -> None:
        self._entries[key] = entry
        while len(self._entries) > self.size:
            try:
                self._entries.popitem(last=False)
            except KeyError:
                break

    def _cuda_argument(self, value: Any, iface: dict | None, spec: ArgInfo, elem_ndim: int, what: str) -> NdArray:
        key = layout_key(value, iface, elem_ndim, spec.may_write)
        entry = self._entries.get(key)
        held = self._held  # the arrays queued kernels may read, held until the runtime is waited for
        if entry is not None and not entry.nd.closed:
            held[id(value)] = held.pop(id(value), value)  # most recent last
            return entry.nd
        nd = self._cuda(value, iface, elem_ndim, None, what, weak=True, spec=spec)
        ref = self._weak(key, value)
        self._keep(key, Entry(nd, ref, value if ref is None else None))
        held[id(value)] = value
        if ref is not None:
            self._print_hit(value, ref, nd, is_jax(value) or bool(iface and iface["data"][1]), held)
        cls = value.__class__
        torch = sys.modules.get("torch")  # torch's tensors are read by their layout (lazy bits their interface hides)
        if iface is not None and cls not in self._cai_classes and not (torch and isinstance(value, torch.Tensor)):
            # the C call takes its arrays anew by their interface (immutable: JAX's), cupy.ndarray by its attributes
            cupy = sys.modules.get("cupy")
            self._cai_classes[cls] = 2 if cupy is not None and cls is cupy.ndarray else is_jax(value)
        return nd

    def _print_hit(self, value: Any, ref: weakref.ref[Any], nd: NdArray, read_only: bool,
                   held: dict[int, Any] | None) -> None:
        """Remember ``value``, shared in ``nd``, by its print, where its class has one (torch, CuPy, JAX)."""
        reads = print_of(value.__class__)
        if reads is None:
            return
        try:
            self.hits[id(value)] = print_hit(value, ref, reads, nd, read_only, held)
        except Exception:  # pragma: no cover - a class of these libraries without the methods read
            forget_print(value.__class__)
        self._trim_hits()

    def _trim_hits(self) -> None:
        while len(self.hits) > self.size:
            try:
                self.hits.pop(next(iter(self.hits)), None)
            except (RuntimeError, StopIteration):  # a callback changed it meanwhile: look again
                continue

    def close(self) -> None:
        """The runtime closes: end the staged copies' mappings (which pin their memory) and drop what is held."""
        self.copies.close()
        for unmap in list(self.unmaps.values()):
            unmap()
        self.unmaps.clear()
        self._held.clear()
        self._batches.clear()

    def before_launch(self, values: Sequence[Any], specs: Sequence[ArgInfo]) -> None:
        """Before a launch with staged copies (:meth:`StagedCopies.before_launch`)."""
        self.copies.before_launch(values, specs)

    def discard(self) -> None:
        """Drop the staged copies of a launch that will not run."""
        self.copies.discard()

    def after_launch(self, keep: Callable[[StagedCopies, list[Staged]], Any] | None = None) -> Any:
        """After a launch with staged copies (:meth:`StagedCopies.after_launch`): what ``keep`` (a call plan's) keeps
        of the copies for its next call, where it keeps them."""
        return self.copies.after_launch(keep)

    @property
    def holding(self) -> bool:
        """Whether CUDA arrays or event batches are held for the runtime's work (what :meth:`release` lets go besides
        the staged copies in flight)."""
        return bool(self._held or self._batches)

    def release(self, flight: Any = None) -> None:
        """The runtime's work is done: let go of the CUDA arrays held for it, and the staged copies queued kernels
        read (``flight``, :meth:`StagedCopies.in_flight` taken before the wait; None: all) are free to fill again."""
        if self._held:
            self._held.clear()  # an array collected now leaves the cache in its callback
        if self._batches:
            batches, self._batches = self._batches, collections.deque()
            for event, _ in batches:
                _cuda.event_done(event, wait=True)  # done: destroyed
        self.copies.release(flight)


def torch_stream(device: int) -> int | None:
    """torch's current CUDA stream of GPU ``device`` on this thread (autograd sets the forward's), or None: the
    legacy default. The device is the runtime's, not the thread's current one (autograd's thread of another GPU)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return int(torch.cuda.current_stream(device).cuda_stream) or None


def argument_elsewhere(value: Any, spec: ArgInfo, what: str, stream: int | None, device: int) -> bytes:
    """The TiArgument bytes of ndarray argument ``spec`` for a launch from another thread than the runtime's (a
    reverse kernel's, from torch's autograd thread), where no ndarray is made: ``value`` must be a CUDA array
    (``__cuda_array_interface__``: torch, CuPy), its producer's stream ordered before ``stream``, checked against
    ``spec`` (dtype, dimensions, element shape, on the runtime's ``device``, contiguous) and passed as its device
    pointer."""
    face = cuda_interface(value, what)
    if face is None:
        raise ArgumentTypeError(f"{what}: from another thread than the runtime's, a CUDA array (torch, CuPy) is "
                                f"needed, got {type(value).__name__}")
    refuse_lazy(value, what)
    array = CudaArray.from_interface(value, face, what, weak=True, consumer=stream)
    array.check(len(spec.elem_shape), what, device)
    if array.read_only and spec.may_write:  # as the policy refuses it on the runtime's thread
        raise _read_only(what, spec, "an immutable CUDA array (a read-only export, a JAX array)",
                         "pass a writable copy")
    shape, dtype = array.shape, spec.dtype
    assert dtype is not None  # an ndarray argument's dtype is recorded
    if array.dtype != NUMPY_DTYPES[dtype] or len(shape) != spec.ndim + len(spec.elem_shape) \
            or shape[spec.ndim:] != tuple(spec.elem_shape):
        raise ArgumentTypeError(f"{what}: expected {spec.describe()}, got {array.dtype} of shape {shape}")
    return bytes(ffi.buffer(ndarray_argument(ffi.cast("TiMemory", array.ptr | lib.TAICHI_AOT_POINTER_TAG),
                                             shape[:spec.ndim], tuple(spec.elem_shape), dtype)))
