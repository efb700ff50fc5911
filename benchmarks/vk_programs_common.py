"""What benchmarks/vk_programs.py's programs share between Taichi's JIT run (vk_programs_kernels.py) and
taichi_aot's (vk_programs.py): their sizes, their arrays at the start, their steps as a caller writes them, and the
timing loop. Neither Taichi nor taichi_aot is imported here."""

import time

import numpy as np

MPM_N, MPM_G, MPM_SUBSTEPS = 32768, 64, 8  # the grid: sim_kernels.GRID
SPH_N, SPH_CELLS, SPH_MAX = 16384, 64, 48
SPH3_N, SPH3_CELLS, SPH3_MAX = 32768, 32, 32
#: A particle's mass: the rest density about 1 (32768 particles in a cube of side 0.6, h a cell's side).
SPH3_MASS = 0.216 / 32768
FEM_N, FEM_ITERS = 256, 20
NBODY_N, NBODY_SUBSTEPS, NBODY_SOFT = 4096, 4, 1e-3
#: The arrays whose last axis is an element (vec3): (program, name) -> element dimensions.
ELEM_NDIM = {("sph3", "x"): 1, ("sph3", "v"): 1, ("sph3", "force"): 1, ("nbody", "x"): 1, ("nbody", "v"): 1,
             ("nbody", "acc"): 1}


def initial() -> dict:
    """Each program's arrays at the start, the same in every run."""
    rng = np.random.default_rng(0)
    mpm_x = (0.2 + 0.6 * rng.random((MPM_N, 2))).astype(np.float32)
    sph_x = (0.3 + 0.4 * rng.random((SPH_N, 2))).astype(np.float32)
    b = rng.random((FEM_N, FEM_N)).astype(np.float32)
    sph3_x = (0.2 + 0.6 * rng.random((SPH3_N, 3))).astype(np.float32)
    nbody_x = rng.standard_normal((NBODY_N, 3)).astype(np.float32)
    cells = (SPH3_CELLS,) * 3
    return {
        "mpm": {"x": mpm_x, "v": np.zeros((MPM_N, 2), np.float32), "grid_v": np.zeros((MPM_G, MPM_G, 2), np.float32),
                "grid_m": np.zeros((MPM_G, MPM_G), np.float32)},
        "sph": {"x": sph_x, "v": np.zeros((SPH_N, 2), np.float32), "count": np.zeros((SPH_CELLS, SPH_CELLS), np.int32),
                "members": np.zeros((SPH_CELLS, SPH_CELLS, SPH_MAX), np.int32), "rho": np.zeros(SPH_N, np.float32)},
        "sph3": {"x": sph3_x, "v": np.zeros((SPH3_N, 3), np.float32), "count": np.zeros(cells, np.int32),
                 "members": np.zeros((*cells, SPH3_MAX), np.int32), "rho": np.zeros(SPH3_N, np.float32),
                 "pressure": np.zeros(SPH3_N, np.float32), "force": np.zeros((SPH3_N, 3), np.float32)},
        "fem": {"x": np.zeros((FEM_N, FEM_N), np.float32), "r": b, "p": b.copy(),
                "ap": np.zeros((FEM_N, FEM_N), np.float32), "rr": np.array(float((b * b).sum()), np.float32),
                "rr_new": np.zeros((), np.float32), "pap": np.zeros((), np.float32)},
        "nbody": {"x": nbody_x, "v": np.zeros((NBODY_N, 3), np.float32), "acc": np.zeros((NBODY_N, 3), np.float32)},
    }


def steps(k: dict, a: dict, graph=None) -> dict:
    """Each program's step, as a caller writes it: ``k`` the kernels, ``a`` the arrays; ``graph``: the MPM substep
    as one graph (a module's), else its four kernels."""
    dt = 1e-4

    def mpm():
        m = a["mpm"]
        for _ in range(MPM_SUBSTEPS):
            if graph is not None:
                graph(x=m["x"], v=m["v"], grid_v=m["grid_v"], grid_m=m["grid_m"], dt=dt, gravity=-9.8)
            else:
                k["mpm_clear_grid"](m["grid_v"], m["grid_m"])
                k["mpm_p2g"](m["x"], m["v"], m["grid_v"], m["grid_m"])
                k["mpm_grid_update"](m["grid_v"], m["grid_m"], dt, -9.8)
                k["mpm_g2p"](m["x"], m["v"], m["grid_v"], dt)

    def sph():
        s = a["sph"]
        k["sph_clear"](s["count"])
        k["sph_bin"](s["x"], s["count"], s["members"])
        k["sph_density"](s["x"], s["count"], s["members"], s["rho"])
        k["sph_force"](s["x"], s["v"], s["count"], s["members"], s["rho"], 2e-5)

    def sph3():
        s = a["sph3"]
        k["sph3_clear"](s["count"])
        k["sph3_bin"](s["x"], s["count"], s["members"])
        k["sph3_density"](s["x"], s["count"], s["members"], s["rho"], s["pressure"])
        k["sph3_force"](s["x"], s["v"], s["count"], s["members"], s["rho"], s["pressure"], s["force"])
        k["sph3_integrate"](s["x"], s["v"], s["rho"], s["force"], 1e-5)
        k["sph3_boundary"](s["x"], s["v"])

    def fem():
        f = a["fem"]
        for _ in range(FEM_ITERS):
            k["fem_matvec"](f["p"], f["ap"])
            k["fem_dot"](f["p"], f["ap"], f["pap"])
            k["fem_update_x_r"](f["x"], f["r"], f["p"], f["ap"], f["rr"], f["pap"])
            k["fem_dot"](f["r"], f["r"], f["rr_new"])
            k["fem_update_p"](f["r"], f["p"], f["rr_new"], f["rr"])
            k["fem_swap"](f["rr_new"], f["rr"])

    def nbody():
        b = a["nbody"]
        for _ in range(NBODY_SUBSTEPS):
            k["nbody_accel"](b["x"], b["acc"])
            k["nbody_kick_drift"](b["x"], b["v"], b["acc"], 1e-3)

    return {"mpm": mpm, "sph": sph, "sph3": sph3, "fem": fem, "nbody": nbody}


#: What a program's result is read from (a checksum compares runs).
RESULT = {"mpm": "x", "sph": "x", "sph3": "x", "fem": "x", "nbody": "x"}


def time_steps(step, sync, n: int, rounds: int) -> list:
    """Milliseconds a step: ``rounds`` samples of ``n`` steps each, after one warm-up round."""
    step()
    sync()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        out.append((time.perf_counter() - t0) / n * 1e3)
    return out
