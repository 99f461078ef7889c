/* common/safetensors.h: read and write the safetensors format
 * (https://huggingface.co/docs/safetensors: u64 little-endian header length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the
 * data buffer; offsets are relative to the buffer's start).
 *
 * Reading maps files read-only (mmap) and validates every entry (dtype known, shape x element
 * size == byte span, span inside the file, spans in order and not overlapping); a sharded
 * checkpoint is opened through its model.safetensors.index.json. Writing is atomic
 * (common/fileio.h). */
#ifndef GLM_SAFETENSORS_H
#define GLM_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef enum {
    GLM_ST_F32, GLM_ST_F16, GLM_ST_BF16, GLM_ST_F64, GLM_ST_I64, GLM_ST_I32, GLM_ST_U8,
    GLM_ST_I8, GLM_ST_BOOL, GLM_ST_U32, GLM_ST_I16, GLM_ST_U16, GLM_ST_U64,
} glm_st_dtype;

/* "F32", "BF16", ... as written in headers. */
const char *glm_st_dtype_name(glm_st_dtype d);
size_t glm_st_dtype_size(glm_st_dtype d);

typedef struct glm_st_tensor {
    char *name;
    glm_st_dtype dtype;
    int ndim;
    int64_t shape[8];
    int64_t numel;
    const void *data;     /* into the mapping (read) or caller memory (write) */
    size_t nbytes;
    const char *file;     /* the file it lives in (read) */
} glm_st_tensor;

/* A set of tensors from one file or from every shard of an index. */
typedef struct glm_st_set glm_st_set;

/* Opens `path`: a .safetensors file, a model.safetensors.index.json, or a directory holding
 * either (index preferred, else model.safetensors, else the one *.safetensors file).
 * Errors: GLM_ERR_IO (missing/unreadable), GLM_ERR_FORMAT (truncated file, bad header JSON,
 * bad dtype, span outside the file; the message names the file and tensor). */
glm_status glm_st_open(const char *path, glm_st_set **out);
void glm_st_close(glm_st_set *s);

size_t glm_st_count(const glm_st_set *s);
const glm_st_tensor *glm_st_at(const glm_st_set *s, size_t i);
/* The tensor named `name`, or NULL. */
const glm_st_tensor *glm_st_find(const glm_st_set *s, const char *name);
/* A `__metadata__` value of the (first) file, or NULL. */
const char *glm_st_metadata(const glm_st_set *s, const char *key);

/* Looks up `name` and checks its shape (ndim dims in `shape`); converts to float32 into `dst`
 * (numel floats) from F32, F16, BF16 or F64. Errors name the tensor, the expected and found
 * shapes, and the file: GLM_ERR_FORMAT (missing tensor), GLM_ERR_MISMATCH (shape),
 * GLM_ERR_UNSUPPORTED (dtype). */
glm_status glm_st_read_f32(const glm_st_set *s, const char *name, int ndim, const int64_t *shape,
                           float *dst);

/* Converts `n` elements of dtype `src_dtype` (F32/F16/BF16/F64) to float32. */
glm_status glm_st_to_f32(glm_st_dtype src_dtype, const void *src, size_t n, float *dst);
/* Converts float32 to F32/F16/BF16 (round to nearest even) into dst. */
glm_status glm_st_from_f32(glm_st_dtype dst_dtype, const float *src, size_t n, void *dst);

/* Writes tensors (in the given order, data in caller memory) to `path` atomically, with
 * optional metadata pairs (meta_kv: key0, value0, key1, value1, ...; n_meta pairs). */
glm_status glm_st_write(const char *path, const glm_st_tensor *tensors, size_t n,
                        const char *const *meta_kv, size_t n_meta);

/* Fills dst with elements [first, first + count) of tensor `tensor` in its dtype. */
typedef glm_status (*glm_st_fill_fn)(void *ctx, size_t tensor, int64_t first, int64_t count, void *dst);

/* As glm_st_write, with the data made by fill() instead of held in memory: the header first,
 * then chunks of 2^25 elements generated and written (pwrite at their offsets) by up to
 * `threads` threads, so memory stays at threads x one chunk whatever the model's size; durable
 * as glm_st_write (temp name, fsync, rename). tensors[i].data is ignored. A thread that cannot be
 * started leaves its share to the others. Errors: fill's, GLM_ERR_IO, GLM_ERR_NOMEM, GLM_ERR_ARG
 * (bad tensor list). */
glm_status glm_st_write_parallel(const char *path, const glm_st_tensor *tensors, size_t n, const char *const *meta_kv,
                                 size_t n_meta, glm_st_fill_fn fill, void *ctx, int threads);

#endif
