/* dataset/packer.h: best-fit packing of documents into rows of T tokens (docs/design.md §2).
 *
 * Documents are never split. Documents are buffered until `window_tokens` tokens are pending;
 * then the window is packed best-fit-decreasing (longest first, ties in arrival order; each
 * document goes to the open row with the least remaining room that still fits it, else to a
 * new row) and every row of the window is written. Memory is bounded by the window, and the
 * output depends only on the input order and settings (byte-identical reruns). */
#ifndef GLM_PACKER_H
#define GLM_PACKER_H

#include <stdint.h>

#include "dataset/shard.h"

typedef struct glm_pack_doc {
    uint32_t *ids;        /* [len], owned by the packer after glm_packer_add */
    uint8_t *targets;     /* [len] 0/1, owned by the packer after glm_packer_add */
    uint32_t len;         /* 1 <= len <= T */
    const char *source;   /* source name; must outlive the packer (not copied) */
    uint64_t record;      /* record index within the source */
} glm_pack_doc;

typedef struct glm_packer {
    uint32_t T;
    uint64_t window_tokens;
    glm_shard_writer *out;
    GLM_VEC(glm_pack_doc) docs;
    uint64_t pending_tokens;
    uint64_t rows, n_docs, tokens, targets;  /* totals written */
} glm_packer;

/* window_tokens: how many tokens to buffer before packing (>= T; e.g. 1<<24). */
void glm_packer_init(glm_packer *p, uint32_t T, uint64_t window_tokens, glm_shard_writer *out);
/* Queues a document (ownership of ids/targets passes to the packer); may pack and write a
 * window. Errors: GLM_ERR_ARG for len 0 or len > T; I/O errors from the shard writer. */
glm_status glm_packer_add(glm_packer *p, glm_pack_doc doc);
/* Packs and writes what is pending, then finishes the last shard. */
glm_status glm_packer_finish(glm_packer *p);
void glm_packer_free(glm_packer *p);

#endif
