"""No module reads another module's private members: layers call only downward, and through what a class shows
(``tests/test_layers.py`` draws the layers).

No module reads ``x._name`` (``x`` not self or cls) unless a class of that module defines ``_name`` itself. Read by
name, not by type: a module that defines ``_handle`` for its own class may also read another's ``_handle`` unseen;
what remains is listed here, each with its reason.
"""

from __future__ import annotations

import ast
from collections import defaultdict

from test_layers import _modules

PRIVATE_READS: dict[tuple[str, str], str] = {
    ("placement", "_replace"): "a NamedTuple's own copy-with-changes (its documented API): the native runtime a room "
                               "made, named with the room",
    ("placement.cuda", "_replace"): "a NamedTuple's own copy-with-changes (its documented API): a room's traits, "
                                    "its base's with its own",
    ("placement.host", "_replace"): "as placement.cuda: a room's traits",
    ("module", "_replace"): "as placement: a module's files' digests kept, their bytes let go once it is loaded",
    ("placement.vulkan", "_replace"): "as placement.cuda: a room's traits, and the device's own once it opens",
    ("runtime", "_DummyThread"): "threading has no public test of a thread Python did not start (XLA's), which join "
                                 "refuses: the exit hook never waits on one",
    ("_callplan", "_prepare"): "a call plan's C launcher (the kernel, or a Twin) made from the plan's record and "
                               "slots: Launcher's own methods, which the C call reads",
    ("_callplan", "_fresh"): "...(see above)",
    ("_ops", "_packers"): "an op packs a scalar with the kernel's own packer (its checks): JAX ops, torch fakes, plans",
    ("_torchop", "_choice"): "a torch op's C kernel launches its kernel's backend's kind and handle, as JAX plans do",
    ("_plans", "_range"): "an op's launch plan names its launches with its kernel's NVTX range (the kernel keeps it)",
    ("replay", "_c"): "a replay copies each bound launch's prepared C struct into the array C replays (launch.py's",
    ("replay", "_validate"): "...BoundLaunch, whose room the sequence shared until it had one of its own), re-checks",
    ("replay", "_entry"): "...a launch after a failure (its _validate), and names its kernel or graph in messages",
    ("cli.build_part", "_adjoint"): "Taichi keeps a kernel's reverse-mode kernel there; build exports it so",
    ("_arguments", "_sig"): "the packer checks an NdArray's signature in the launch hot path (a property costs",
    ("_arguments", "_arg_bytes"): "...about 5% of a dynamic launch): it writes the NdArray's packed TiArgument",
    ("_arguments", "_arg"): "...or its cffi TiArgument, and checks its memory's lifetime record and runtime",
    ("_arguments", "_memory"): "...(NdArray._memory._owned.closed, NdArray._runtime), the same hot path",
    ("_arguments", "_owned"): "...(see above)",
    ("_arguments", "_runtime"): "...(see above); textures and images too (their _runtime)",
    ("_seen", "_sig"): "a hit of the foreign-array cache keeps the signature and packed argument of the NdArray",
    ("_seen", "_arg_bytes"): "...it was made for, which the packer then writes without the NdArray",
    ("_staged", "_unfilled"): "staged copies are made unfilled: writing zeros maps memory, which waits on Vulkan",
    ("_staged", "_read_later"): "a written staged copy's read back is queued after its kernel and read after the "
                                 "launch's one wait: the package's copies back, no user's",
    ("ndarray", "_imported_host"): "NdArray's import routes (over_host, over_cuda) make their Memory with its",
    ("ndarray", "_imported_cuda"): "...import constructors, which take raw addresses their callers checked",
    ("_lifetime", "_children"): "Child registers with its runtime and closes through it: the lifetime protocol",
    ("_lifetime", "_check_closer"): "...that runtime.py implements for every child (runtime.py imports _lifetime)",
    ("taichi_aot_bench.launch", "_packed"): "the bench times the parts of a launch apart (the flat C call on a",
    ("taichi_aot_bench.launch", "_slow_call"): "...bound launch's packed buffer, the call checked in Python): it reads",
    ("taichi_aot_bench.launch", "_handle"): "...what no user should (see above)",
    ("taichi_aot_bench.steps", "_c"): "the raw C loops launch bound launches' prepared structs with plain ti_launch_*",
    ("cli.build_part", "_aot_kernels"): "Taichi 1.7.4 lists the @ti.aot.export kernels nowhere public (pinned)",
    ("cli", "_SubParsersAction"): "argparse's type of a subcommand table, for an annotation",
    ("capi.core", "_value2member_map_"): "enum's table of values: the one lookup that takes no exception",
    ("_probe", "_replace"): "a namedtuple's documented method (its name begins with _ so as not to clash)",
    ("_arrays", "_C"): "torch's C layer: the probes of a torch tensor's layout reads are made under its",
    ("_arrays", "_cdata"): "...DisableTorchFunction, and compared with its _cdata (the TensorImpl's address)",
    ("_arrays", "_trust_layout"): "Launcher's, off the surface every Kernel inherits: trusts the layout reads",
    ("torch", "_C"): "an op's own autograd kernel calls the op below autograd (_AutoDispatchBelowAutograd, as",
    ("torch", "_AutoDispatchBelowAutograd"): "...torch.library's own autograd wrappers do): 6-9 us less a call",
    ("torch", "_len_torch_dispatch_stack"): "a plain eager call skips torch's dispatcher (about 8 us) only where",
    ("torch", "_len_torch_function_stack"): "...no dispatch or function mode, no functorch transform and no",
    ("torch", "_functorch"): "...tracer is active: torch's C layer is where those are asked (about 0.1 us each);",
    ("torch", "_get_tracing_state"): "...torch.jit.trace's state, as torch's own Python code asks it",
    ("torch", "_autograd"): "...and no torch.profiler records (its C layer's _profiler_enabled, which torch's own",
    ("torch", "_profiler_enabled"): "...profiler code asks): a recorded call goes by the dispatcher, which names it",
}


def private_reads() -> dict[tuple[str, str], list[int]]:
    """(module, private name) -> lines where the module reads a private member no class of its own defines."""
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for module, path in _modules().items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        own: set[str] = set()
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for node in ast.walk(cls):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    own.add(node.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    own.add(node.attr)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    own.add(node.id)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):  # __slots__ entries
                    own.add(node.value)
        name = module.replace("taichi_aot.", "")
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")) or node.attr.startswith("__"):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "lib", "ffi", "os"):  # os._exit
                continue
            owner = PARENTS.get(_receiver(node.value))
            if node.attr not in own or (owner is not None and owner != name):
                out[(name, node.attr)].append(node.lineno)
    return out


#: Receivers whose class is known by their name (STYLE.md: a child's parent is ``_runtime`` / ``_module``): a private
#: read through them is judged against the module of that class, not against the reading module's own classes
#: (``self._runtime._handle`` in memory.py reads the Runtime's ``_handle``, whatever Memory's is called).
PARENTS = {"_runtime": "runtime", "runtime": "runtime", "rt": "runtime", "_module": "module", "module": "module"}


def _receiver(node: ast.expr) -> str:
    """The name a receiver ends in: ``rt`` of ``rt._x``, ``_runtime`` of ``self._runtime._x``; "" for others."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def test_no_module_reads_another_modules_private_members():
    found = private_reads()
    unlisted = {f"{m}: .{name} (lines {lines})" for (m, name), lines in found.items() if (m, name) not in PRIVATE_READS}
    assert not unlisted, "read through a public name, or list it in PRIVATE_READS with its reason: " + "; ".join(
        sorted(unlisted))
    stale = sorted(set(PRIVATE_READS) - set(found))
    assert not stale, f"listed in PRIVATE_READS but read no more: {stale}"
