/* The table of this module's functions that the C call uses (taichi_aot.h: TaichiAotCallTable), made once for
   the process (compiled after the files whose functions it names). */
#include "taichi_aot.h"

static const TaichiAotCallTable taichi_aot_table = {
    sizeof(TaichiAotCallTable),
    &taichi_aot_epoch,
    taichi_aot_launch,
    taichi_aot_torch_layout,
    taichi_aot_torch_same,
    taichi_aot_torch_code,
    ti_get_last_error,
    ti_set_last_error,
    ti_import_cpu_memory,
    ti_import_cuda_memory,
    taichi_aot_launch_quick,
    &taichi_aot_coming,
    taichi_aot_coming_back,
    taichi_aot_came_back,
};

const TaichiAotCallTable *taichi_aot_call_table(void) {
    return &taichi_aot_table;
}
