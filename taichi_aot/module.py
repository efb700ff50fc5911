"""AOT modules, kernels and compute graphs, and how Python values become kernel arguments."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from . import capi, metadata
from ._native import ffi, lib
from .enums import ArgumentType, DataType, ImageDimension, ImageUsage
from .errors import (
    ArgumentNotFoundError,
    ArgumentTypeError,
    CorruptedDataError,
    IncompatibleModuleError,
    InvalidArgumentError,
    MissingFileError,
    NameNotFoundError,
    NotSupportedError,
    check,
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


def _content_names(path: str | None, data: bytes | None) -> tuple[list[str], list[str]] | None:
    """Kernel and graph names from a module's ``__content__`` listing, or None when unknown."""
    text = None
    try:
        if data is not None or (path and os.path.isfile(path)):
            import io

            with zipfile.ZipFile(io.BytesIO(data) if data is not None else path) as zf:
                text = zf.read("__content__").decode("utf-8", "replace")
        elif path and os.path.isfile(os.path.join(path, "__content__")):
            with open(os.path.join(path, "__content__"), encoding="utf-8", errors="replace") as f:
                text = f.read()
    except (KeyError, OSError, zipfile.BadZipFile, ValueError):
        return None
    if text is None:
        return None
    kernels, graphs = [], []
    for line in text.splitlines():
        kind, _, name = line.strip().partition(":")
        if kind == "kernel" and name:
            kernels.append(name)
        elif kind == "cgraph" and name:
            graphs.append(name)
    return kernels, graphs


def _check_compatible(meta: metadata.ModuleInfo, runtime: Runtime, where: str) -> None:
    """Refuse, before C, a module built for another kind of backend or by an incompatible Taichi."""
    llvm_runtime = runtime._arch in capi.LLVM_ARCHS
    if (meta.format == "llvm") != llvm_runtime:
        built = "an LLVM backend (x64/CUDA)" if meta.format == "llvm" else "a gfx backend (Vulkan/Metal/OpenGL)"
        raise IncompatibleModuleError(
            f"module {where} was compiled for {built}; this runtime is {runtime._arch.name}", -10
        )
    if meta.arch is not None and meta.arch != runtime._arch and not (
        meta.arch in capi.CPU_ARCHS and runtime._arch in capi.CPU_ARCHS and meta.arch == capi._host_cpu_arch()
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

        names = _content_names(path, data)
        # read the metadata before C sees the module: corrupt input raises here
        meta = metadata.read_module(data if data is not None else path)
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
        a = a.astype(np.int32)  # Python ints default to i32, as scalars do
    if a.dtype == np.float64 and isinstance(value, (list, tuple)):
        a = a.astype(np.float32)
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


def _make_checker(spec: metadata.ArgInfo, what: str):
    """A function ``(value, dst, runtime)`` that validates ``value`` against ``spec`` and packs it."""
    expected = spec.describe()

    def wrong(value, cls=ArgumentTypeError):
        return cls(f"{what}: expected {expected}, got {_describe_value(value)}")

    if spec.kind == "ndarray":
        np_dtype = NUMPY_DTYPES.get(spec.dtype) if spec.dtype is not None else None

        def check(value, dst, runtime):
            if not isinstance(value, NdArray):
                raise wrong(value)
            if (np_dtype is not None and value._dtype != np_dtype) or value.ndim != spec.ndim or (
                value._elem_shape != spec.elem_shape
            ):
                raise wrong(value, InvalidArgumentError)
            _set_argument(dst, value, runtime, what)

        return check
    if spec.kind in ("texture", "rw_texture"):
        want_dim = _TEXTURE_DIMENSIONS.get(spec.ndim)
        want_usage = ImageUsage.STORAGE if spec.kind == "rw_texture" else ImageUsage.SAMPLED

        def check(value, dst, runtime):
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

        def check(value, dst, runtime):
            if isinstance(value, (NdArray, Texture, Image, str, bytes)) or np.ndim(value) not in (1, 2):
                raise wrong(value)
            if spec.length is not None and np.size(value) != spec.length:
                raise wrong(value, InvalidArgumentError)
            if spec.dtype is not None:
                a = np.asarray(value)
                if a.dtype.kind not in "iuf" or (a.dtype.kind == "f" and NUMPY_DTYPES[spec.dtype].kind in "iu"):
                    raise wrong(value)
                value = a.astype(NUMPY_DTYPES[spec.dtype])
            _set_tensor(dst, value, what)

        return check
    if spec.kind != "scalar":
        def check(value, dst, runtime):
            raise NotSupportedError(f"{what}: {spec.kind} arguments cannot be passed through the C-API")

        return check
    dt = spec.dtype
    if dt in (DataType.I32, DataType.I16, DataType.U16):
        info = np.iinfo({DataType.I32: np.int32, DataType.I16: np.int16, DataType.U16: np.uint16}[dt])

        def check(value, dst, runtime):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise wrong(value)
            v = int(value)
            if not info.min <= v <= info.max:
                raise InvalidArgumentError(f"{what}: {v} is out of range for {dt.name.lower()}")
            if dt == DataType.I32:
                dst.type = ArgumentType.I32
                dst.value.i32 = v
            else:
                dst.type = ArgumentType.SCALAR
                dst.value.scalar.type = dt
                dst.value.scalar.value.x16 = v & 0xFFFF

        return check
    if dt in (DataType.F32, DataType.F16):

        def check(value, dst, runtime):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise wrong(value)
            v = float(value)
            if dt == DataType.F32:
                dst.type = ArgumentType.F32
                dst.value.f32 = v
            else:  # the C-API carries an f16 scalar as an f32 in x32
                dst.type = ArgumentType.SCALAR
                dst.value.scalar.type = DataType.F16
                dst.value.scalar.value.x32 = int(np.array(v, np.float32).view(np.uint32))

        return check

    def check(value, dst, runtime):
        name = dt.name.lower() if dt is not None else "this"
        raise NotSupportedError(
            f"{what}: the C-API of Taichi 1.7.4 cannot pass a {name} scalar (only i32, f32, i16, u16, f16)"
        )

    return check


class _ModuleEntry:
    """A kernel or graph of a module: its name, module and handle."""

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

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name!r} of {self._module!r}>"


class Kernel(_ModuleEntry):
    """A kernel of a module. Call it to launch: ``kernel(x, y, 0.5)`` (alias ``kernel.launch``).

    Every argument is checked against the signature in the module's metadata before
    C is called (count, kind, dtype, ndim, element shape, scalar range); keyword
    arguments work where the module records argument names (gfx backends).
    """

    def __init__(self, module: AotModule, name: str, handle: Any):
        super().__init__(module, name, handle)
        info = module._meta.kernels.get(name)
        self._args: list[metadata.ArgInfo] | None = info.args if info is not None else None
        self._checkers = None
        if self._args is not None:
            self._checkers = [
                _make_checker(a, f"kernel {name!r} argument {a.index}" + (f" ({a.name!r})" if a.name else ""))
                for a in self._args
            ]
            self._names = [a.name for a in self._args]

    @property
    def signature(self) -> list[metadata.ArgInfo] | None:
        """The arguments the module records for this kernel."""
        return list(self._args) if self._args is not None else None

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

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Enqueue a launch. Arguments: NdArray, Texture/Image, int, float, numpy scalars,
        small vectors/matrices (numpy arrays or tuples); checked against the signature."""
        self._module._check()
        rt = self._runtime
        if self._checkers is not None:
            args = self._bind(args, kwargs)
        elif kwargs:
            raise ArgumentTypeError(f"kernel {self._name!r}: keyword arguments need the module's argument names")
        array = ffi.new("TiArgument[]", len(args)) if args else ffi.NULL
        if self._checkers is not None:
            for i, (value, checker) in enumerate(zip(args, self._checkers)):
                checker(value, array + i, rt)
        else:
            for i, value in enumerate(args):
                _set_argument(array + i, value, rt, f"kernel {self._name!r} argument {i}")
        # hot path: the objects guarantee what the flat layer would check (live handles, extents)
        lib.ti_launch_kernel(rt._handle, self._handle, len(args), array)
        check(f"launch of kernel {self._name!r}")

    launch = __call__


_MISSING = object()


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
        self._cnames: dict[str, Any] = {}
        if self._args is not None:
            self._checkers = {
                a.name: _make_checker(a, f"graph {name!r} argument {a.name!r}") for a in self._args
            }
            self._cnames = {a.name: ffi.new("char[]", a.name.encode()) for a in self._args}

    @property
    def signature(self) -> list[metadata.ArgInfo] | None:
        """The named arguments the module records for this graph."""
        return list(self._args) if self._args is not None else None

    def launch(self, args: Mapping[str, Any]) -> None:
        """Enqueue the graph with ``{name: value}`` arguments."""
        self._module._check()
        if not isinstance(args, Mapping):
            raise ArgumentTypeError(f"graph {self._name!r}: arguments must be a mapping of name to value")
        rt = self._runtime
        checkers = self._checkers
        if checkers is not None:
            unknown = [n for n in args if n not in checkers]
            if unknown:
                raise ArgumentTypeError(f"graph {self._name!r} has no argument {unknown[0]!r} "
                                        f"(it takes {', '.join(checkers)})")
            missing = [n for n in checkers if n not in args]
            if missing:
                raise ArgumentNotFoundError(f"graph {self._name!r}: missing argument(s) {', '.join(missing)}", -7)
        array = ffi.new("TiNamedArgument[]", len(args)) if args else ffi.NULL
        keep = []
        for i, (name, value) in enumerate(args.items()):
            cname = self._cnames.get(name)
            if cname is None:
                if not isinstance(name, str) or not name or "\0" in name:
                    raise ArgumentTypeError(f"graph {self._name!r}: argument names must be non-empty str, "
                                            f"got {name!r}")
                cname = ffi.new("char[]", name.encode())
                keep.append(cname)
            array[i].name = cname
            dst = ffi.addressof(array[i], "argument")
            if checkers is not None:
                checkers[name](value, dst, rt)
            else:
                _set_argument(dst, value, rt, f"graph {self._name!r} argument {name!r}")
        capi.launch_compute_graph(rt._handle, self._handle, array if args else ())
        del keep

    def __call__(self, **args: Any) -> None:
        """Enqueue the graph: ``graph(x=nd, y=nd, a=0.5)``."""
        self.launch(args)


__all__ = ["AotModule", "ComputeGraph", "Kernel", "NotSupportedError", "extract_archive"]
