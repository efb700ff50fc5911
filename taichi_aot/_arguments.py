"""How Python values become kernel arguments: one packer per argument of a module's signature.

:func:`make_packer` turns an :class:`~taichi_aot.metadata.ArgInfo` into a function
``pack(value, runtime, slot)`` that validates ``value`` against it and writes it as
the ``TiArgument`` at ``slot`` (a place in a launch's packed argument buffer). The
common kinds (ndarray, i32, f32) are written as plain bytes into the buffer; the rare
ones (textures, vectors and matrices, i16/u16/f16 scalars) through the slot's cffi
pointer. Messages name the kernel or graph, the argument, what was expected and what came.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import numpy as np

from ._arrays import array_like, describe_array, detached, print_hit_accepts
from ._dtypes import convert_checked, signature
from ._lifetime import Parent
from ._native import ffi, lib
from .enums import DATA_TYPES, GFX_ARCHS, NUMPY_DTYPES, Access, Arch, ArgumentType, DataType, ImageDimension, ImageUsage
from .errors import ArgumentTypeError, ClosedError, InvalidArgumentError, NotSupportedError
from .image import Image, Texture
from .ndarray import NdArray

if TYPE_CHECKING:  # pragma: no cover
    from .metadata import ArgInfo

ARG_SIZE: int = ffi.sizeof("TiArgument")
_VALUE = ffi.offsetof("TiArgument", "value")
_I32 = struct.Struct("<i").pack_into
_TYPE = struct.Struct("<I").pack_into
_F16_MAX = 65504.0
_TENSOR_FIELD = {1: "x8", 2: "x16", 4: "x32", 8: "x64"}
_TEXTURE_DIMENSIONS = {1: ImageDimension.DIM_1D, 2: ImageDimension.DIM_2D, 3: ImageDimension.DIM_3D}


class Slot:
    """Where one argument goes: byte ``off`` of the packed buffer ``buf``, and ``ptr``, a TiArgument* there;
    ``hits``: the runtime's arrays shared before (``ForeignArgs.hits``: numpy arrays and CUDA arrays of torch,
    CuPy and JAX), one lookup away."""

    __slots__ = ("buf", "hits", "off", "ptr")

    def __init__(self, buf: bytearray, off: int, ptr: Any, hits: dict[int, Any]):
        self.buf = buf
        self.off = off
        self.ptr = ptr
        self.hits = hits


#: ``pack(value, runtime, slot)``: validate ``value`` and write it into ``slot``.
Packer = Callable[[Any, Parent, Slot], None]


def by_name(names: list[str], args: Sequence[Any], kwargs: Mapping[str, Any], what: str,
            noun: str = "argument") -> list[Any]:
    """``args`` then ``kwargs`` (by name) as one list in ``names``' order; ArgumentTypeError naming ``what`` for an
    unknown name, a value given twice or one missing."""
    values = list(args) + [None] * (len(names) - len(args))
    given = set(range(len(args)))  # positions, not a sentinel among the values: torch.compile traces this
    for key, value in kwargs.items():
        if key not in names:
            raise ArgumentTypeError(f"{what} has no {noun} {key!r} (it takes {', '.join(names)})")
        i = names.index(key)
        if i in given:
            raise ArgumentTypeError(f"{what}: {noun} {key!r} given twice")
        values[i] = value
        given.add(i)
    missing = [n for i, n in enumerate(names) if i not in given]
    if missing:
        raise ArgumentTypeError(f"{what}: missing {noun}(s) {', '.join(missing)}")
    return values


def describe_value(value: Any) -> str:
    """A short description of a value for error messages (type, dtype, shape)."""
    if isinstance(value, NdArray):
        elem = f", element shape {value.elem_shape}" if value.elem_shape else ""
        return f"{value.dtype} ndarray of shape {value.shape}{elem}"
    if isinstance(value, np.generic):
        return f"numpy {value.dtype} scalar {value!r}"
    if array_like(value):
        return describe_array(value)  # another library's array, by its library (torch tensor, JAX array, ...)
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}"


def prefill(buf: bytearray, offsets: list[int], specs: list[ArgInfo]) -> None:
    """Write the constant argument types of i32/f32 slots once; their packers then write only values."""
    for off, spec in zip(offsets, specs):
        if spec.kind == "scalar" and spec.dtype in (DataType.F32, DataType.I32):
            _TYPE(buf, off, ArgumentType.F32 if spec.dtype == DataType.F32 else ArgumentType.I32)


def _write_tensor(dst: Any, value: Any, what: str) -> None:
    """Write a 1-D or 2-D array of numbers as a TI_ARGUMENT_TYPE_TENSOR at ``dst``."""
    try:
        a = np.asarray(value)
    except (ValueError, TypeError):  # a ragged nesting of lists
        a = np.empty(0, object)
    if a.dtype == object or a.ndim not in (1, 2) or a.size == 0:
        raise ArgumentTypeError(f"{what}: a vector/matrix argument must be a 1-D or 2-D array of numbers")
    if a.dtype.kind == "b":
        raise ArgumentTypeError(f"{what}: bool vectors are not kernel arguments")
    if a.dtype.kind in "iu" and a.dtype.itemsize > 4 and isinstance(value, (list, tuple)):
        a = convert_checked(a, np.dtype(np.int32), what)  # Python ints default to i32, as scalars do
    if a.dtype == np.float64 and isinstance(value, (list, tuple)):
        a = convert_checked(a, np.dtype(np.float32), what)
    dt = DATA_TYPES.get(a.dtype)
    if dt is None:
        raise ArgumentTypeError(f"{what}: {a.dtype} vectors are not kernel arguments")
    capacity = 128 // a.dtype.itemsize
    if a.size > capacity:
        raise InvalidArgumentError(f"{what}: {a.size} elements of {a.dtype} exceed a tensor argument ({capacity})")
    dst.type = ArgumentType.TENSOR
    tensor = dst.value.tensor
    tensor.type = dt
    tensor.contents.length = a.size
    raw = np.ascontiguousarray(a).tobytes()
    ffi.memmove(getattr(tensor.contents.data, _TENSOR_FIELD[a.dtype.itemsize]), raw, len(raw))


class Packing(NamedTuple):
    """What a launch made elsewhere than a kernel's own call needs of its arguments (a reverse kernel launched from
    torch's autograd thread: :class:`GradCall`): their signature, packers and names in messages."""

    signature: list[ArgInfo]
    packers: list[Packer]
    what: list[str]


def make_packer(spec: ArgInfo, what: str, arch: Arch | None = None, widens: bool = False) -> Packer:
    """The packer for an argument described by ``spec`` of a kernel on ``arch``; ``what`` names it in messages;
    ``widens``: the kernel's launch backend takes every scalar type as it is (the own launches)."""
    if spec.kind == "ndarray" and spec.dtype == DataType.U1 and arch in GFX_ARCHS:
        message = (f"{what}: a u1 (bool) ndarray on {arch.name}: Taichi 1.7.4's SPIR-V for u1 ndarrays stores "
                   "nothing the host sees (lavapipe), and its writes corrupted the process on an NVIDIA GPU; "
                   "declare the array u8 in the kernel")

        def refuse_u1(value: Any, runtime: Parent, slot: Slot) -> None:
            raise NotSupportedError(message)

        return refuse_u1
    if spec.kind == "ndarray":
        return _ndarray_packer(spec, what)
    if spec.kind in ("texture", "rw_texture"):
        return _texture_packer(spec, what)
    if spec.kind == "tensor":
        return _tensor_packer(spec, what)
    if spec.kind == "scalar":
        make = _SCALAR_PACKERS.get(spec.dtype) if spec.dtype is not None else None
        if make is None and widens and spec.dtype in _WIDE:
            make = _wide_packer
        if make is not None:
            return make(spec, what)
        name = spec.dtype.name.lower() if spec.dtype is not None else "this"
        message = f"{what}: the C-API of Taichi 1.7.4 cannot pass a {name} scalar (only i32, f32, i16, u16, f16)"
    else:
        message = f"{what}: {spec.kind} arguments cannot be passed through the C-API"

    def refuse(value: Any, runtime: Parent, slot: Slot) -> None:
        raise NotSupportedError(message)

    return refuse


def _wrong(spec: ArgInfo, what: str) -> Callable[..., Exception]:
    expected = spec.describe()
    want = NUMPY_DTYPES[spec.dtype].name if spec.dtype is not None else None
    dtype = f", np.{want}" if want is not None else ""
    # a list or tuple for an array: no array is made of it (what the kernel writes would be lost); what to pass
    listed = (f": pass np.asarray(value{dtype}) or an ndarray (rt.ndarray_from_numpy(...)); a {{}} is not taken "
              "as an array (what the kernel writes into it would be lost)") if spec.kind == "ndarray" else ""

    def wrong(value: Any, cls: type[Exception] = ArgumentTypeError) -> Exception:
        fix = listed.format(type(value).__name__) if isinstance(value, (list, tuple)) else ""
        return cls(f"{what}: expected {expected}, got {describe_value(value)}{fix}")

    return wrong


def _ndarray_packer(spec: ArgInfo, what: str) -> Packer:
    wrong = _wrong(spec, what)
    sig = signature(spec.dtype, spec.ndim, spec.elem_shape) if spec.dtype is not None else None
    shape_sig = (spec.ndim, spec.elem_shape)
    writes = spec.may_write
    ndarray = np.ndarray
    end = ARG_SIZE
    put = lib.taichi_aot_array_pack

    def pack(value: Any, runtime: Parent, slot: Slot) -> None:
        given = value  # what the caller passed, as messages describe it (a numpy or torch array, not its ndarray)
        cls = value.__class__
        if cls is not NdArray:
            if cls is ndarray:  # a numpy array shared before: one lookup (an entry leaves before its array's id can
                address = id(value)  # be reused) and one C call (what may have changed, see NumpyHit)
                hit = slot.hits.get(address)
                if hit is not None and not hit.owned.closed and (
                        hit.sig is sig or (sig is None and hit.sig[1:] == shape_sig)) and put(
                        address, hit.key, writes, slot.ptr):  # the same array: its ndarray's argument written
                    return
                value = runtime.foreign.argument(value, spec, what)
            elif not isinstance(value, NdArray):
                if _other_array(value, cls, slot, sig, writes, wrong):
                    return
                value = runtime.foreign.argument(value, spec, what)
        if (value._sig != sig) if sig is not None else (value._sig[1:] != shape_sig):
            raise ArgumentTypeError(f"{wrong(given)}: {array_fix(given, value, spec)}")
        if value._memory._owned.closed:
            value.ensure_open()
        if value._runtime is not runtime:
            raise InvalidArgumentError(f"{what}: the ndarray belongs to another runtime")
        off = slot.off
        slot.buf[off:off + end] = value._arg_bytes

    return pack


#: How each library converts an array to another dtype, by the module its array type comes from.
_CONVERT = {"torch": ".to(torch.{})", "cupy": ".astype(cupy.{})", "jax": ".astype(jnp.{})", "jaxlib": ".astype(jnp.{})"}


def array_fix(given: Any, nd: NdArray, spec: ArgInfo) -> str:
    """What to do with an array (``given``, taken as ``nd``) whose dtype or dimensions ``spec`` does not take: the
    conversion in its own library's words, the shape the kernel expects."""
    fixes = []
    want = NUMPY_DTYPES[spec.dtype] if spec.dtype is not None else None
    if want is not None and nd.dtype != want:
        if isinstance(given, NdArray):
            fixes.append(f"make it a {want.name} ndarray (rt.ndarray(shape, np.{want.name}))")
        else:
            convert = _CONVERT.get(type(given).__module__.partition(".")[0], ".astype(np.{})").format(want.name)
            fixes.append(f"convert it with {convert}")
    if (len(nd.shape), nd.elem_shape) != (spec.ndim, spec.elem_shape):
        dims = ", ".join(["n"] * spec.ndim + [str(d) for d in spec.elem_shape])
        comma = "," if spec.ndim + len(spec.elem_shape) == 1 else ""
        fixes.append(f"pass an array of shape ({dims}{comma})" + (
            f": {spec.ndim} array dimension(s), then the element shape {spec.elem_shape}" if spec.elem_shape else ""))
    return "; ".join(fixes) or "pass an array of the kernel's dtype and shape"


def _other_array(value: Any, cls: type, slot: Slot, sig: Any, writes: bool, wrong: Callable[..., Exception]
                 ) -> bool:
    """A value neither an NdArray nor a numpy array: True where it is a torch, CuPy or JAX array shared before
    (PrintHit) and still as it was (its argument written into ``slot``), False for another array (the runtime's
    ForeignArgs takes it); ``wrong(value)`` raised for what is no array."""
    address = id(value)
    hit = slot.hits.get(address)
    if hit is None or not print_hit_accepts(hit, value, sig, writes):  # the C call's rule (_csrc/reads.c)
        if not array_like(value):
            raise wrong(value)
        return False
    held = hit.held  # what queued kernels read is held until the runtime is waited for
    if held is not None and address not in held:
        held[address] = value
    off = slot.off
    slot.buf[off:off + ARG_SIZE] = hit.arg_bytes
    return True


def _texture_packer(spec: ArgInfo, what: str) -> Packer:
    wrong = _wrong(spec, what)
    expected = spec.describe()
    want_dim = _TEXTURE_DIMENSIONS.get(spec.ndim)
    want_usage = ImageUsage.STORAGE if spec.kind == "rw_texture" else ImageUsage.SAMPLED

    def pack(value: Any, runtime: Parent, slot: Slot) -> None:
        texture = value if isinstance(value, Texture) else None
        image = texture.image if texture is not None else value
        if not isinstance(image, Image):
            raise wrong(value)
        if want_dim is not None and image.dimension != want_dim:
            raise InvalidArgumentError(f"{what}: expected {expected}, got a {image.dimension.name} image")
        if spec.format is not None and image.format != spec.format:
            raise InvalidArgumentError(f"{what}: the kernel writes {spec.format.name} texels, the image is "
                                       f"{image.format.name}")
        if not image.usage & want_usage:
            raise InvalidArgumentError(f"{what}: a {spec.kind.replace('_', '-')} needs an image allocated with "
                                       f"{want_usage.name} usage, this one has {image.usage!r}")
        image.ensure_open()
        if image._runtime is not runtime:
            raise InvalidArgumentError(f"{what}: the texture's image belongs to another runtime")
        slot.ptr[0] = (texture if texture is not None else Texture(image))._arg[0]

    return pack


def _tensor_packer(spec: ArgInfo, what: str) -> Packer:
    wrong = _wrong(spec, what)
    target = NUMPY_DTYPES[spec.dtype] if spec.dtype is not None else None

    def pack(value: Any, runtime: Parent, slot: Slot) -> None:
        if isinstance(value, (NdArray, Texture, Image, str, bytes)):
            raise wrong(value)
        try:
            a = np.asarray(value)
        except (ValueError, TypeError):  # a ragged nesting of lists, or what numpy cannot read as numbers
            raise wrong(value) from None
        if a.ndim not in (1, 2):
            raise wrong(value)
        if spec.length is not None and a.size != spec.length:
            raise wrong(value, InvalidArgumentError)
        if target is not None:
            if a.dtype.kind not in "iuf" or (a.dtype.kind == "f" and target.kind in "iu"):
                raise wrong(value)
            value = convert_checked(a, target, what)
        _write_tensor(slot.ptr, value, what)

    return pack


def _f32_packer(spec: ArgInfo, what: str) -> Packer:
    wrong = _wrong(spec, what)
    put = lib.taichi_aot_f32_pack  # the C call's own conversion (_csrc/arrays.c): both paths round a value alike

    def pack(value: Any, runtime: Parent, slot: Slot) -> None:
        cls = value.__class__
        try:
            if cls is not float:
                if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                    raise wrong(value)
                value = float(value)  # an int as the C call converts it (to the nearest double first)
            if put(value, slot.ptr):  # the slot's type was written once (prefill)
                return
        except OverflowError:  # an int past every double
            pass
        raise InvalidArgumentError(f"{what}: {value!r} is out of range for f32")

    return pack


def _i32_packer(spec: ArgInfo, what: str) -> Packer:
    wrong = _wrong(spec, what)
    value_off = _VALUE

    def pack(value: Any, runtime: Parent, slot: Slot) -> None:
        if value.__class__ is not int:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise wrong(value)
            value = int(value)
        if not -2147483648 <= value <= 2147483647:
            raise InvalidArgumentError(f"{what}: {value} is out of range for i32")
        _I32(slot.buf, slot.off + value_off, value)  # the slot's type was written once (prefill)

    return pack


def _i16_packer(spec: ArgInfo, what: str) -> Packer:
    wrong = _wrong(spec, what)
    dt = DataType.I16 if spec.dtype == DataType.I16 else DataType.U16
    info = np.iinfo(np.int16 if dt == DataType.I16 else np.uint16)

    def pack(value: Any, runtime: Parent, slot: Slot) -> None:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise wrong(value)
        v = int(value)
        if not info.min <= v <= info.max:
            raise InvalidArgumentError(f"{what}: {v} is out of range for {dt.name.lower()}")
        dst = slot.ptr
        dst.type = ArgumentType.SCALAR
        dst.value.scalar.type = dt
        dst.value.scalar.value.x16 = v & 0xFFFF

    return pack


def _f16_packer(spec: ArgInfo, what: str) -> Packer:
    wrong = _wrong(spec, what)

    def pack(value: Any, runtime: Parent, slot: Slot) -> None:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise wrong(value)
        try:
            v = float(value)
        except OverflowError:  # an int past every float
            v = _F16_MAX * 2
        if abs(v) > _F16_MAX and v == v and abs(v) != float("inf"):
            raise InvalidArgumentError(
                f"{what}: {describe_value(value)} is out of range for f16 (largest {_F16_MAX:g})")
        # the C-API carries an f16 scalar as an f32 in x32
        dst = slot.ptr
        dst.type = ArgumentType.SCALAR
        dst.value.scalar.type = DataType.F16
        dst.value.scalar.value.x32 = int(np.array(v, np.float32).view(np.uint32))

    return pack


#: Scalars the C-API cannot pass and taichi_aot's CUDA launcher can: the unsigned type of their width, for the bits.
_WIDE = {DataType.F64: np.uint64, DataType.I64: np.uint64, DataType.U64: np.uint64, DataType.U32: np.uint32,
         DataType.I8: np.uint8, DataType.U8: np.uint8}


def _wide_packer(spec: ArgInfo, what: str) -> Packer:
    """A scalar the C-API has no room for, as its bits in the TiScalar's x64 (read back by the own launches:
    ``_csrc/backends/cuda.c``, ``x64.c``)."""
    wrong = _wrong(spec, what)
    dt = spec.dtype
    assert dt is not None
    target, bits = NUMPY_DTYPES[dt], _WIDE[dt]
    floating = dt == DataType.F64

    def pack(value: Any, runtime: Parent, slot: Slot) -> None:
        kinds = (int, float, np.integer, np.floating) if floating else (int, np.integer)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, kinds):
            raise wrong(value)
        if not floating and not np.iinfo(target).min <= int(value) <= np.iinfo(target).max:
            raise InvalidArgumentError(f"{what}: {value} is out of range for {dt.name.lower()}")
        dst = slot.ptr
        dst.type = ArgumentType.SCALAR
        dst.value.scalar.type = dt
        try:
            dst.value.scalar.value.x64 = int(np.array(value, target).view(bits))
        except OverflowError:
            raise InvalidArgumentError(f"{what}: {value!r} is out of range for {dt.name.lower()}") from None

    return pack


_SCALAR_PACKERS: dict[DataType, Callable[[ArgInfo, str], Packer]] = {
    DataType.F32: _f32_packer,
    DataType.I32: _i32_packer,
    DataType.I16: _i16_packer,
    DataType.U16: _i16_packer,
    DataType.F16: _f16_packer,
}


def c_api_passes(spec: ArgInfo) -> bool:
    """Whether libtaichi_c_api 1.7.4 can pass argument ``spec`` (it has no room for f64, i64, u64, u32, i8 or u8
    scalars: the own launches take those)."""
    return spec.kind != "scalar" or spec.dtype in _SCALAR_PACKERS


def gradient_signature(args: list[ArgInfo]) -> list[ArgInfo]:
    """A reverse-mode kernel's signature on taichi_aot's own launches: its arguments, then the gradient of each
    ndarray that needs one (same dtype and shape, named ``<name>_grad`` where that name is free)."""
    names = {a.name for a in args}
    grads = [a for a in args if a.kind == "ndarray" and a.needs_grad]
    # its arrays with gradients are read (Taichi's reverse pass turns each store to them into one to its gradient),
    # where no access is recorded; others keep theirs (a plain array the primal writes is written again); the
    # gradients are read and written (added to; an output's read, then cleared)
    primal = [replace(a, access=Access.READ) if a.kind == "ndarray" and a.needs_grad and a.access is None else a
              for a in args]
    return [*primal, *(replace(a, index=len(args) + k, access=None, needs_grad=False,
                             name=f"{a.name}_grad" if a.name and f"{a.name}_grad" not in names else None)
                     for k, a in enumerate(grads))]


class GradCall:
    """A reverse-mode kernel run as its primal's ``grad``: ``kernel``, the module's kernel of its gradient signature
    (:func:`gradient_signature`: the primal's arguments, then the gradient arrays of ``needing``, argument
    positions), launched with them as any kernel is: the same packers and foreign-array policy, so a launch backend
    takes addresses only. From another thread than the runtime's, where its backend launches there
    (``elsewhere(args, count, stream)``: torch's autograd runs CUDA backward on a thread of its own while the
    runtime's waits), the arrays are CUDA arrays taken by pointer on that thread's torch stream
    (``_foreign.argument_elsewhere``) and the scalars packed by the kernel's packers; ``closed()`` says whether its
    module or runtime is closed. Elsewhere None: the runtime's thread only, as the kernel's own launches."""

    def __init__(self, kernel: Any, needing: list[int], closed: Callable[[], bool] | None = None,
                 elsewhere: Callable[[Any, int, int | None], None] | None = None):
        self.kernel, self.needing, self.closed, self.elsewhere = kernel, needing, closed, elsewhere
        self.packing = kernel.packing() if elsewhere is not None else None

    def call(self, values: list[Any], grads: Any, names: list[str | None], what: list[str], kernel: str) -> None:
        """The primal's ``grad(*values, grads=grads)`` (``names`` its arguments' names, ``what`` each as messages
        name it, ``kernel`` the kernel): each gradient found and its shape checked against its array's, then the
        launch."""
        order = gradient_map(grads, self.needing, names, f"{kernel}: grads")
        signature = self.kernel.signature
        for i in self.needing:
            shape, got = getattr(values[i], "shape", None), getattr(order[i], "shape", None)
            ndim = signature[i].ndim  # the array's dimensions (an NdArray's shape has no element dims)
            if shape is not None and got is not None and tuple(shape)[:ndim] != tuple(got)[:ndim]:
                raise InvalidArgumentError(f"the gradient of {what[i]}: shape {tuple(got)[:ndim]}, its array's is "
                                           f"{tuple(shape)[:ndim]}")
        given = [detached(v) for v in (*values, *(order[i] for i in self.needing))]
        runtime = self.kernel._runtime
        if self.elsewhere is None or runtime.on_its_thread():
            self.kernel(*given)
            return
        assert self.packing is not None and self.closed is not None
        if self.closed():  # closed objects are refused on any thread
            raise ClosedError(f"{kernel}: its module or runtime is closed")
        from ._foreign import argument_elsewhere, torch_stream

        stream = torch_stream(runtime.device_index)
        p = self.packing
        args = ffi.new("TiArgument[]", max(len(given), 1))
        for i, (spec, value) in enumerate(zip(p.signature, given)):
            arg = argument_elsewhere(value, spec, f"{kernel}: {p.what[i]}", stream, runtime.device_index) \
                if spec.kind == "ndarray" else pack_one(p.packers[i], spec, value, runtime)
            ffi.memmove(ffi.addressof(args, i), arg, ARG_SIZE)
        self.elsewhere(args, len(given), stream)


def gradient_map(grads: Any, needing: list[int], names: list[str | None], what: str) -> dict[int, Any]:
    """{argument index: gradient array}: ``grads`` a sequence in the order of the arguments needing one, or a dict
    by argument index or name."""
    if isinstance(grads, dict):
        out = {}
        for key, value in grads.items():
            index = names.index(key) if isinstance(key, str) and key in names else key
            if index not in needing:
                raise ArgumentTypeError(f"{what}: {key!r} is no argument with a gradient (those: {needing})")
            out[index] = value
    elif isinstance(grads, (list, tuple)):
        if len(grads) != len(needing):
            raise ArgumentTypeError(f"{what}: {len(grads)} given, the kernel takes one for each of arguments "
                                    f"{needing}")
        out = dict(zip(needing, grads))
    else:
        raise ArgumentTypeError(f"{what}: a sequence or a dict of gradient arrays, got {type(grads).__name__}")
    missing = [i for i in needing if i not in out]
    if missing:
        raise ArgumentTypeError(f"{what}: no gradient for argument(s) {missing}")
    return out


def pack_one(packer: Packer, arg: ArgInfo, value: Any, runtime: Any) -> bytes:
    """One argument packed alone into a TiArgument's bytes by its packer (its checks: type, range), as a call
    from outside the launch path takes it (an XLA attribute, a launch from another thread)."""
    buf = bytearray(ARG_SIZE)
    prefill(buf, [0], [arg])
    packer(value, runtime, Slot(buf, 0, ffi.cast("TiArgument *", ffi.from_buffer(buf)), {}))
    return bytes(buf)
