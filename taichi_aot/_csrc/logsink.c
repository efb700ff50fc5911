/* The C stdio streams libtaichi_c_api writes to, pointed at a file of taichi_aot's (_library.py's log sink): its
   logger takes the `stderr` it finds when it is made, and some of its errors printf() to `stdout`. */
#include <stdio.h>

void *taichi_aot_stdio_open(int fd) {
    return fdopen(fd, "a");
}

/* Point C's stderr (`which` 2) or stdout (else) at `stream`; returns the stream it pointed at. */
void *taichi_aot_stdio_swap(int which, void *stream) {
    FILE *old;
    if (which == 2) {
        old = stderr;
        stderr = (FILE *)stream;
    } else {
        old = stdout;
        stdout = (FILE *)stream;
    }
    return old;
}

int taichi_aot_stdio_flush(void *stream) {
    return fflush((FILE *)stream);
}
