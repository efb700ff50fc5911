/* The launch kinds and each one's entries (kinds.h): one line a kind, as the backends register in
   backends/__init__.py. A new backend's kind is a #define in taichi_aot.h, its entries in its own C file (declared in
   the header named for it), and a line here; launch.c does not change. */
#include <stddef.h>

#include "taichi_aot.h"
#include "kinds.h"
#include "backends/cpucalls.h"
#include "backends/cuda.h"
#include "backends/libtaichi.h"
#include "backends/vulkan.h"
#include "backends/x64.h"

/* The calls of a runtime that any thread uses are held by its own Vulkan state (vkqueue.c) or, on a CPU runtime, by
   its calls lock (backends/cpucalls.c): the hold answers NULL, holding nothing, for a runtime with neither.
   libtaichi's launches are made on either (backends/libtaichi.c asks the calls registered for the runtime, holds.c,
   where each of those states registers its own), the own x64 launch on a CPU runtime, the own Vulkan launch on its
   state. The own CUDA launcher's driver takes any thread itself: no hold. libtaichi's
   launches and the own x64 launch are quick on a CPU runtime alone, while their record's launches are short
   (backends/cpucalls.c's quick hold); elsewhere that hold answers busy: they let Python's lock go. */
#define CALLS taichi_aot_vk_hold_calls, taichi_aot_vk_let_go_calls
#define LIBRARY_CALLS aot_library_hold_calls, aot_library_let_go_calls
#define CPU_CALLS aot_cpu_hold_calls, aot_cpu_let_go_calls

static const TaichiAotKindOps KINDS[] = {
    [TAICHI_AOT_KIND_KERNEL] = {aot_library_launch, aot_library_elsewhere, LIBRARY_CALLS, aot_library_drain, 1,
                                aot_cpu_quick_hold},
    [TAICHI_AOT_KIND_GRAPH] = {aot_library_launch, aot_library_elsewhere, LIBRARY_CALLS, aot_library_drain, 1,
                               aot_cpu_quick_hold},
    [TAICHI_AOT_KIND_CUDA_KERNEL] = {aot_cuda_kernel_launch, aot_cuda_kernel_elsewhere, NULL, aot_cuda_let_go_quick,
                                     NULL, 1, aot_cuda_kernel_quick},
    [TAICHI_AOT_KIND_CUDA_GRAPH] = {aot_cuda_graph_launch, aot_cuda_graph_elsewhere, NULL, aot_cuda_let_go_quick, NULL,
                                    1, aot_cuda_graph_quick},
    [TAICHI_AOT_KIND_CPU_CALL] = {aot_cpu_call_launch, aot_cpu_call_elsewhere, CPU_CALLS, NULL, 1, aot_cpu_quick_hold,
                                  aot_cpu_call_values},
    [TAICHI_AOT_KIND_VULKAN_KERNEL] = {aot_vk_kernel_launch, NULL, CALLS, NULL, 1, aot_vk_kernel_quick},
    [TAICHI_AOT_KIND_VULKAN_GRAPH] = {aot_vk_graph_launch, NULL, CALLS, NULL, 1, aot_vk_graph_quick},
};

const TaichiAotKindOps *taichi_aot_kind_ops(uint32_t kind) {
    if (kind >= sizeof(KINDS) / sizeof(KINDS[0]) || KINDS[kind].launch == NULL) { /* past the table, or a gap (4) */
        return NULL;
    }
    return &KINDS[kind];
}
