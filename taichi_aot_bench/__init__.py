"""The bench of taichi_aot (``python -m taichi_aot bench``): launch overhead, a whole simulation, kernel
throughput, transfers, graphs, foreign arrays and pool scaling, each against its limit, side by side.

Every figure is measured in one run with interleaved repeats after a warm-up, reported as the median with
min-max, and as a ratio to its limit: a raw C loop (``_csrc/steps.c``, this room's own extension ``_steps``,
launching in this process on the same runtime what the Python side launches), the raw C driver in a process of
its own (``_csrc/driver.c``, compiled here with the system compiler, linked against the same libtaichi_c_api),
``memcpy``/``np.copyto`` on the host, or the device's own copy bandwidth. Times of a method include a final
``wait``, as in C.

A room of its own above the command line (``taichi_aot.cli``): it is built on the package and nothing in the
package imports from it; ``taichi_aot/__main__.py`` adds its command (command.py). Its files: run.py (a run:
sections on archs), harness.py (one arch's runtime, module and driver), measure.py (paired rounds), row.py and
report.py (rows, tables, the picture), steps.py (the raw C loops), compile.py (its Taichi modules and driver,
compiled once and cached), one file a section (launch.py: launch, graph, interop and memory; sim.py, transfers.py,
fresh.py, scaling.py with independent.py, launcher.py, validation.py, ops.py, autodiff.py), and the Taichi sources
of its modules (``*_kernels.py``, compiled in child processes: taichi_aot never imports Taichi).
"""
