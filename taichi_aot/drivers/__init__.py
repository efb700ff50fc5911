"""The drivers, bound once for the package: what every room may import, as a part below them all (the launch
backends, the devices, the arrays and the ops alike), and which imports none of them.

* :mod:`.cuda`: the CUDA driver (ctypes): contexts, streams, events, pointer attributes, error names, the driver
  tables handed to the extension's C;
* :mod:`.cuda_host`: host arrays to and from CUDA memory (page-locked arrays, the page-lock budget, staged copies);
* :mod:`.cudart`: a CUDA device as taichi_aot's own CUDA runtime uses it (memory and waits through the driver), the
  streams a caller hands a runtime, and device 0's primary context for libtaichi's CUDA calls.

What a runtime *does* with them (which CUDA runtime it gets, where bytes move, which stream its kernels run on) is
the rooms' above: :mod:`taichi_aot._cudart` and :mod:`taichi_aot.placement`.
"""
