"""One arch of ``taichi-aot build``, in a child process:
``python build_part.py ARCH gfx|llvm FILE FOLDER CPU_THREADS|- [CAPS...]``.

Run by path, never imported by the library: it imports Taichi and nothing of taichi_aot (one process never
holds Taichi's runtime twice). It compiles what FILE exports (build.py's docstring gives the convention)
into the module folder FOLDER and prints a summary line (kernels, graphs, each kernel's argument names);
a failure is one ``taichi-aot: error: ...`` line on stderr and exit status 2.
(No ``from __future__ import annotations`` here: the user's file may rely on Taichi reading annotations.)
"""
# mypy: ignore-errors
# (Taichi ships no types)

import importlib.util
import json
import os
import sys

SUMMARY = "taichi_aot-build-summary: "
ERROR = "taichi-aot: error: "


class BuildError(Exception):
    """What went wrong, in words for the user."""


def _import(source):
    """Import the user's file as a module (its folder on ``sys.path`` meanwhile, for its own imports)."""
    spec = importlib.util.spec_from_file_location("_taichi_aot_build_source", os.path.abspath(source))
    if spec is None or spec.loader is None:
        raise BuildError(f"cannot import {source}: not a Python file")
    user = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(source)))
    try:
        spec.loader.exec_module(user)
    except Exception as e:
        raise BuildError(f"importing {source} failed: {type(e).__name__}: {e}") from e
    finally:
        sys.path.pop(0)
    return user


def argument_names(kernel):
    """The names of a Taichi kernel's parameters that the compiled kernel takes (template ones are baked in)."""
    primal = getattr(kernel, "_primal", None)
    arguments = getattr(primal, "arguments", None)
    if primal is None or arguments is None:
        raise BuildError(f"{kernel!r} is not a Taichi kernel")
    templates = set(getattr(primal, "template_slot_locations", ()) or ())
    return [a.name for i, a in enumerate(arguments) if i not in templates]


def _ndarray_annotations(kernel):
    """(name, annotation) of each ndarray argument of ``kernel``, in order."""
    from taichi.types.ndarray_type import NdarrayType

    arguments = getattr(getattr(kernel, "_primal", None), "arguments", ())
    return [(a.name, a.annotation) for a in arguments if isinstance(getattr(a, "annotation", None), NdarrayType)]


def _differentiable(kernel):
    """Whether an ndarray argument of ``kernel`` says ``needs_grad=True``: its reverse-mode kernel is exported."""
    return any(annotation.needs_grad for _, annotation in _ndarray_annotations(kernel))


def _grad_arrays(kernel):
    """{argument: an ndarray} for every ndarray argument of a kernel one of whose ndarrays says ``needs_grad=True``
    (made with gradients where its annotation says so, of its dimensions: a 0-D one for a 0-D loss): Taichi
    compiles such a kernel only given arrays for all of them, those that carry gradients with them (index and
    constant arrays among them carry none). Nothing for another kernel."""
    import taichi as ti

    annotations = _ndarray_annotations(kernel)
    if not any(annotation.needs_grad for _, annotation in annotations):
        return {}
    out = {}
    for name, annotation in annotations:
        ndim = annotation.ndim if isinstance(annotation.ndim, int) else 1
        if annotation.dtype is None:
            raise BuildError(f"ndarray argument {name!r} says no dtype: Taichi compiles a differentiable kernel for "
                             "arrays of one dtype (ti.types.ndarray(dtype=..., ndim=...))")
        out[name] = ti.ndarray(annotation.dtype, shape=(1,) * ndim, needs_grad=bool(annotation.needs_grad))
    return out


class _Reverse:
    """What ``Module.add_kernel`` takes to export a kernel's reverse-mode kernel: it reads the kernel object's
    ``_primal``, which the reverse kernel (``kernel.grad``) does not carry; its adjoint is that object."""

    def __init__(self, kernel, name):
        self._primal = kernel._adjoint
        self.__name__ = f"{name}_grad"


def _fields(user):
    """(name, field) of the Taichi fields ``user`` (the imported file) holds at its top level, in order."""
    from taichi.lang.field import Field

    return [(name, value) for name, value in vars(user).items() if isinstance(value, Field)]


def build_part(source, arch, gfx, folder, caps, cpu_threads=None):
    """Compile ``source`` for ``arch`` into the module folder ``folder`` (CPU kernels on at most ``cpu_threads``
    threads: Taichi compiles the count into them); returns the summary."""
    # Taichi 1.7.4 has no public way to find the kernels a file marks with @ti.aot.export: the
    # decorators append records (.kernel, .name, .template_types) to the private list
    # taichi.aot._export._aot_kernels, so we read what the import of the file added to it.
    # The build extra's taichi==1.7.4 pin keeps the list where it is.
    ti, export = _taichi(arch, cpu_threads)
    before = len(export._aot_kernels)  # private, see above
    user = _import(source)
    records = export._aot_kernels[before:]  # what the file's @ti.aot.export decorators added
    graphs = _graphs(user, source)
    names = _kernel_names(source, records, graphs)
    stack = getattr(user, "AD_STACK_SIZE", None)  # entries of each autodiff stack (Taichi's ad_stack_size)
    if stack is not None:
        if isinstance(stack, bool) or not isinstance(stack, int) or not 1 <= stack <= 1 << 16:
            raise BuildError(f"AD_STACK_SIZE in {source} must be an int from 1 to 65536, got {stack!r}")
        ti.lang.impl.current_cfg().ad_stack_size = stack  # read when each kernel is compiled, below
    all_caps = list(caps) + list(getattr(user, "AOT_CAPS", []) or [])
    module = ti.aot.Module(getattr(ti, arch), caps=all_caps if gfx else None)
    fields = _fields(user)
    no_grad = _add(module, arch, gfx, fields, records, graphs)
    os.makedirs(folder, exist_ok=True)  # Taichi 1.7.4 needs the folder to exist (gfx)
    module.save(folder)
    args = {r.name: argument_names(r.kernel) for r in records}
    if not gfx:  # a reverse-mode kernel takes its primal's arguments
        args.update({f"{r.name}_grad": args[r.name] for r in records
                     if _differentiable(r.kernel) and r.name not in no_grad})
    return {"kernels": names, "graphs": list(graphs), "fields": [n for n, _ in fields], "arch": arch,
            "taichi": ".".join(map(str, ti.__version__)), "args": args, "no_grad": no_grad}


def _taichi(arch, cpu_threads):
    """Taichi, initialized for ``arch`` (CPU kernels on at most ``cpu_threads`` threads), and its export module."""
    try:
        import taichi as ti
        from taichi.aot import _export
    except ImportError as e:
        raise BuildError(f"building needs Taichi 1.7.4 (pip install 'taichi_aot[build]'): {e}") from None

    options = {"cpu_max_num_threads": cpu_threads} if cpu_threads else {}
    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=False, **options)
    got = ti.lang.impl.current_cfg().arch
    if got != getattr(ti, arch):
        raise BuildError(f"Taichi cannot target {arch} on this machine (it fell back to {got.name})")
    return ti, _export


def _graphs(user, source):
    """The compiled graphs the file's ``export_graphs()`` returns by name (none without one)."""
    try:
        graphs = user.export_graphs() if callable(getattr(user, "export_graphs", None)) else {}
    except Exception as e:
        raise BuildError(f"export_graphs() in {source} failed: {type(e).__name__}: {e}") from e
    if not isinstance(graphs, dict):
        raise BuildError("export_graphs() must return a dict of name -> compiled graph")
    return graphs


def _kernel_names(source, records, graphs):
    """The exported kernels' names, checked: something is exported, no name twice."""
    if not records and not graphs:
        raise BuildError(f"{source} exports nothing: mark kernels with @ti.aot.export or define export_graphs()")
    names = [r.name for r in records]
    if len(set(names)) != len(names):
        raise BuildError(f"two exported kernels share a name: {sorted(n for n in names if names.count(n) > 1)}")
    return names


def _add(module, arch, gfx, fields, records, graphs):
    """Put the fields, kernels and graphs into ``module``; a BuildError naming the one Taichi refused. A kernel whose
    reverse-mode kernel Taichi cannot compile is built without it: returns {kernel: Taichi's reason} of those."""
    for name, field in fields:  # the global fields the kernels share: an LLVM module of none has no memory for them
        try:
            module.add_field(name, field)
        except Exception as e:
            raise BuildError(f"Taichi could not add field {name!r} for {arch}: {e}") from e
    no_grad = {}
    for r in records:
        templates = {**_grad_arrays(r.kernel), **(r.template_types or {})}
        try:
            if templates:
                module.add_kernel(r.kernel, template_args=templates, name=r.name)
            else:
                module.add_kernel(r.kernel, name=r.name)
        except Exception as e:
            hint = " (gfx backends may need --caps, e.g. spirv_has_int64 spirv_has_float64)" if gfx else ""
            raise BuildError(f"Taichi could not compile kernel {r.name!r} for {arch}: {e}{hint} (drop it from the "
                             "file's exports to build the others)") from e
        if not gfx and _differentiable(r.kernel):  # its reverse-mode kernel beside it
            try:
                module.add_kernel(_Reverse(r.kernel, r.name), template_args=templates, name=f"{r.name}_grad")
            except Exception as e:
                no_grad[r.name] = f"{type(e).__name__}: {e}"[:500]
    for name, graph in graphs.items():
        try:
            module.add_graph(name, graph)
        except Exception as e:
            raise BuildError(f"Taichi could not add graph {name!r}: {e}") from e
    return no_grad


def main(argv):
    arch, family, source, folder, threads, *caps = argv
    try:
        summary = build_part(source, arch, family == "gfx", folder, caps, None if threads == "-" else int(threads))
    except BuildError as e:
        print(ERROR + str(e), file=sys.stderr)
        code = 2
    else:
        print(SUMMARY + json.dumps(summary))
        code = 0
    # Taichi 1.7.4 can abort in its CUDA teardown at exit on multi-GPU hosts (CUDA_ERROR_INVALID_CONTEXT in
    # cuMemFreeAsync) once the module is written: leave without it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
