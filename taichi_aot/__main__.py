"""Command line: ``python -m taichi_aot`` (or ``taichi-aot``).

    archs             which backends work here, their devices and capabilities
    demo              compile a reaction-diffusion module with Taichi, run it through
                      taichi_aot on the best backend, print timings, write a PNG
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time


def cmd_archs(args: argparse.Namespace) -> int:
    from . import Runtime, capi

    print(f"libtaichi_c_api {capi.library.path} (C-API {capi.get_version()}, found via {capi.library.source})")
    for arch, status in capi.arch_status().items():
        if status.available:
            devices = "?" if status.device_count is None else status.device_count
            line = f"  {arch.name.lower():8} available, devices: {devices}"
            if args.caps:
                with Runtime(arch) as rt:
                    caps = rt.capabilities
                line += "".join(f"\n      {getattr(c, 'name', c)}={v}" for c, v in caps.items())
            print(line)
        else:
            print(f"  {arch.name.lower():8} unavailable: {status.reason}")
    return 0


def _demo_module(arch_name: str) -> str:
    """Compile (once, cached) the demo module for ``arch_name`` with Taichi in a child process."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_demo_source.py")  # not imported here
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    cache = os.environ.get("TAICHI_AOT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "taichi_aot")
    out = os.path.join(cache, f"demo-{arch_name}-{digest}")
    if os.path.isfile(os.path.join(out, "__content__")):
        return out
    tmp = out + f".tmp{os.getpid()}"
    proc = subprocess.run([sys.executable, source, arch_name, tmp], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"demo: Taichi could not compile the demo module for {arch_name}:\n{proc.stderr[-2000:]}")
    os.replace(tmp, out) if not os.path.exists(out) else None
    return out


def _progress(done: int, total: int, started: float) -> None:
    width = 30
    filled = int(width * done / total)
    rate = done / max(time.perf_counter() - started, 1e-9)
    sys.stderr.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} steps, {rate:,.0f} steps/s ")
    sys.stderr.flush()


def cmd_demo(args: argparse.Namespace) -> int:
    import numpy as np

    from . import Runtime
    from ._png import colormap, write_png

    with Runtime(args.arch) as rt:
        arch = rt.arch.name.lower()
        print(f"demo: Gray-Scott reaction-diffusion, {args.size}x{args.size}, {args.steps} steps on {arch}")
        t0 = time.perf_counter()
        path = _demo_module(arch)
        t1 = time.perf_counter()
        mod = rt.load_module(path)
        a = rt.ndarray((args.size, args.size), np.float32, (2,), host_access="none")
        b = rt.ndarray((args.size, args.size), np.float32, (2,), host_access="none")
        mod.kernels["seed"](a, max(args.size // 16, 4))
        step16 = mod.graphs["steps16"]
        rt.wait()
        t2 = time.perf_counter()
        launches = max(args.steps // 16, 1)
        started = time.perf_counter()
        for i in range(launches):
            step16(a=a, b=b, feed=0.037, kill=0.06)
            if (i + 1) % max(launches // 20, 1) == 0 or i + 1 == launches:
                rt.wait()
                _progress((i + 1) * 16, launches * 16, started)
        rt.wait()
        t3 = time.perf_counter()
        sys.stderr.write("\n")
        v = a.to_numpy()[..., 1]
        image = colormap((v - v.min()) / max(float(v.max() - v.min()), 1e-6))
        write_png(args.out, image)
        steps = launches * 16
        print(f"  compile (Taichi, cached after the first run): {t1 - t0:.2f} s")
        print(f"  load module + allocate + seed:                {t2 - t1:.3f} s")
        print(f"  {steps} steps ({launches} graph launches):      {t3 - t2:.3f} s, "
              f"{steps / (t3 - t2):,.0f} steps/s, {(t3 - t2) / steps * 1e6:.1f} us/step")
        print(f"  wrote {args.out} ({args.size}x{args.size}, v in [{v.min():.3f}, {v.max():.3f}])")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="taichi-aot", description="Run ahead-of-time compiled Taichi kernels.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("archs", help="which backends work here")
    p.add_argument("--caps", action="store_true", help="also list each backend's device capabilities")
    p.set_defaults(func=cmd_archs)
    p = sub.add_parser("demo", help="run a reaction-diffusion demo and write a picture")
    p.add_argument("--arch", default=None, help="backend (default: the best available)")
    p.add_argument("--size", type=int, default=256, help="grid side (default 256)")
    p.add_argument("--steps", type=int, default=4000, help="simulation steps (default 4000)")
    p.add_argument("--out", default="taichi_aot_demo.png", help="PNG to write")
    p.set_defaults(func=cmd_demo)
    args = parser.parse_args(argv)
    if getattr(args, "size", 64) < 32 or getattr(args, "steps", 16) < 16:
        parser.error("--size must be at least 32 and --steps at least 16")
    from .errors import TaichiError

    try:
        return args.func(args)
    except TaichiError as e:
        print(f"taichi-aot: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
