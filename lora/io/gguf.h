/* lora/io/gguf.h: a GGUF file writer (llama.cpp's model format), and the tensor encodings it
 * writes (F32, F16, BF16, Q8_0).
 *
 * The format (GGUF version 3, as llama.cpp's gguf-py 0.19 writes and ggml's gguf.cpp reads; all
 * integers little endian):
 *   u32 magic 0x46554747 (the bytes "GGUF"), u32 version 3, u64 tensor count, u64 key count;
 *   per key: a string key, u32 value type, the value; a string is u64 byte length + the bytes
 *     (no NUL); an array is u32 element type, u64 count, the elements; a bool is one byte;
 *   per tensor: string name, u32 number of dims, u64 per dim (ne[0] first: the innermost,
 *     fastest-varying dimension, i.e. the torch shape reversed), u32 ggml type, u64 offset of
 *     its data from the start of the data section (a multiple of the alignment);
 *   zero padding to the alignment (general.alignment, 32 by default and here), then the data
 *     section: each tensor's bytes, zero-padded to the alignment.
 * Value types (gguf-py constants.py GGUFValueType): u8 0, i8 1, u16 2, i16 3, u32 4, i32 5,
 * f32 6, bool 7, string 8, array 9, u64 10, i64 11, f64 12.
 * Tensor types (ggml.h / constants.py GGMLQuantizationType): F32 0, F16 1, Q8_0 8, BF16 30.
 * Q8_0 (ggml-quants.c, quantize_row_q8_0_ref): rows in blocks of 32 values, each block 34 bytes:
 *   an IEEE f16 scale d = max|x| / 127 (computed in f32, stored rounded to nearest even), then
 *   32 int8 q = roundf(x * id) with id = 1/d in f32 (0 when d = 0); roundf rounds halves away
 *   from zero. The value is q * d (with the stored f16 d).
 *
 * A file is written in one pass: keys and tensor infos are collected first (glm_gguf_kv_*,
 * glm_gguf_add_tensor), glm_gguf_begin writes them, each tensor's data follows in the order the
 * tensors were added (glm_gguf_write_tensor), and glm_gguf_commit puts the file in place
 * durably (common/fileio.h: temporary name, fsync, rename). */
#ifndef GLM_LORA_GGUF_H
#define GLM_LORA_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define GLM_GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define GLM_GGUF_VERSION 3u
#define GLM_GGUF_ALIGNMENT 32u     /* GGUF_DEFAULT_ALIGNMENT, written as general.alignment */
#define GLM_GGUF_Q8_0_BLOCK 32     /* values per Q8_0 block (QK8_0) */
#define GLM_GGUF_Q8_0_BYTES 34     /* bytes per Q8_0 block: f16 scale + 32 int8 */

/* GGUF metadata value types (gguf-py GGUFValueType). */
typedef enum {
    GLM_GGUF_U8 = 0, GLM_GGUF_I8 = 1, GLM_GGUF_U16 = 2, GLM_GGUF_I16 = 3, GLM_GGUF_U32 = 4,
    GLM_GGUF_I32 = 5, GLM_GGUF_F32 = 6, GLM_GGUF_BOOL = 7, GLM_GGUF_STRING = 8, GLM_GGUF_ARRAY = 9,
    GLM_GGUF_U64 = 10, GLM_GGUF_I64 = 11, GLM_GGUF_F64 = 12,
} glm_gguf_vtype;

/* ggml tensor types that glmtune writes (ggml.h enum ggml_type). */
typedef enum {
    GLM_GGML_F32 = 0,
    GLM_GGML_F16 = 1,
    GLM_GGML_Q8_0 = 8,
    GLM_GGML_BF16 = 30,
} glm_ggml_type;

/* llama.cpp's general.file_type for a file whose 2-D tensors are of type t (llama_ftype /
 * gguf-py LlamaFileType: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32). */
uint32_t glm_gguf_file_type(glm_ggml_type t);

/* "f32", "f16", "bf16", "q8_0". */
const char *glm_ggml_type_name(glm_ggml_type t);

/* Bytes of a tensor of type t with `ne0` values per row and `rows` rows: 4 / 2 / 2 per value,
 * Q8_0 34 per 32 values. Returns 0 when ne0 does not fit the type (Q8_0: ne0 % 32 != 0). */
uint64_t glm_ggml_nbytes(glm_ggml_type t, int64_t ne0, int64_t rows);

/* Encodes n float32 values (n a multiple of ne0 rows; for Q8_0 n % 32 == 0) as type t into dst
 * (glm_ggml_nbytes bytes): F32 as is, F16 and BF16 rounded to nearest even (common/safetensors.h),
 * Q8_0 block by block as quantize_row_q8_0_ref (see the top of this file).
 * Errors: GLM_ERR_ARG (n not a multiple of 32 for Q8_0). */
glm_status glm_ggml_encode(glm_ggml_type t, const float *src, int64_t n, void *dst);

/* One Q8_0 block: 32 floats -> 34 bytes (little-endian f16 scale, then 32 int8). */
void glm_gguf_q8_0_block(const float *x, uint8_t *out);

typedef struct glm_gguf glm_gguf;

/* A new, empty file description. Errors: GLM_ERR_NOMEM. */
glm_status glm_gguf_new(glm_gguf **out);
/* Frees g; a file begun and not committed is removed (glm_afile_abort). NULL is fine. */
void glm_gguf_free(glm_gguf *g);

/* Metadata, in the order added. A key added twice is GLM_ERR_ARG (naming it); every function
 * also fails with GLM_ERR_NOMEM, and with GLM_ERR_ARG once the file is begun. Strings are
 * UTF-8, written without their NUL. */
glm_status glm_gguf_kv_str(glm_gguf *g, const char *key, const char *value);
glm_status glm_gguf_kv_u32(glm_gguf *g, const char *key, uint32_t value);
glm_status glm_gguf_kv_i32(glm_gguf *g, const char *key, int32_t value);
glm_status glm_gguf_kv_u64(glm_gguf *g, const char *key, uint64_t value);
glm_status glm_gguf_kv_f32(glm_gguf *g, const char *key, float value);
glm_status glm_gguf_kv_bool(glm_gguf *g, const char *key, bool value);
/* An array of n strings: strs[i] of lens[i] bytes (lens NULL: NUL-terminated strings). */
glm_status glm_gguf_kv_strs(glm_gguf *g, const char *key, const char *const *strs, const size_t *lens, size_t n);
/* An array of n i32 values. */
glm_status glm_gguf_kv_i32s(glm_gguf *g, const char *key, const int32_t *v, size_t n);

/* Declares the next tensor: name, type, shape as torch gives it (outermost first, ndim 1..4;
 * written reversed, ne[0] = shape[ndim - 1]). Its offset is the running total of the earlier
 * tensors' padded sizes. Errors: GLM_ERR_ARG (a name used twice or longer than 63 bytes, which
 * ggml refuses: GGML_MAX_NAME 64; a bad ndim or dim; a row that does not fit the type: Q8_0
 * needs ne[0] % 32 == 0), GLM_ERR_NOMEM. */
glm_status glm_gguf_add_tensor(glm_gguf *g, const char *name, glm_ggml_type type, int ndim, const int64_t *shape);

/* Number of tensors declared; tensor i's byte size. */
size_t glm_gguf_n_tensors(const glm_gguf *g);
uint64_t glm_gguf_tensor_nbytes(const glm_gguf *g, size_t i);

/* Opens `path` (glm_afile: "<path>.tmp.<pid>" until committed) and writes the header, every key
 * (general.alignment is added first when not already there) and every tensor info, then the
 * padding up to the data section. Errors: GLM_ERR_IO naming the path, GLM_ERR_ARG (begun twice). */
glm_status glm_gguf_begin(glm_gguf *g, const char *path);

/* Writes the data of the next tensor (the order of glm_gguf_add_tensor), exactly its byte size,
 * then its padding. Errors: GLM_ERR_ARG (not begun, every tensor written, a size other than the
 * declared one, naming the tensor), GLM_ERR_IO. */
glm_status glm_gguf_write_tensor(glm_gguf *g, const void *data, uint64_t nbytes);

/* Flushes, fsyncs and renames the file into place. Errors: GLM_ERR_ARG (a tensor's data not
 * written), GLM_ERR_IO. g stays to be freed. */
glm_status glm_gguf_commit(glm_gguf *g);

#endif
