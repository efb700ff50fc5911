"""Kernels and compute graphs as JAX functions: ``taichi_aot.jax.op(kernel, outputs)``, an XLA FFI custom call.

The op works eagerly and under ``jax.jit``: XLA calls the extension's C handler (``_csrc/xla.c``) with its own
buffers, on an x64 runtime for the CPU and a CUDA runtime for NVIDIA GPUs. XLA allocates the outputs (zero-filled
by the handler before the launch, or aliased to the input for an argument the kernel reads and writes); inputs are
shared, never copied (each buffer address is imported into the runtime once and pooled). On x64 the handler waits
for the kernel; on CUDA a kernel of taichi_aot's own launcher runs on XLA's stream, one through libtaichi after
XLA's stream is synchronized, and is waited for. A CUDA op runs on the GPU XLA runs it on (``jax.pmap``,
``shard_map``, arrays on another GPU): on the kernel's runtime's GPU, or on its twin of another GPU, made the first
time XLA runs it there (the module loaded on a runtime of that GPU, once a GPU); where the kernel cannot run there
(libtaichi's launcher: device 0 only), XLA's error names both GPUs and why.

Scalars: a Python number (or numpy scalar) becomes an attribute of the call, packed once at trace time: nothing to
read at run time, but under ``jax.jit`` each new value is a new compilation (pass values that change per step as
arrays); a 0-d JAX array (a traced value in ``jit``) becomes an operand, read by the handler from XLA's buffer at
each call (an f16 widened to the f32 the C-API carries; x64 only: on CUDA that would be a device-to-host copy and a
synchronization, refused: pass a number).
"""

from __future__ import annotations

import atexit
import inspect
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from ._lifetime import without_collection
from ._native import ffi, lib
from ._ops import ModuleParts, OpSpec, PartsOp
from ._plans import Plan, cell
from .drivers import cuda as _cuda
from .enums import Arch
from .errors import ArgumentTypeError, ClosedError, NotSupportedError
from .launch import Kernel
from .module import ModuleSource

__all__ = ["ModuleOp", "Op", "empty_call", "op", "op_of"]

_TARGET, _EMPTY = "taichi_aot_call", "taichi_aot_empty"
#: The target of kernels XLA may capture into its command buffers (CUDA graphs): the own launcher's, whose launch
#: never waits (no autodiff stacks checked after it).
_GRAPHABLE = "taichi_aot_call_graphable"
_registered = False


def _local_gpus() -> list[int]:
    """The CUDA ordinals of the GPUs JAX has in this process (none where JAX has no GPU backend)."""
    try:
        gpus = jax.local_devices(backend="gpu")
    except Exception:  # RuntimeError: no GPU backend (its text and type vary by JAX version)
        return []
    out = set()
    for d in gpus:
        ordinal = getattr(d, "local_hardware_id", None)
        out.add(int(ordinal if ordinal is not None else d.id))
    return sorted(out)


_twins_lock = threading.RLock()  # a reverse op's twin is made inside its primal's
#: The twins' runtimes, one a GPU and thread (their modules shared by content, as a runtime shares them), kept for
#: the process, as the twins' plans are (compiled XLA calls may name them); closed at exit with every runtime.
_twin_runtimes: dict[tuple[int, int], Any] = {}


def _twin_runtime(device: int) -> Any:
    """taichi_aot's own CUDA runtime of GPU ``device`` for this thread's ops' twins (made once)."""
    key = (device, threading.get_ident())
    runtime = _twin_runtimes.get(key)
    if runtime is None or runtime.closed:
        from .runtime import Runtime

        runtime = _twin_runtimes[key] = Runtime(Arch.CUDA, device_index=device, cuda_runtime="own")
    return runtime


#: What traces a value (shard_map's and jit's tracers): a concrete array, never inside ``shard_map``, varies over no
#: axis, known without asking its type (the eager call's hot path).
_TRACER = getattr(jax.core, "Tracer", object)


def _varying(value: Any) -> frozenset[str]:
    """The manual mesh axes ``value`` varies over inside ``shard_map`` (its type's: ``manual_axis_type.varying``, or
    ``vma`` in JAX before 0.10); empty outside it."""
    typeof = getattr(jax, "typeof", None)
    if typeof is None or not isinstance(value, _TRACER):  # a JAX before types said what varies; a concrete array
        return frozenset()
    aval = typeof(value)
    axes = getattr(aval, "manual_axis_type", None)
    return frozenset(getattr(aval, "vma", ()) if axes is None else getattr(axes, "varying", ()))


def _vary_operands(operands: Sequence[Any]) -> tuple[tuple[Any, ...], frozenset[str]]:
    """Inside ``shard_map``: the call's array operands made varying over every manual mesh axis any of them varies
    over (an FFI call takes operands of one type), before the op's VJP sees them: an invariant operand's cotangent is
    then summed over the axes, as ``pcast``'s transpose does; and those axes. Outside ``shard_map``: as they are, and
    none."""
    kinds = [_varying(a) for a in operands]
    axes = frozenset().union(*kinds)
    if not axes:
        return tuple(operands), axes
    pcast = getattr(jax.lax, "pcast", None)
    return tuple(a if not (missing := tuple(sorted(axes - kind))) else
                 pcast(a, missing, to="varying") if pcast is not None else jax.lax.pvary(a, missing)
                 for a, kind in zip(operands, kinds)), axes


#: How this JAX's ShapeDtypeStruct takes the manual axes a value varies over, if it does.
_TYPED_BY = next((k for k in ("manual_axis_type", "vma")
                  if k in inspect.signature(jax.ShapeDtypeStruct.__init__).parameters), None)


def _typed_like(axes: frozenset[str], arrays: Sequence[Any]) -> dict[str, Any]:
    """The keywords that type an FFI call's results as varying over ``axes``, the manual mesh axes its operands vary
    over (:func:`_vary_operands` made them one type): a result typed invariant would be made varying again by what
    uses it, whose transpose sums each GPU's cotangent over the mesh, a gradient counted once a GPU. None outside
    ``shard_map``."""
    if not axes or not arrays or _TYPED_BY is None:
        return {}
    aval = jax.typeof(arrays[0])
    # the type names the mesh the axes are of: a result of the operands' mesh, replicated over its other axes
    typed: dict[str, Any] = {"sharding": jax.sharding.NamedSharding(aval.sharding.mesh, jax.sharding.PartitionSpec())}
    kind = getattr(aval, "manual_axis_type", None)
    typed[_TYPED_BY] = axes if kind is None else type(kind)(varying=axes)
    return typed


def _vary_like(cotangent: Any, primal: Any) -> Any:
    """A backward's ``cotangent`` typed as varying over every manual mesh axis its ``primal`` input varies over:
    ``shard_map`` requires a VJP's cotangents of its inputs' types, and the reverse op's outputs (an FFI call's) vary
    over none."""
    if cotangent is None:
        return None
    missing = tuple(sorted(_varying(primal) - _varying(cotangent)))
    if not missing:
        return cotangent
    pcast = getattr(jax.lax, "pcast", None)
    return pcast(cotangent, missing, to="varying") if pcast is not None else jax.lax.pvary(cotangent, missing)


def _register() -> None:
    global _registered
    if _registered:
        return
    empty = int(ffi.cast("uintptr_t", ffi.addressof(lib, "taichi_aot_xla_empty")))
    for platform, handler in (("cpu", "taichi_aot_xla_call_cpu"), ("CUDA", "taichi_aot_xla_call_cuda")):
        call = int(ffi.cast("uintptr_t", ffi.addressof(lib, handler)))  # each checks its runtime's backend
        jax.ffi.register_ffi_target(_TARGET, jax.ffi.pycapsule(call), platform=platform)
        jax.ffi.register_ffi_target(_EMPTY, jax.ffi.pycapsule(empty), platform=platform)
    graphable = int(ffi.cast("uintptr_t", ffi.addressof(lib, "taichi_aot_xla_call_graphable")))
    jax.ffi.register_ffi_target(_GRAPHABLE, jax.ffi.pycapsule(graphable), platform="CUDA")
    atexit.register(lib.taichi_aot_xla_stop_twins)  # run before the runtimes close: no twin made from then on
    _registered = True


class _Plan(Plan):
    """A JAX op's plan, with a table of its twins' plans on the other GPUs JAX has, by CUDA device (jax.pmap,
    shard_map), each made the first time XLA runs the op on that GPU (:meth:`make_twin`)."""

    def __init__(self, op: Op, attrs: Sequence[bool]):
        super().__init__(op.spec, op._choice, op._cell, op._pack, attrs)
        self.attrs = tuple(attrs)
        self.devices = op._device_table() if op._cuda else None
        if self.devices is not None:
            self._op = weakref.ref(op)  # the plan outlives its op (XLA's compiled calls name it): no cycle
            self._handle = ffi.new_handle(self)  # kept with the plan, as the plan is, for the process's life
            self.c.devices, self.c.device_count, self.c.twin = self.devices, len(self.devices), self._handle

    def make_twin(self, device: int) -> Any:
        """This call's plan on GPU ``device`` (its C struct, which C puts in the table): the op's twin there made
        (the module loaded on a runtime of that GPU, once a GPU) and its plan of the same scalars. XLA's handler
        asks for it the first time it runs the op there, on XLA's thread, whose context is that GPU's and whose
        stream XLA may be capturing into a command buffer: the twin is made in the driver's relaxed capture mode
        (its memory allocated and zeroed aside, never captured), under the twins' lock (two threads' first runs:
        one twin, one plan). Raises why not."""
        op = self._op()
        if op is None:
            raise ClosedError(f"{ffi.string(self.what).decode()}: its op was let go")
        with _twins_lock, _cuda.relaxed_capture(), without_collection():  # no other object's finalizer runs here
            return op._twin(device)._plan(self.attrs).c


class _UnavailableError(NotSupportedError):
    """Why an op cannot run on a GPU (its text says it whole: the first failure's type and message)."""


@ffi.def_extern(error=-1)
def taichi_aot_xla_twin(handle: Any, device: int, made: Any, why: Any, why_size: int) -> int:
    """XLA's handler asks for the op's plan on GPU ``device`` (``_csrc/xla.c``, taichi_aot_xla_make_twin): 0 with
    the plan in ``made[0]``, which C puts in the table of the plan whose handle is given, else 1 with why not in
    ``why`` (NUL-terminated, at most ``why_size`` bytes, whole UTF-8 characters), which XLA's error then says."""
    try:
        made[0] = ffi.from_handle(handle).make_twin(device)
        return 0
    except Exception as e:
        text = str(e) if isinstance(e, _UnavailableError) else f"{type(e).__name__}: {e}"
        data = text.encode("utf-8", "replace")[: max(why_size - 1, 0)].decode("utf-8", "ignore").encode("utf-8")
        ffi.memmove(why, data + b"\0", len(data) + 1)
        return 1


class Op:
    """A kernel or graph as a JAX function: call it with the inputs (signature order, or keywords); it returns the
    outputs (one array, or a tuple in the order ``outputs`` gave them). Traceable: ``jax.jit``, ``jax.vmap`` (a
    sequential loop, or one launch with ``vmap_method="batch"``), ``jax.grad`` where a ``backward`` was given or
    the module holds the kernel's reverse-mode kernel (x64, and CUDA where the own launcher takes it).
    """

    def __init__(self, launchable: Any, outputs: Mapping[Any, Any], backward: Callable[..., Any] | None = None,
                 vmap_method: str | None = "sequential"):
        spec = self.spec = OpSpec(launchable, outputs, "taichi_aot.jax")
        rt = spec.entry.module.runtime
        if spec.returned and spec.entry._choice.results is None:  # its launch gives none back: refused, never lost
            raise NotSupportedError(f"taichi_aot.jax.op({launchable.name!r}): the kernel returns values, and runs on "
                                    f"libtaichi's path ({spec.entry.launcher}), which gives none back: load it with "
                                    "taichi_aot's own launches (a CUDA module needs PTX: python -m taichi_aot ptx "
                                    "MODULE)")
        if rt.arch not in (Arch.X64, Arch.CUDA):
            raise NotSupportedError(f"{spec}: XLA's buffers can be shared with an x64 or CUDA runtime, not "
                                    f"{rt.arch.name}")
        if len(spec.args) > lib.TAICHI_AOT_OP_MAX_ARGS:
            raise NotSupportedError(f"{spec}: more than {lib.TAICHI_AOT_OP_MAX_ARGS} arguments")
        _register()
        self._cuda = rt.arch == Arch.CUDA
        self._choice = spec.entry._choice  # its launch backend's
        self._cell = cell(rt)
        self._target = _TARGET
        if self._choice.graphable:  # XLA may put it in a command buffer (a CUDA graph), which holds XLA's stand-in
            self._target = _GRAPHABLE  # and the kernel's code past the runtime's close
            rt.backends.keep_for_graphs()
        self._plans: dict[tuple[bool, ...], _Plan] = {}
        self._given = (outputs, backward, vmap_method)  # what made it: its twins on other GPUs are made alike
        #: its twin on each other GPU XLA ran it on (the module loaded on a runtime of that GPU, once), or why it
        #: cannot be
        self._twins: dict[int, Op | str] = {}
        self._twin_of: Callable[[int], Op] | None = None  # how a reverse op finds its twins (its primal's)
        self._is_twin = False  # a twin is reached through its op's table only: it has no table of its own
        # a backward from the reverse kernel: on the host (x64), or an op of its own (CUDA's own launcher)
        self._needing = spec.gradients() if backward is None else None
        self._reverse_op = self._make_reverse_op() if self._needing is not None and self._cuda else None
        self._backward = backward
        self._batch = vmap_method == "batch"  # jax.vmap as one launch (:meth:`_batched`)
        if self._batch:
            why = self._unbatchable()
            if why is not None:
                raise NotSupportedError(f"taichi_aot.jax.op({launchable.name!r}, vmap_method='batch'): {why}; "
                                        "use vmap_method='sequential' (a launch per batch element)")
        self._vmap_method = "sequential" if self._batch else vmap_method  # a vmap inside the batch's own: a loop
        owned = spec.entry.module.owned
        owned.pin()  # the kernel's handle stays valid while the op lives (a runtime closed first closes the cell)
        self._finalizer = weakref.finalize(self, _release, self._plans, owned)

    # -- calls ------------------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        spec = self.spec
        values = spec.bind(args, kwargs)
        spec.ensure_open()
        attrs, operands, shapes = self._split(values)
        plan = self._plan(attrs)
        packed = b"".join(self._pack(i, v) for i, v, a in zip(spec.inputs, values, attrs) if a)
        extra = {"scalars": np.frombuffer(packed, np.uint8)} if packed else {}
        positions = list(shapes)  # the array operands' argument positions, in operand order
        typed_operands, axes = _vary_operands(operands)  # inside shard_map: one type, before the VJP sees them

        def run(*arrays: Any) -> Any:  # the call, its outputs shaped by the arrays given (a batch's are merged)
            got = {i: tuple(a.shape) for i, a in zip(positions, arrays)}
            typed = _typed_like(axes, arrays)
            results = [jax.ShapeDtypeStruct(s, d, **typed) for s, d in spec.output_shapes(got)]
            results += [jax.ShapeDtypeStruct(shape or (), dtype, **typed) for dtype, shape in spec.returned]
            call = jax.ffi.ffi_call(self._target, results, vmap_method=self._vmap_method,
                                    input_output_aliases=plan.aliases)
            return call(*arrays, plan=plan.address, **extra)

        if self._batch:
            run = self._batched(run, positions)

        backward = self._backward
        if backward is None and self._reverse_op is not None:
            backward = self._from_reverse_op(values, attrs)
        elif backward is None and self._needing is not None:
            backward = self._from_reverse(values, attrs)
        out = self._differentiable(run, backward)(*typed_operands)
        return out[0] if len(out) == 1 else tuple(out)

    def _plan(self, attrs: Sequence[bool]) -> _Plan:
        """The plan of a call whose inputs are attributes where ``attrs`` says (made once a way)."""
        key = tuple(attrs)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _Plan(self, attrs)
        return plan

    def _device_table(self) -> Any:
        """A call's table of its plans on the GPUs JAX has (``void *[]`` by CUDA device, every entry NULL until XLA
        first runs the op on that GPU: :meth:`_Plan.make_twin`), so that XLA's handler launches on the GPU XLA runs
        it on (``jax.pmap``, ``shard_map``, arrays on another GPU); None for a twin."""
        if self._is_twin:
            return None
        return ffi.new("void *[]", max([*_local_gpus(), self.spec.entry.module.runtime.device_index]) + 1)

    def _twin(self, device: int) -> Op:
        """This op on GPU ``device``: its kernel or graph of the module loaded there on a runtime of that GPU (made
        once, kept for the process's life as the plans are). Raises _UnavailableError where the module cannot be loaded
        again (no files) or the kernel cannot run there (found once and kept: each later run there says it)."""
        with _twins_lock:  # two threads' first calls: one twin
            made = self._twins.get(device)
            if made is None:
                try:
                    made = self._twin_of(device) if self._twin_of is not None else self._load_twin(device)
                except Exception as e:  # a reverse op's reason is its primal's, said once
                    made = str(e) if isinstance(e, _UnavailableError) else f"{type(e).__name__}: {e}"
                self._twins[device] = made
        if isinstance(made, str):
            raise _UnavailableError(made)
        return made

    def _load_twin(self, device: int) -> Op:
        entry = self.spec.entry
        files = entry.module.files
        if files is None:
            raise NotSupportedError("its module was not loaded from files (a folder or a .tcm), so it cannot be "
                                    "loaded on another GPU")
        module = _twin_runtime(device).load_module(files, launcher="taichi" if entry.launcher == "taichi" else None)
        made = Op((module.kernels if isinstance(entry, Kernel) else module.graphs)[entry.name], *self._given)
        made._is_twin = True
        if made._reverse_op is not None:
            made._reverse_op._is_twin = True
        return made

    def _unbatchable(self) -> str | None:
        """Why ``jax.vmap`` cannot be one launch of this kernel over the whole batch, or None: every array argument
        must have a leading axis the batch can join, and every output be shaped like an input."""
        spec = self.spec
        if spec.returned:
            return "the kernel returns values, one for the whole launch, not one per batch element"
        for i, a in enumerate(spec.args):
            if a.kind == "ndarray" and a.ndim == 0:
                return f"{spec.what(i)} is 0-D: no leading axis to join the batch to"
        for i in spec.outputs:
            if not isinstance(spec.shapes[i], int) and i not in spec.inout:
                return f"output {spec.what(i)} has a shape of its own, not an input's"
        return None

    def _batched(self, run: Callable[..., Any], positions: list[int]) -> Callable[..., Any]:
        """``run`` whose ``jax.vmap`` is one launch: each batched array's batch axis joined to its leading axis
        ((B, N, ...) -> (B * N, ...)), an unbatched array broadcast over the batch first, the outputs split back.
        The kernel must treat its arrays' leading axis element by element (what the user says with
        ``vmap_method="batch"``); a scalar must be the batch's one value."""
        spec = self.spec
        batched = jax.custom_batching.custom_vmap(run)

        @batched.def_vmap
        def rule(axis_size: int, in_batched: Sequence[bool], *arrays: Any) -> tuple[list[Any], list[bool]]:
            merged = []
            for i, x, b in zip(positions, arrays, in_batched):
                if spec.args[i].kind != "ndarray":
                    if b:
                        raise NotSupportedError(f"{spec.what(i)}: vmap_method='batch' takes one scalar for the "
                                                "whole batch (a Python number, or an array vmap does not map)")
                    merged.append(x)
                    continue
                x = x if b else jnp.broadcast_to(x, (axis_size, *x.shape))
                merged.append(x.reshape((axis_size * x.shape[1], *x.shape[2:])))
            outs = run(*merged)
            return [o.reshape((axis_size, o.shape[0] // axis_size, *o.shape[1:])) for o in outs], [True] * len(outs)

        return batched

    def _split(self, values: Sequence[Any]) -> tuple[list[bool], list[Any], dict[int, tuple[int, ...]]]:
        """Which inputs are attributes (Python numbers), the operands (checked: dtype, shape), and input shapes."""
        spec = self.spec
        attrs, operands, shapes = [], [], {}
        for i, v in zip(spec.inputs, values):
            a = spec.args[i]
            if a.kind == "scalar" and isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
                    v, (bool, np.bool_)):
                attrs.append(True)
                continue
            if not hasattr(v, "shape") or not hasattr(v, "dtype"):
                raise ArgumentTypeError(f"{spec.what(i)}: expected an array ({a.describe()}), got "
                                        f"{type(v).__name__}")
            if a.kind == "scalar":
                spec.check_scalar(i, v.dtype, v.shape)
                if self._cuda:
                    raise NotSupportedError(f"{spec.what(i)}: on CUDA a scalar is passed as a Python number (an "
                                            "attribute); reading it from a device array would synchronize")
            else:
                spec.check(i, v.shape, v.dtype)
                if any(d == 0 for d in v.shape):
                    raise ArgumentTypeError(f"{spec.what(i)}: an empty array (shape {tuple(v.shape)})")
            attrs.append(False)
            operands.append(v if isinstance(v, jax.Array) else jnp.asarray(v))
            shapes[i] = tuple(v.shape)
        return attrs, operands, shapes

    def _pack(self, i: int, value: Any) -> bytes:
        """Scalar argument ``i`` = ``value`` as a packed TiArgument (its packer checks the type and range)."""
        return self.spec.pack(i, value)

    def _differentiable(self, run: Callable[..., Any], backward: Callable[..., Any] | None) -> Callable[..., Any]:
        """``run`` with a VJP: ``backward`` (the user's, or one from the reverse kernel), or a NotSupportedError
        raised when a gradient is asked for."""
        spec = self.spec

        @jax.custom_vjp
        def f(*arrays: Any) -> Any:
            return run(*arrays)

        @jax.custom_jvp
        def forward(*arrays: Any) -> Any:  # the call inside a VJP: differentiated again only for a second derivative
            return run(*arrays)

        @forward.defjvp
        def second(primals: Any, tangents: Any) -> Any:
            raise NotSupportedError(f"{spec}: a second derivative: the op's call has a first derivative only")

        def fwd(*arrays: Any) -> Any:
            out = forward(*arrays)
            return out, (arrays, out)

        def bwd(res: Any, grads: Any) -> Any:
            arrays, out = res
            if backward is None:
                raise NotSupportedError(f"{spec}: no backward was given (taichi_aot.jax.op(..., backward=fn), "
                                        "fn(inputs, outputs, cotangents) returning one per array input)")
            n = len(spec.outputs)  # a kernel's returned values after the outputs: no gradient flows through them
            result = backward(tuple(arrays), tuple(out[:n]), tuple(grads[:n]))
            result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            if len(result) != len(arrays):
                raise ArgumentTypeError(f"{spec}: backward returned {len(result)} cotangent(s) for {len(arrays)} "
                                        "array input(s)")
            return tuple(_vary_like(g, a) for g, a in zip(result, arrays))

        f.defvjp(fwd, bwd)
        return f

    def _make_reverse_op(self) -> Op:
        """The reverse-mode kernel (``<kernel>_grad`` on the own CUDA launcher: its arguments, then their gradients)
        as an op of its own: an input's gradient is a new output, zero-filled; an output's is its cotangent, read
        and cleared by the kernel (aliased, so XLA's buffer is not written behind its back)."""
        kernel = self.spec.entry
        assert isinstance(kernel, Kernel)  # spec.gradients() is None for graphs
        kernel.prepare_grad()
        reverse = kernel.module.kernels[f"{kernel.name}_grad"]
        n, outputs = len(self.spec.args), {}
        for k, i in enumerate(self._needing or []):
            outputs[n + k] = n + k if i in self.spec.outputs else i
        made = Op(reverse, outputs)
        primal = weakref.ref(self)  # no cycle through the reverse op: the op's finalizer runs when it is dropped

        def twin_of(device: int) -> Op:  # on another GPU: the reverse op of this op's twin there
            op = primal()
            if op is None:
                raise ClosedError(f"{made.spec}: its op was let go")
            reverse = op._twin(device)._reverse_op
            assert reverse is not None  # a twin is made alike: a reverse op where its op has one
            return reverse

        made._twin_of = twin_of
        return made

    def _from_reverse_op(self, values: Sequence[Any], attrs: Sequence[bool]) -> Callable[..., Any]:
        """The backward of one call (CUDA): the reverse kernel's op on the call's inputs and outputs and the
        outputs' cotangents; each input's cotangent is what it accumulated (None for scalars and inputs without
        a gradient)."""
        spec, needing, reverse = self.spec, self._needing or [], self._reverse_op
        assert reverse is not None
        operands = [i for i, a in zip(spec.inputs, attrs) if not a]
        given = dict(zip(spec.inputs, values))
        inputs = [i for i in needing if i in spec.inputs]  # whose gradients the reverse op returns (in-out too)

        def backward(arrays: Sequence[Any], outs: Sequence[Any], cotangents: Sequence[Any]) -> tuple:
            call = []
            for i in range(len(spec.args)):
                if i in operands:  # an in-out argument: its input's values
                    call.append(arrays[operands.index(i)])
                elif i in spec.outputs:
                    call.append(outs[spec.outputs.index(i)])
                else:
                    call.append(given[i])  # a number passed as an attribute
            call += [cotangents[spec.outputs.index(i)] for i in needing if i in spec.outputs]
            got = reverse(*call)
            got = got if isinstance(got, tuple) else (got,)
            found = {i: g for i, g in zip(needing, got) if i in inputs}
            return tuple(found.get(i) for i in operands)

        return backward

    def _from_reverse(self, values: Sequence[Any], attrs: Sequence[bool]) -> Callable[..., Any]:
        """The backward made from the kernel's reverse-mode kernel (``Kernel.grad``, on the host through
        ``jax.pure_callback``) for one call's ``values`` (each input's: the numbers passed as attributes are
        these): each output's cotangent seeds its argument's gradient, each input's starts at zero, and what the
        reverse kernel accumulated there is the input's cotangent (None, a zero, for scalars and inputs without
        a gradient)."""
        spec, kernel, needing = self.spec, self.spec.entry, self._needing or []
        assert isinstance(kernel, Kernel)  # spec.gradients() is None for graphs
        operands = [i for i, a in zip(spec.inputs, attrs) if not a]  # argument positions of the operands
        wanted = [i for i in operands if i in needing and spec.args[i].kind == "ndarray"]
        given = dict(zip(spec.inputs, values))

        def host(*flat: Any) -> tuple:
            full: list[Any] = [given.get(i) for i in range(len(spec.args))]
            flat = tuple(np.asarray(v) for v in flat)  # JAX's CPU arrays: their memory
            for i, v in zip(spec.outputs, flat[len(operands):]):
                full[i] = v
            for i, v in zip(operands, flat):  # an in-out argument: its input's values
                full[i] = v.item() if spec.args[i].kind == "scalar" else v
                if i not in needing and i not in spec.outputs and spec.args[i].kind == "ndarray" \
                        and not full[i].flags.writeable:  # an input without a gradient (indices): JAX's memory is
                    full[i] = np.array(full[i])  # immutable, and a plain array's access is the primal's, unknown
            seeds = spec.reverse_seeds(full, flat[len(operands) + len(spec.outputs):], needing, np.zeros_like,
                                       lambda value, g: np.array(g, value.dtype, copy=True))
            kernel.grad(*full, grads=seeds)
            return tuple(seeds[i] for i in wanted)

        @jax.custom_jvp
        def reverse(*flat: Any) -> Any:
            like = [flat[operands.index(i)] for i in wanted]
            return jax.pure_callback(host, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in like], *flat,
                                     vmap_method="sequential")

        @reverse.defjvp
        def no_second(primals: Any, tangents: Any) -> Any:
            raise NotSupportedError(f"{spec}: a second derivative through a reverse-mode kernel: the reverse "
                                    "kernel has no derivative of its own")

        def backward(arrays: Sequence[Any], outs: Sequence[Any], cotangents: Sequence[Any]) -> tuple:
            found = dict(zip(wanted, reverse(*arrays, *outs, *cotangents)))
            return tuple(found.get(i) for i in operands)

        return backward

    @property
    def imports(self) -> int:
        """How many XLA buffer addresses the op's runtime imported so far (its pool, shared by its ops)."""
        return int(lib.taichi_aot_op_cell_imports(self._cell))

    @property
    def captured(self) -> int:
        """How many launches of the op's runtime's ops XLA captured into its command buffers (CUDA graphs, replayed
        without calling the op again) so far."""
        return int(lib.taichi_aot_op_cell_captured(self._cell))

    def __repr__(self) -> str:
        return f"<taichi_aot.jax.Op of {self.spec.kind} {self.spec.entry.name!r}>"


def _release(plans: dict[Any, _Plan], owned: Any) -> None:
    for plan in plans.values():
        lib.taichi_aot_op_release(plan.c)
    owned.unpin()


def op(launchable: Any, outputs: Mapping[Any, Any], *, backward: Callable[..., Any] | None = None,
       vmap_method: str | None = "sequential") -> Op:
    """A kernel or compute graph as a JAX function, called through XLA's FFI (eagerly and under ``jax.jit``).

    Args:
        launchable: a :class:`~taichi_aot.Kernel` or :class:`~taichi_aot.ComputeGraph` of an x64 runtime (JAX on
            the CPU) or a CUDA runtime (JAX on an NVIDIA GPU).
        outputs: ``{output argument: like}``, each output by name or position; ``like`` is the input it is shaped
            like (name or position), a ``jax.ShapeDtypeStruct`` (or ``(shape, dtype)``), or the output itself
            (read and written: taken as an input, its buffer aliased to the output). Other outputs start zeroed.
        backward: ``fn(inputs, outputs, cotangents)`` returning a cotangent per array input, for ``jax.grad`` (a
            ``jax.custom_vjp``). Without it, a kernel whose module holds its reverse-mode kernel (``build`` exports
            one for kernels whose ndarrays say ``needs_grad=True``) on an x64 runtime gets its backward from that
            (``Kernel.grad``, run on the host through ``jax.pure_callback``), or on a CUDA runtime whose own
            launcher takes it, an op of the reverse kernel on XLA's stream; any other raises NotSupportedError
            when a gradient is asked for.
        vmap_method: how ``jax.vmap`` batches it: "sequential", a loop of calls, by default; "batch", one launch
            for the whole batch, the batch joined to every array's leading axis (for a kernel that maps over its
            arrays' leading axis element by element; one that cannot be batched so is refused here, saying why);
            None makes vmap an error; or another of ``jax.ffi.ffi_call``'s.

    Raises:
        ArgumentTypeError: an unknown argument or a wrong output; a call with a wrong count, dtype or shape of
            inputs (at trace time under ``jax.jit``), naming the argument.
        NotSupportedError: another backend than x64 or CUDA; an argument an op cannot take.
        ClosedError: a call after the module or runtime was closed (a compiled call then fails in XLA, saying so).
    """
    return Op(launchable, outputs, backward, vmap_method)


#: JAX's platform of each arch a part of a module may be for: a module op lowers the part of the platform XLA runs on.
_PLATFORM_OF = {Arch.X64: "cpu", Arch.CUDA: "cuda"}


class ModuleOp(PartsOp):
    """A kernel or graph of a module with several parts (``build --arch x64 cuda``) as one JAX function: each call
    lowers, with ``jax.lax.platform_dependent``, the part of the platform XLA runs it on (``cpu``: the x64 part;
    ``cuda``: the CUDA part), each an :class:`Op` on a runtime of its own. The parts whose backend this machine has
    are loaded at the first call; :meth:`close` closes the runtimes the op made.

    Attributes:
        devices: the platforms the module has parts for, in its order of preference.
    """

    _framework = "taichi_aot.jax"

    def __init__(self, module: ModuleSource, name: str, outputs: Mapping[Any, Any],
                 backward: Callable[..., Any] | None, vmap_method: str | None, runtimes: Mapping[str, Any] | None):
        super().__init__(ModuleParts(module, name, _PLATFORM_OF, runtimes, "taichi_aot.jax.op_of"))
        self._outputs, self._backward, self._vmap_method = outputs, backward, vmap_method

    def load(self) -> dict[str, Op]:
        """The parts for the platforms this machine has (a CUDA part where CUDA works here), loaded now where not
        yet."""
        from . import capi

        status = capi.arch_status()
        with self._loading:
            for platform in self.devices:
                arch = self._modules.arch(platform)
                if platform not in self._parts and status[arch].available:
                    self._parts[platform] = Op(self._modules.launchable(platform), self._outputs, self._backward,
                                               self._vmap_method)
            return dict(self._parts)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        parts = self._parts or self.load()
        if not parts:
            raise NotSupportedError(f"{self}: none of the module's parts ({', '.join(self.devices)}) has its backend "
                                    "on this machine (python -m taichi_aot archs says why)")
        if len(parts) == 1:
            [part] = parts.values()
            return part(*args, **kwargs)
        branches = {platform: (lambda part=part: part(*args, **kwargs)) for platform, part in parts.items()}
        return jax.lax.platform_dependent(**branches)


def op_of(module: ModuleSource, name: str, outputs: Mapping[Any, Any], *, backward: Callable[..., Any] | None = None,
          vmap_method: str | None = "sequential", runtimes: Mapping[str, Any] | None = None) -> ModuleOp:
    """The kernel or compute graph ``name`` of a module with several parts as one JAX function, for the CPU and
    NVIDIA GPUs alike: each call runs the module's x64 part where XLA runs it on the CPU and its CUDA part on a GPU
    (``jax.lax.platform_dependent``), each an :class:`Op` on a runtime of its own (see :class:`ModuleOp`).

    Args:
        module: a module with parts for x64 and/or CUDA (``build FILE.py --arch x64 cuda``).
        name: the kernel's or graph's name.
        outputs, backward, vmap_method: as :func:`op`.
        runtimes: runtimes to load parts on, by platform (``{"cuda": rt}``); the op makes its own for the others.

    Raises:
        NotSupportedError: the module has no part for x64 or CUDA.
        ArgumentTypeError: ``runtimes`` for a platform the module has no part for; and as :func:`op`.
        MissingFileError, CorruptedDataError: as :meth:`~taichi_aot.Runtime.load_module`.
    """
    return ModuleOp(module, name, outputs, backward, vmap_method, runtimes)


def empty_call(x: Any) -> Any:
    """An XLA FFI call that does nothing and returns an array like ``x`` (uninitialised): the floor XLA puts under
    any custom call, which the bench measures beside ops."""
    _register()
    return jax.ffi.ffi_call(_EMPTY, jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

