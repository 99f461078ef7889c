/* tokenize/bpe/spm_shim.h (internal to tokenize/): a minimal C interface to libsentencepiece (C++),
 * which has no C API. Only tokenizer.c uses it. Errors are reported as a return code plus a
 * message written into a caller buffer (the shim does not touch glm_err, which is C). */
#ifndef GLM_TOKENIZE_SPM_SHIM_H
#define GLM_TOKENIZE_SPM_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct glm_spm glm_spm;

/* Loads a SentencePiece model from the serialized ModelProto bytes data[0..len).
 * Returns NULL on failure with sentencepiece's message in err[0..errlen). */
glm_spm *glm_spm_load(const void *data, size_t len, char *err, size_t errlen);
void glm_spm_free(glm_spm *m);

/* Number of pieces (ids 0 .. size-1). */
uint32_t glm_spm_size(const glm_spm *m);

/* Encodes text[0..len) (UTF-8) with the model's normalizer and segmentation; *ids is a malloc'd
 * array of *n ids (free it). Thread-safe (sentencepiece's Encode is const). Returns 0, or -1 with
 * the message in err. */
int glm_spm_encode(const glm_spm *m, const char *text, size_t len, uint32_t **ids, size_t *n,
                   char *err, size_t errlen);

/* sentencepiece's own DecodeIds (byte pieces joined, U+2581 -> space, leading space of the first
 * piece dropped, unknown -> " \u2047 "): a malloc'd buffer of *len bytes (NUL-terminated), or NULL
 * with the message in err when an id is out of range. */
char *glm_spm_decode(const glm_spm *m, const uint32_t *ids, size_t n, size_t *len, char *err,
                     size_t errlen);

/* The piece string of id (NUL-terminated, owned by the model), or NULL when out of range;
 * *len gets its length. */
const char *glm_spm_id_to_piece(const glm_spm *m, uint32_t id, size_t *len);

/* The id of a piece string, or -1 when it is not a piece (sentencepiece maps unknown strings to
 * the unk id; this returns -1 for those instead). */
int64_t glm_spm_piece_to_id(const glm_spm *m, const char *piece, size_t len);

/* Piece types (sentencepiece_model.proto SentencePiece.Type). */
enum { GLM_SPM_NORMAL = 1, GLM_SPM_UNKNOWN = 2, GLM_SPM_CONTROL = 3, GLM_SPM_USER_DEFINED = 4,
       GLM_SPM_UNUSED = 5, GLM_SPM_BYTE = 6 };

/* The type of id as sentencepiece reports it (NORMAL, UNKNOWN, CONTROL, UNUSED or BYTE; this
 * library version has no user-defined query, so USER_DEFINED comes from the proto, see
 * tokenizer.c), or 0 when out of range. */
int glm_spm_piece_type(const glm_spm *m, uint32_t id);

#ifdef __cplusplus
}
#endif

#endif
