"""Run benchmark sections of the taichi_aot harness.

    python benchmarks/bench.py [SECTION ...] [--quick] [--arch x64 vulkan cuda] [--json FILE] [--plot FILE.png]

Sections (default: all):
  launch      per-launch cost of a trivial kernel: raw C, recorded sequence, pre-bound, dynamic,
              flat capi, Taichi's JIT path
  graph       a 16-dispatch compute graph against the same 16 kernels launched one by one
  throughput  memory-bound kernels (copy, saxpy) from 2^10 to 2^26 elements against memcpy or the
              device's copy bandwidth
  transfers   to_numpy, from_numpy and mapped views against np.copyto, 1 KiB to 256 MiB
  memory      Python heap and RSS growth over 10^5 launches, beside the raw C reference

The same harness as ``python -m taichi_aot bench``; ``results_md.py`` turns its JSON into tables.
"""

from __future__ import annotations

import sys

from taichi_aot.__main__ import main
from taichi_aot_bench.row import SECTIONS

if __name__ == "__main__":
    args = sys.argv[1:]
    sections = [a for a in args if a in SECTIONS]
    rest = [a for a in args if a not in SECTIONS]
    sys.exit(main(["bench", *(["--sections", *sections] if sections else []), *rest]))
