# PyInstaller's run-time hook of taichi_aot, run before the app's own script: where this process is a child
# taichi_aot started (a probe, a module's first check), run its code and exit; else note that this app serves such
# children (TAICHI_AOT_CHILD_ENTRY: its executable). A child is one whose TAICHI_AOT_CHILD ("FD:TOKEN") names an
# inherited pipe whose content begins with TOKEN, then the code: the variable alone, set from outside, runs nothing.
# The same as taichi_aot._child.serve_child, written out here: importing taichi_aot would load its library before the
# app asks.


def _taichi_aot_child():
    import os
    import stat
    import sys

    fd, _, token = os.environ.pop("TAICHI_AOT_CHILD", "").partition(":")
    os.environ["TAICHI_AOT_CHILD_ENTRY"] = sys.executable
    if not fd.isdigit() or int(fd) < 3 or len(token) < 32:
        return
    try:
        if not stat.S_ISFIFO(os.fstat(int(fd)).st_mode):
            return
        os.set_blocking(int(fd), False)  # written whole and closed before the child started: a pipe still open is not
        with os.fdopen(int(fd), "rb", buffering=0) as pipe:  # taichi_aot's, and is not waited on
            chunks = [pipe.read(1 << 16)]
            while chunks[-1]:
                chunks.append(pipe.read(1 << 16))
    except (OSError, ValueError):
        return
    given, _, code = b"".join(chunks[:-1]).partition(b"\n")
    if chunks[-1] is None or given != token.encode():
        return
    status: object = 0
    try:
        exec(compile(code.decode("utf-8"), "<taichi_aot child>", "exec"), {"__name__": "__taichi_aot_child__"})
    except SystemExit as e:
        status = e.code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status if isinstance(status, int) else 1)


_taichi_aot_child()
del _taichi_aot_child
