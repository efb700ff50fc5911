#!/usr/bin/env bash
# Paired runs of what a wait costs (issue "vkwait") on the NVIDIA machine, in one call: the bench's sections that wait
# (by default placement, profiler and sharing on Vulkan and CUDA), beside raw Vulkan's blocking and polled floors,
# alternately under TAICHI_AOT_WAIT=block (every wait in the driver's blocking wait, as before the wait policy) and
# TAICHI_AOT_WAIT=auto (the default), ROUNDS pairs; each run's table in OUT_DIR/waits-POLICY-N.txt.
# Carried as for gpu_run.sh (.whl/, .gl/, .gpu/cache/); .gpu/vk_raw, a build of benchmarks/vk_raw.c, where there is
# one (else it is built there, where Vulkan's headers are).
# Usage there: bash benchmarks/gpu_waits.sh OUT_DIR [ROUNDS [bench arguments...]]
set -uo pipefail
out=${1:?output folder}; rounds=${2:-2}; shift $(($# < 2 ? $# : 2))
[ $# -gt 0 ] || set -- --arch vulkan cuda --sections placement profiler sharing
source benchmarks/gpu_setup.sh  # the carried wheels, the loader, taichi_aot built: sets repo, where
raw=$repo/.gpu/vk_raw
if [ ! -x "$raw" ]; then
  raw=/tmp/vk_raw
  cc -O2 -o "$raw" "$repo/benchmarks/vk_raw.c" -ldl || raw=""
fi
cd "$where"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
for r in $(seq "$rounds"); do
  for policy in block auto; do
    echo "== round $r, TAICHI_AOT_WAIT=$policy"
    TAICHI_AOT_WAIT=$policy PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-240}" python3 -m taichi_aot bench \
      ${raw:+--vk-raw "$raw"} "$@" > "$out/waits-$policy-$r.txt" 2>&1
    grep -E "targets:|\[(met|MISSED)" "$out/waits-$policy-$r.txt" | head -40
  done
done
