# Sourced by the GPU runs (gpu_run.sh, gpu_waits.sh) in the checkout's root on the NVIDIA machine: the carried Vulkan
# loader (.gl/) and Python 3.12 wheels (.whl/) installed, taichi_aot built into /tmp/site (else the checkout with its
# carried abi3 builds), NVIDIA's Vulkan driver named, the carried compiled modules (.gpu/cache/) as the cache. Sets
# `repo` (the checkout) and `where` (the folder to run from: the installed package's, not the checkout's).
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
# a wheel carried as an xz-compressed tar of its files (taichi's: 37 MB, not 54, where the 64 MiB a call carries are
# short), unpacked as pip would
for f in .whl/*.tar.xz; do [ -f "$f" ] && { tar -xJf "$f" -C /tmp/site || exit 1; }; done
export PYTHONPATH=/tmp/site
repo=$(pwd)
# SPIRV-Tools' validator, which the build bundles (no network there to fetch its wheel)
# (carried as it is, or xz-compressed where the 64 MiB a call carries are short; without it, the build bundles nothing:
# taichi_aot then loads the libtaichi_c_api of the taichi installed beside it, and Vulkan modules cannot be checked)
if [ -f .whl/libSPIRV-Tools-shared.so.xz ]; then
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    .whl/libSPIRV-Tools-shared.so.xz /tmp/libSPIRV-Tools-shared.so
  export TAICHI_AOT_SPIRV_TOOLS_LIB=/tmp/libSPIRV-Tools-shared.so
elif [ -f .whl/libSPIRV-Tools-shared.so ]; then
  export TAICHI_AOT_SPIRV_TOOLS_LIB=$repo/.whl/libSPIRV-Tools-shared.so
else
  export TAICHI_AOT_BUNDLE=0
fi
if python3 -m pip install -q --upgrade --no-index --no-deps --no-build-isolation --target /tmp/site .; then
  where=/tmp
else  # no compiler for the extensions there: use the checkout with the carried abi3 builds of them
  echo "building taichi_aot there failed; using the carried taichi_aot/*.abi3.so and taichi_aot_bench/_steps.abi3.so"
  export PYTHONPATH=$repo:/tmp/site
  where=$repo
fi
if ! python3 -c 'import ctypes; ctypes.CDLL("libvulkan.so.1")' 2>/dev/null; then echo "no Vulkan loader"; fi
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] && \
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
mkdir -p /tmp/cache && cp -r .gpu/cache/. /tmp/cache/ 2>/dev/null
export TAICHI_AOT_CACHE=/tmp/cache
