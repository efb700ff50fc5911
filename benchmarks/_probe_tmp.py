import time, timeit, numpy as np, sys
import torch, cupy, jax, jax.numpy as jnp
from taichi_aot import Runtime, Arch
from taichi_aot import _foreign
from taichi_aot.cli.cache import taichi_module
from taichi_aot.metadata import ArgInfo
from taichi_aot.enums import DataType, Access
rt = Runtime(Arch.CUDA)
mod = rt.load_module(taichi_module("bench", "cuda"))
tiny = mod.kernels["tiny"]
tiny3 = mod.kernels["tiny3"].declare_access({1: "read", 2: "read"})
spec = ArgInfo(0, "x", "ndarray", DataType.F32, 1, access=Access.READ)
calls = {"slow": 0}
orig = _foreign.ForeignArgs._cuda_argument
def counted(self, *a, **k):
    calls["slow"] += 1
    return orig(self, *a, **k)
_foreign.ForeignArgs._cuda_argument = counted
gpu = [d for d in jax.devices() if d.platform == "gpu"][0]
arrays = {"torch": torch.zeros(16, device="cuda"), "cupy": cupy.zeros(16, cupy.float32),
          "jax": jax.device_put(jnp.zeros(16, jnp.float32), gpu)}
nd = rt.ndarray((16,), np.float32)
def t(stmt, g, n=20000):
    return min(timeit.repeat(stmt, globals=g, number=n, repeat=5)) / n * 1e6
print("launch nd", t("tiny(nd, 1.0)", dict(tiny=tiny, nd=nd)))
pack, slot = tiny3._plan[1]
print("pack nd", t("pack(nd, rt, slot)", dict(pack=pack, slot=slot, rt=rt, nd=nd)))
for name, a in arrays.items():
    fp = _foreign.print_of(type(a))
    g = dict(a=a, fp=fp, rt=rt, spec=spec, tiny=tiny, _foreign=_foreign)
    rt.foreign.argument(a, spec, "x")
    calls["slow"] = 0
    pack, slot = tiny3._plan[1]
    g.update(pack=pack, slot=slot)
    pack(a, rt, slot)
    hit = slot.hits.get(id(a))
    print(name, "hit", type(hit).__name__, hit and hit.sig, hit and hit.cls, type(a), hit and hit.fresh(a, False))
    g["hit"] = hit
    if hit is not None:
        print(name, "fresh", t("hit.fresh(a, False)", g), "get", t("slot.hits.get(id(a))", g))
    import cProfile, pstats
    pr = cProfile.Profile(); pr.enable()
    for _ in range(2000): pack(a, rt, slot)
    pr.disable(); pstats.Stats(pr).sort_stats("tottime").print_stats(6)
    r = {"print": t("fp(a)", g), "pack": t("pack(a, rt, slot)", g),
         "cai": t("a.__cuda_array_interface__", g, 2000), "print_of": t("_foreign.print_of(type(a))", g)}
    if name != "jax":
        r["launch"] = t("tiny(a, 1.0)", g)
    rt.wait()
    print(name, type(a).__module__, fp, {k: round(v, 3) for k, v in r.items()}, "slow calls", calls["slow"])
