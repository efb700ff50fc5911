"""A kernel's argument layout, read from its metadata entry: where each argument goes in the argument bytes Taichi's
LLVM code generator laid out (``args_type``), and where a kernel's return values lie (``ret_type``); checked so that
nothing a module's files say (anyone may edit them) makes the C launches write outside their argument buffer
(``_csrc/backends/plan.c`` lays values by it). Both own launches read it: the own CUDA launcher (:mod:`taichi_aot.ptx`'s
plans add its tasks) and the own x64 launch (:mod:`taichi_aot.backends.cpu`).
"""

from __future__ import annotations

from typing import Any

from ..errors import CorruptedDataError

#: Bytes of each scalar type code (Taichi's PrimitiveTypeID, TiDataType): f16 f32 f64 i8 i16 i32 i64 u1 u8 u16
#: u32 u64.
SCALAR_SIZES = {0: 2, 1: 4, 2: 8, 3: 1, 4: 2, 5: 4, 6: 8, 7: 1, 8: 1, 9: 2, 10: 4, 11: 8}
#: The most argument bytes the launches pack (CUDA's kernel parameters hold 4 KiB on every GPU;
#: TAICHI_AOT_PLAN_MAX_BYTES).
MAX_ARGS_SIZE = 4096
#: Most dimensions an ndarray argument has (TiNdShape holds 16).
MAX_DIMS = 16
#: The most bytes of results a kernel returns on the own launches (each stand-in keeps this much after its runtime).
RESULT_BYTES = 4096


class PlanError(CorruptedDataError):
    """A metadata entry the own launches cannot plan for; the message says why (the kernel stays on libtaichi)."""


def _elements(t: Any) -> list[dict]:
    if not isinstance(t, dict) or t.get("type_kind") != 3:
        raise PlanError("an argument's type is not a struct")
    elements = (t.get("content") or {}).get("elements_")
    if not isinstance(elements, list) or not all(isinstance(e, dict) for e in elements):
        raise PlanError("an argument struct without elements")
    return elements


def _scalar_code(t: Any) -> int:
    if not isinstance(t, dict) or t.get("type_kind") != 0:
        raise PlanError("a member that is not a scalar")
    code = (t.get("content") or {}).get("type")
    if code not in SCALAR_SIZES:
        raise PlanError(f"a scalar of unknown type {code!r}")
    return int(code)


def _argument(arg: dict, t: Any, offset: int) -> dict:
    """An argument's place in the launch parameters, from its metadata ``arg`` and its layout ``t`` at ``offset``:
    an ndarray (its shape and pointers), a scalar, or a vector or matrix by value."""
    ptype = arg.get("ptype", 0)
    if ptype == 1:
        return _ndarray(t, offset)
    if ptype != 0:
        raise PlanError("a texture argument")
    if isinstance(t, dict) and t.get("type_kind") == 0:
        code = _scalar_code(t)
        return {"kind": "scalar", "offset": offset, "size": SCALAR_SIZES[code], "type": code}
    values = _elements(t)  # a vector or matrix by value: a struct of scalars of one type
    codes = {_scalar_code(e.get("type")) for e in values}
    if len(codes) != 1:
        raise PlanError("a vector argument of mixed types")
    size = SCALAR_SIZES[codes.pop()]
    if [e.get("offset") for e in values] != [size * k for k in range(len(values))]:
        raise PlanError("a vector argument with unexpected offsets")
    return {"kind": "tensor", "offset": offset, "size": size, "count": len(values)}


def _ndarray(t: Any, offset: int) -> dict:
    """An ndarray argument's plan: its layout ``t`` is {shape {i32 dim_k}, data_ptr[, grad_ptr]}."""
    members = {e.get("name"): e for e in _elements(t)}
    if set(members) - {"grad_ptr"} != {"shape", "data_ptr"}:
        raise PlanError(f"an ndarray argument with members {sorted(map(str, members))}")
    shape = _elements(members["shape"].get("type"))
    if not 1 <= len(shape) <= MAX_DIMS or any(_scalar_code(e.get("type")) != 5 for e in shape):
        raise PlanError("an ndarray shape that is not 1 to 16 i32")
    if [e.get("offset") for e in shape] != [4 * k for k in range(len(shape))]:
        raise PlanError("an ndarray shape with unexpected offsets")
    out = {"kind": "ndarray", "offset": offset + int(members["shape"]["offset"]), "dims": len(shape),
           "data": offset + int(members["data_ptr"]["offset"])}
    pointee = ((members["data_ptr"].get("type") or {}).get("content") or {}).get("pointee_") or {}
    if pointee.get("type_kind") == 0:  # its elements' scalar type (the x64 launch reads its arrays so)
        out["type"] = _scalar_code(pointee)
    if "grad_ptr" in members:  # the arguments say needs_grad: read by the reverse-mode kernel only
        out["grad"] = offset + int(members["grad_ptr"]["offset"])
    return out




def arguments(entry: dict, where: str) -> dict:
    """Where each argument of a metadata kernel entry goes in its argument struct, checked (the x64 launch's plan,
    which has no tasks to launch): ``{"args": [...], "args_size": N}`` and, for a kernel that returns values,
    ``results`` and ``result_size``."""
    plan = {**laid_out(entry), **results_of(entry)}
    check_arguments(plan, where)
    return plan


def laid_out(entry: dict) -> dict:
    """``args`` and ``args_size`` of a metadata kernel entry (``args_type``: the offsets Taichi laid out)."""
    args_type = entry.get("args_type")
    members = {e.get("name"): e for e in _elements(args_type)} if entry.get("args") else {}
    args: list[dict] = [{}] * len(entry.get("args") or [])
    for ids, arg in entry.get("args") or []:
        if not isinstance(ids, list) or len(ids) != 1 or not isinstance(arg, dict):
            raise PlanError("an argument id that is not one index")
        index = int(ids[0])
        member = members.get(f"arg_{index}")
        if not 0 <= index < len(args) or member is None:
            raise PlanError(f"argument {index} is not laid out")
        args[index] = _argument(arg, member.get("type"), int(member.get("offset", -1)))
    return {"args": args, "args_size": int(entry.get("args_size", 0))}


def results_of(entry: dict) -> dict:
    """A returning kernel's plan's ``results`` and ``result_size``; nothing for another kernel."""
    if not returns(entry):
        return {}
    return {"results": results(entry), "result_size": int(entry.get("ret_size", 0))}


def returns(entry: dict) -> bool:
    """Whether a kernel's metadata entry says it returns values."""
    return bool(entry.get("ret_size", 0) or entry.get("rets"))


def results(entry: dict) -> list[dict]:
    """Where a kernel's return values lie in its result buffer (``ret_type``: a struct ``ret_0``, ``ret_1``...
    as Taichi's LLVM code generator writes it): each a scalar (``type``, ``offset``) or a vector or matrix of one
    scalar type (``shape`` too: its elements in row-major order); PlanError for what else a kernel returns."""
    rets = _elements(entry.get("ret_type"))
    if [e.get("name") for e in rets] != [f"ret_{k}" for k in range(len(rets))] or not rets:
        raise PlanError("return values not laid out as ret_0, ret_1, ...")
    out = []
    for e in rets:
        t, offset = e.get("type"), e.get("offset")
        if isinstance(t, dict) and t.get("type_kind") == 2:  # a vector or matrix
            content = t.get("content") or {}
            shape = content.get("shape_")
            if not isinstance(shape, list) or not 1 <= len(shape) <= 2 or not all(type(n) is int for n in shape):
                raise PlanError("a returned vector or matrix of unknown shape")
            out.append({"type": _scalar_code(content.get("element_")), "offset": offset, "shape": shape})
        elif isinstance(t, dict) and t.get("type_kind") == 0:
            out.append({"type": _scalar_code(t), "offset": offset})
        else:
            raise PlanError("returns a struct (taichi_aot reads scalars, vectors and matrices)")
    return out


def checked_int(value: Any, low: int, high: int, what: str) -> int:
    """``value``, an int from ``low`` to ``high``; else CorruptedDataError naming ``what``."""
    if type(value) is not int or not low <= value <= high:
        raise CorruptedDataError(f"{what} {value!r} is out of range ({low} to {high})")
    return value


def check_arguments(plan: dict, where: str) -> dict:
    """The arguments and results of ``plan`` (:func:`arguments`', or a CUDA plan's: ``ptx.plan.check``): every
    write inside ``args_size`` and the results' bytes, aligned; else CorruptedDataError."""
    if not isinstance(plan.get("args"), list):
        raise CorruptedDataError(f"{where}: a kernel plan without args")
    size = checked_int(plan.get("args_size"), 0, MAX_ARGS_SIZE, f"{where}: args_size")
    for i, arg in enumerate(plan["args"]):
        what = f"{where}: argument {i}"
        kind = arg.get("kind") if isinstance(arg, dict) else None
        offset = checked_int(arg.get("offset") if kind else None, 0, size, f"{what}'s offset")
        if kind == "ndarray":
            _check_ndarray(arg, offset, size, what)
        elif kind in ("scalar", "tensor"):
            _check_value(arg, offset, size, what)
        else:
            raise CorruptedDataError(f"{what}: unknown kind {kind!r}")
    if "results" in plan:
        _check_results(plan["results"], plan.get("result_size"), where)
    return plan


def _check_results(rets: Any, size: Any, where: str) -> None:
    """Each return value aligned and inside the ``size`` bytes of results, which fit the stand-in's result buffer."""
    size = checked_int(size, 1, RESULT_BYTES, f"{where}: the results' size")
    if not isinstance(rets, list) or not rets:
        raise CorruptedDataError(f"{where}: a kernel plan with a results' size and no results")
    for i, ret in enumerate(rets):
        what = f"{where}: return value {i}"
        code = ret.get("type") if isinstance(ret, dict) else None
        if code not in SCALAR_SIZES:
            raise CorruptedDataError(f"{what}: an unknown scalar type {code!r}")
        width = SCALAR_SIZES[code]
        count = 1
        for n in ret.get("shape") or []:
            count *= checked_int(n, 1, RESULT_BYTES, f"{what}'s shape")
        offset = checked_int(ret.get("offset"), 0, size - width, f"{what}'s offset")
        if offset % width or offset + width * count > size:
            raise CorruptedDataError(f"{what}: misaligned or past the results ({size} bytes)")


def _check_value(arg: dict, offset: int, size: int, what: str) -> None:
    """A scalar's or vector's elements (1 to 64, of 1, 2, 4 or 8 bytes) aligned at ``offset``, inside the ``size``
    bytes of the arguments."""
    width = checked_int(arg.get("size"), 1, 8, f"{what}'s element size")
    if width not in (1, 2, 4, 8) or offset % width:
        raise CorruptedDataError(f"{what}: a misaligned or odd-sized value")
    count = checked_int(arg.get("count", 1), 1, 64, f"{what}'s element count")
    if offset + width * count > size:
        raise CorruptedDataError(f"{what} ends past the arguments ({size} bytes)")


def _check_ndarray(arg: dict, offset: int, size: int, what: str) -> None:
    """An ndarray's shape (at ``offset``), data pointer and gradient pointer inside the ``size`` bytes of the
    arguments, aligned, none overlapping another."""
    dims = checked_int(arg.get("dims"), 1, MAX_DIMS, f"{what}'s dims")
    data = checked_int(arg.get("data"), 0, size - 8, f"{what}'s data pointer offset")
    if offset % 4 or data % 8 or offset + 4 * dims > size or (data < offset + 4 * dims and offset < data + 8):
        raise CorruptedDataError(f"{what}: its shape and pointer overlap or leave the arguments")
    if "grad" in arg:
        grad = checked_int(arg.get("grad"), 8, size - 8, f"{what}'s gradient pointer offset")
        if grad % 8 or (grad < offset + 4 * dims and offset < grad + 8) or abs(grad - data) < 8:
            raise CorruptedDataError(f"{what}: its gradient pointer overlaps its shape or data pointer")
