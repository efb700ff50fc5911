"""AOT modules, kernels and compute graphs, and how Python values become kernel arguments."""

from __future__ import annotations

import os
import shutil
import stat
import struct
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from . import _probe, capi, metadata
from ._native import ffi, lib
from .enums import ArgumentType, DataType, ImageDimension, ImageUsage
from .errors import (
    ClosedError,
    ArgumentNotFoundError,
    ArgumentTypeError,
    CorruptedDataError,
    IncompatibleModuleError,
    InvalidArgumentError,
    MissingFileError,
    NameNotFoundError,
    NotSupportedError,
    make_error,
    take_last_error,
)
from .image import Image, Texture
from .memory import DATA_TYPES, NUMPY_DTYPES, NdArray
from .runtime import Child, Owned, Runtime

#: Limits when extracting a .tcm archive (a zip file) for the LLVM backends.
MAX_ARCHIVE_MEMBERS = 10_000
MAX_ARCHIVE_BYTES = 4 << 30


def _is_zip(data: bytes) -> bool:
    return data[:4] == b"PK\x03\x04"


def extract_archive(source: str | bytes, dest: str) -> None:
    """Safely extract a ``.tcm`` archive (path or bytes) into ``dest``.

    Refuses absolute paths, ``..`` components, links and special files, more than
    MAX_ARCHIVE_MEMBERS members, and more than MAX_ARCHIVE_BYTES uncompressed.
    """
    import io

    what = "module archive"
    try:
        zf = zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise CorruptedDataError(f"{what} is not a valid .tcm (zip) archive: {e}", -2) from None
    with zf:
        members = zf.infolist()
        if len(members) > MAX_ARCHIVE_MEMBERS:
            raise CorruptedDataError(f"{what} has {len(members)} members (at most {MAX_ARCHIVE_MEMBERS})", -2)
        total = 0
        root = os.path.realpath(dest)
        for info in members:
            name = info.filename
            mode = info.external_attr >> 16
            if name.startswith(("/", "\\")) or ":" in name or any(p == ".." for p in name.replace("\\", "/").split("/")):
                raise CorruptedDataError(f"{what}: unsafe member path {name!r}", -2)
            if mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise CorruptedDataError(f"{what}: member {name!r} is not a regular file", -2)
            target = os.path.realpath(os.path.join(root, name))
            if os.path.commonpath([root, target]) != root:
                raise CorruptedDataError(f"{what}: member {name!r} escapes the extraction folder", -2)
            total += info.file_size
            if total > MAX_ARCHIVE_BYTES:
                raise CorruptedDataError(f"{what} expands to more than {MAX_ARCHIVE_BYTES} bytes", -2)
        try:
            for info in members:
                target = os.path.join(root, info.filename)
                if info.is_dir():
                    os.makedirs(target, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
        except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, ValueError) as e:
            raise CorruptedDataError(f"{what} is damaged: {e}", -2) from None


def _check_compatible(meta: metadata.ModuleInfo, runtime: Runtime, where: str) -> None:
    """Refuse, before C, a module built for another kind of backend or by an incompatible Taichi."""
    llvm_runtime = runtime._arch in capi.LLVM_ARCHS
    if (meta.format == "llvm") != llvm_runtime:
        built = "an LLVM backend (x64/CUDA)" if meta.format == "llvm" else "a gfx backend (Vulkan/Metal/OpenGL)"
        raise IncompatibleModuleError(
            f"module {where} was compiled for {built}; this runtime is {runtime._arch.name}", -10
        )
    if meta.arch is not None and meta.arch != runtime._arch and not (
        meta.arch in capi.CPU_ARCHS and runtime._arch in capi.CPU_ARCHS and meta.arch == _probe.host_cpu_arch()
    ):
        raise IncompatibleModuleError(
            f"module {where} was compiled for {meta.arch.name}; this runtime is {runtime._arch.name}", -10
        )
    wanted = capi.library.version // 1000  # e.g. 1007 for Taichi 1.7.x
    if meta.version is not None and len(meta.version) >= 2 and meta.version[0] * 1000 + meta.version[1] != wanted:
        have = ".".join(map(str, meta.version))
        raise IncompatibleModuleError(
            f"module {where} was compiled by Taichi {have}; libtaichi_c_api {capi.library.version} "
            f"loads modules of Taichi {wanted // 1000}.{wanted % 1000}.x", -10
        )


def _release_module(handle: tuple) -> None:
    module, temp_dir = handle
    try:
        if ("module", module) in capi._live:
            capi.destroy_aot_module(module)
    finally:
        if temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)


class AotModule(Child):
    """A loaded AOT module. Create with :meth:`Runtime.load_module`.

    ``module.kernels["name"]`` and ``module.graphs["name"]`` are mappings by name;
    an unknown name raises :class:`NameNotFoundError` (a KeyError) listing the names the module has.
    """

    def __init__(self):
        raise TypeError("use Runtime.load_module() to load an AotModule")

    @classmethod
    def _load(cls, runtime: Runtime, source: Any) -> AotModule:
        temp_dir = None
        data: bytes | None = None
        path: str | None = None
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            if not data:
                raise CorruptedDataError("load_module: empty module data", -2)
            if not _is_zip(data):
                raise CorruptedDataError("load_module: the bytes are not a .tcm archive", -2)
        elif isinstance(source, (str, os.PathLike)):
            path = os.fsdecode(os.fspath(source))
            if not os.path.exists(path):
                raise MissingFileError(f"load_module: no module at {path!r}")
            if os.path.isfile(path) and os.path.getsize(path) == 0:
                raise CorruptedDataError(f"load_module: {path!r} is an empty file", -2)
        else:
            raise ArgumentTypeError(f"load_module: expected a path or bytes, got {type(source).__name__}")

        # read the metadata before C sees the module: corrupt input raises here
        meta = metadata.read_module(data if data is not None else path)
        names = meta.content
        _check_compatible(meta, runtime, path if path is not None else "<bytes>")
        rt = runtime._handle
        if runtime._arch in capi.LLVM_ARCHS and (data is not None or os.path.isfile(path)):
            # libtaichi_c_api 1.7.4 segfaults loading a .tcm path on LLVM backends and
            # refuses .tcm bytes: extract the archive to a private folder instead.
            temp_dir = tempfile.mkdtemp(prefix="taichi_aot_module_")
            try:
                extract_archive(data if data is not None else path, temp_dir)
                handle = capi.load_aot_module(rt, temp_dir)
            except BaseException:
                shutil.rmtree(temp_dir, ignore_errors=True)
                raise
        elif data is not None:
            handle = capi.create_aot_module(rt, data)
        else:
            handle = capi.load_aot_module(rt, path)

        self = object.__new__(cls)
        self._handle = handle
        self._source = path if path is not None else f"<{len(data)} bytes>"
        self._names = names
        self._meta = meta
        self._kernels: dict[str, Kernel] = {}
        self._graphs: dict[str, ComputeGraph] = {}
        self._attach(runtime, Owned((handle, temp_dir), _release_module, runtime._owned))
        return self

    _kind = "module"

    @property
    def source(self) -> str:
        """Where the module came from (path, or a byte count)."""
        return self._source

    @property
    def kernels(self) -> _Named:
        """Kernels by name."""
        return _Named(self, "kernel")

    @property
    def graphs(self) -> _Named:
        """Compute graphs by name."""
        return _Named(self, "graph")

    def kernel_names(self) -> list[str]:
        return list(self._names[0]) if self._names else []

    def graph_names(self) -> list[str]:
        return list(self._names[1]) if self._names else []

    def _get(self, kind: str, name: Any):
        self._check()
        cache = self._kernels if kind == "kernel" else self._graphs
        obj = cache.get(name) if isinstance(name, str) else None
        if obj is not None:
            return obj
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{kind} names are str, got {type(name).__name__}")
        known = self.kernel_names() if kind == "kernel" else self.graph_names()
        listing = f"; the module has {kind}s: {', '.join(known) if known else '(none)'}"
        if self._names is not None and name not in known:
            raise NameNotFoundError(f"no {kind} named {name!r} in module {self._source}{listing}", -3)
        try:
            if kind == "kernel":
                handle = capi.get_aot_module_kernel(self._handle, name)
            else:
                handle = capi.get_aot_module_compute_graph(self._handle, name)
        except NameNotFoundError:
            if self._names is not None and name in known:
                raise CorruptedDataError(
                    f"module {self._source} lists {kind} {name!r}, but the library cannot load it: its compiled "
                    f"code is missing or damaged" + (f" ({name}.ll)" if self._meta.format == "llvm" else ""), -2
                ) from None
            raise NameNotFoundError(f"no {kind} named {name!r} in module {self._source}{listing}", -3) from None
        obj = (Kernel if kind == "kernel" else ComputeGraph)(self, name, handle)
        cache[name] = obj
        return obj

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<AotModule {self._source} on {self._runtime.arch.name} ({state})>"


class _Named(Mapping):
    """``module.kernels`` / ``module.graphs``."""

    def __init__(self, module: AotModule, kind: str):
        self._module = module
        self._kind = kind

    def _names(self) -> list[str]:
        m = self._module
        return m.kernel_names() if self._kind == "kernel" else m.graph_names()

    def __getitem__(self, name: str):
        return self._module._get(self._kind, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __repr__(self) -> str:
        return f"<{self._kind}s of {self._module!r}: {', '.join(self._names())}>"


# ---------------------------------------------------------------------------
# Python values -> TiArgument

_TENSOR_FIELD = {1: "x8", 2: "x16", 4: "x32", 8: "x64"}
_TEXTURE_DIMENSIONS = {1: ImageDimension.DIM_1D, 2: ImageDimension.DIM_2D, 3: ImageDimension.DIM_3D}
_I32 = (-(2**31), 2**31 - 1)


def _set_argument(dst: Any, value: Any, runtime: Runtime, what: str) -> None:
    """Write ``value`` into the TiArgument ``dst``."""
    if isinstance(value, NdArray):
        value._check()
        if value._runtime is not runtime:
            raise InvalidArgumentError(f"{what}: the ndarray belongs to another runtime")
        dst[0] = value._arg[0]
        return
    if isinstance(value, Image):
        value = Texture(value)
    if isinstance(value, Texture):
        value.image._check()
        if value.image._runtime is not runtime:
            raise InvalidArgumentError(f"{what}: the texture's image belongs to another runtime")
        dst[0] = value._arg[0]
        return
    if isinstance(value, bool) or isinstance(value, np.bool_):
        raise ArgumentTypeError(f"{what}: bool is not a kernel argument (pass 0/1)")
    if isinstance(value, np.generic):
        dt = value.dtype
        if dt == np.int16 or dt == np.uint16:
            dst.type = ArgumentType.SCALAR
            dst.value.scalar.type = DataType.I16 if dt == np.int16 else DataType.U16
            dst.value.scalar.value.x16 = int(value.view(np.uint16))
            return
        if dt == np.float16:  # the C-API carries an f16 scalar as an f32 in x32
            dst.type = ArgumentType.SCALAR
            dst.value.scalar.type = DataType.F16
            dst.value.scalar.value.x32 = int(np.float32(value).view(np.uint32))
            return
        if np.issubdtype(dt, np.integer):
            value = int(value)
        elif np.issubdtype(dt, np.floating):
            value = float(value)
        else:
            raise ArgumentTypeError(f"{what}: numpy {dt} is not a kernel argument type")
    if isinstance(value, int):
        if not _I32[0] <= value <= _I32[1]:
            raise InvalidArgumentError(f"{what}: int {value} does not fit in i32")
        dst.type = ArgumentType.I32
        dst.value.i32 = value
        return
    if isinstance(value, float):
        dst.type = ArgumentType.F32
        dst.value.f32 = value
        return
    if isinstance(value, (np.ndarray, list, tuple)):
        _set_tensor(dst, value, what)
        return
    raise ArgumentTypeError(
        f"{what}: {type(value).__name__} is not a kernel argument "
        "(expected NdArray, Texture, int, float, a numpy scalar or a small vector/matrix)"
    )


def _set_tensor(dst: Any, value: Any, what: str) -> None:
    a = np.asarray(value)
    if a.dtype == object or a.ndim not in (1, 2) or a.size == 0:
        raise ArgumentTypeError(f"{what}: a vector/matrix argument must be a 1-D or 2-D array of numbers")
    if a.dtype.kind == "b":
        raise ArgumentTypeError(f"{what}: bool vectors are not kernel arguments")
    if a.dtype.kind in "iu" and a.dtype.itemsize > 4 and isinstance(value, (list, tuple)):
        a = _convert_checked(a, np.dtype(np.int32), what)  # Python ints default to i32, as scalars do
    if a.dtype == np.float64 and isinstance(value, (list, tuple)):
        a = _convert_checked(a, np.dtype(np.float32), what)
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


_F16_MAX = 65504.0


def _convert_checked(a: np.ndarray, target: np.dtype, what: str) -> np.ndarray:
    """``a`` as ``target``, refusing values the conversion would wrap or overflow to infinity."""
    if target.kind in "iu":
        info = np.iinfo(target)
        if a.size and (a.min() < info.min or a.max() > info.max):
            raise InvalidArgumentError(f"{what}: values out of range for {target} ({a.min()}..{a.max()})")
        return a.astype(target)
    with np.errstate(over="ignore"):
        out = a.astype(target)
    if not np.array_equal(np.isfinite(out), np.isfinite(a)):
        raise InvalidArgumentError(f"{what}: values out of range for {target}")
    return out


def _describe_value(value: Any) -> str:
    if isinstance(value, NdArray):
        elem = f", element shape {value.elem_shape}" if value.elem_shape else ""
        return f"{value.dtype} ndarray of shape {value.shape}{elem}"
    if isinstance(value, np.ndarray):
        return f"numpy {value.dtype} array of shape {value.shape}"
    if isinstance(value, np.generic):
        return f"numpy {value.dtype} scalar {value!r}"
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}"


_ARG_SIZE = ffi.sizeof("TiArgument")
_VALUE = ffi.offsetof("TiArgument", "value")
_F32 = struct.Struct("<f").pack_into
_I32_PACK = struct.Struct("<i").pack_into
_TYPE = struct.Struct("<I").pack_into


def _make_checker(spec: metadata.ArgInfo, what: str):
    """A function ``(value, runtime, buf, off, dst)`` that validates ``value`` against ``spec`` and
    writes it as the TiArgument at byte ``off`` of ``buf`` (``dst`` points there, for the rare kinds
    packed through cffi). The common kinds (ndarray, i32, f32) are packed with plain byte writes."""
    expected = spec.describe()

    def wrong(value, cls=ArgumentTypeError):
        return cls(f"{what}: expected {expected}, got {_describe_value(value)}")

    if spec.kind == "ndarray":
        sig = (spec.dtype, spec.ndim, spec.elem_shape) if spec.dtype is not None else None
        end = _ARG_SIZE

        def check(value, runtime, buf, off, dst):
            if value.__class__ is not NdArray:
                if not isinstance(value, NdArray):
                    raise wrong(value)
            if (sig is not None and value._sig != sig) or (
                sig is None and (value._sig[1] != spec.ndim or value._sig[2] != spec.elem_shape)
            ):
                raise wrong(value, InvalidArgumentError)
            if value._memory._owned._closed:
                value._check()
            if value._runtime is not runtime:
                raise InvalidArgumentError(f"{what}: the ndarray belongs to another runtime")
            buf[off:off + end] = value._arg_bytes

        return check
    if spec.kind in ("texture", "rw_texture"):
        want_dim = _TEXTURE_DIMENSIONS.get(spec.ndim)
        want_usage = ImageUsage.STORAGE if spec.kind == "rw_texture" else ImageUsage.SAMPLED

        def check(value, runtime, buf, off, dst):
            image = value.image if isinstance(value, Texture) else value
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
            _set_argument(dst, value, runtime, what)

        return check
    if spec.kind == "tensor":

        def check(value, runtime, buf, off, dst):
            if isinstance(value, (NdArray, Texture, Image, str, bytes)) or np.ndim(value) not in (1, 2):
                raise wrong(value)
            if spec.length is not None and np.size(value) != spec.length:
                raise wrong(value, InvalidArgumentError)
            if spec.dtype is not None:
                a = np.asarray(value)
                target = NUMPY_DTYPES[spec.dtype]
                if a.dtype.kind not in "iuf" or (a.dtype.kind == "f" and target.kind in "iu"):
                    raise wrong(value)
                value = _convert_checked(a, target, what)
            _set_tensor(dst, value, what)

        return check
    if spec.kind != "scalar":
        def check(value, runtime, buf, off, dst):
            raise NotSupportedError(f"{what}: {spec.kind} arguments cannot be passed through the C-API")

        return check
    dt = spec.dtype
    if dt == DataType.F32:
        value_off = _VALUE

        def check(value, runtime, buf, off, dst):
            cls = value.__class__
            if cls is not float and cls is not int:
                if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                    raise wrong(value)
                value = float(value)
            try:
                _F32(buf, off + value_off, value)  # the slot's type was written once (_prefill)
            except (OverflowError, struct.error):
                raise InvalidArgumentError(f"{what}: {value!r} is out of range for f32") from None

        return check
    if dt == DataType.I32:
        value_off = _VALUE

        def check(value, runtime, buf, off, dst):
            if value.__class__ is not int:
                if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                    raise wrong(value)
                value = int(value)
            if not -2147483648 <= value <= 2147483647:
                raise InvalidArgumentError(f"{what}: {value} is out of range for i32")
            _I32_PACK(buf, off + value_off, value)  # the slot's type was written once (_prefill)

        return check
    if dt in (DataType.I16, DataType.U16):
        info = np.iinfo(np.int16 if dt == DataType.I16 else np.uint16)

        def check(value, runtime, buf, off, dst):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise wrong(value)
            v = int(value)
            if not info.min <= v <= info.max:
                raise InvalidArgumentError(f"{what}: {v} is out of range for {dt.name.lower()}")
            dst.type = ArgumentType.SCALAR
            dst.value.scalar.type = dt
            dst.value.scalar.value.x16 = v & 0xFFFF

        return check
    if dt == DataType.F16:

        def check(value, runtime, buf, off, dst):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise wrong(value)
            v = float(value)
            if abs(v) > _F16_MAX and v == v and abs(v) != float("inf"):
                raise InvalidArgumentError(f"{what}: {value!r} is out of range for f16 (largest {_F16_MAX:g})")
            # the C-API carries an f16 scalar as an f32 in x32
            dst.type = ArgumentType.SCALAR
            dst.value.scalar.type = DataType.F16
            dst.value.scalar.value.x32 = int(np.array(v, np.float32).view(np.uint32))

        return check

    def check(value, runtime, buf, off, dst):
        name = dt.name.lower() if dt is not None else "this"
        raise NotSupportedError(
            f"{what}: the C-API of Taichi 1.7.4 cannot pass a {name} scalar (only i32, f32, i16, u16, f16)"
        )

    return check


def _prefill(packed: _Packed, specs: list) -> None:
    """Write the constant argument types of i32/f32 slots once; their checkers then write only values."""
    for off, spec in zip(packed.offsets, specs):
        if spec.kind == "scalar" and spec.dtype in (DataType.F32, DataType.I32):
            _TYPE(packed.buf, off, ArgumentType.F32 if spec.dtype == DataType.F32 else ArgumentType.I32)


def _launch_struct(rt: Runtime, kind: int, handle: Any, packed: _Packed) -> Any:
    runtime, thread, pending = rt._handle, rt._thread, rt._pending
    c = ffi.new("TaichiAotLaunch *")
    c.runtime = runtime
    c.kind = kind
    c.handle = handle
    c.arg_count = len(packed.offsets)
    c.args = packed.array
    c.seen = -1  # stale: the first launch checks in Python
    c.thread = thread
    c.pending = pending
    return c


def _untyped_checker(what: str):
    """For a module without a recorded signature: pack by the value's own type."""

    def check(value, runtime, buf, off, dst):
        _set_argument(dst, value, runtime, what)

    return check


def _launcher(c: Any, validate, what: str):
    def launch() -> None:
        code = _launch(c)
        if code:
            _launch_failed(code, c, validate, what)

    return launch


def _launch_failed(code: int, c: Any, validate, what: str) -> None:
    """A prepared launch came back non-zero: re-check and relaunch when stale, else raise the error."""
    if code == _STALE:
        epoch = lib.taichi_aot_epoch
        validate()  # raises ClosedError / WrongThreadError
        c.seen = epoch
        code = _launch(c)
        if not code:
            return
    _raise_launch_error(code, what)


_STALE = lib.TAICHI_AOT_STALE


def _raise_launch_error(code: int, what: str) -> None:
    c, message = take_last_error()
    raise make_error(c or code, message, what)


class _ModuleEntry:
    """A kernel or graph of a module: its name, module, handle, and precomputed argument packers."""

    _what = "kernel"

    def __init__(self, module: AotModule, name: str, handle: Any):
        self._module = module
        self._runtime = module._runtime
        self._name = name
        self._handle = handle

    @property
    def name(self) -> str:
        return self._name

    @property
    def module(self) -> AotModule:
        return self._module

    @property
    def signature(self) -> list[metadata.ArgInfo] | None:
        """The arguments the module records (in order for a kernel, by first use for a graph), or None."""
        return list(self._args) if self._args is not None else None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name!r} of {self._module!r}>"


class _Packed:
    """One launch's arguments: a byte buffer laid out as the C array, and cffi pointers into it."""

    __slots__ = ("buf", "array", "slots", "offsets", "keep", "launch")

    def __init__(self, ctype: str, count: int, stride: int, arg_offset: int):
        self.buf = bytearray(max(count, 1) * stride)
        self.array = ffi.from_buffer(ctype + "[]", self.buf) if count else ffi.NULL
        self.offsets = [i * stride + arg_offset for i in range(count)]
        base = ffi.cast("char *", self.array) if count else None
        self.slots = [ffi.cast("TiArgument *", base + o) for o in self.offsets]
        self.keep: list = []
        self.launch = None  # the TaichiAotLaunch that launches with these arguments


class Kernel(_ModuleEntry):
    """A kernel of a module. Call it to launch: ``kernel(x, y, 0.5)`` (alias ``kernel.launch``).

    Every argument is checked against the signature in the module's metadata before
    C is called (count, kind, dtype, ndim, element shape, scalar range); keyword
    arguments work where the module records argument names (gfx backends).
    :meth:`bind` checks and packs arguments once for repeated launches.
    """

    def __init__(self, module: AotModule, name: str, handle: Any):
        super().__init__(module, name, handle)
        info = module._meta.kernels.get(name)
        self._args: list[metadata.ArgInfo] | None = info.args if info is not None else None
        self._checkers = None
        self._plan = None
        self._names: list = []
        if self._args is not None:
            self._checkers = [
                _make_checker(a, f"kernel {name!r} argument {a.index}" + (f" ({a.name!r})" if a.name else ""))
                for a in self._args
            ]
            self._names = [a.name for a in self._args]
            self._packed = self._new_packed(len(self._args))
            self._plan = list(zip(self._checkers, self._packed.offsets, self._packed.slots))

    def _new_packed(self, count: int) -> _Packed:
        packed = _Packed("TiArgument", count, _ARG_SIZE, 0)
        if self._args is not None:
            _prefill(packed, self._args)
        packed.launch = _launch_struct(self._runtime, 0, self._handle, packed)
        return packed

    def _bind(self, args: tuple, kwargs: dict) -> tuple:
        if kwargs:
            if None in self._names:
                raise ArgumentTypeError(f"kernel {self._name!r}: this module records no argument names; pass them "
                                        "by position")
            values = list(args) + [_MISSING] * (len(self._names) - len(args))
            for key, value in kwargs.items():
                if key not in self._names:
                    raise ArgumentTypeError(f"kernel {self._name!r} has no argument {key!r} "
                                            f"(it takes {', '.join(self._names)})")
                i = self._names.index(key)
                if i < len(args):
                    raise ArgumentTypeError(f"kernel {self._name!r}: argument {key!r} given twice")
                values[i] = value
            missing = [n for n, v in zip(self._names, values) if v is _MISSING]
            if missing:
                raise ArgumentTypeError(f"kernel {self._name!r}: missing argument(s) {', '.join(missing)}")
            args = tuple(values)
        if len(args) != len(self._checkers):
            listing = ", ".join(a.describe() + (f" {a.name}" if a.name else "") for a in self._args)
            raise ArgumentTypeError(
                f"kernel {self._name!r} takes {len(self._checkers)} argument(s) ({listing}), got {len(args)}"
            )
        return args

    def _pack(self, args: tuple, kwargs: dict, packed: _Packed | None = None) -> tuple[_Packed, tuple]:
        """Check ``args`` and write them into ``packed`` (a new one when None); returns it and the values."""
        rt = self._runtime
        if self._checkers is None:
            if kwargs:
                raise ArgumentTypeError(f"kernel {self._name!r}: keyword arguments need the module's argument names")
            checkers = [_untyped_checker(f"kernel {self._name!r} argument {i}") for i in range(len(args))]
        else:
            if kwargs or len(args) != len(self._checkers):
                args = self._bind(args, kwargs)
            checkers = self._checkers
        if packed is None:
            packed = self._new_packed(len(args))
        buf, offsets, slots = packed.buf, packed.offsets, packed.slots
        for i, value in enumerate(args):
            checkers[i](value, rt, buf, offsets[i], slots[i])
        return packed, args

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Enqueue a launch. Arguments: NdArray, Texture/Image, int, float, numpy scalars,
        small vectors/matrices (numpy arrays or tuples); checked against the signature."""
        rt = self._runtime
        if rt._recorder is not None:
            rt._recorder.append(self.bind(*args, **kwargs))
            return
        plan = self._plan
        if plan is None or kwargs or len(args) != len(plan):
            packed = self._pack(args, kwargs, self._packed if plan is not None else None)[0]
        else:
            # hot path: the metadata-derived checkers validate and pack each argument
            packed = self._packed
            buf = packed.buf
            for (check, off, slot), value in zip(plan, args):
                check(value, rt, buf, off, slot)
        # the objects guarantee what the flat layer would check (live handles, extents); C checks
        # that nothing was closed since the last look and that this is the runtime's thread
        code = _launch(packed.launch)
        if code:
            _launch_failed(code, packed.launch, self._module._check, f"launch of kernel {self._name!r}")

    launch = __call__

    def bind(self, *args: Any, **kwargs: Any) -> BoundLaunch:
        """Check and pack arguments once; the returned :class:`BoundLaunch` launches with them.

        ``bound()`` launches; ``bound.set(index_or_name, value)`` changes one argument (checked).
        """
        self._module._check()
        packed, values = self._pack(args, kwargs)
        return BoundLaunch(self, packed, list(values))


_MISSING = object()
_launch = lib.taichi_aot_launch
_NAMED_SIZE = ffi.sizeof("TiNamedArgument")
_NAMED_ARG = ffi.offsetof("TiNamedArgument", "argument")


class BoundLaunch:
    """A kernel or graph with its arguments checked and packed: call it to launch.

    Holds its arguments (they stay alive). A launch re-checks that the kernel, the runtime and
    each bound object are open whenever anything was closed since the last check, so a closed
    object raises ClosedError; otherwise a launch is one comparison and one C call.
    """

    __slots__ = ("_entry", "_packed", "_values", "_owneds", "_runtime", "_c", "launch", "__weakref__")

    def __init__(self, entry: Kernel | ComputeGraph, packed: _Packed, values: list):
        self._entry = entry
        self._packed = packed
        self._runtime = entry._runtime
        self._values = values
        self._c = packed.launch
        self._refresh()
        #: The launch as a plain function: ``run = bound.launch`` then ``run()`` skips the cost of
        #: calling an object (the fastest way to launch from Python).
        self.launch = _launcher(self._c, self._validate, f"launch of {entry!r}")

    def _refresh(self) -> None:
        owneds = [self._entry._module._owned, self._runtime._owned]
        for v in self._values:
            if isinstance(v, NdArray):
                owneds.append(v._memory._owned)
            elif isinstance(v, (Image, Texture)):
                owneds.append((v.image if isinstance(v, Texture) else v)._owned)
        self._owneds = tuple(owneds)
        self._c.seen = -1

    @property
    def entry(self) -> Kernel | ComputeGraph:
        """The kernel or graph this launch belongs to."""
        return self._entry

    def _validate(self) -> None:
        for o in self._owneds:
            if o._closed:
                raise ClosedError(f"{self._entry!r}: a bound argument, the module or the runtime is closed")
        self._runtime._check()

    def __call__(self) -> None:
        """Launch with the bound arguments."""
        code = _launch(self._c)
        if code:
            _launch_failed(code, self._c, self._validate, f"launch of {self._entry!r}")

    def set(self, key: int | str, value: Any) -> None:
        """Replace one argument (by index, or by name where the module records names), checked."""
        entry = self._entry
        if entry._checkers is None:
            raise NotSupportedError(f"{entry!r}: set() needs the module's argument signature")
        if isinstance(entry, Kernel):
            names = entry._names
            index = names.index(key) if isinstance(key, str) and key in names else key
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(names):
                raise ArgumentTypeError(f"{entry!r} has no argument {key!r}")
            checker = entry._checkers[index]
        else:
            if key not in entry._order:
                raise ArgumentTypeError(f"{entry!r} has no argument {key!r}")
            index = entry._order.index(key)
            checker = entry._checkers[key]
        p = self._packed
        checker(value, self._runtime, p.buf, p.offsets[index], p.slots[index])
        self._values[index] = value
        self._refresh()

    def __repr__(self) -> str:
        return f"<BoundLaunch of {self._entry!r}>"


class LaunchSequence:
    """Launches recorded once and replayed by C code in the extension, with no Python in between.

    Build with ``rt.record()`` (``with rt.record() as seq: kernel(x, 1.0); graph(a=x)``) or
    :meth:`append` of :class:`BoundLaunch` objects; then ``seq.replay(times)``.
    """

    def __init__(self, runtime: Runtime):
        self._runtime = runtime
        self._launches: list[BoundLaunch] = []
        self._steps = None

    def append(self, launch: BoundLaunch) -> None:
        """Add a bound launch (of this runtime) at the end."""
        if not isinstance(launch, BoundLaunch):
            raise ArgumentTypeError(f"a LaunchSequence holds BoundLaunch objects, got {type(launch).__name__}")
        if launch._runtime is not self._runtime:
            raise InvalidArgumentError("the launch belongs to another runtime")
        self._launches.append(launch)
        self._steps = None

    def __len__(self) -> int:
        return len(self._launches)

    def __iter__(self):
        return iter(self._launches)

    def replay(self, times: int = 1) -> None:
        """Launch the whole sequence ``times`` times, in order, from C."""
        if isinstance(times, bool) or not isinstance(times, int) or times < 0:
            raise ArgumentTypeError(f"replay times must be an int >= 0, got {times!r}")
        for launch in self._launches:
            launch._validate()
        self._runtime._check()
        if not self._launches or not times:
            return
        if self._steps is None:
            steps = ffi.new("TaichiAotLaunch[]", len(self._launches))
            for i, launch in enumerate(self._launches):
                steps[i] = launch._c[0]
            self._steps = steps
        code = lib.taichi_aot_replay(self._steps, len(self._launches), times, _done)
        if code:
            done = _done[0]
            if done < len(self._launches):
                where = f"replay step {done} ({self._launches[done]._entry!r})"
            else:
                where = f"a replay of {done} launches (found after the first pass)"
            _raise_launch_error(code, where)

    def __repr__(self) -> str:
        return f"<LaunchSequence of {len(self._launches)} launches>"


_done = ffi.new("uint64_t *")


class ComputeGraph(_ModuleEntry):
    """A compute graph of a module. Call with named arguments: ``graph(x=a, y=b, s=0.5)``.

    Arguments are checked against the graph's recorded signature before C is called:
    every name present and known, and each value's kind, dtype, ndim and element shape.
    """

    def __init__(self, module: AotModule, name: str, handle: Any):
        super().__init__(module, name, handle)
        info = module._meta.graphs.get(name)
        self._args: list[metadata.ArgInfo] | None = info.args if info is not None else None
        self._checkers: dict[str, Any] | None = None
        self._order: list[str] = []
        if self._args is not None:
            self._checkers = {
                a.name: _make_checker(a, f"graph {name!r} argument {a.name!r}") for a in self._args
            }
            self._order = [a.name for a in self._args]
            self._cnames = [ffi.new("char[]", n.encode()) for n in self._order]
            self._packed = self._new_packed(self._cnames)

    def _new_packed(self, cnames: list) -> _Packed:
        packed = _Packed("TiNamedArgument", len(cnames), _NAMED_SIZE, _NAMED_ARG)
        for i, cname in enumerate(cnames):
            packed.array[i].name = cname
        packed.keep = list(cnames)
        if self._args is not None and len(cnames) == len(self._args):
            _prefill(packed, self._args)
        packed.launch = _launch_struct(self._runtime, 1, self._handle, packed)
        return packed

    def _pack(self, args: Mapping[str, Any], packed: _Packed | None) -> _Packed:
        if not isinstance(args, Mapping):
            raise ArgumentTypeError(f"graph {self._name!r}: arguments must be a mapping of name to value")
        rt = self._runtime
        checkers = self._checkers
        if checkers is None:  # no recorded signature: pack by the values' own types
            names = list(args)
            for name in names:
                if not isinstance(name, str) or not name or "\0" in name:
                    raise ArgumentTypeError(f"graph {self._name!r}: argument names must be non-empty str, "
                                            f"got {name!r}")
            packed = self._new_packed([ffi.new("char[]", n.encode()) for n in names])
            for i, name in enumerate(names):
                _set_argument(packed.slots[i], args[name], rt, f"graph {self._name!r} argument {name!r}")
            return packed
        if len(args) != len(checkers) or any(n not in checkers for n in args):
            unknown = [n for n in args if n not in checkers]
            if unknown:
                raise ArgumentTypeError(f"graph {self._name!r} has no argument {unknown[0]!r} "
                                        f"(it takes {', '.join(checkers)})")
            missing = [n for n in checkers if n not in args]
            raise ArgumentNotFoundError(f"graph {self._name!r}: missing argument(s) {', '.join(missing)}", -7)
        packed = packed or self._new_packed(self._cnames)
        buf, offsets, slots = packed.buf, packed.offsets, packed.slots
        for i, name in enumerate(self._order):
            checkers[name](args[name], rt, buf, offsets[i], slots[i])
        return packed

    def launch(self, args: Mapping[str, Any]) -> None:
        """Enqueue the graph with ``{name: value}`` arguments."""
        rt = self._runtime  # closed objects and the thread are checked in C at launch (_launch_failed)
        if rt._recorder is not None:
            rt._recorder.append(self.bind(**args) if isinstance(args, Mapping) else self.bind(args))
            return
        packed = self._pack(args, self._packed if self._checkers is not None else None)
        code = _launch(packed.launch)
        if code:
            _launch_failed(code, packed.launch, self._module._check, f"launch of graph {self._name!r}")

    def __call__(self, **args: Any) -> None:
        """Enqueue the graph: ``graph(x=nd, y=nd, a=0.5)``."""
        self.launch(args)

    def bind(self, *mapping: Mapping[str, Any], **args: Any) -> BoundLaunch:
        """Check and pack named arguments once; returns a :class:`BoundLaunch`."""
        self._module._check()
        if mapping:
            if len(mapping) != 1 or args:
                raise ArgumentTypeError(f"graph {self._name!r}: bind(mapping) or bind(**named), not both")
            args = mapping[0]
        packed = self._pack(args, None)
        order = self._order if self._checkers is not None else list(args)
        return BoundLaunch(self, packed, [args[n] for n in order])


__all__ = ["AotModule", "BoundLaunch", "ComputeGraph", "Kernel", "LaunchSequence", "NotSupportedError",
           "extract_archive"]
