"""Closes under other threads' launches, many rounds in one process: the stress that ``tests/test_close_stress.py`` runs
in a child (a signal there is a failed test, not a dead suite), and the GPU run repeats (``benchmarks/gpu_run.sh``).

``python tests/close_stress.py MODULE --arch vulkan|x64 --target arrays|images|module|runtime --launcher vulkan|taichi
--rounds N``

Each round makes a runtime (Vulkan, or x64: ``--arch``) and loads the module with the launcher asked for; four threads
launch through it (kernels, graphs, bound launches, replays of a recorded sequence, numpy arguments, textures on
Vulkan, host copies on x64) with arrays and images of their own; the owner thread closes the target under them after
a short, varied delay. Every call of a worker's comes
wholly before the close or raises a typed error (ClosedError, or InvalidStateError where libtaichi refuses a call on a
closed runtime); anything else, a worker that does not end, or a value that is not the kernels' own fails the round
(exit 1, said on stderr). A signal kills the process: the caller sees its exit status.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import threading
import time

import numpy as np

from taichi_aot import Arch, ClosedError, ImageLayout, InvalidStateError, Runtime, Texture, capi

TARGETS = ("arrays", "images", "module", "runtime")
#: What each arch's rounds close, and the launchers its module is loaded with (x64: no images; libtaichi's launch).
ARCH_TARGETS = {"vulkan": TARGETS, "x64": ("arrays", "module", "runtime")}
ARCH_LAUNCHERS = {"vulkan": ("vulkan", "taichi"), "x64": ("taichi",)}
WORKERS = 4
SIZE = 4096


class Round:
    """One round's runtime, module and the workers' objects."""

    def __init__(self, path: str, launcher: str, target: str, seed: int, arch: str = "vulkan"):
        self.rt = Runtime(Arch.VULKAN if arch == "vulkan" else Arch.X64)
        self.mod = self.rt.load_module(path, launcher=launcher)
        self.target, self.rng = target, random.Random(seed)
        self.arrays = [(self.rt.ndarray((SIZE,), np.float32), self.rt.ndarray_from_numpy(np.ones(SIZE, np.float32)))
                       for _ in range(WORKERS)]
        self.images = []
        for _ in range(WORKERS if arch == "vulkan" else 0):
            image = self.rt.allocate_image("2d", (16, 8), "r32f")
            image.transition(ImageLayout.SHADER_READ_WRITE)
            self.images.append(image)
        add, twice = self.mod.kernels["add"], self.mod.graphs["add_twice"]
        self.bound, self.sequences = [], []
        for x, y in self.arrays:  # recorded here: a runtime records one sequence at a time
            self.bound.append(add.bind(x, y, 1.0))
            with self.rt.record() as seq:
                add(x, y, 1.0)
                twice(x=x, y=y, a=0.5)
            self.sequences.append(seq)
        self.go = threading.Barrier(WORKERS + 1)
        self.failures: list[str] = []
        self.launched = [0] * WORKERS

    def work(self, i: int) -> None:
        """Worker ``i``'s launches until a typed error says its objects (or the runtime) are closed."""
        kernels, graphs = self.mod.kernels, self.mod.graphs
        add, twice, tex_write = kernels["add"], graphs["add_twice"], kernels.get("tex_write")
        x, y = self.arrays[i]
        image = self.images[i] if self.images else None
        host = np.zeros(SIZE, np.float32)
        bound, seq = self.bound[i], self.sequences[i]
        self.go.wait()
        step = 0
        while True:
            try:
                which = step % 6
                if which == 0:
                    add(x, y, 1.0)
                elif which == 1:
                    twice(x=x, y=y, a=0.5)
                elif which == 2:
                    bound()
                elif which == 3:
                    seq.replay(2)
                elif which == 4:
                    add(host, y, 1.0)  # a numpy argument: staged or imported, copied back
                elif tex_write is not None:
                    tex_write(Texture(image), 1.0, 16, 8)
                else:  # x64: host copies in and out
                    x.from_numpy(host)
                    x.to_numpy(out=host)
                step += 1
                self.launched[i] = step
                if step % 64 == 0:
                    self.rt.wait()
            except (ClosedError, InvalidStateError):
                return
            except BaseException as e:  # the round reads it
                self.failures.append(f"worker {i} at step {step}: {e!r}")
                return
            if step > 200_000:
                self.failures.append(f"worker {i}: no close reached it")
                return

    def close_target(self) -> None:
        if self.target == "arrays":
            for x, y in self.arrays:
                x.close()
                y.close()
        elif self.target == "images":
            for image in self.images:
                image.close()
        elif self.target == "module":
            self.mod.close()
        else:
            self.rt.close()

    def run(self) -> list[str]:
        failures = self.failures
        threads = [threading.Thread(target=self.work, args=(i,), daemon=True) for i in range(WORKERS)]
        for t in threads:
            t.start()
        try:
            self.go.wait(timeout=60)
        except threading.BrokenBarrierError:
            self.failures.append("a worker never began")
        time.sleep(self.rng.uniform(0.0, 0.02))
        self.close_target()
        deadline = time.monotonic() + 60
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in threads):
            self.failures.append(f"a worker still runs 60 s after the {self.target} closed: it hangs")
            return self.failures
        if not self.rt.closed:
            self.rt.wait()  # the runtime serves this thread after
            self.rt.close()
        launched = self.launched
        self.__dict__.clear()  # the round's objects let go: every native object of the round is released now
        self.launched = launched
        gc.collect()
        left = capi.live_handle_count()
        if left:
            kinds = {k: capi.live_handle_count(k) for k in ("runtime", "memory", "image", "module")}
            failures.append(f"{left} native objects outlived the round's runtime ({kinds})")
        return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module")
    parser.add_argument("--arch", choices=tuple(ARCH_TARGETS), default="vulkan")
    parser.add_argument("--target", choices=(*TARGETS, "all"), default="all")
    parser.add_argument("--launcher", choices=("vulkan", "taichi", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    targets = ARCH_TARGETS[args.arch] if args.target == "all" else (args.target,)
    launchers = ARCH_LAUNCHERS[args.arch] if args.launcher == "both" else (args.launcher,)
    rounds = launched = 0
    for n in range(args.rounds):
        for target in targets:
            for launcher in launchers:
                round_ = Round(args.module, launcher, target, args.seed * 100_003 + n, args.arch)
                failures = round_.run()
                rounds, launched = rounds + 1, launched + sum(round_.launched)
                if failures:
                    print(f"round {n} ({target}, {launcher}): " + "; ".join(failures), file=sys.stderr)
                    return 1
    print(f"close stress: {rounds} rounds, {launched} launches before the closes, no failure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
