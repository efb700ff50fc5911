# PyInstaller's run-time hook of taichi_aot, run before the app's own script: where this process is a child
# taichi_aot started (a probe, a module's first check: TAICHI_AOT_CHILD holds its code), run that code and exit;
# else note that this app serves such children (TAICHI_AOT_CHILD_ENTRY: its executable). The same as
# taichi_aot._probe.serve_child, written out here: importing taichi_aot would load its library before the app asks.


def _taichi_aot_child():
    import os
    import sys

    code = os.environ.pop("TAICHI_AOT_CHILD", None)
    os.environ["TAICHI_AOT_CHILD_ENTRY"] = sys.executable
    if code is None:
        return
    status: object = 0
    try:
        exec(compile(code, "<taichi_aot child>", "exec"), {"__name__": "__taichi_aot_child__"})
    except SystemExit as e:
        status = e.code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status if isinstance(status, int) else 1)


_taichi_aot_child()
del _taichi_aot_child
