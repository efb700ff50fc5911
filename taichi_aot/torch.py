"""Kernels and compute graphs as PyTorch operators: ``taichi_aot.torch.op(kernel, outputs)``.

The op is a ``torch.library`` operator with a fake implementation (``register_fake``): ``torch.compile`` (with
``fullgraph=True`` too) traces it without a graph break, ``torch.library.opcheck`` passes, and autograd raises a
:class:`~taichi_aot.errors.NotSupportedError` at backward unless a ``backward`` is given. Outputs are allocated by
torch on the inputs' device (zero-filled, or the input's values for an argument the kernel reads and writes), and
the kernel is called with the tensors themselves: on x64 and CUDA torch's memory is shared, never copied. On x64
the op waits for the kernel before it returns; on CUDA the kernel runs on torch's current stream of its runtime's
GPU, and takes tensors on that GPU (``cuda:1`` for a runtime of device 1): the runtime of the kernel it wraps.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable, cast

import torch

from ._call import EagerOp
from ._ops import FLOATS, ModuleParts, OpSpec, PartsOp
from ._torchop import boxed_kernel
from .enums import Arch
from .errors import ArgumentTypeError, NotSupportedError, TaichiError
from .launch import Kernel
from .module import ModuleSource

if TYPE_CHECKING:  # pragma: no cover
    from .runtime import Runtime

__all__ = ["ModuleOp", "Op", "op", "op_of"]

_numbers = itertools.count()
#: torch's current CUDA stream on a device, as a CUstream handle: the raw getter torch.compile's generated code calls
#: (about 1 us less a call than ``torch.cuda.current_stream(...).cuda_stream``, which makes a Stream object)
_raw_stream: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)
# What says a call is traced, or runs under a mode or transform (Op._direct): each about 0.1 us
_compiling = torch.compiler.is_compiling


def _exporting() -> bool:
    """Whether torch.export traces (its programs run again with no guard: they keep the op itself). Its flag is read
    itself: torch 2.11's Dynamo answers ``torch.compiler.is_exporting()`` with True under torch.compile too."""
    return bool(getattr(torch.compiler, "_is_exporting_flag", False))


_modes, _function_modes = torch._C._len_torch_dispatch_stack, torch._C._len_torch_function_stack
_level, _tracing = torch._C._functorch.maybe_current_level, torch._C._get_tracing_state
_profiling = torch._C._autograd._profiler_enabled  # a torch.profiler is recording: calls go by the dispatcher
_Tensor = torch.Tensor
_CONTIGUOUS = torch.contiguous_format
_clone = torch.Tensor.clone  # the C call's output makers (Op._setup_eager)
#: The steps of an op's call that the call in C makes itself: a subclass that gives its own keeps the Python path
_CALL_PATH = ("_python_call", "_direct", "_eager", "_launch", "_impl", "_outputs", "_run", "_call", "_values",
              "_unheld", "_on_torchs_stream", "_explain", "_check", "_eager_failed")
_zeros_like = functools.partial(torch.zeros_like, memory_format=_CONTIGUOUS)
#: The namespace of the ops' operators below autograd (Op._define_nograd)
_NOGRAD = "taichi_aot_nograd"


def _schema(name: str, types: Sequence[str], returns: int) -> str:
    """An operator's schema: ``name(<types>) -> Tensor`` (or a tuple of ``returns`` tensors)."""
    rets = "Tensor" if returns == 1 else "(" + ", ".join(["Tensor"] * returns) + ")"
    return f"{name}({', '.join(types)}) -> {rets}"


def _needs_grad(values: Sequence[Any]) -> bool:
    """Whether autograd records a call with ``values``: grad mode on, and a tensor among them that requires grad."""
    return torch.is_grad_enabled() and any(isinstance(v, _Tensor) and v.requires_grad for v in values)


def _traced_call(self: Op, *args: Any, **kwargs: Any) -> Any:
    """What torch.compile traces for an op's call, which it cannot trace into C (``EagerOp.__call__``): the Python
    call, which under a trace calls the dispatcher's operator."""
    return self._python_call(*args, **kwargs)


#: Whether torch.compile traces a C type's call through a function registered in its place (torch.compiler.
#: substitute_in_graph of ``EagerOp.__call__``): torch 2.13 does (checked by the suite); torch 2.11 does not look for
#: one, so there, and below 2.13, ops get a Python ``__call__`` that torch.compile traces (about 0.4 us more a call).
_C_CALL_TRACED = tuple(int(n) for n in re.findall(r"\d+", torch.__version__)[:2]) >= (2, 13)
if _C_CALL_TRACED:
    torch.compiler.substitute_in_graph(EagerOp.__call__, skip_signature_check=True)(_traced_call)


def _torch_dtype(dtype: Any) -> torch.dtype:
    return getattr(torch, "bool" if dtype.kind == "b" else dtype.name)


def _schema_types(spec: OpSpec) -> list[str]:
    """The op's inputs as its schema declares them: ``Tensor x``, ``float a`` (raises for a scalar of a type no
    number has)."""
    types = []
    for i in spec.inputs:
        a = spec.args[i]
        if a.kind == "ndarray":
            types.append(f"Tensor {spec.param(i)}")
        else:
            spec.dtype(i)
            types.append(f"{'float' if a.dtype in FLOATS else 'int'} {spec.param(i)}")
    return types


def _qualname(name: str | None, kernel: str) -> str:
    """The operator's qualified name: ``name`` (checked: ``namespace::name``, each an identifier), else
    ``taichi_aot::<kernel>_<n>``."""
    qualname = name or f"taichi_aot::{re.sub(r'[^0-9A-Za-z_]', '_', kernel)}_{next(_numbers)}"
    namespace, _, opname = qualname.partition("::")
    if not re.fullmatch(r"[A-Za-z_]\w*", namespace) or not re.fullmatch(r"[A-Za-z_]\w*", opname):
        raise ArgumentTypeError(f"taichi_aot.torch.op: name must be 'namespace::name' (each a Python "
                                f"identifier), got {qualname!r}")
    return qualname


class Op(EagerOp):
    """A kernel or graph as a PyTorch operator; call it with the inputs (signature order, or keywords): it returns
    the outputs (one tensor, or a tuple in the order ``outputs`` gave them).

    A plain eager call of a kernel's op is made in C (``_csrc/eager.c``: the outputs made, the kernel's own C call,
    the wait on x64); every other call (traced, compiled, under a mode, transform or profiler, needing a gradient, by
    keyword, of a graph) goes through :meth:`_python_call`.

    Attributes:
        custom_op: the operator it calls, ``torch.ops.<namespace>.<name>.default`` (for ``torch.library.opcheck``).
        spec: which arguments are inputs and outputs.
        boxed: whether a compiled graph's call of the op, where no input needs a gradient, is made in C from torch's
            dispatcher (the kernel of its operator below autograd, ``_csrc/torchop.c``).
    """

    def __init__(self, launchable: Any, outputs: Mapping[Any, Any], backward: Callable[..., Any] | None = None,
                 name: str | None = None):
        spec = self.spec = OpSpec(launchable, outputs, "taichi_aot.torch")
        self._runtime = cast("Runtime", spec.entry.module.runtime)  # the one Parent there is
        cuda = self._cuda = self._runtime.arch == Arch.CUDA  # on the runtime's GPU: torch's cuda:<its device_index>
        self._device = torch.device("cuda", self._runtime.device_index) if cuda else torch.device("cpu")
        self._held = self._runtime.foreign.held  # CUDA: the arrays launches hold until a wait, which the op lets go
        types = _schema_types(spec)
        # the kernel's returned values come after the outputs, a tensor each (0-D for a scalar)
        self._returned = [(_torch_dtype(dtype), shape or ()) for dtype, shape in spec.returned]
        qualname = self.qualname = _qualname(name, launchable.name)
        namespace, _, opname = qualname.partition("::")
        self._define(namespace, opname, types)
        # the module's reverse-mode kernel, made here, on the runtime's thread (autograd calls it from its own on CUDA),
        # where no backward is given
        needing = spec.gradients() if backward is None else None
        self._needing = needing or []  # the arguments with gradients, where the backward is _from_reverse
        self._backward_op: Any = None
        if backward is None and needing is not None:
            backward = self._from_reverse  # the module's reverse-mode kernel (x64, CUDA's own launcher)
            self._backward_op = self._define_backward(opname, types)
        self._user_backward = backward
        if backward is None:  # no autograd formula: below autograd at once, unless an input needs a gradient
            self._library.impl(opname, self._no_backward, "Autograd")
        else:
            torch.library.register_autograd(qualname, self._backward, setup_context=self._setup_context,
                                            lib=self._library)
        self.custom_op = getattr(getattr(torch.ops, namespace), opname).default
        self._makers = self._plan_outputs()
        self._count = len(spec.inputs)
        self._tensor_inputs = [k for k, i in enumerate(spec.inputs) if spec.args[i].kind == "ndarray"]
        # each argument's place in (inputs..., outputs...): a kernel's values in signature order from the two
        self._order = [spec.inputs.index(i) if i in spec.inputs and i not in spec.inout else
                       len(spec.inputs) + spec.outputs.index(i) for i in range(len(spec.args))]
        setup = self._setup_eager()
        impl = self._register_impl(opname, setup)
        #: the operator a traced call takes where no input needs a gradient (:meth:`_define_nograd`)
        self._nograd_op = self._define_nograd(types, impl)

    def _c_makers(self) -> list[tuple[int, Callable[[Any], Any]]] | None:
        """The outputs' makers for the call in C: (input position, a clone or zeros like it) each; None where an
        output has a shape of its own, or another element shape or dtype than its input's."""
        spec = self.spec
        makers = []
        for how, at, what in self._makers:
            if how == "clone":
                makers.append((at, _clone))
            elif how == "like" and not what[1] and not spec.args[spec.inputs[at]].elem_shape and what[2] == (
                    _torch_dtype(spec.dtype(spec.inputs[at]))):
                makers.append((at, _zeros_like))
            else:
                return None
        return makers

    def _register_impl(self, opname: str, eager: dict[str, Any] | None) -> Any:
        """The op's implementation for torch's dispatcher: where the eager call in C is set up (``eager``: its
        setup), an object of its own that makes the call in C the same way, but with no check of traces or modes
        (the dispatcher has dealt with them) and, for a call it does not make, :meth:`_launch`; else :meth:`_impl`
        (as for a subclass that gives its own step of the call, ``_CALL_PATH``)."""
        impl: Any = self._impl
        if eager is not None:
            impl = _Impl(self, {**eager, "truthy": (), "nones": ()})
        self._library.impl(opname, impl, "CompositeExplicitAutograd")
        return impl

    def _own_steps(self) -> bool:
        """Whether a subclass gives its own step of the call (``_CALL_PATH``): its calls keep the Python path."""
        return any(getattr(type(self), name) is not getattr(Op, name) for name in _CALL_PATH)

    def _define_nograd(self, types: list[str], impl: Any) -> Any:
        """The operator ``taichi_aot_nograd::<namespace>__<name>``: the op below autograd, which a call traced by
        torch.compile takes where no input needs a gradient (Dynamo guards on grad mode and on each input's
        ``requires_grad``; under a functorch transform, and in torch.export, whose programs run again unguarded, the
        op itself is taken). Its autograd kernel falls through, and on the op's device its kernel is made in C
        (``_torchop``: no Python between the compiled graph and the launch; :attr:`boxed`) where the C side takes the
        op and no subclass step (:meth:`_own_steps`) is to be taken; elsewhere ``impl``, the op's own. A namespace of
        its own: no name a user gives an op can be taken already."""
        name = self.qualname.replace("::", "__")
        self._nograd_library = torch.library.Library(_NOGRAD, "FRAGMENT")
        self._nograd_library.define(_schema(name, types, len(self.spec.outputs) + len(self._returned)))
        self._nograd_library.impl(name, impl, "CompositeExplicitAutograd")
        self._nograd_library.impl(name, torch.library.fallthrough_kernel, "Autograd")
        torch.library.register_fake(f"{_NOGRAD}::{name}", self._fake, lib=self._nograd_library)
        self.boxed = not self._own_steps() and boxed_kernel(self, self.spec, self._makers, f"{_NOGRAD}::{name}")
        return getattr(getattr(torch.ops, _NOGRAD), name).default

    def _setup_eager(self) -> dict[str, Any] | None:
        """Hand the eager call in C what it needs, for a kernel's op whose outputs are made from its inputs (a clone,
        or zeros like an input of their dtype and shape) and that returns no value; other ops keep the Python call
        (:meth:`_direct`, :meth:`_eager`), which takes the same calls the same way. Returns the setup, or None."""
        spec = self.spec
        if self._own_steps():
            return None  # a subclass's own step of the call: every call keeps the Python path, which takes it
        makers = self._c_makers()
        if spec.graph or self._returned or not makers:
            return None
        rt, cuda = self._runtime, self._cuda
        setup: dict[str, Any] = dict(
            count=self._count, truthy=(_compiling, _modes, _function_modes, _profiling), nones=(_level, _tracing),
            tensor=_Tensor, tensors=tuple(self._tensor_inputs), device="is_cuda" if cuda else "is_cpu",
            makers=tuple(makers), order=tuple(self._order), kernel=spec.entry, wait=None if cuda else rt.wait,
            held=self._held if cuda else None, runtime=rt.device if cuda else None,
            stream=functools.partial(_raw_stream, self._device.index) if cuda else None)
        self._eager_setup(**setup)
        return setup

    def _define(self, namespace: str, opname: str, types: list[str]) -> None:
        """The operator: a Library operator with kernels of its own (torch.library.custom_op's wrapper costs 5-9 us
        more a call, eagerly and in compiled graphs alike), and its fake."""
        self._library = torch.library.Library(namespace, "FRAGMENT")
        try:
            self._library.define(_schema(opname, types, len(self.spec.outputs) + len(self._returned)))
        except RuntimeError as e:
            raise ArgumentTypeError(f"taichi_aot.torch.op: torch refused the operator {self.qualname!r} (a name is "
                                    f"one operator for the process's life: name another op anew): {e}") from None
        torch.library.register_fake(self.qualname, self._fake, lib=self._library)  # its implementation: once the
        # eager call's setup is known (_register_impl)

    def _python_call(self, *args: Any, **kwargs: Any) -> Any:
        """A call the eager call in C (``EagerOp.__call__``) did not make."""
        if kwargs or len(args) != self._count:  # else every input by position: nothing to put in order
            args = tuple(self.spec.bind(args, kwargs))
        if self._direct(args):  # plain eager call: what torch's dispatcher would hand _impl
            return self._eager(args)
        if _compiling() and not _exporting() and _level() is None and not _needs_grad(args):
            # compiled: below autograd, and in C where the op is made there, on contiguous tensors (a copy where not)
            return self._nograd_op(*[v.contiguous() if isinstance(v, _Tensor) and not v.is_contiguous() else v
                                     for v in args])
        return self.custom_op(*args)

    def _direct(self, args: Sequence[Any]) -> bool:
        """Whether a call may skip torch's dispatcher (its two Python kernels cost about 8 us): an eager call, not
        traced (torch.compile, torch.jit.trace), under no dispatch or function mode (fake tensors, opcheck,
        functionalization, export) or functorch transform (vmap, grad), of plain tensors of which none needs a
        gradient, while no torch.profiler records (its trace names an op by the dispatcher's record of the call). The
        dispatcher would hand those straight to :meth:`_impl` too."""
        if (_compiling() or _modes() or _function_modes() or _level() is not None or _tracing() is not None
                or _profiling()):  # a profiler names the op's calls by the dispatcher's record of them
            return False
        cuda = self._cuda
        for k in self._tensor_inputs:
            v = args[k]
            if type(v) is not _Tensor or v.requires_grad or not (v.is_cuda if cuda else v.is_cpu):
                return False  # the dispatcher's way: autograd, or the fake's message for another device
        return True

    def __repr__(self) -> str:
        return f"<taichi_aot.torch.Op of {self.spec.kind} {self.spec.entry.name!r}: {self.qualname}>"

    # -- the checks and outputs both implementations share ----------------------------------------------------

    def _check(self, inputs: Sequence[Any]) -> None:
        """Raise ArgumentTypeError naming the argument where ``inputs`` do not fit the op (dtype, shape, device, a
        tensor for a number or the other way round)."""
        spec = self.spec
        for i, value in zip(spec.inputs, inputs):
            a = spec.args[i]
            if a.kind != "ndarray":
                if isinstance(value, torch.Tensor):
                    raise ArgumentTypeError(f"{spec.what(i)}: a scalar argument takes a Python number")
                if type(value) in (bool, int, float):  # its packer's checks (type, range), as a launch makes them
                    spec.pack(i, value)
                continue
            if not isinstance(value, torch.Tensor):
                raise ArgumentTypeError(f"{spec.what(i)}: expected a tensor ({a.describe()}), got "
                                        f"{type(value).__name__}")
            spec.check(i, value.shape, str(value.dtype))
            if value.device.type != self._device.type:
                raise ArgumentTypeError(f"{spec.what(i)}: a tensor on {value.device}, and the kernel's runtime is "
                                        f"{self._runtime.arch.name}: pass tensors on {self._device}")
            if self._cuda and value.device.index != self._device.index:
                raise ArgumentTypeError(f"{spec.what(i)}: a tensor on {value.device}, and the kernel's runtime "
                                        f"drives device {self._device.index}: pass tensors on {self._device} (a "
                                        f"runtime of device {value.device.index} takes them there)")

    def _plan_outputs(self) -> list[tuple[str, Any, Any]]:
        """How each output is made from the inputs: ("clone", input position, None), ("like", input position,
        (its array dims, the output's element shape, torch dtype)), or ("new", shape, torch dtype)."""
        spec = self.spec
        at = {i: k for k, i in enumerate(spec.inputs)}
        makers: list[tuple[str, Any, Any]] = []
        for i in spec.outputs:
            like = spec.shapes[i]
            if i in spec.inout:
                makers.append(("clone", at[i], None))
            elif isinstance(like, int):
                makers.append(("like", at[like], (spec.args[like].ndim, tuple(spec.args[i].elem_shape),
                                                  _torch_dtype(spec.dtype(i)))))
            else:
                makers.append(("new", like[0], _torch_dtype(like[1])))
        return makers

    def _outputs(self, inputs: Sequence[Any], fake: bool = False) -> list[torch.Tensor]:
        """The outputs, zero-filled (``fake``: uninitialised), an in-out one its input cloned; unchecked inputs (the
        launch, or ``_check``, checks them). One shaped exactly like its input is made ``*_like`` it (contiguous):
        about 3 us less than from a shape."""
        make, like = (torch.empty, torch.empty_like) if fake else (torch.zeros, torch.zeros_like)
        out = []
        for how, at, what in self._makers:
            if how == "clone":
                out.append(inputs[at].clone())
            elif how == "like":
                ndim, elem, dtype = what
                source = inputs[at]
                if not elem and source.dtype == dtype and source.dim() == ndim:
                    out.append(like(source, memory_format=_CONTIGUOUS))
                else:
                    out.append(make(tuple(source.shape)[:ndim] + elem, dtype=dtype, device=source.device))
            else:
                out.append(make(at, dtype=what, device=self._device))
        return out

    def _fake(self, *inputs: Any) -> Any:
        self._check(inputs)
        out = self._outputs(inputs, fake=True)
        out += [torch.empty(shape, dtype=dtype, device=self._device) for dtype, shape in self._returned]
        return out[0] if len(out) == 1 else tuple(out)

    def _values(self) -> list[torch.Tensor]:
        """The values the kernel's launch returned, a tensor each on the op's device (0-D for a scalar)."""
        if not self._returned:
            return []
        got = self.spec.entry.last_value()  # type: ignore[union-attr]  # a ReturningKernel: it returns values
        got = got if isinstance(got, tuple) else (got,)
        return [torch.as_tensor(v, dtype=dtype, device=self._device).reshape(shape)
                for v, (dtype, shape) in zip(got, self._returned)]

    def _impl(self, *inputs: Any) -> Any:
        return self._launch(inputs)

    def _explain(self, inputs: Sequence[Any]) -> None:
        """The op's own message (the argument, what was expected), where its checks find the fault a launch met."""
        self.spec.ensure_open()
        self._check(inputs)

    def _eager(self, args: Sequence[Any]) -> Any:
        """A call :meth:`_direct` let through (plain tensors on the op's device, none needing a gradient): the
        outputs made and the kernel launched, with no further look at the inputs (the launch checks them; where it
        refuses one, the op's own checks give the message)."""
        try:
            out = self._outputs(args)
            both = (*args, *out)
            self._run([both[k] for k in self._order])
        except (TaichiError, AttributeError, TypeError):
            self._explain(args)
            raise
        out += self._values()
        return out[0] if len(out) == 1 else tuple(out)

    def _eager_failed(self, args: tuple[Any, ...], error: BaseException) -> Any:
        """A call the C call made that failed: the op's own message where its checks find the fault, else ``error``
        (as :meth:`_eager`)."""
        try:
            raise error
        except (TaichiError, AttributeError, TypeError):
            self._explain(args)  # raises the op's own, with ``error`` as its context, as in _eager
            raise

    def _launch(self, inputs: Sequence[Any]) -> Any:
        """The call torch's dispatcher hands the op: its tensors on the op's device (else the op's own message, as
        its fake's), detached (autograd hands the op the tensors it tracks, grad mode off: the kernel reads their
        memory), then as :meth:`_eager`."""
        cuda, given = self._cuda, []
        for value in inputs:
            if isinstance(value, _Tensor):
                if value.is_cuda != cuda:  # a kernel call would copy it over: the op refuses, as its fake does
                    self._explain(inputs)
                if value.requires_grad:
                    value = value.detach()
            given.append(value)
        return self._eager(given)

    def _run(self, values: list[Any]) -> None:
        """Launch with ``values`` (in signature order)."""
        if self._held is None:  # x64: the kernel runs on libtaichi's threads, done before torch reads the outputs
            self._call(values)
            self._runtime.wait()
        else:
            self._unheld(values, lambda: self._call(values))

    def _call(self, values: list[Any]) -> None:
        spec = self.spec
        if spec.graph:
            spec.entry(**{str(spec.args[i].name): v for i, v in enumerate(values)})
        else:
            spec.entry(*values)

    def _unheld(self, tensors: Sequence[Any], launch: Callable[[], object]) -> None:
        """A CUDA launch on torch's current stream that holds none of ``tensors`` past the op's call, as torch's own
        ops hold none (a CUDA graph's memory pool may not keep them alive): torch's allocator reuses their memory in
        that stream's order. Those a kernel call held before stay held."""
        held = cast(dict, self._held)
        with self._runtime.backends.lock:  # another thread's op sets its own stream (the own CUDA runtime's)
            # nothing held before (the common case: ops hold nothing): all the launch holds is its own
            already = [id(v) in held for v in tensors] if held else None
            try:
                self._on_torchs_stream()
                launch()
            finally:
                if already is None:
                    held.clear()
                else:
                    for value, was in zip(tensors, already):
                        if not was:
                            held.pop(id(value), None)

    def _on_torchs_stream(self) -> None:
        """A CUDA runtime's launches on torch's current stream, as torch orders its own work."""
        rt = self._runtime
        if rt.arch == Arch.CUDA:
            stream = _raw_stream(rt.device_index)
            if (stream or None) != rt.cuda_stream:
                rt.set_cuda_stream(stream or None)

    # -- autograd -----------------------------------------------------------------------------------------

    def _no_backward(self, *inputs: Any) -> Any:
        """The op's autograd kernel without a backward: the op itself where no input needs a gradient; else the
        op through a function whose backward raises NotSupportedError."""
        if _needs_grad(inputs):
            return _Unsupported.apply(self, *inputs)
        with torch._C._AutoDispatchBelowAutograd():
            return self.custom_op(*inputs)

    def _setup_context(self, ctx: Any, inputs: Sequence[Any], output: Any) -> None:
        if self._user_backward is None:
            return
        outs = output if isinstance(output, tuple) else (output,)
        if self._returned:  # the kernel's returned values: no gradient flows through them
            ctx.mark_non_differentiable(*outs[len(self.spec.outputs):])
            outs = outs[:len(self.spec.outputs)]
        ctx.save_for_backward(*[v for v in inputs if isinstance(v, torch.Tensor)], *outs)
        ctx.numbers = [None if isinstance(v, torch.Tensor) else v for v in inputs]

    def _backward(self, ctx: Any, *grads: Any) -> Any:
        if self._user_backward is None:
            raise NotSupportedError(f"{self.spec}: no backward was given (taichi_aot.torch.op(..., "
                                    "backward=fn), fn(inputs, outputs, grads) returning a gradient per input)")
        saved = list(ctx.saved_tensors)
        grads = grads[:len(self.spec.outputs)]  # none for the returned values
        inputs = [saved.pop(0) if n is None else n for n in ctx.numbers]
        result = self._user_backward(tuple(inputs), tuple(saved), grads)
        result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        if len(result) != len(inputs):
            raise ArgumentTypeError(f"{self.spec}: backward returned {len(result)} gradient(s) for "
                                    f"{len(inputs)} input(s) (None for an input without one)")
        return result


    def _define_backward(self, opname: str, types: list[str]) -> Any:
        """The backward made from the reverse kernel as an operator of its own (``<name>_backward``, with a fake
        implementation), so that torch.compile traces a backward that calls it rather than the kernel: the op's
        inputs, its outputs and their gradients in; the gradients of the inputs that have one out."""
        spec = self.spec
        self._wanted = [i for i in spec.inputs if i in self._needing and spec.args[i].kind == "ndarray"]
        if not self._wanted:  # no input has a gradient: nothing to launch
            return None
        n = len(spec.outputs)
        outs = [f"Tensor out{k}" for k in range(n)] + [f"Tensor grad{k}" for k in range(n)]
        name = f"{opname}_backward"
        self._library.define(_schema(name, [*types, *outs], len(self._wanted)))
        self._library.impl(name, self._reverse_impl, "CompositeExplicitAutograd")
        at = [spec.inputs.index(i) for i in self._wanted]
        torch.library.register_fake(f"{self.qualname}_backward",
                                    lambda *a: _one([torch.empty_like(a[k]) for k in at]), lib=self._library)
        return getattr(getattr(torch.ops, self.qualname.partition("::")[0]), name).default

    def _from_reverse(self, inputs: Sequence[Any], outputs: Sequence[Any], grads: Sequence[Any]) -> tuple:
        """The backward made from the kernel's reverse-mode kernel: its operator (:meth:`_define_backward`) on the
        op's inputs, outputs and their gradients (zeros for an output without one)."""
        if torch.is_grad_enabled():  # autograd records the backward (create_graph=True): a second derivative
            raise NotSupportedError(f"{self.spec}: a second derivative (create_graph=True) through a reverse-mode "
                                    "kernel: the reverse kernel has no derivative of its own")
        if self._backward_op is None:
            return (None,) * len(inputs)
        grads = [torch.zeros_like(o) if g is None else g for o, g in zip(outputs, grads)]
        got = self._backward_op(*inputs, *outputs, *grads)
        found = dict(zip(self._wanted, got if isinstance(got, tuple) else (got,)))
        return tuple(found.get(i) for i in self.spec.inputs)

    def _reverse_impl(self, *given: Any) -> Any:
        """The backward operator's implementation (``Kernel.grad``): each output's gradient seeds its argument's,
        each input's starts at zero, and what the reverse kernel accumulated there is returned."""
        spec, kernel = self.spec, self.spec.entry
        assert isinstance(kernel, Kernel)  # what made this the op's backward
        inputs, n = given[:len(spec.inputs)], len(spec.outputs)
        outputs, grads = given[len(spec.inputs):len(spec.inputs) + n], given[len(spec.inputs) + n:]
        values: list[Any] = [None] * len(spec.args)
        for i, value in [*zip(spec.outputs, outputs), *zip(spec.inputs, inputs)]:  # an in-out one: its input's
            values[i] = value.detach().contiguous() if isinstance(value, torch.Tensor) else value
        seeds = spec.reverse_seeds(values, grads, self._needing, lambda value: torch.zeros_like(value).contiguous(),
                                   lambda value, g: g.detach().to(value.dtype).contiguous().clone())
        if self._runtime.on_its_thread() and self._held is not None:
            self._unheld([*values, *seeds.values()], lambda: kernel.grad(*values, grads=seeds))
        else:  # x64, or autograd's thread: on the stream autograd set (the forward's), holding nothing
            kernel.grad(*values, grads=seeds)
        return _one([seeds[i] for i in self._wanted])


if not _C_CALL_TRACED:
    def _python_level_call(self: EagerOp, *args: Any, **kwargs: Any) -> Any:
        return self._python_call(*args, **kwargs) if _compiling() else EagerOp.__call__(self, *args, **kwargs)

    Op.__call__ = _python_level_call  # type: ignore[method-assign]


class _Impl(EagerOp):
    """An op's implementation for torch's dispatcher, made in C as its eager call is (Op._register_impl); a call it
    does not make goes to the op's :meth:`Op._launch`."""

    def __init__(self, op: Op, setup: dict[str, Any]):
        self._op = op
        self._eager_setup(**setup)

    def _python_call(self, *args: Any, **kwargs: Any) -> Any:
        return self._op._launch(args)

    def _eager_failed(self, args: tuple[Any, ...], error: BaseException) -> Any:
        return self._op._eager_failed(args, error)


#: The torch device type of each arch a part of a module may be for: a module op runs the part where its tensors are.
_DEVICE_OF = {Arch.X64: "cpu", Arch.CUDA: "cuda"}


def _device_of(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, int] | None:
    """The device type and index of a call's first tensor (positional, then by keyword), or None where it has
    none."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, _Tensor):
            return value.device.type, value.device.index or 0
    return None


class ModuleOp(PartsOp):
    """A kernel or graph of a module with several parts (``build --arch x64 cuda``) as one op: a call runs the part
    for the device its tensors are on (torch's ``cpu``: the x64 part; ``cuda``: the CUDA part, on the tensors' GPU),
    eagerly, under ``torch.compile`` and autograd. Each part is an :class:`Op` of its own (``<name>_cpu``,
    ``<name>_cuda``; ``<name>_cuda1`` on GPU 1) on a runtime of its own, loaded at its first call or by :meth:`load`;
    :meth:`close` closes the runtimes the op made. Parts are named by device: ``"cpu"``, ``"cuda"`` (device 0, or the
    GPU of the runtime given as ``runtimes["cuda"]``) and ``"cuda:k"`` for any other GPU.

    Attributes:
        devices: the device types the module has parts for, in its order of preference.
    """

    _framework = "taichi_aot.torch"

    def __init__(self, module: ModuleSource, name: str, outputs: Mapping[Any, Any],
                 backward: Callable[..., Any] | None, op_name: str | None, runtimes: Mapping[str, Any] | None):
        super().__init__(ModuleParts(module, name, _DEVICE_OF, runtimes, "taichi_aot.torch.op_of", by_gpu=True))
        self._outputs, self._backward = outputs, backward
        self.qualname = _qualname(op_name, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        found = _device_of(args, kwargs)
        device = self._modules.name_of(*found) if found is not None else self.devices[0]
        part = self._parts.get(device)
        return (part if part is not None else _load_part(self, device))(*args, **kwargs)

    def load(self, device: str) -> Op:
        """The part for tensors on ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``), its runtime made and module loaded
        now where not yet (a runtime given as ``runtimes[device]`` is used instead of one of the op's own).

        Under ``torch.compile`` a part not loaded yet is loaded outside the trace (``torch.compiler.disable``: a graph
        break, which ``fullgraph=True`` refuses): load it before, or call the op once eagerly.

        Raises:
            ArgumentTypeError: the module has no part for ``device`` (the message names those it has).
            ClosedError: the op was closed.
            InvalidArgumentError: ``"cuda:k"`` for a GPU this process does not see.
            NotSupportedError: ``"cuda:k"`` (k > 0) where libtaichi's CUDA runtime was asked for
                (``TAICHI_AOT_CUDA_RUNTIME=taichi``): it drives device 0 only.
        """
        device = self._modules.canonical(str(device) if isinstance(device, torch.device) else device)
        with self._loading:
            part = self._parts.get(device)
            if part is None:
                part = self._parts[device] = Op(self._modules.launchable(device), self._outputs, self._backward,
                                                f"{self.qualname}_{device.replace(':', '')}")
        return part


@torch.compiler.disable
def _load_part(op: ModuleOp, device: str) -> Op:
    """``op.load(device)`` outside any torch.compile trace (loading makes a runtime and torch operators)."""
    return op.load(device)


def op_of(module: ModuleSource, name: str, outputs: Mapping[Any, Any], *, backward: Callable[..., Any] | None = None,
          op_name: str | None = None, runtimes: Mapping[str, Any] | None = None) -> ModuleOp:
    """The kernel or compute graph ``name`` of a module with several parts as one PyTorch op, for CPU and CUDA
    tensors alike: each call runs the module's x64 part for tensors on the CPU and its CUDA part for tensors on a
    GPU, each an :class:`Op` on a runtime of its own, loaded at its first call (see :class:`ModuleOp`).

    Args:
        module: a module with parts for x64 and/or CUDA (``build FILE.py --arch x64 cuda``), as
            :meth:`~taichi_aot.Runtime.load_module` takes it.
        name: the kernel's or graph's name.
        outputs, backward: as :func:`op`.
        op_name: the operators' qualified name (``"ns::name"``); each part's is it with ``_cpu``, ``_cuda`` or, for
            another GPU k, ``_cudak`` added.
        runtimes: runtimes to load parts on, by device (``{"cuda": rt}``: the program's CUDA runtime, whose GPU's
            tensors it takes; ``{"cuda:1": rt1}``: GPU 1's); the op makes its own for the others.

    Raises:
        NotSupportedError: the module has no part for x64 or CUDA.
        ArgumentTypeError: ``runtimes`` for a device the module has no part for; and as :func:`op`, at a part's
            first call (a call on a device without a part names the parts the module holds).
        MissingFileError, CorruptedDataError: as :meth:`~taichi_aot.Runtime.load_module`.
    """
    return ModuleOp(module, name, outputs, backward, op_name, runtimes)


def _one(tensors: list[Any]) -> Any:
    """One tensor, or a tuple of several: what an operator declared ``-> Tensor`` or ``-> (Tensor, ...)`` returns."""
    return tensors[0] if len(tensors) == 1 else tuple(tensors)


class _Unsupported(torch.autograd.Function):
    """An op without a backward, called on inputs that need a gradient: its outputs do too, and backward raises."""

    @staticmethod
    def forward(ctx: Any, op: Op, *inputs: Any) -> Any:
        ctx.op = op
        with torch._C._AutoDispatchBelowAutograd():
            return op.custom_op(*inputs)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        ctx.op._backward(ctx, *grads)  # raises NotSupportedError


def op(launchable: Any, outputs: Mapping[Any, Any], *, backward: Callable[..., Any] | None = None,
       name: str | None = None) -> Op:
    """A kernel or compute graph as a PyTorch operator (a ``torch.library`` operator with a fake implementation).

    Args:
        launchable: a :class:`~taichi_aot.Kernel` or :class:`~taichi_aot.ComputeGraph` (x64 or CUDA runtime).
        outputs: ``{output argument: like}``, each output by name or position; ``like`` is the input it is shaped
            like (name or position), ``(shape, dtype)``, or the output itself (read and written: taken as an input
            too, its output starting as the input's values). Other outputs start zero-filled.
        backward: ``fn(inputs, outputs, grads)`` returning a gradient (or None) per input, for autograd; without
            it, a backward through the op raises NotSupportedError.
        name: the operator's qualified name (``"ns::name"``, each part an identifier); default
            ``taichi_aot::<kernel>_<n>``. A name is one operator for the process's life: a second op of a name already
            taken raises ArgumentTypeError.

    Returns:
        An :class:`Op`: ``op(*inputs)`` or ``op(**inputs)`` returns the output tensor(s).

    Raises:
        ArgumentTypeError: an unknown argument, an output that is not an ndarray or of the wrong shape, or a ``name``
            taken or malformed; a call with a wrong count, dtype, shape or device of inputs (at trace time under
            ``torch.compile``).
        InvalidArgumentError: an input the module records the kernel writes.
    """
    return Op(launchable, outputs, backward, name)
