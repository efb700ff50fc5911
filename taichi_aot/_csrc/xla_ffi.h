/* The few structures of XLA's FFI C API (API version 0.x, the ABI jaxlib's xla/ffi/api/c_api.h describes) that
   xla.c reads and writes, declared by their layout under names of our own: every struct starts with its size and
   an extension pointer; enums are 32-bit ints. tests/test_ops_jax.py compiles a file that includes both this and
   jaxlib's own header (jax.ffi.include_dir()) and checks every size and offset below against it. */
#ifndef TAICHI_AOT_XLA_FFI_H
#define TAICHI_AOT_XLA_FFI_H

#include <stddef.h>
#include <stdint.h>

#define TAO_FFI_SIZE(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))

typedef struct tao_ffi_ext {
    size_t struct_size;
    int32_t type; /* 1: the metadata extension */
    struct tao_ffi_ext *next;
} tao_ffi_ext;

typedef struct {
    size_t struct_size;
    tao_ffi_ext *extension_start;
    int major_version;
    int minor_version;
} tao_ffi_version;

typedef struct {
    size_t struct_size;
    tao_ffi_ext *extension_start;
    const char *message;
    int32_t errc;
} tao_ffi_error_args;

typedef struct {
    size_t struct_size;
    tao_ffi_ext *extension_start;
    int32_t dtype;
    void *data;
    int64_t rank;
    int64_t *dims;
} tao_ffi_buffer;

typedef struct {
    size_t struct_size;
    tao_ffi_ext *extension_start;
    int64_t size;
    int32_t *types;
    void **items;
} tao_ffi_list; /* the arguments (XLA_FFI_Args) and results (XLA_FFI_Rets): the same layout */

typedef struct {
    const char *ptr;
    size_t len;
} tao_ffi_span;

typedef struct {
    int32_t dtype;
    void *value;
} tao_ffi_scalar;

typedef struct {
    int32_t dtype;
    size_t size;
    void *data;
} tao_ffi_array;

typedef struct {
    size_t struct_size;
    tao_ffi_ext *extension_start;
    int64_t size;
    int32_t *types; /* 1 array, 2 dictionary, 3 scalar, 4 string */
    tao_ffi_span **names;
    void **attrs;
} tao_ffi_attrs;

typedef struct tao_ffi_api tao_ffi_api;

typedef struct {
    size_t struct_size;
    tao_ffi_ext *extension_start;
    const tao_ffi_api *api;
    void *ctx;
    int32_t stage; /* 3: execute */
    tao_ffi_list args;
    tao_ffi_list rets;
    tao_ffi_attrs attrs;
    void *future;
} tao_ffi_frame;

typedef struct {
    size_t struct_size;
    tao_ffi_ext *extension_start;
    void *ctx;
    void *stream;
} tao_ffi_stream_args;

typedef void *(*tao_ffi_fn)(void *args);

struct tao_ffi_api {
    size_t struct_size;
    tao_ffi_ext *extension_start;
    tao_ffi_version api_version;
    const void *internal_api;
    tao_ffi_fn error_create;      /* XLA_FFI_Error_Create */
    tao_ffi_fn error_get_message; /* XLA_FFI_Error_GetMessage */
    tao_ffi_fn error_destroy;     /* XLA_FFI_Error_Destroy */
    tao_ffi_fn handler_register;  /* XLA_FFI_Handler_Register */
    tao_ffi_fn stream_get;        /* XLA_FFI_Stream_Get */
};

typedef struct {
    size_t struct_size;
    tao_ffi_version api_version;
    uint32_t traits;
} tao_ffi_metadata;

typedef struct {
    tao_ffi_ext extension_base;
    tao_ffi_metadata *metadata;
} tao_ffi_metadata_ext;

#endif
