"""Kernels and compute graphs as framework ops (:mod:`taichi_aot.torch`, :mod:`taichi_aot.jax`): which arguments
are outputs, the shape and dtype of each, and the checks both frameworks make at trace time, before any launch.

An op's *outputs* are arguments the framework allocates each call and the op returns; its *inputs* are the other
arguments, taken in signature order (or by keyword). ``outputs`` maps each output (a name or a position) to the
input it is shaped like (a name or a position), to ``(shape, dtype)`` (or any object with ``.shape`` and
``.dtype``: ``jax.ShapeDtypeStruct``, a meta tensor), or to itself: an argument the kernel reads and writes, taken
as an input and returned as an output that starts as the input's values. Every other output starts zero-filled.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from . import metadata
from ._arguments import by_name, pack_one
from .enums import NUMPY_DTYPES, Access, Arch, DataType
from .errors import ArgumentTypeError, ClosedError, InvalidArgumentError, NotSupportedError
from .module import ModuleSource
from .runtime import Runtime

if TYPE_CHECKING:  # pragma: no cover
    from .launch import ComputeGraph, Kernel
    from .metadata import ArgInfo

#: What an output is shaped like: an input's position, or (array shape with the element's dims, numpy dtype).
Shape = Union[int, tuple[tuple[int, ...], np.dtype]]


def _dtype_of(dtype: Any) -> np.dtype | None:
    """numpy's dtype for a numpy, JAX or torch dtype (``torch.float32``), or None."""
    try:
        return np.dtype(dtype)
    except TypeError:
        text = str(dtype)  # torch.float32 -> float32
        try:
            return np.dtype(text.rsplit(".", 1)[-1])
        except TypeError:
            return None


def _given_shape(like: Any, what: str) -> tuple[tuple[int, ...], np.dtype]:
    """An output's shape and dtype given as ``(shape, dtype)`` or an object with ``.shape`` and ``.dtype``."""
    shape = getattr(like, "shape", None)
    dtype = getattr(like, "dtype", None)
    if shape is None and isinstance(like, (tuple, list)) and len(like) == 2:
        shape, dtype = like
    dt = _dtype_of(dtype) if dtype is not None else None
    if shape is None or dt is None:
        raise ArgumentTypeError(f"{what}: an output is shaped like an input (its name or position) or given as "
                                f"(shape, dtype) or a ShapeDtypeStruct, got {like!r}")
    return tuple(int(d) for d in shape), dt


class OpSpec:
    """A launchable's arguments split into inputs and outputs, with the checks an op makes.

    Attributes:
        entry: the kernel or graph; args: its signature; graph: whether it is a graph.
        outputs: argument positions of the outputs, in the order the op returns them.
        shapes: output position -> what it is shaped like (:data:`Shape`).
        inout: outputs the op also takes as inputs (read and written).
        inputs: argument positions the op takes, in signature order; names: their parameter names.
        returned: what a kernel that returns values returns (``ReturningKernel.returned``: dtype and shape of
        each), after the outputs; empty for another.
    """

    def __init__(self, entry: Kernel | ComputeGraph, outputs: Mapping[Any, Any], framework: str):
        from .launch import ComputeGraph, Kernel, ReturningKernel

        if not isinstance(entry, (Kernel, ComputeGraph)):
            raise ArgumentTypeError(f"{framework}.op takes a Kernel or a ComputeGraph, got {type(entry).__name__}")
        entry.module.ensure_open()
        self.entry = entry
        self.graph = isinstance(entry, ComputeGraph)
        self.args: list[ArgInfo] = entry.signature
        self.kind = "graph" if self.graph else "kernel"
        self.returned = entry.returned if isinstance(entry, ReturningKernel) else []
        if not isinstance(outputs, Mapping) or (not outputs and not self.returned):
            raise ArgumentTypeError(f"{framework}.op({entry.name!r}): outputs must be a non-empty mapping "
                                    "{output argument: the input it is shaped like, or (shape, dtype)} (empty only "
                                    "for a kernel that returns values)")
        self.outputs: list[int] = []
        self.shapes: dict[int, Shape] = {}
        self.inout: set[int] = set()
        for key, like in outputs.items():
            i = self.index(key)
            self._output(i, like)
        self.inputs = [i for i in range(len(self.args)) if i not in self.shapes or i in self.inout]
        self.names = [self.param(i) for i in self.inputs]
        for i in self.inputs:
            self._input_ok(i)

    # -- naming ---------------------------------------------------------------------------------------------

    def index(self, key: Any) -> int:
        """The position of argument ``key`` (a name, or a position); ArgumentTypeError naming it where none."""
        for i, a in enumerate(self.args):
            if (isinstance(key, str) and a.name == key) or (
                    not self.graph and isinstance(key, int) and not isinstance(key, bool) and key == i):
                return i
        taken = ", ".join(self.param(i) for i in range(len(self.args)))
        raise ArgumentTypeError(f"{self.kind} {self.entry.name!r} has no argument {key!r} (it takes {taken})")

    def param(self, i: int) -> str:
        """Argument ``i``'s parameter name: its recorded name, else ``arg<i>``."""
        name = self.args[i].name
        return name if name and name.isidentifier() else f"arg{i}"

    def gradients(self) -> list[int] | None:
        """The arguments with gradients, where the op's backward can be made from the kernel's reverse-mode kernel
        (``Kernel.grad``: the module holds one and its launch backend runs it here, asked of the backends once, by
        ``Kernel.prepare_grad``, which makes it now: on x64 compiled, on the caller's thread), else None; a reverse
        kernel that cannot be made for another reason (its IR, LLVM) raises here, when the op is made. An in-out
        argument's gradient is seeded with its output's and comes back as its input's, as Taichi's reverse kernels
        define it (run on the input's values)."""
        reverse = self.entry.module.kernel_info(f"{self.entry.name}_grad")
        if self.graph or reverse is None or not reverse.reverse:
            return None
        try:
            self.entry.prepare_grad()  # type: ignore[union-attr]  # a kernel: not self.graph
        except NotSupportedError:
            return None
        return [a.index for a in reverse.args if a.needs_grad]

    def reverse_seeds(self, values: list[Any], grads: Sequence[Any], needing: list[int],
                      zeros: Any, seed: Any) -> dict[int, Any]:
        """The gradient arrays ``Kernel.grad`` takes for a backward: an output's is its incoming gradient
        (``seed(value, grad)``, a copy the kernel may clear; ``grads`` by output order, None for none), an input's
        starts at zero (``zeros(value)``), where the reverse kernel accumulates its gradient."""
        out = {}
        for i in needing:
            g = grads[self.outputs.index(i)] if i in self.outputs else None
            out[i] = zeros(values[i]) if g is None else seed(values[i], g)
        return out

    def what(self, i: int) -> str:
        """Argument ``i`` in messages: "kernel 'add' argument 1 ('y')"."""
        name = self.args[i].name
        return f"{self.kind} {self.entry.name!r} argument {i}" + (f" ({name!r})" if name else "")

    # -- outputs --------------------------------------------------------------------------------------------

    def _output(self, i: int, like: Any) -> None:
        spec = self.args[i]
        what = self.what(i)
        if spec.kind != "ndarray" or spec.dtype is None or spec.dtype not in NUMPY_DTYPES:
            raise NotSupportedError(f"{what}: an output must be an ndarray argument (this is {spec.describe()})")
        if i in self.shapes:
            raise ArgumentTypeError(f"{what}: named twice in outputs")
        self.outputs.append(i)
        if isinstance(like, (str, int)) and not isinstance(like, bool):
            j = self.index(like)
            if j == i:
                self.inout.add(i)
                self.shapes[i] = i
                return
            if self.args[j].kind != "ndarray":
                raise ArgumentTypeError(f"{what}: shaped like {self.what(j)}, which is not an ndarray")
            self.shapes[i] = j
            return
        shape, dt = _given_shape(like, what)
        self.check(i, shape, dt, f"{what} (its output shape)")
        self.shapes[i] = (shape, dt)

    def _input_ok(self, i: int) -> None:
        spec = self.args[i]
        if spec.kind == "ndarray" and i not in self.inout and spec.access is not None and spec.access & Access.WRITE:
            raise InvalidArgumentError(
                f"{self.what(i)}: the kernel writes it ({spec.access_word()}), and an op's inputs are never written; "
                f"make it an output (outputs={{{self.param(i)!r}: ...}}), or map it to itself to take it in and out")
        if spec.kind not in ("ndarray", "scalar"):
            raise NotSupportedError(f"{self.what(i)}: {spec.describe()} arguments cannot be op inputs "
                                    "(ndarrays and scalars can)")

    def pack(self, i: int, value: Any) -> bytes:
        """Scalar argument ``i`` = ``value`` as a packed TiArgument, by the kernel's own packer (its checks of type and
        range, as a launch makes them)."""
        entry = self.entry
        return pack_one(entry._packers[i], self.args[i], value, entry.module.runtime)

    def dtype(self, i: int) -> np.dtype:
        """numpy's dtype of argument ``i`` (an ndarray's element type, or a scalar's)."""
        dt = self.args[i].dtype
        if dt is None or dt not in NUMPY_DTYPES:
            raise NotSupportedError(f"{self.what(i)}: its data type is not recorded or not storable")
        return NUMPY_DTYPES[dt]

    def check(self, i: int, shape: Sequence[int], dtype: Any, what: str | None = None) -> None:
        """Raise ArgumentTypeError (naming the argument) unless an array of ``shape`` and ``dtype`` fits ndarray
        argument ``i``: its dtype, its dims and element shape."""
        spec = self.args[i]
        what = what or self.what(i)
        dt = _dtype_of(dtype)
        shape = tuple(shape)
        elem = tuple(spec.elem_shape)
        if (dt != self.dtype(i) or len(shape) != spec.ndim + len(elem)
                or (elem and shape[spec.ndim:] != elem)):
            raise ArgumentTypeError(f"{what}: expected {spec.describe()}, got {dtype} array of shape {shape}")

    def check_scalar(self, i: int, dtype: Any, shape: Sequence[int]) -> None:
        """Raise ArgumentTypeError unless an array of ``dtype`` and ``shape`` can be scalar argument ``i``."""
        if tuple(shape) != () or _dtype_of(dtype) != self.dtype(i):
            raise ArgumentTypeError(f"{self.what(i)}: expected a Python number or a 0-d {self.dtype(i)} array "
                                    f"({self.args[i].describe()}), got {dtype} array of shape {tuple(shape)}")

    def output_shapes(self, shapes: Mapping[int, Sequence[int]]) -> list[tuple[tuple[int, ...], np.dtype]]:
        """Each output's (shape, dtype), in output order, from the input arrays' ``shapes`` (position -> shape)."""
        out = []
        for i in self.outputs:
            like = self.shapes[i]
            if isinstance(like, int):
                j = like
                dims = tuple(shapes[j])[: self.args[j].ndim]
                out.append((dims + tuple(self.args[i].elem_shape), self.dtype(i)))
            else:
                out.append(like)
        return out

    # -- calls ----------------------------------------------------------------------------------------------

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """The op's arguments in :attr:`inputs` order, from positional ``args`` and keywords (parameter names)."""
        names = self.names
        if len(args) > len(names):
            raise ArgumentTypeError(f"{self}: takes {len(names)} argument(s) ({', '.join(names)}), got {len(args)}")
        return by_name(names, args, kwargs, str(self), "input")

    def ensure_open(self) -> None:
        """ClosedError where the launchable's module or runtime was closed."""
        if self.entry.module.closed or self.entry.module.runtime.closed:
            raise ClosedError(f"{self}: its module or runtime is closed")

    def __str__(self) -> str:
        return f"op of {self.kind} {self.entry.name!r}"


#: Scalar data types an op takes as a framework number (``float`` / ``int``).
FLOATS = frozenset({DataType.F16, DataType.F32, DataType.F64})


#: A device name of one GPU, where a module's parts are asked for by GPU: ``"cuda:1"``.
_GPU_NAME = re.compile(r"cuda:([0-9]+)", re.ASCII)


class ModuleParts:
    """A kernel or graph of a module with several parts (``build --arch x64 cuda``), for a framework's op over
    devices (``taichi_aot.torch.op_of``, ``taichi_aot.jax.op_of``): each part, named by the framework's device
    (``devices``: ``{Arch: name}``), on a runtime of its own made when the part is first asked for, or on one given in
    ``runtimes`` (by device name); :meth:`close` closes those it made.

    With ``by_gpu`` a CUDA part is asked for by GPU as well: ``"cuda"`` names the GPU of the runtime given for it
    (device 0 where none is), ``"cuda:k"`` any other GPU ``k`` (a runtime made on it, or one given by that name).

    Attributes:
        devices: the device names the module has parts for, in its order of preference.
    """

    def __init__(self, module: ModuleSource, name: str, devices: Mapping[Arch, str],
                 runtimes: Mapping[str, Any] | None, what: str, by_gpu: bool = False):
        loadable: Any = metadata.loadable(module)
        if isinstance(loadable, (bytearray, memoryview)):
            loadable = bytes(loadable)
        archs = metadata.loads_on(loadable)
        self._source, self.name, self._what = loadable, name, what
        self.where = metadata.describe(module)
        self._archs = {devices[a]: a for a in archs if a in devices}
        self.held = [a.name.lower() for a in archs]  # the module's parts, every arch
        self.devices = tuple(self._archs)
        if not self.devices:
            raise NotSupportedError(f"{what}: module {self.where} has parts for {', '.join(self.held) or 'no arch'}, "
                                    f"none for {' or '.join(a.name.lower() for a in devices)}")
        self._by_gpu = by_gpu
        self._given = self._checked(runtimes or {})
        home = self._given.get("cuda")
        self._home = home.device_index if home is not None else 0  # the GPU of the part named "cuda"
        self._owned: dict[str, Runtime] = {}  # the runtimes made here, by device
        self.closed = False

    def _checked(self, runtimes: Mapping[str, Any]) -> dict[str, Runtime]:
        """The runtimes given, by device name, checked: each of a part's arch, a ``"cuda:k"`` one of GPU k."""
        given: dict[str, Runtime] = {}
        for device, rt in dict(runtimes).items():
            index = self._index(device)
            base = "cuda" if index is not None else device
            if base not in self._archs:
                raise ArgumentTypeError(f"{self._what}: runtimes for {device}, and the module has parts for the "
                                        f"devices {', '.join(self.devices)}")
            if not isinstance(rt, Runtime) or rt.arch != self._archs[base]:
                raise ArgumentTypeError(f"{self._what}: runtimes[{device!r}] must be an {self._archs[base].name} "
                                        f"Runtime, got {rt!r}")
            if index is not None and rt.device_index != index:
                raise ArgumentTypeError(f"{self._what}: runtimes[{device!r}] drives GPU {rt.device_index}")
            key = device if index is None else f"cuda:{index}"
            if key in given:
                raise ArgumentTypeError(f"{self._what}: two runtimes for {key}")
            given[key] = rt
        if "cuda" not in given and "cuda:0" in given:  # device 0's runtime is the plain "cuda" one
            given["cuda"] = given.pop("cuda:0")
        home = given.get("cuda")
        if home is not None and f"cuda:{home.device_index}" in given:
            raise ArgumentTypeError(f"{self._what}: runtimes for 'cuda' and 'cuda:{home.device_index}', both GPU "
                                    f"{home.device_index}")
        return given

    def _index(self, device: Any) -> int | None:
        """k of a device name ``"cuda:k"`` where parts are asked for by GPU, else None."""
        found = _GPU_NAME.fullmatch(device) if self._by_gpu and isinstance(device, str) else None
        return int(found[1]) if found else None

    def _base(self, device: str) -> str:
        """``device`` without its GPU (``"cuda:1"``: ``"cuda"``), where parts are asked for by GPU."""
        return "cuda" if self._index(device) is not None else device

    def name_of(self, device: str, gpu: int) -> str:
        """The device name of the part for tensors on ``device`` (a device type) and GPU ``gpu``: ``"cuda"`` for the
        GPU of the ``"cuda"`` part, ``"cuda:k"`` for another."""
        if device != "cuda" or not self._by_gpu or gpu == self._home:
            return device
        return f"cuda:{gpu}"

    def canonical(self, device: str) -> str:
        """``device`` as parts are named: ``"cuda:k"`` is ``"cuda"`` where k is the ``"cuda"`` part's GPU."""
        index = self._index(device)
        return self.name_of("cuda", index) if index is not None else device

    def arch(self, device: str) -> Arch:
        """The arch of the part for ``device``; ArgumentTypeError naming the parts the module holds where none."""
        base = self._base(device)
        arch = self._archs.get(base)
        if arch is None:
            rebuild = (f" (rebuild it with python -m taichi_aot build FILE.py --arch {' '.join(self.held)} cuda)"
                       if base in ("cuda", "gpu") else "")
            raise ArgumentTypeError(f"{self._what}: arrays on {device}, and module {self.where} holds parts for "
                                    f"{', '.join(self.held)}: the op runs on {' and '.join(self.devices)}{rebuild}")
        return arch

    def launchable(self, device: str) -> Kernel | ComputeGraph:
        """The kernel or graph of the part for ``device``, its runtime made and the module loaded now (see
        :meth:`arch` for a device without a part)."""
        arch = self.arch(device)
        if self.closed:
            raise ClosedError(f"{self._what}: the op of {self.name!r} is closed")
        rt: Runtime | None = self._given.get(device) or self._owned.get(device)
        if rt is None:
            index = self._index(device)
            rt = self._owned[device] = Runtime(arch) if index is None else Runtime(arch, device_index=index)
        try:
            module = rt.load_module(self._source)
            return module.graphs[self.name] if self.name in module.graph_names() else module.kernels[self.name]
        except BaseException:
            made = self._owned.pop(device, None)  # a part that cannot load keeps no runtime of the op's
            if made is not None:
                made.close()
            raise

    def close(self) -> None:
        """Close the runtimes made here (not those given); no part is loaded after."""
        self.closed = True
        for rt in self._owned.values():
            rt.close()


class PartsOp:
    """What a framework's op over a module's parts shares (``taichi_aot.torch.ModuleOp``, ``taichi_aot.jax.ModuleOp``):
    the parts (``modules``), the ops made of them so far by device, and closing.

    Attributes:
        devices: the devices the module has parts for, in its order of preference.
    """

    _framework = "op"

    def __init__(self, modules: ModuleParts):
        self._modules = modules
        self.devices = modules.devices
        self._parts: dict[str, Any] = {}
        self._loading = threading.Lock()  # two threads' first calls on one device: one runtime, one part

    @property
    def parts(self) -> dict[str, Any]:
        """The parts' ops made so far, by device."""
        return dict(self._parts)

    def close(self) -> None:
        """Close the runtimes the op made (not those it was given); its parts' calls then raise ClosedError."""
        self._modules.close()

    def __repr__(self) -> str:
        return (f"<{self._framework}.ModuleOp {self._modules.name!r} of {self._modules.where} on "
                f"{', '.join(self.devices)}>")
