/* taichi_aot's own C functions, compiled into taichi_aot._native next to the C-API trampolines.

   Declared once, read twice: build_ffi.py hands this header to the cffi cdef with its preprocessor
   lines and comments stripped (a valued #define becomes `#define NAME ...`, so the compiler supplies
   the value: lib.TAICHI_AOT_STALE), and loader.c and launch.c #include it. */
#ifndef TAICHI_AOT_H
#define TAICHI_AOT_H

#include <stddef.h>
#include <stdint.h>

#include "taichi/taichi_core.h"
#include "taichi/taichi_cpu.h"
#include "taichi/taichi_cuda.h"

/* One prepared launch, of one of the launch backends (their Python half: taichi_aot/backends). `kind` says which,
   and launch.c's dispatcher is the one place that launches by it:
     TAICHI_AOT_KIND_KERNEL, TAICHI_AOT_KIND_GRAPH: libtaichi's ti_launch_kernel / ti_launch_compute_graph, `handle` a
       TiKernel / TiComputeGraph, `args` TiArguments / TiNamedArguments;
     TAICHI_AOT_KIND_CUDA_KERNEL, TAICHI_AOT_KIND_CUDA_GRAPH: the own CUDA launcher (backends/cuda.c), `handle` a
       TaichiAotCudaKernel / TaichiAotCudaGraph, `args` as libtaichi's, but an ndarray's TiMemory may be a device
       pointer tagged with TAICHI_AOT_POINTER_TAG;
     TAICHI_AOT_KIND_CPU_CALL: the own x64 launch (backends/x64.c) of a kernel libtaichi's C-API cannot give all it
       needs (one that returns values, takes scalars it cannot pass, or a reverse-mode kernel, its gradients after
       its arguments), `handle` a TaichiAotCpuKernel with its plan, `args` as libtaichi's, but an ndarray's TiMemory
       may be a host pointer tagged with TAICHI_AOT_POINTER_TAG;
     TAICHI_AOT_KIND_VULKAN_KERNEL, TAICHI_AOT_KIND_VULKAN_GRAPH: the own Vulkan launch (backends/vulkan.c), `handle` a
       kernel it made (taichi_aot_vk_kernel) / a TaichiAotVkGraph, `args` as libtaichi's (ndarrays TiMemory).
   launch.c's launch_any is the one switch on the kind; an unknown kind is refused (TAICHI_AOT_UNKNOWN_KIND).
   `flags` says what the launch is where C must know it elsewhere, written from its backend's Choice
   (backends/__init__.py) as each backend declares it: TAICHI_AOT_LAUNCH_POINTERS, an ndarray may be passed as a
   pointer tagged with TAICHI_AOT_POINTER_TAG (call.c, fresh.c and opplan.c pass new arrays so); TAICHI_AOT_LAUNCH_CODES,
   it reports its errors by its return code, not libtaichi's error slot (checked on every replay, and no wait for
   libtaichi's copies where it is launched elsewhere); TAICHI_AOT_LAUNCH_GRAPHABLE, its launch never waits (a CUDA
   graph may hold it); TAICHI_AOT_LAUNCH_ANY_THREAD, any thread may launch it, not only the runtime's (its runtime's
   device says so: launch.py); TAICHI_AOT_LAUNCH_LONG, set by C, not Python: a launch of the record on a CPU runtime
   made with Python's lock kept ran past TAICHI_AOT_CPU_QUICK_NS (backends/cpucalls.c), so its later launches let
   that lock go (one is tried with it kept again after 1023 of them, counted down in the bits from 20 up).
   `seen` is the close epoch at which Python last found every object it uses open, `thread` the thread that
   owns the runtime, `pending` the runtime's three counts: [0] "work may be running" (nonzero), set by every
   launch, on a runtime that bounds its queue the launches queued since the last wait; [1] launches through
   libtaichi refused: TAICHI_AOT_REFUSED (a non-blocking CUDA stream is set, which libtaichi's own copies on the
   legacy default stream would not be ordered with); [2] the most launches queued before a launch waits for them
   (0: no bound). `name` is the NVTX range a launch is made inside while ranges are on (nvtx.c): "taichi_aot:" and the
   kernel's or graph's name (launch.py), or NULL (the range is named "taichi_aot"); it lives as long as the record's
   kernel or graph. */
#define TAICHI_AOT_KIND_KERNEL 0
#define TAICHI_AOT_KIND_GRAPH 1
#define TAICHI_AOT_KIND_CUDA_KERNEL 2
#define TAICHI_AOT_KIND_CUDA_GRAPH 3
/* 4: no longer used (x64 reverse-mode kernels are TAICHI_AOT_KIND_CPU_CALL's) */
#define TAICHI_AOT_KIND_CPU_CALL 5
#define TAICHI_AOT_KIND_VULKAN_KERNEL 6
#define TAICHI_AOT_KIND_VULKAN_GRAPH 7
#define TAICHI_AOT_LAUNCH_POINTERS 1
#define TAICHI_AOT_LAUNCH_CODES 2
#define TAICHI_AOT_LAUNCH_GRAPHABLE 4
#define TAICHI_AOT_LAUNCH_ANY_THREAD 8
#define TAICHI_AOT_LAUNCH_LONG 16
typedef struct {
    TiRuntime runtime;
    uint32_t kind;
    uint32_t flags;
    void *handle;
    uint32_t arg_count;
    const void *args;
    int64_t seen;
    unsigned long thread;
    int32_t *pending;
    const char *name;
} TaichiAotLaunch;

/* imports.c: a launch through libtaichi on taichi_aot's own CUDA runtime, whose ndarrays are device pointers tagged
   with TAICHI_AOT_POINTER_TAG: its arguments (`*args`) with each such one swapped for the runtime's import of that
   memory (the record's own where none is; else a copy, `*made`, which the caller frees). 0, or -1 with the library's
   error set where an import failed. taichi_aot_imports_forget drops a runtime's imports (before it is destroyed). */
int taichi_aot_library_args(const TaichiAotLaunch *launch, const void **args, void **made);
void taichi_aot_imports_forget(TiRuntime runtime);

/* loader.c: libtaichi_c_api opened with dlopen, its functions looked up into the trampolines. */
int taichi_aot_load(const char *path, char *error, size_t error_size);
void taichi_aot_unload(void);
int taichi_aot_is_loaded(void);
int taichi_aot_has_symbol(const char *name);
/* Another library opened at `path` (RTLD_LOCAL) with its `count` functions `names` looked up into `functions`
   (spirv.c's SPIRV-Tools, nvtx.c's NVTX): its handle, or NULL with dlerror's message, or the first function it
   lacks, in `error` (the library closed again). */
void *taichi_aot_open_functions(const char *path, const char *const *names, void **functions, size_t count,
                                char *error, size_t error_size);

/* spirv.c: SPIRV-Tools' validator, opened with dlopen. A validation returns SPIRV-Tools' result (0: valid; below
   0: invalid, the message says why) or TAICHI_AOT_SPIRV_UNAVAILABLE. */
#define TAICHI_AOT_SPIRV_UNAVAILABLE (-1000)
int taichi_aot_spirv_load(const char *path, char *error, size_t error_size);
const char *taichi_aot_spirv_version(void);
int taichi_aot_spirv_env(const char *name);
int taichi_aot_spirv_validate(int env, const uint32_t *words, size_t count, char *message, size_t message_size);

/* launch.c: the dispatcher. Launches from the runtime's thread, checked against the close epoch; one launch
   unchecked (the flat API's, whose callers checked it); replayed sequences; and launches made elsewhere (XLA's
   handler on XLA's threads and stream, torch's autograd thread), which take no epoch: their callers hold what they
   launch. */
extern int64_t taichi_aot_epoch;
/* Threads coming back for Python's lock (launch.c): a C call that may block with Python's lock let go (a wait, a copy
   that waits for the runtime's calls) marks its thread as it returns (taichi_aot_coming_back), and the caller, once it
   has the lock again, unmarks it (taichi_aot_came_back, from Python `_call.came_back()`). taichi_aot_coming counts
   the marked threads: a launch made with the lock kept hands it to them after it (call.c's launcher_launch), at most
   once a millisecond in the process (pyhelp.c's launcher_hand_over), where they would otherwise wait for Python's
   switch interval (5 ms) while another thread launches. */
extern int32_t taichi_aot_coming;
void taichi_aot_coming_back(void);
void taichi_aot_came_back(void);
#define TAICHI_AOT_STALE (-100)
#define TAICHI_AOT_REFUSED (-102)
#define TAICHI_AOT_UNKNOWN_KIND (-106) /* a launch whose kind launch_any does not know: nothing launched */
#define TAICHI_AOT_BUSY (-107) /* taichi_aot_launch_quick: not made without blocking; nothing launched */
int taichi_aot_launch(const TaichiAotLaunch *launch);
int taichi_aot_launch_quick(const TaichiAotLaunch *launch);
int taichi_aot_dispatch(const TaichiAotLaunch *launch);
int taichi_aot_replay(const TaichiAotLaunch *launches, uint32_t count, uint64_t repeat, uint64_t *done, int64_t seen);
int taichi_aot_runtime_wait(TiRuntime runtime, int32_t *pending, int always);

/* nvtx.c: NVTX ranges around every launch of the dispatcher. The NVTX library (libnvToolsExt.so.1, or the
   libnvtx3interop.so.1 of newer CUDA wheels) is opened by path, once (taichi_aot._nvtx finds it): 0, or -1 with the
   reason in `error`. taichi_aot_nvtx is the switch launch.c reads before every launch (nonzero: ranges on); only
   taichi_aot_nvtx_enable sets it, and only where the library is open: it returns whether ranges are on now. */
extern int taichi_aot_nvtx;
int taichi_aot_nvtx_load(const char *path, char *error, size_t error_size);
int taichi_aot_nvtx_loaded(void);
int taichi_aot_nvtx_enable(int on);
void taichi_aot_nvtx_push(const char *name);
void taichi_aot_nvtx_pop(void);

/* profile.c: each launch's times while a profile is open on its runtime (taichi_aot.profile). A profiled runtime is
   known by its launches' `pending` counts (the object layer's) or, where a launch has none (the flat API's), its
   TiRuntime. A record is taken around every launch launch.c makes for it: the name (the kernel's or graph's, without
   the NVTX prefix), the thread, the host's CLOCK_MONOTONIC nanoseconds before and after the call, and the device's
   nanoseconds of the work: the call's own on a CPU runtime (`host_times`), else what the launch's backend gives
   (Vulkan timestamps around its dispatches, read once their batch is done: "waiting" until then), or none
   ("enqueue": the launch backend times nothing, the call's times are its enqueue). A record's states are profile.h's
   list (AOT_PROFILE_STATES): taichi_aot_profile_state gives the `index`-th's value in `*state` and its name (NULL
   past the last, TAICHI_AOT_PROFILE_STATES). taichi_aot_profiling is the switch launch.c reads before every launch
   (the profiled runtimes' count: 0, nothing is taken). taichi_aot_profile_take copies out the runtime's records in
   launch order, as far as the first not yet complete (all of them where `all`: those still waiting for device times
   then say "waiting"), and forgets them; it returns how many (at most `cap`); `lost` counts
   records a full store (TAICHI_AOT_PROFILE_MAX) dropped. */
#define TAICHI_AOT_PROFILE_NAME 64
#define TAICHI_AOT_PROFILE_MAX 4194304
typedef struct {
    char name[64]; /* TAICHI_AOT_PROFILE_NAME */
    uint64_t thread;
    int64_t host_start, host_end;
    int64_t device_start, device_end;
    uint32_t kind;
    int32_t state; /* one of profile.h's AOT_PROFILE_STATES (taichi_aot_profile_state names them) */
} TaichiAotProfileRecord;
#define TAICHI_AOT_PROFILE_STATES 6
extern int taichi_aot_profiling;
int taichi_aot_profile_open(TiRuntime runtime, int32_t *pending, int host_times);
int taichi_aot_profile_close(TiRuntime runtime, int32_t *pending);
uint32_t taichi_aot_profile_take(TiRuntime runtime, int32_t *pending, TaichiAotProfileRecord *out, uint32_t cap,
                                 int all, uint64_t *lost);
const char *taichi_aot_profile_state(uint32_t index, int32_t *state);

/* arrays.c: a numpy array passed to kernels before, recognised in one call: its data pointer, dtype
   object, dimensions, strides and writable flag, read from numpy's array object (whose layout numpy
   keeps for compiled extensions) at `array`, the object's address (CPython's id()). Python checks at
   import that these reads agree with numpy's own attributes, and uses them only then. `..._pack`
   writes the key's argument into a launch's slot where the array is the same (one call per argument). */
typedef struct {
    const void *data;
    const void *descr;
    int32_t nd;
    int32_t writable;
    intptr_t dims[16];
    intptr_t strides[16];
    TiArgument argument; /* what a launch gets for the array: the ndarray shared over its memory */
} TaichiAotArrayKey;
int taichi_aot_array_key(uintptr_t array, TaichiAotArrayKey *key);
int taichi_aot_array_same(uintptr_t array, const TaichiAotArrayKey *key, int need_writable);
int taichi_aot_array_pack(uintptr_t array, const TaichiAotArrayKey *key, int need_writable, TiArgument *slot);
/* arrays.c too (the one C file both extensions compile): an f32 scalar argument's value from a double (a Python
   float, or an int as Python converts it), converted as C converts it (rounded to nearest even, a NaN quieted) into
   `slot`'s value; 0 (nothing written) where a finite `d` rounds past f32's range. The one conversion of both call
   paths: the C call's (call.c) and the Python call's packer (_arguments.py). */
int taichi_aot_f32_pack(double d, TiArgument *slot);

/* torch.c: a torch tensor's layout, read through the C functions torch exports for compiled models
   (aoti_torch_get_*), looked up in `library` (libtorch_cpu, loaded by torch; 1 where all were found).
   `tensor` is the address of an at::Tensor (in a tensor's Python object: reads.c). Python checks at first
   use that these reads agree with torch's own getters, and uses them only then. Returns 1 where read (the
   bytes past `dim` zero). */
typedef struct {
    void *data;
    int64_t storage_size;
    int32_t dtype;
    int32_t device_type;
    int32_t device_index;
    int32_t pad;
    int64_t dim;
    int64_t sizes[16];
    int64_t strides[16];
} TaichiAotTorchLayout;
int taichi_aot_torch_bind(const char *library);
int taichi_aot_torch_layout(uintptr_t tensor, TaichiAotTorchLayout *out);
int taichi_aot_torch_same(uintptr_t tensor, const TaichiAotTorchLayout *expect);
/* torch's dtype code for a Taichi data type (TiDataType), or -1 (none, or the functions are not bound). */
int32_t taichi_aot_torch_code(int32_t data_type);

/* table.c: what the C call (call.c, the extension taichi_aot._call, built apart from this module: setup.py) uses
   of this module, handed to it once, by address, at import (taichi_aot._arrays: `_call._bind`). `size` is the
   table's, which _bind checks; `epoch` is taichi_aot_epoch's address; the rest are this module's functions (the
   ti_* ones its trampolines into libtaichi_c_api). */
typedef struct {
    uint32_t size;
    int64_t *epoch;
    int (*launch)(const TaichiAotLaunch *launch);
    int (*torch_layout)(uintptr_t tensor, TaichiAotTorchLayout *out);
    int (*torch_same)(uintptr_t tensor, const TaichiAotTorchLayout *expect);
    int32_t (*torch_code)(int32_t data_type);
    TiError (*get_last_error)(uint64_t *message_size, char *message);
    void (*set_last_error)(TiError error, const char *message);
    TiMemory (*import_cpu_memory)(TiRuntime runtime, void *ptr, size_t memory_size);
    TiMemory (*import_cuda_memory)(TiRuntime runtime, void *ptr, size_t memory_size);
    int (*launch_quick)(const TaichiAotLaunch *launch);
    int32_t *coming; /* taichi_aot_coming's address */
    void (*coming_back)(void);
    void (*came_back)(void);
} TaichiAotCallTable;
const TaichiAotCallTable *taichi_aot_call_table(void);

/* The CUDA driver's entry points every C file of the package calls, in one table (_cuda.py fills it once a process,
   from libcuda, and hands its address to each: the copies of cuda.c, the own launcher's launches, the op cells of
   XLA's handler and torch's C kernel). Each field holds the address of the driver function named beside it. */
typedef struct {
    void *push;              /* cuCtxPushCurrent_v2 */
    void *pop;               /* cuCtxPopCurrent_v2 */
    void *htod;              /* cuMemcpyHtoD_v2 */
    void *dtoh;              /* cuMemcpyDtoH_v2 */
    void *launch;            /* cuLaunchKernel */
    void *current;           /* cuCtxGetCurrent */
    void *sync;              /* cuStreamSynchronize */
    void *memset;            /* cuMemsetD32Async */
    void *capturing;         /* cuStreamIsCapturing */
    void *memset8_async;     /* cuMemsetD8Async */
    void *htod_async;        /* cuMemcpyHtoDAsync_v2 */
    void *dtod_async;        /* cuMemcpyDtoDAsync_v2 */
    void *error_name;        /* cuGetErrorName */
    void *ctx_device;        /* cuCtxGetDevice */
    void *pointer_attribute; /* cuPointerGetAttribute */
    void *event_create;      /* cuEventCreate (a profile's events: backends/cudaprofile.c) */
    void *event_record;      /* cuEventRecord */
    void *event_query;       /* cuEventQuery */
    void *event_sync;        /* cuEventSynchronize */
    void *event_elapsed;     /* cuEventElapsedTime */
    void *event_destroy;     /* cuEventDestroy_v2 */
} TaichiAotCudaDriver;
/* cuda.c: a copy between host memory and a CUDA device pointer, in `context` (pushed and popped; 0: the thread's
   current one), through the driver's table. Returns the driver's CUresult. */
int taichi_aot_cuda_transfer(const TaichiAotCudaDriver *cu, uint64_t context, void *host, uint64_t device, uint64_t size,
                         int to_device);
/* cuda.c: `size` bytes of a CUDA device pointer read into `host` after the work queued before on the runtime's
   stream (`stream`; 0: the legacy default stream, which every blocking stream's work precedes): one wait, the copy's
   own where no stream is set, which is the runtime's whole wait (its count `pending[0]` cleared first, as
   taichi_aot_runtime_wait clears it). TAICHI_AOT_CUDA_CAPTURING, nothing asked of the stream but that, where the
   stream set is being captured into a CUDA graph. The thread marked as coming back for Python's lock
   (taichi_aot_coming_back) where it waited. Else the driver's CUresult. */
#define TAICHI_AOT_CUDA_CAPTURING (-108)
int taichi_aot_cuda_read(const TaichiAotCudaDriver *cu, uint64_t context, uint64_t stream, int32_t *pending,
                         void *host, uint64_t device, uint64_t size);

/* The argument plan both own launches share (backends/plan.c, read by metadata/layout.py): where each TiArgument
   goes in a kernel's argument bytes (kind NDARRAY: `size` i32 dims at `offset`, the
   data pointer at `data`, a reverse kernel's gradient pointer at `grad`; SCALAR and TENSOR: `count` values of `size`
   bytes at `offset`), at most
   TAICHI_AOT_PLAN_MAX_BYTES of them; TAICHI_AOT_PLAN_BAD_ARGS is a launch's code for an argument not of the kind
   its plan lays out. */
#define TAICHI_AOT_PLAN_MAX_BYTES 4096
#define TAICHI_AOT_PLAN_BAD_ARGS (-101)
#define TAICHI_AOT_PLAN_NDARRAY 1
#define TAICHI_AOT_PLAN_SCALAR 2
#define TAICHI_AOT_PLAN_TENSOR 3
/* An ndarray argument's memory with this bit set is a device pointer itself (an array taken anew in C for a kernel
   of the own launcher: never imported), not a TiMemory: user-space addresses never have it. */
#define TAICHI_AOT_POINTER_TAG 0x8000000000000000ULL
/* backends/cuda.c: a kernel launched by taichi_aot itself (TaichiAotLaunch kind 2, whose handle is a TaichiAotCudaKernel):
   its TiArguments laid out in the launch parameters by its plan, then each task launched in order on the runtime's
   `stream` with its stand-in `standin` (a device LLVMRuntime). Returns 0, the library's error code (an ndarray's
   memory unknown to it), TAICHI_AOT_PLAN_BAD_ARGS (an argument not of the planned kind), or TAICHI_AOT_CUDA_ERROR
   minus the driver's CUresult. */
#define TAICHI_AOT_STACK_OVERFLOW (-103) /* a reverse-mode kernel overflowed its autodiff stacks (either own launch) */
/* a kernel whose launch waits (its autodiff stacks' check) launched on a stream being captured into a CUDA graph */
#define TAICHI_AOT_CUDA_CAPTURE_REFUSED (-104)
/* a kernel that returns a value (read back after the launch: a wait) launched on a stream being captured */
#define TAICHI_AOT_CUDA_RESULT_CAPTURE_REFUSED (-105)
#define TAICHI_AOT_CUDA_ERROR (-1000)
typedef struct {
    const TaichiAotCudaDriver *driver;
    void *context;   /* the runtime's CUcontext */
    void *stream;    /* the stream kernels run on (NULL: the legacy default stream) */
    uint64_t standin; /* that stream's runtime stand-in */
    uint32_t captured; /* set by a launch made while the stream was being captured into a CUDA graph: the graph
                          holds the stand-in's address (Python keeps it, and the module's code, for the process) */
} TaichiAotCudaRuntime;
typedef struct {
    void *function; /* CUfunction */
    uint32_t grid;
    uint32_t block;
    uint32_t trim; /* a grid-stride range_for task: its grid trimmed to the largest ndarray argument's elements */
} TaichiAotCudaTask;
typedef struct {
    uint32_t kind;
    uint32_t offset;
    uint32_t size;
    uint32_t count;
    uint32_t data;
    uint32_t grad; /* a reverse-mode kernel's ndarray: where its gradient's pointer goes (0: it has none) */
} TaichiAotArgPlan;
/* A kernel's plan. A reverse-mode kernel takes, after its arg_count arguments, grad_count ndarrays: the gradients
   of its ndarrays whose grad is set, in their order. */
typedef struct {
    const TaichiAotCudaRuntime *runtime;
    const TaichiAotCudaTask *tasks;
    const TaichiAotArgPlan *args;
    uint32_t task_count;
    uint32_t arg_count;
    uint32_t args_size;
    uint32_t grad_count;
    uint64_t overflow; /* a reverse kernel whose PTX bounds its autodiff stacks: the device address of the flag an
                          overflow sets (cleared on the stream before the launch, read after it: a wait), or 0 */
    uint64_t result_at; /* a kernel that returns values: where its result buffer lies in a stand-in (the bytes after
                           the LLVMRuntime, which its PTX hands the kernel as RuntimeContext.result_buffer) */
    uint32_t result_size; /* its results' bytes (copied into `result` after the launch, the stream waited for), or 0 */
    void *result; /* host memory of result_size bytes: the last launch's results */
} TaichiAotCudaKernel;
int taichi_aot_cuda_launch(TiRuntime runtime, const TaichiAotCudaKernel *kernel, uint32_t count,
                           const TiArgument *args);
/* A compute graph whose every dispatch is a kernel of the own launcher (TaichiAotLaunch kind 3, its handle this):
   dispatch d launches kernels[d] with, as its argument i, the graph's named argument maps[offset + i] (offset: the
   argument counts of the dispatches before it). Returns as taichi_aot_cuda_launch, at the first failure. */
#define TAICHI_AOT_CUDA_GRAPH_ARGS 64
typedef struct {
    uint32_t dispatch_count;
    const TaichiAotCudaKernel *const *kernels;
    const uint32_t *maps;
    const char *const *names; /* each dispatch's name in a profile (its row: "<graph>/<kernel>"); NULL: none */
} TaichiAotCudaGraph;
int taichi_aot_cuda_graph(TiRuntime runtime, const TaichiAotCudaGraph *graph, uint32_t count,
                          const TiNamedArgument *args);
/* The same made elsewhere (launch.c's taichi_aot_launch_elsewhere: XLA's handler): every dispatch with the caller's
   record `own` (its stand-in and stream) in place of its kernel's runtime. */
int taichi_aot_cuda_graph_elsewhere(TiRuntime runtime, const TaichiAotCudaGraph *graph, uint32_t count,
                                    const TiNamedArgument *args, TaichiAotCudaRuntime *own);

/* launch.c: a launch made elsewhere than the runtime's thread and stream: XLA's handler (on XLA's threads and
   stream) and torch's autograd thread (on torch's stream). A kernel of the own CUDA launcher runs with the record
   `own` (a stand-in of the caller's, the `stream` set into it; its `captured` set where a CUDA graph took the
   launch); one of libtaichi's, where `sync` is given, first waits for `stream` (libtaichi launches on a stream of its
   own) and then for itself (x64: the caller reads the results next; CUDA: `stream` is not ordered with libtaichi's).
   An x64 kernel of the own launch runs as it would anywhere. A graph of the own CUDA launcher, and a kernel of it
   given no `own`, are refused (TAICHI_AOT_REFUSED: none is launched elsewhere); an unknown kind too
   (TAICHI_AOT_UNKNOWN_KIND), before anything is waited for. Returns 0 or the
   launch's error code; the library's last error is left for the caller to read and clear. */
typedef struct {
    void *stream;
    TaichiAotCudaRuntime *own;
    int (*sync)(void *stream);
} TaichiAotElsewhere;
int taichi_aot_launch_elsewhere(const TaichiAotLaunch *launch, TaichiAotElsewhere *where);

/* opplan.c: a kernel's or graph's launch as an op of a framework (XLA's handler, xla.c; torch's C kernel, torchop.c),
   from a list of buffers with no Python. A plan says, for each kernel argument (`args[k]`, its TiArgument prefilled
   in `templates[k]`), where it comes from: operand buffer `index` (TAICHI_AOT_OP_OPERAND), result buffer `index`
   (TAICHI_AOT_OP_RESULT, zero-filled first where `zero`), a 0-d operand `index` whose `value_size` bytes go at byte
   `value_offset` of the TiArgument (SCALAR_OPERAND), or the `index`th TiArgument of the packed scalars XLA passes as
   the u8 array attribute "scalars" (SCALAR_ATTR); `dtype` is the buffer's type in XLA FFI's numbering (torch's
   front-end maps its own), `ndim` and `elem_ndim` its dims. `runtime` is the runtime's cell (taichi_aot_op_cell: its
   lock, its pool of imports, on CUDA the own launcher's runtime to launch with the caller's stream, the driver's
   table); `kind` and `handle` are a TaichiAotLaunch's (the dispatcher launches it). */
#define TAICHI_AOT_OP_MAX_ARGS 64
#define TAICHI_AOT_OP_OPERAND 1
#define TAICHI_AOT_OP_RESULT 2
#define TAICHI_AOT_OP_SCALAR_OPERAND 3
#define TAICHI_AOT_OP_SCALAR_ATTR 4
typedef struct {
    uint32_t kind;
    uint32_t index;
    int32_t dtype;
    uint32_t ndim;
    uint32_t elem_ndim;
    uint32_t zero;
    uint32_t itemsize; /* an ndarray's: bytes of one element of its dtype */
    uint32_t value_offset;
    uint32_t value_size;
} TaichiAotOpArg;
typedef struct {
    void *runtime;
    uint32_t kind;
    uint32_t flags; /* the launch's (TAICHI_AOT_LAUNCH_*) */
    void *handle;
    uint32_t arg_count;
    const TaichiAotOpArg *args;
    const TiArgument *templates;
    const char *const *names;
    const char *what;
    int32_t closed;
    /* a kernel that returns values (x64): after the launch, value k's `value_sizes[k]` bytes at `values` +
       `value_offsets[k]` (its results' host memory) copied into XLA's result buffer `value_first` + k */
    uint32_t value_count;
    uint32_t value_first;
    const uint32_t *value_offsets;
    const uint32_t *value_sizes;
    const void *values;
    const char *name; /* the launch's NVTX range (TaichiAotLaunch.name), or NULL */
    /* CUDA: the same op's plans on other GPUs, by CUDA device (`device_count` of them, NULL where a GPU has none):
       XLA running the op on another GPU than its runtime's (jax.pmap, shard_map) launches that GPU's plan */
    void **devices;
    int32_t device_count;
    /* CUDA: the op's handle for Python, which makes its plan on GPU k, put into `devices[k]` the first time XLA runs
       it there (taichi_aot_xla_make_twin); NULL: none is made */
    void *twin;
} TaichiAotOpPlan;
void *taichi_aot_op_cell(TiRuntime runtime, int cuda, const TaichiAotCudaRuntime *own, const TaichiAotCudaDriver *cu,
                         int device);
void taichi_aot_op_cell_update(void *cell, TiRuntime runtime, const TaichiAotCudaRuntime *own);
/* The runtime's counts (its launches' `pending`), by which a profile knows the op's launches as the runtime's. */
void taichi_aot_op_cell_counts(void *cell, int32_t *pending);
void taichi_aot_op_cell_close(void *cell);
void taichi_aot_op_release(TaichiAotOpPlan *plan);
uint64_t taichi_aot_op_cell_imports(void *cell);
uint64_t taichi_aot_op_cell_captured(void *cell);
/* xla.c: the op plans as XLA FFI custom calls (taichi_aot.jax), thin over opplan.c: the handler's address goes to
   jax.ffi.register_ffi_target; it returns NULL or an XLA_FFI_Error. A plan's twins (`devices`, `twin`) are its
   plans on the other GPUs XLA runs the op on. */
int32_t taichi_aot_xla_make_twin(const TaichiAotOpPlan *plan, int32_t device, char *why, size_t why_size);
void taichi_aot_xla_stop_twins(void);
void *taichi_aot_xla_call_cpu(void *frame);
void *taichi_aot_xla_call_cuda(void *frame);
void *taichi_aot_xla_call_graphable(void *frame);
void *taichi_aot_xla_empty(void *frame);

/* torchop.c: a torch op's boxed kernel for torch's dispatcher, in C (taichi_aot.torch): its inputs (`input_count`
   stack entries, each TAICHI_AOT_TORCH_TENSOR of torch dtype code `input_dtypes[k]`, or a FLOAT or INT scalar) are
   the operands of `plan` (argument `input_args[k]` each); its outputs (`output_count`, `outputs`) are made as each
   TaichiAotTorchOutput says: torch's dtype code, `rank` dims, the first `lead` of them input `source`'s (-1: none),
   the rest `dims`' own; where `copy`, input `source`'s bytes copied in (on CUDA by the cell's cuMemcpyDtoDAsync); plan
   argument `arg`, or -1 for a value the kernel returns. `device_type` is torch's code of the op's device
   (`cpu_type` the CPU's), `device_index` its GPU; `device` and `what` name them in messages; a call from another
   `thread` (0: any thread, taichi_aot's own CUDA runtime) or `pid` than the runtime's is refused. bind returns 1 where
   torch's functions were found; register puts the op in a slot of its own (see the file), returning it, or -1
   (unbound, or every slot taken) or -2 (torch refused); release unregisters it once no call of it is in flight. */
#define TAICHI_AOT_TORCH_SLOTS 256
#define TAICHI_AOT_TORCH_TENSOR 0
#define TAICHI_AOT_TORCH_FLOAT 1
#define TAICHI_AOT_TORCH_INT 2
typedef struct {
    int32_t dtype;
    int32_t source;
    int32_t arg;
    uint32_t copy;
    uint32_t lead;
    uint32_t rank;
    int64_t dims[16];
} TaichiAotTorchOutput;
typedef struct {
    TaichiAotOpPlan *plan;
    uint32_t input_count;
    const uint32_t *input_kinds;
    const int32_t *input_dtypes;
    const uint32_t *input_args;
    uint32_t output_count;
    const TaichiAotTorchOutput *outputs;
    int32_t device_type;
    int32_t cpu_type;
    int32_t device_index;
    const char *device;
    const char *what;
    void *library;
    int32_t slot;
    uint64_t thread; /* the runtime's thread (pthread_self, as Python's threading.get_ident gives it; 0: any thread)
                        and process */
    int32_t pid;
    int32_t busy;    /* calls in flight (torchop_lock) */
} TaichiAotTorchOp;
int taichi_aot_torch_op_bind(const char *torch_cpu, const char *c10, const char *torch_cuda);
int taichi_aot_torch_op_register(TaichiAotTorchOp *op, const char *ns, const char *name, const char *key);
void taichi_aot_torch_op_release(TaichiAotTorchOp *op);

/* got.c: libtaichi_c_api's calls of `name` pointed at `fn` (its GOT slots); the slots patched, or -1. */
int taichi_aot_patch_library_calls(const char *name, void *fn);

/* vkfence.c: libtaichi's Vulkan fences kept and reused (`on`), its dlsym patched once; whether its Vulkan goes
   through ours; the counts of fences made, taken from a pool and put back; the physical device libtaichi is shown;
   whether a VkDevice was made with VK_EXT_external_memory_host (added where the driver has it). */
int taichi_aot_hook_vulkan_fences(int on);
int taichi_aot_vulkan_fences_hooked(void);
void taichi_aot_vulkan_fence_counts(uint64_t *out);
int32_t taichi_aot_vulkan_select_device(int32_t index);
int taichi_aot_vulkan_imports_host(void *device);

/* backends/x64.c: an x64 kernel's tasks (compiled by llvmlite) run without libtaichi on a stand-in for its runtime, whose
   parallel_for is taichi_aot_cpu_parallel_for_address() (its splits on threads of its own; the stand-in's
   thread_pool points to the int32 count of threads a loop may use). A kernel has a plan: its arguments laid out as
   the CUDA plan's are (`args`, `arg_count`, `args_size`, at most TAICHI_AOT_PLAN_MAX_BYTES); a reverse-mode kernel
   takes `grad_count` gradients after its arguments (each of its array's shape), and where its autodiff stacks are
   bounded, `overflow` is the flag an overflow sets (cleared after each launch); where it returns values, `result`:
   host memory of `result_size` bytes its tasks write them into (RuntimeContext.result_buffer), one for all its
   launches: a launch copies them, before its runtime's calls are let go, into memory of the launching thread's, which
   taichi_aot_cpu_values gives that thread (the kernel's `result` where the thread's last launch was another kernel's),
   so a value read after a launch is that launch's whatever another thread launches meanwhile. taichi_aot_cpu_call
   returns 0, TAICHI_AOT_PLAN_BAD_ARGS where an argument is not of the kind the plan lays out,
   TAICHI_AOT_STACK_OVERFLOW, or the library's error code where an ndarray's memory is not its (ti_map_memory
   failed). */
typedef struct {
    void *standin;
    void *const *tasks;
    uint32_t count;
    const TaichiAotArgPlan *args;
    uint32_t arg_count;
    uint32_t args_size;
    void *result;
    uint32_t grad_count;
    int32_t *overflow;
    uint32_t result_size;
} TaichiAotCpuKernel;
#define TAICHI_AOT_CPU_VALUES_BYTES 4096 /* a kernel's values at most, copied for its launching thread */
void *taichi_aot_cpu_parallel_for_address(void);
const void *taichi_aot_cpu_values(const TaichiAotCpuKernel *kernel);
int taichi_aot_cpu_call(TiRuntime runtime, const TaichiAotCpuKernel *kernel, uint32_t count, const TiArgument *args);

/* backends/vulkan.c: a Vulkan module's kernels dispatched by taichi_aot itself on the VkDevice and compute queue of
   the runtime's libtaichi (the file says how, and how its submissions keep order with libtaichi's calls).
   taichi_aot_vk_open makes the runtime's own state (once a runtime; its id, or 0 with the reason in `error`); it is
   closed with the runtime (libtaichi's ti_destroy_runtime first closes it) or by taichi_aot_vk_close.
   taichi_aot_vk_kernel makes a kernel of `task_count` tasks, each a pipeline of its SPIR-V (`code`, `words`) with its
   bindings (TaichiAotVkBind: Taichi's binding number, what is bound there, an ARRAY's argument index), dispatched
   with `groups` workgroups of `group_size` threads, or, where `trim`, as many as the largest ndarray argument's
   elements need, `groups` at most (a loop over an ndarray's run-time length); its arguments laid out by `args` in
   `args_size` bytes; a kernel that returns values `result_size` bytes of them, copied into `result` after each
   launch (waited for). It returns the kernel's id and sets `*handle` (the launch record's), or 0 with the reason.
   taichi_aot_vk_kernel_free lets a kernel go (any thread; freed once no batch runs it). A launch returns 0,
   TAICHI_AOT_PLAN_BAD_ARGS, the library's error code (an ndarray's memory unknown to it) or TAICHI_AOT_VK_ERROR
   minus Vulkan's VkResult. taichi_aot_vk_counts gives a runtime's TAICHI_AOT_VK_COUNTS counts: dispatches recorded,
   batches submitted, descriptor sets made, sets found kept, waits for fences, workgroups dispatched, copies, host
   arrays copied through their imported pages, fence waits that polled to their end and that blocked, quick launches
   that let Python's lock go because another thread's call held the runtime or the next batch slot was still running,
   fence waits made while threads shared the runtime (vkstate.h: aot_vk_shared); taichi_aot_vk_count_name names each
   (NULL past the last).
   taichi_aot_vk_hold_calls holds the runtime's calls for this thread, as every own launch, copy, wait and wrapped
   call of libtaichi's on the runtime does (recursive), and returns what taichi_aot_vk_let_go_calls takes (NULL:
   nothing held, no own state open): taichi_aot_launch and taichi_aot_replay check the close epoch inside, and the
   releases of what a launch uses hold them too (libtaichi's module destroy, a kernel's free), so that a close on
   another thread comes wholly before or after a launch. */
#define TAICHI_AOT_VK_BIND_ARGS 1
#define TAICHI_AOT_VK_BIND_RETS 2
#define TAICHI_AOT_VK_BIND_TEMPS 3
#define TAICHI_AOT_VK_BIND_ARRAY 4
#define TAICHI_AOT_VK_MAX_BINDS 32
#define TAICHI_AOT_VK_MAX_ARRAYS 32
#define TAICHI_AOT_VK_BATCHES 8 /* a slot waited on by a thread with the calls let go is passed over (vkbatch.c) */
#define TAICHI_AOT_VK_BATCH_DISPATCHES 256
#define TAICHI_AOT_VK_EARLY_LAUNCHES 16 /* where waits block, a batch begun after a wait is submitted at this launch */
#define TAICHI_AOT_VK_RESULT_BYTES 4096
#define TAICHI_AOT_VK_COUNTS 13
#define TAICHI_AOT_VK_ERROR (-3000)
typedef struct {
    uint32_t binding;
    uint32_t kind;
    uint32_t arg;
} TaichiAotVkBind;
typedef struct {
    const uint32_t *code;
    uint32_t words;
    uint32_t group_size;
    uint32_t groups;
    uint32_t trim;
    uint32_t bind_count;
    const TaichiAotVkBind *binds;
} TaichiAotVkTask;
/* A compute graph whose every dispatch is a kernel of the own Vulkan launch (TaichiAotLaunch kind 7): dispatch d
   launches kernels[d] with, as its argument i, the graph's named argument maps[offset + i], as the CUDA graph's. */
typedef struct {
    uint32_t dispatch_count;
    void *const *kernels;
    const uint32_t *maps;
    const char *const *names; /* each dispatch's name in a profile (its row: "<graph>/<kernel>"); NULL: none */
} TaichiAotVkGraph;
uint64_t taichi_aot_vk_open(TiRuntime runtime, char *error, size_t error_size);
void taichi_aot_vk_close(TiRuntime runtime);
uint64_t taichi_aot_vk_kernel(uint64_t runtime_id, const TaichiAotVkTask *tasks, uint32_t task_count,
                              const TaichiAotArgPlan *args, uint32_t arg_count, uint32_t args_size,
                              uint32_t result_size, void *result, void **handle, char *error, size_t error_size);
void taichi_aot_vk_kernel_free(uint64_t runtime_id, uint64_t kernel_id);
int taichi_aot_vk_launch(TiRuntime runtime, const void *kernel, uint32_t count, const TiArgument *args);
int taichi_aot_vk_graph(TiRuntime runtime, const TaichiAotVkGraph *graph, uint32_t count, const TiNamedArgument *args);
void taichi_aot_vk_counts(uint64_t runtime_id, uint64_t *out);
/* How a runtime's waits for its fences are made (waits.h): TAICHI_AOT_WAIT_AUTO polls for a bounded time learned from
   its waits (at most `cap_ns`, 0: a millisecond) while fewer threads of the process poll than it has cores, then
   blocks; SPIN polls until done; YIELD polls and yields the core between polls; BLOCK sleeps in the driver's wait. */
#define TAICHI_AOT_WAIT_AUTO 0
#define TAICHI_AOT_WAIT_SPIN 1
#define TAICHI_AOT_WAIT_YIELD 2
#define TAICHI_AOT_WAIT_BLOCK 3
void taichi_aot_vk_set_wait(uint64_t runtime_id, int policy, uint64_t cap_ns);
const char *taichi_aot_vk_count_name(uint32_t index);
void *taichi_aot_vk_hold_calls(TiRuntime runtime);
void taichi_aot_vk_let_go_calls(void *held);
/* backends/vkcopy.c: copies on the own state's queue: between two memories of the runtime, recorded as a launch is;
   between host memory and a memory, through the host's pages imported (waited for). Each returns 0, 1 where it
   cannot (no own state; host memory the device cannot import: the caller copies through libtaichi or staging
   buffers), the library's error code (a memory unknown to it) or TAICHI_AOT_VK_ERROR minus Vulkan's VkResult. */
int taichi_aot_vk_copy(TiRuntime runtime, TiMemory dst, uint64_t dst_offset, TiMemory src, uint64_t src_offset,
                       uint64_t size);
int taichi_aot_vk_host_copy(TiRuntime runtime, TiMemory memory, uint64_t offset, void *host, uint64_t size,
                            int to_device, uint64_t import_id);
/* A host array's few bytes (at most TAICHI_AOT_VK_UPDATE_BYTES, a multiple of 4 at an offset of one) written into a
   memory by the command buffer itself (vkCmdUpdateBuffer), recorded as a copy is: the bytes are taken when it
   returns, no staging buffer in flight. */
#define TAICHI_AOT_VK_UPDATE_BYTES 65536
int taichi_aot_vk_update(TiRuntime runtime, TiMemory dst, uint64_t dst_offset, const void *host, uint64_t size);
/* A memory's few bytes (at most TAICHI_AOT_VK_UPDATE_BYTES) read into host memory after what is recorded: copied into
   the runtime's reads buffer, submitted and waited for by this thread alone (the runtime's calls let go while it
   waits, by its wait policy); done when it returns. */
int taichi_aot_vk_read(TiRuntime runtime, TiMemory src, uint64_t offset, void *host, uint64_t size);
/* Host pages kept imported for copies of an array that moves again (`import_id` above; 0: imported for the one copy):
   the import's id, or 0 where they cannot be; let go by taichi_aot_vk_import_free (any thread). */
uint64_t taichi_aot_vk_import(TiRuntime runtime, void *host, uint64_t size);
void taichi_aot_vk_import_free(TiRuntime runtime, uint64_t id);

/* logsink.c: C's stdio streams, which the library writes to, pointed at a file descriptor of ours (`which`: 2 stderr,
   1 stdout); open returns NULL where fdopen fails. */
void *taichi_aot_stdio_open(int fd);
void *taichi_aot_stdio_swap(int which, void *stream);
int taichi_aot_stdio_flush(void *stream);

/* threads.c: the thread count of the x64 runtimes created next (libtaichi_c_api asks get_nprocs; its slot
   for it is pointed at our answer once the library is loaded). */
int taichi_aot_hook_cpu_threads(void);
void taichi_aot_set_cpu_threads(int count);
int taichi_aot_get_cpu_threads(void);

/* backends/cpucalls.c: libtaichi's calls on a CPU runtime made one at a time, so that any thread may use it. The hook
   points the trampolines of the calls on a runtime (launches, copies, waits, memory, modules, its destroy) at
   wrappers that hold its runtime's calls lock, once, after the library is loaded (1: in place); open gives a runtime
   its lock (1; 0 where the wrappers are not in place, or taichi_aot_cpu_calls_max() CPU runtimes are open), which
   any thread's launches hold (kinds.h) and its destroy gives up: a call on it after that, from any thread, is
   refused (INVALID_STATE). settle returns once no other thread is inside a call on the runtime (a launch that may
   read host memory about to go back to the system: one that comes after finds the close epoch moved). */
int taichi_aot_cpu_calls_hook(void);
int taichi_aot_cpu_calls_open(TiRuntime runtime);
void taichi_aot_cpu_calls_settle(TiRuntime runtime);
int taichi_aot_cpu_calls_max(void);

/* hostcopy.c: `size` bytes copied from `src` to `dst` (not overlapping) by `threads` threads (1-16), each a part. */
void taichi_aot_copy_bytes(void *dst, const void *src, uint64_t size, uint32_t threads);

#endif
