"""An LLVM module's metadata.tcb (what libtaichi_c_api reads) checked against metadata.json (what taichi_aot
checks), and both against the kernels' code, before C reads any of it.

The hostile modules here are written consistently: metadata.json edited, and metadata.tcb written from it the
way Taichi's binary serializer writes it, so only the checks of meaning can refuse them. Each was a crash, a
wrong value or, for a task the code lacks, libtaichi_c_api deleting the module's files."""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from typing import Any, Callable

import numpy as np
import pytest

import taichi_aot as ta
from conftest import graphs_tcb, require_arch
from taichi_aot import Arch, Runtime, metadata
from taichi_aot.errors import CorruptedDataError
from taichi_aot.metadata import tcb

HERE = os.path.dirname(os.path.abspath(__file__))


def _cache(folder: str) -> dict:
    with open(os.path.join(folder, "metadata.json")) as f:
        return metadata.parse_text(f.read())["cache"]


def _rewritten(modules, tmp_path, edit: Callable[[dict], Any]) -> str:
    """A copy of the x64 test module with ``edit`` applied to its metadata, in both files: metadata.json in
    Taichi's text form (its version a brace list, as Taichi writes it) and metadata.tcb written from it."""
    folder = str(tmp_path / "m")
    shutil.copytree(modules.path(Arch.X64), folder)
    cache = _cache(folder)
    edit(cache)
    version = cache["version"]
    text = json.dumps({"cache": cache}).replace(f'"version": {json.dumps(version)}',
                                                '"version": {' + ", ".join(map(str, version)) + "}", 1)
    with open(os.path.join(folder, "metadata.json"), "w") as f:
        f.write(text)
    try:
        data = tcb.encode(cache).data
    except CorruptedDataError:  # a record the binary serializer cannot write: metadata.tcb stays Taichi's
        return folder
    with open(os.path.join(folder, "metadata.tcb"), "wb") as f:
        f.write(data)
    return folder


def test_taichis_own_modules_write_the_same_record_twice(modules, cuda_modules):
    """Taichi's x64 and CUDA modules: metadata.json written as the binary serializer writes is metadata.tcb,
    byte for byte, and each passes the checks of meaning."""
    folders = [modules.path(Arch.X64)]
    for d in sorted(os.listdir(cuda_modules)):  # a module, or a folder of them (the corpus)
        if d in ("taichi-ptx", "ir"):  # Taichi's own PTX of some kernels, and IR alone: references, no modules
            continue
        folder = os.path.join(cuda_modules, d)
        inner = [] if os.path.isfile(os.path.join(folder, "metadata.tcb")) else sorted(os.listdir(folder))
        folders += [os.path.join(folder, m) for m in inner] if inner else [folder]
    assert len(folders) >= 16
    for folder in folders:
        with open(os.path.join(folder, "metadata.tcb"), "rb") as f:
            assert tcb.encode(_cache(folder)).data == f.read(), folder
        info = metadata.read_module(folder)
        assert info.kernels


@pytest.fixture(scope="module")
def edges(tmp_path_factory) -> str:
    """tests/llvm_edges.py's module, compiled by Taichi: a field, a kernel named in Cyrillic, one without arguments."""
    import subprocess

    out = str(tmp_path_factory.mktemp("llvm-edges") / "m")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "llvm_edges.py"), out], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_what_taichi_writes_at_the_llvm_edges_loads_and_runs(edges):
    """A module with an SNode field (the text serializer quotes the "fields" map's integer keys), a kernel named in
    Cyrillic (LLVM quotes its functions' names, with escapes) and one without arguments: each check passes it."""
    require_arch(Arch.X64)
    with open(os.path.join(edges, "metadata.tcb"), "rb") as f:
        assert tcb.encode(_cache(edges)).data == f.read()
    with open(os.path.join(edges, "metadata.json")) as f:
        assert '"fields": {"' in f.read()  # a quoted key: the case at hand
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(edges)
        x, out = rt.ndarray((4,), np.float32), rt.ndarray((8,), np.float32)
        mod.kernels["ядро"](x)
        mod.kernels["fill_field"](1.5)
        mod.kernels["read_field"](out)
        mod.kernels["nothing"]()
        rt.wait()
        assert x.to_numpy().tolist() == [0.0, 2.0, 4.0, 6.0]
        assert out.to_numpy().tolist() == [1.5 + i for i in range(8)]


def _flipped(data: bytes, bits: list[int]) -> bytes:
    out = bytearray(data)
    for at in bits:
        out[at // 8] ^= 1 << (at % 8)
    return bytes(out)


def test_every_byte_of_a_metadata_tcb_damaged_is_refused(modules):
    """The x64 test module's metadata.tcb with each of its bytes inverted in turn, and 300 seeded sets of 4 flipped
    bits: each is a CorruptedDataError naming the byte and its field (before, one in 300 ran and gave a wrong value,
    and seeded damage killed the process). A sample goes through the whole load."""
    folder = modules.path(Arch.X64)
    with open(os.path.join(folder, "metadata.tcb"), "rb") as f:
        good = f.read()
    expected = tcb.encode(_cache(folder))
    expected.verify(good)
    rng = random.Random(42)
    variants = [_flipped(good, [at * 8 + b for b in range(8)]) for at in range(len(good))]
    variants += [_flipped(good, rng.sample(range(len(good) * 8), 4)) for _ in range(300)]
    fields = set()
    for data in variants:
        with pytest.raises(CorruptedDataError, match=r"metadata\.tcb") as e:
            expected.verify(data)
        fields.add(str(e.value).split(" in ")[-1])
    assert any("args_type" in f for f in fields) and any("tasks" in f for f in fields)
    with pytest.raises(CorruptedDataError, match=r"byte 0, in the file's length"):
        expected.verify(b"\0" + good[1:])
    with pytest.raises(CorruptedDataError, match=r"bytes where metadata\.json makes"):
        expected.verify(good[: len(good) // 2])


def test_a_damaged_metadata_tcb_is_refused_at_load(modules, tmp_path):
    """Through the whole load (object layer, flat API, info): a refusal naming metadata.tcb, made before C reads
    it (no child process needed), and the runtime carries on."""
    from taichi_aot import capi

    require_arch(Arch.X64)
    folder = tmp_path / "bad"
    shutil.copytree(modules.path(Arch.X64), folder)
    path = folder / "metadata.tcb"
    good = path.read_bytes()
    rng = random.Random(5)
    with Runtime(Arch.X64) as rt:
        for at in [*rng.sample(range(8, len(good)), 12), 0]:
            path.write_bytes(_flipped(good, [at * 8 + rng.randrange(8)]))
            with pytest.raises(ta.CorruptedDataError, match=r"metadata\.tcb"):
                rt.load_module(folder)
            with pytest.raises(ta.CorruptedDataError, match=r"metadata\.tcb"):
                capi.load_aot_module(rt.handle, str(folder))
            with pytest.raises(ta.CorruptedDataError, match=r"metadata\.tcb"):
                metadata.read_module(str(folder))
        path.write_bytes(good)
        x = rt.ndarray((4, 4), np.int32)
        rt.load_module(folder).kernels["fill_i32"](x, 3)
        rt.wait()
        i, j = np.indices((4, 4))
        assert (x.to_numpy() == 3 + 100 * i + j).all()  # fill_i32: x[i, j] = v + 100 i + j


def _swap(cache: dict, a: str, b: str, fields: tuple[str, ...]) -> None:
    ka, kb = cache["kernels"][a], cache["kernels"][b]
    for f in fields:
        ka[f], kb[f] = kb[f], ka[f]


HOSTILE = {
    # the metadata of two kernels swapped (a SIGSEGV at launch before)
    "swapped arguments": (lambda c: _swap(c, "add", "fill_i32", ("args", "args_type", "args_size")),
                          r"kernel '(add|fill_i32)': add\.ll's|fill_i32\.ll's .* reads its arguments as"),
    "one argument's type": (lambda c: c["kernels"]["fill_i32"]["args_type"]["content"]["elements_"][1]["type"]
                            ["content"].update(type=6),  # i32 -> i64 in the layout, the code reads i32
                            r"kernel 'fill_i32', argument 1: recorded as i32, laid out as i64"),
    "an offset moved": (lambda c: c["kernels"]["add"]["args_type"]["content"]["elements_"][2].update(offset=36),
                        r"kernel 'add': argument layout: 'arg_2' at offset 36, where a C struct has it at 32"),
    "the layout's size": (lambda c: c["kernels"]["add"].update(args_size=8),
                          r"kernel 'add': an argument layout of 8 bytes"),
    "a task the code lacks": (lambda c: c["kernels"]["fill_i32"]["compiled_data"]["tasks"][0].update(name="gone"),
                              r"runs task 'gone', which fill_i32\.ll does not define"),
    "an ndarray of another rank": (lambda c: c["kernels"]["fill_i32"]["args"][1][1].update(total_dim=3),
                                   r"an ndarray of 3 dimensions"),
    "an argument numbered twice": (lambda c: c["kernels"]["add"]["args"][0][0].__setitem__(0, 1),
                                   r"not 0, 1, \.\.\. once each"),
    "a type kind C aborts on": (lambda c: c["kernels"]["add"]["ret_type"].update(type_kind=7),
                                r"ret_type\.type_kind: 7 is no type kind"),
    "another kernel's name": (lambda c: c["kernels"]["add"].update(kernel_key="fill_i32"),
                              r"kernel 'add': recorded as kernel 'fill_i32'"),
    # numbers past what anything holds: typed, at once, with no large allocation
    "an ndarray of 2**26 dimensions": (lambda c: _param(c, "add", 0).update(total_dim=1 << 26),
                                       r"an ndarray of 67108864 dimensions"),
    "an ndarray of 2**64-1 dimensions": (lambda c: _param(c, "add", 0).update(total_dim=(1 << 64) - 1),
                                         r"an ndarray of 18446744073709551615 dimensions"),
    "a tensor of 2**31-1 ** 500 elements": (
        lambda c: _param(c, "add", 2)["dt_"].update(ptr_={"type_kind": 2, "content": {
            "shape_": [(1 << 31) - 1] * 500, "element_": {"type_kind": 0, "content": {"type": 1}}}}),
        r"argument 2: recorded as \[\? x float\]"),
    "a layout tensor of 100000 dimensions": (
        lambda c: c["kernels"]["add"]["args_type"]["content"]["elements_"][2].update(type={"type_kind": 2, "content": {
            "shape_": [3] * 100_000, "element_": {"type_kind": 0, "content": {"type": 1}}}}),
        r"a tensor of 100000 dimensions"),
    "a scalar laid out as an ndarray": (lambda c: _param(c, "fill_i32", 0).update(ptype=0),
                                        r"'fill_i32', argument 0: a scalar laid out as \{ \{ i32, i32 \}, i32\* \}"),
}


def _param(cache: dict, kernel: str, index: int) -> dict:
    return next(p for key, p in cache["kernels"][kernel]["args"] if key == [index])


@pytest.mark.parametrize("case", list(HOSTILE))
def test_consistent_hostile_llvm_metadata_is_refused(modules, tmp_path, case):
    """Metadata changed in both files, so that metadata.tcb is metadata.json: refused before C reads the module,
    naming the kernel; the module's files stay as they were."""
    require_arch(Arch.X64)
    edit, message = HOSTILE[case]
    folder = _rewritten(modules, tmp_path, edit)
    files = sorted(os.listdir(folder))
    with Runtime(Arch.X64) as rt:
        with pytest.raises(ta.CorruptedDataError, match=message):
            rt.load_module(folder)
        assert "add" in rt.load_module(modules.path(Arch.X64)).kernels
    assert sorted(os.listdir(folder)) == files  # libtaichi_c_api deletes a kernel's .ll when a task is missing


def test_the_rewriter_keeps_a_good_module_good(modules, tmp_path):
    """The tests' own rewriting, with no edit, gives a module that loads and runs: what refuses the hostile ones is
    the edit."""
    require_arch(Arch.X64)
    folder = _rewritten(modules, tmp_path, lambda c: None)
    with Runtime(Arch.X64) as rt:
        x, y = rt.ndarray((4,), np.float32), rt.ndarray((4,), np.float32)
        x.from_numpy(np.arange(4, dtype=np.float32))
        y.from_numpy(np.ones(4, np.float32))
        rt.load_module(folder).kernels["add"](x, y, 2.0)  # x += a y
        rt.wait()
        assert x.to_numpy().tolist() == [2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize("case,args,message", [
    ("binds fewer", [("a", 1, 1, 2, [])], r"binds 1 arguments, the kernel takes 3"),
    ("another dtype", [("a", 1, 1, 2, []), ("b", 5, 1, 2, []), ("s", 1, 0, 0, [])], r"argument 1 \('b'\)"),
    ("another rank", [("a", 1, 2, 2, []), ("b", 1, 1, 2, []), ("s", 1, 0, 0, [])], r"argument 0 \('a'\)"),
    ("a scalar for an ndarray", [("a", 1, 0, 0, []), ("b", 1, 1, 2, []), ("s", 1, 0, 0, [])], r"argument 0"),
])
def test_an_llvm_graph_binding_other_arguments_is_refused(modules, tmp_path, case, args, message):
    """graphs.tcb dispatches ``add(a: ndarray f32 1-D, b: ndarray f32 1-D, s: f32)``; a dispatch binding other kinds,
    dtypes or dimensions is refused at load (before, it ran on whatever lay there)."""
    folder = tmp_path / "g"
    shutil.copytree(modules.path(Arch.X64), folder)
    good = [("a", 1, 1, 2, []), ("b", 1, 1, 2, []), ("s", 1, 0, 0, [])]
    (folder / "graphs.tcb").write_bytes(graphs_tcb([("g", [("add", good)])]))
    assert list(metadata.read_module(str(folder)).graphs) == ["g"]
    (folder / "graphs.tcb").write_bytes(graphs_tcb([("g", [("add", args)])]))
    with pytest.raises(CorruptedDataError, match=message):
        metadata.read_module(str(folder))
    (folder / "graphs.tcb").write_bytes(graphs_tcb([("g", [("nothing", good)])]))
    with pytest.raises(CorruptedDataError, match=r"dispatch of 'nothing': no such kernel"):
        metadata.read_module(str(folder))


@pytest.mark.parametrize("where", ["everywhere", "the pool's counts", "the loop's end"])
def test_a_kernel_built_for_no_sane_thread_count_is_refused_at_load(modules, tmp_path, where):
    """A CPU kernel's ``.ll`` edited to a thread count of 0 or less, of more than a runtime may start, or of no number
    at all is refused at load, naming the file: before, libtaichi aborted the process at the first launch of 0
    threads, ran one of 2**31 - 1 for minutes, and ran none of the loop for an end of 0."""
    import re

    from taichi_aot import _cpus
    from taichi_aot.metadata import llvm_ir

    require_arch(Arch.X64)
    assert llvm_ir.MOST_THREADS == _cpus.MAX_THREADS
    with open(os.path.join(modules.path(Arch.X64), "add.ll")) as f:
        text = f.read()
    pool = re.compile(r"(i32 noundef )\d+(, i32 noundef )\d+(, i8\* noundef nonnull)")
    end = re.compile(r"(store <4 x i32> <i32 0, i32 )\d+(, i32 1, i32 1>)")
    assert len(pool.findall(text)) == 1 and len(end.findall(text)) == 1
    for count in ("0", str(2**31 - 1), str(llvm_ir.MOST_THREADS + 1), "-3", "lots"):
        edited = text
        if where != "the loop's end":
            edited = pool.sub(rf"\g<1>{count}\g<2>{count}\g<3>", edited)
        if where != "the pool's counts":
            edited = end.sub(rf"\g<1>{count}\g<2>", edited)
        folder = tmp_path / f"threads{count}"
        shutil.copytree(modules.path(Arch.X64), folder)
        (folder / "add.ll").write_text(edited)
        with pytest.raises(CorruptedDataError, match=rf"add\.ll runs its parallel loops on '{count}' threads, not a "
                                                     rf"number from 1 to {llvm_ir.MOST_THREADS}"):
            metadata.read_module(str(folder))
        with Runtime(Arch.X64) as rt, pytest.raises(CorruptedDataError, match=r"add\.ll .* build the module again"):
            rt.load_module(folder)
    folder = tmp_path / "most"  # the most a runtime may start is a count, and runs
    shutil.copytree(modules.path(Arch.X64), folder)
    (folder / "add.ll").write_text(end.sub(rf"\g<1>{llvm_ir.MOST_THREADS}\g<2>",
                                           pool.sub(rf"\g<1>{llvm_ir.MOST_THREADS}\g<2>{llvm_ir.MOST_THREADS}\g<3>",
                                                    text)))
    with Runtime(Arch.X64) as rt:
        x, y = rt.ndarray((4,), np.float32), rt.ndarray((4,), np.float32)
        x.from_numpy(np.arange(4, dtype=np.float32))
        y.from_numpy(np.ones(4, np.float32))
        rt.load_module(folder).kernels["add"](x, y, 2.0)
        rt.wait()
        assert x.to_numpy().tolist() == [2.0, 3.0, 4.0, 5.0]
