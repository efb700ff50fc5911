"""torch DDP over the GPUs of one host, with a taichi_aot op in the model's forward and backward.

    torchrun --nproc_per_node=2 benchmarks/ddp_op.py [--steps N] [--batch B] [--width W] [--module FOLDER] [--cpu]

Each process (rank) drives its GPU (``cuda:<LOCAL_RANK>``) with taichi_aot's own CUDA runtime of that GPU. The model
is Linear -> the op -> Linear, the op SiLU written as a Taichi kernel (``silu`` below, built with its reverse-mode
kernel and PTX: its backward runs the reverse kernel). Rank 0 builds the module into a temporary folder (Taichi and
llvmlite: the ``build`` and ``ptx`` extras) unless ``--module`` names one built so. Rank 0 prints:

* whether it is right: after the steps, the DDP model's parameters equal, on every rank, those of the same model
  with torch's own SiLU in the op's place trained the same way (same initial weights, same batches), within float32
  rounding;
* the step time under DDP (every GPU a batch of its own, gradients all-reduced) beside one GPU's step of the same
  model without DDP (the same batch), their ratio (weak scaling: 1.0 is perfect), and torch's own SiLU under DDP.

``--cpu`` runs the same on the CPU (gloo, an x64 runtime a process, the kernels built for x64): a check of the
script where there is no GPU, not a measurement.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

KERNELS = '''
import taichi as ti

A = ti.types.ndarray(dtype=ti.f32, ndim=1, needs_grad=True)


@ti.aot.export
@ti.kernel
def silu(x: A, y: A):
    for i in x:
        y[i] = x[i] / (1.0 + ti.exp(-x[i]))
'''


def _build(folder: str, arch: str) -> str:
    """The kernels above built for ``arch`` (with their reverse kernels; PTX on CUDA) into ``folder``; the module's
    path."""
    source, out = os.path.join(folder, "ddp_kernels.py"), os.path.join(folder, "ddp_kernels")
    with open(source, "w", encoding="utf-8") as f:
        f.write(KERNELS)
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "build", source, "--arch", arch, "-o", out],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"ddp_op: building the kernels failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return out


def _module(args: argparse.Namespace, rank: int, dist: Any, folder: str) -> str:
    """The module's path on every rank: ``--module``, or rank 0's build, sent to the others."""
    path = [args.module]
    if args.module is None and rank == 0:
        path = [_build(folder, "x64" if args.cpu else "cuda")]
    dist.broadcast_object_list(path, src=0)
    return str(path[0])


def _model(act: Any, width: int, device: str) -> Any:
    """Linear -> ``act`` (on the flattened activations) -> Linear, the same initial weights every time."""
    import torch

    class Act(torch.nn.Module):
        def __init__(self, fn: Any):
            super().__init__()
            self.fn = fn

        def forward(self, h: Any) -> Any:
            return self.fn(h.contiguous().reshape(-1)).reshape(h.shape)

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, width), Act(act), torch.nn.Linear(width, width)).to(device)


def _train(net: Any, data: list) -> float:
    """Train ``net`` on ``data`` (pairs of input and target) with SGD; the seconds a step took."""
    import torch

    opt = torch.optim.SGD(net.parameters(), lr=1e-2)
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    start = time.perf_counter()
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    sync()
    return (time.perf_counter() - start) / max(len(data), 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="training steps timed (and checked)")
    parser.add_argument("--batch", type=int, default=8192, help="rows a GPU a step")
    parser.add_argument("--width", type=int, default=2048, help="the Linear layers' width")
    parser.add_argument("--module", help="the kernels built already (a folder of `taichi_aot build --arch cuda`)")
    parser.add_argument("--cpu", action="store_true", help="on the CPU (gloo, x64): a check of the script")
    args = parser.parse_args()
    import torch
    import torch.distributed as dist
    from torch.nn.functional import silu
    from torch.nn.parallel import DistributedDataParallel

    import taichi_aot.torch as tt
    from taichi_aot import Runtime

    if "LOCAL_RANK" not in os.environ:
        sys.exit("ddp_op: run it under torchrun (torchrun --nproc_per_node=2 benchmarks/ddp_op.py)")
    rank, local, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    device = "cpu" if args.cpu else f"cuda:{local}"
    if not args.cpu:
        torch.cuda.set_device(local)
    dist.init_process_group("gloo" if args.cpu else "nccl")
    with tempfile.TemporaryDirectory() as folder:
        path = _module(args, rank, dist, folder)
        rt = Runtime("x64") if args.cpu else Runtime("cuda", device_index=local)
        kernel = rt.load_module(path).kernels["silu"]
        op = tt.op(kernel, {"y": "x"})
        gen = torch.Generator(device=device).manual_seed(1 + rank)  # a batch of its own on every rank
        data = [(torch.randn(args.batch, args.width, device=device, generator=gen),
                 torch.randn(args.batch, args.width, device=device, generator=gen)) for _ in range(args.steps)]
        warm = data[:3]
        ids = None if args.cpu else [local]
        ours = DistributedDataParallel(_model(op, args.width, device), device_ids=ids)
        theirs = DistributedDataParallel(_model(silu, args.width, device), device_ids=ids)
        _train(ours, warm)
        _train(theirs, warm)
        dist.barrier()
        ddp = _train(ours, data)
        dist.barrier()
        builtin = _train(theirs, data)
        worst = max((a - b).abs().max().item() for a, b in zip(ours.parameters(), theirs.parameters()))
        scale = max(b.abs().max().item() for b in theirs.parameters())
        right = torch.tensor([1 if worst <= 1e-4 * max(scale, 1.0) else 0], device=device)
        dist.all_reduce(right, op=dist.ReduceOp.MIN)
        dist.barrier()
        one = None
        if rank == 0:  # one GPU, no DDP: the same model, the same batch a step
            alone = _model(op, args.width, device)
            _train(alone, warm)
            one = _train(alone, data)
        dist.barrier()
        if rank == 0:
            assert one is not None
            where = "CPU processes" if args.cpu else f"GPUs ({torch.cuda.get_device_name(local)})"
            print(f"ddp_op: {world} {where}, batch {args.batch} a GPU, width "
                  f"{args.width}, {args.steps} steps; launchers {kernel.module.launchers()}")
            print(f"right: {'yes' if int(right.item()) else 'NO'} (the DDP model's parameters against torch's own "
                  f"SiLU's on every rank; largest difference here {worst:.3g})")
            unit = "processes" if args.cpu else "GPUs"
            print(f"step under DDP on {world} {unit}: {ddp * 1e3:.3f} ms; one without DDP: {one * 1e3:.3f} ms; "
                  f"ratio {ddp / one:.3f} (1.0: perfect weak scaling); torch's own SiLU under DDP: "
                  f"{builtin * 1e3:.3f} ms ({ddp / builtin:.3f}x)")
        rt.close()
    dist.destroy_process_group()
    return 0 if int(right.item()) else 1


if __name__ == "__main__":
    sys.exit(main())
