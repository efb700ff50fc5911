/* libtaichi's TiMemory of taichi_aot's own CUDA memory. On taichi_aot's own CUDA runtime (taichi_aot/_cudart.py)
   libtaichi's runtime is made beside it, on device 0, only for a module whose kernels need it; its launches then get
   the ndarrays the own runtime made, and the arrays it takes as they are, as device pointers tagged with
   TAICHI_AOT_POINTER_TAG, where libtaichi takes only its own TiMemory handles. launch.c's launch through libtaichi
   swaps each such argument for an import of its memory (ti_import_cuda_memory), made once an address and runtime,
   again where a larger array lies there later, and kept while that runtime lives (libtaichi_c_api 1.7.4 cannot
   release an import; an import says only where memory is: each launch writes its array's shape beside it).
   Python forgets a runtime's imports before it destroys the runtime (taichi_aot_imports_forget). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "taichi_aot.h"

typedef struct {
    TiRuntime runtime;
    uint64_t address; /* 0: a free slot */
    uint64_t bytes;
    TiMemory memory;
} import_entry;

static import_entry *imports;
static size_t imports_capacity, imports_count;
static pthread_mutex_t imports_lock = PTHREAD_MUTEX_INITIALIZER;
/* bytes of an element of each TiDataType, F16 to U64 */
static const uint8_t type_bytes[] = {2, 4, 8, 1, 2, 4, 8, 1, 1, 2, 4, 8};

/* The first slot of (runtime, address): a multiplicative hash of both (allocations are aligned to 2 MiB and more:
   their low bits say nothing), its high bits. */
static size_t import_home(TiRuntime runtime, uint64_t address, size_t capacity) {
    uint64_t h = (address ^ ((uint64_t)(uintptr_t)runtime * 0xC2B2AE3D27D4EB4FULL)) * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 32) & (capacity - 1);
}

static size_t import_slot(const import_entry *table, size_t capacity, TiRuntime runtime, uint64_t address) {
    size_t i = import_home(runtime, address, capacity);
    while (table[i].address != 0 && (table[i].address != address || table[i].runtime != runtime)) {
        i = (i + 1) & (capacity - 1);
    }
    return i;
}

/* The table twice as large (or first made), every entry moved over: 1, or 0 out of memory (the table as it was). */
static int imports_grow(size_t capacity) {
    import_entry *was = imports, *table = calloc(capacity, sizeof(import_entry));
    size_t i, old = imports_capacity;
    if (table == NULL) {
        return 0;
    }
    imports_count = 0;
    for (i = 0; i < old; ++i) {
        if (was[i].address != 0) {
            table[import_slot(table, capacity, was[i].runtime, was[i].address)] = was[i];
            ++imports_count;
        }
    }
    free(was);
    imports = table;
    imports_capacity = capacity;
    return 1;
}

/* The bytes an ndarray argument spans (its shape, element shape and type). */
static uint64_t nd_bytes(const TiNdArray *nd) {
    uint64_t n = nd->elem_type < sizeof(type_bytes) ? type_bytes[nd->elem_type] : 8;
    uint32_t d;
    for (d = 0; d < nd->shape.dim_count && d < 16; ++d) {
        n *= nd->shape.dims[d];
    }
    for (d = 0; d < nd->elem_shape.dim_count && d < 16; ++d) {
        n *= nd->elem_shape.dims[d];
    }
    return n > 0 ? n : 1;
}

/* The runtime's import of the memory a tagged ndarray argument names (the table's lock held): NULL where the library
   refused it (its error set) or no memory was left for the table. */
static TiMemory import_of(TiRuntime runtime, const TiNdArray *nd) {
    uint64_t address = (uint64_t)((uintptr_t)nd->memory & ~TAICHI_AOT_POINTER_TAG), bytes = nd_bytes(nd);
    TiMemory memory;
    size_t i;
    if ((imports_count + 1) * 2 > imports_capacity && !imports_grow(imports_capacity ? 2 * imports_capacity : 64)) {
        return TI_NULL_HANDLE;
    }
    i = import_slot(imports, imports_capacity, runtime, address);
    if (imports[i].address != 0 && imports[i].bytes >= bytes) {
        return imports[i].memory;
    }
    memory = ti_import_cuda_memory(runtime, (void *)(uintptr_t)address, bytes);
    if (ti_get_last_error(NULL, NULL) != TI_ERROR_SUCCESS || memory == TI_NULL_HANDLE) {
        return TI_NULL_HANDLE;
    }
    if (imports[i].address == 0) {
        ++imports_count;
    }
    imports[i].runtime = runtime;
    imports[i].address = address;
    imports[i].bytes = bytes;
    imports[i].memory = memory;
    return memory;
}

static int is_tagged(const TiArgument *a) {
    return a->type == TI_ARGUMENT_TYPE_NDARRAY && ((uintptr_t)a->value.ndarray.memory & TAICHI_AOT_POINTER_TAG) != 0;
}

/* The argument at `i` of a record's arguments (`named`: TiNamedArguments). */
static TiArgument *argument_at(const void *args, uint32_t i, int named) {
    return named ? &((TiNamedArgument *)args)[i].argument : &((TiArgument *)args)[i];
}

int taichi_aot_library_args(const TaichiAotLaunch *l, const void **args, void **made) {
    int named = l->kind == TAICHI_AOT_KIND_GRAPH;
    size_t size = named ? sizeof(TiNamedArgument) : sizeof(TiArgument);
    uint32_t i = 0;
    void *local;
    int failed = 0;
    *made = NULL;
    *args = l->args; /* none of the own memory (no argument at all, too): as they are */
    while (i < l->arg_count && !is_tagged(argument_at(l->args, i, named))) {
        ++i;
    }
    if (i == l->arg_count) {
        return 0;
    }
    local = malloc(size * l->arg_count);
    if (local == NULL) {
        ti_set_last_error(TI_ERROR_OUT_OF_MEMORY, "taichi_aot: no memory to import an array into libtaichi");
        return -1;
    }
    memcpy(local, l->args, size * l->arg_count);
    pthread_mutex_lock(&imports_lock);
    for (; i < l->arg_count && !failed; ++i) {
        TiArgument *a = argument_at(local, i, named);
        if (is_tagged(a)) {
            a->value.ndarray.memory = import_of(l->runtime, &a->value.ndarray);
            failed = a->value.ndarray.memory == TI_NULL_HANDLE;
        }
    }
    pthread_mutex_unlock(&imports_lock);
    if (failed) {
        free(local);
        if (ti_get_last_error(NULL, NULL) == TI_ERROR_SUCCESS) {
            ti_set_last_error(TI_ERROR_OUT_OF_MEMORY, "taichi_aot: no memory for libtaichi's imports");
        }
        return -1;
    }
    *made = local;
    *args = local;
    return 0;
}

/* Slot `i` emptied in place, the entries of its run after it moved back to where a look-up finds them (linear
   probing's deletion: nothing allocated). */
static void import_remove(size_t i) {
    size_t j = i, home;
    imports[i].address = 0;
    --imports_count;
    for (;;) {
        j = (j + 1) & (imports_capacity - 1);
        if (imports[j].address == 0) {
            return;
        }
        home = import_home(imports[j].runtime, imports[j].address, imports_capacity);
        /* it stays unless its home lies cyclically outside (i, j] */
        if ((i <= j) ? (i < home && home <= j) : (i < home || home <= j)) {
            continue;
        }
        imports[i] = imports[j];
        imports[j].address = 0;
        i = j;
    }
}

void taichi_aot_imports_forget(TiRuntime runtime) {
    size_t i;
    int removed;
    pthread_mutex_lock(&imports_lock);
    do { /* again while a pass removed any: a removal may move an entry back past the wrap, behind the pass */
        removed = 0;
        for (i = 0; i < imports_capacity; ++i) {
            while (imports[i].address != 0 && imports[i].runtime == runtime) {
                import_remove(i); /* what moved into slot i is looked at again */
                removed = 1;
            }
        }
    } while (removed);
    pthread_mutex_unlock(&imports_lock);
}
