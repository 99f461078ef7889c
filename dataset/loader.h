/* dataset/loader.h: reads the shards of one split for training: epoch shuffle by seed,
 * rank sharding, and a position that a checkpoint saves and restores exactly.
 *
 * Rows are the unit: an epoch is a permutation of all rows of the split (Fisher-Yates with a
 * glm_rng seeded by (seed, epoch)); consecutive calls take rows in that order; the last batch
 * of an epoch may be short (it is used, not dropped). */
#ifndef GLM_LOADER_H
#define GLM_LOADER_H

#include <stdint.h>

#include "dataset/shard.h"

typedef struct glm_loader {
    uint32_t T;
    uint64_t fingerprint;   /* tokenizer fingerprint of the shards (0: pre-tokenized, unknown) */
    uint32_t vocab_size;    /* of that tokenizer (0: unknown) */
    uint64_t data_fingerprint; /* the split's rows: FNV-1a over each shard's file name, payload CRC-32
                                  and row count, in order (equal for a byte-identical re-tokenization) */
    size_t n_shards;
    glm_shard *shards;
    uint64_t *row_base;     /* [n_shards + 1]: first global row of each shard */
    uint64_t n_rows, n_tokens, n_targets;
    uint64_t seed;
    bool shuffle;
    /* the unit of an epoch: rows (packing), or documents (samples: glm_loader_by_document) */
    bool by_doc;
    uint64_t n_units;       /* n_rows, or n_docs when by_doc */
    uint64_t n_docs;
    struct glm_loader_docref {
        uint64_t row;       /* global row holding the document */
        uint32_t off, len;  /* its first token within the row, and its length */
    } *docs;                /* [n_docs] when by_doc, in shard order */
    /* position */
    uint64_t epoch, cursor;
    uint64_t *perm;         /* [n_units] unit order of the current epoch */
} glm_loader;

/* Opens the `split` ("train" or "val") of a tokenize output directory (or its manifest.json),
 * or a single shard file (split ignored). Every shard is validated (glm_shard_open: header, sizes,
 * the payload CRC-32 over all its data, every row) and must share seq_len and tokenizer
 * fingerprint; a shard of a tokenize output must also be the one its manifest.json lists: the
 * entry's file size (checked before it is read), row, sample, token and target counts and payload
 * CRC-32. Errors: GLM_ERR_IO / GLM_ERR_FORMAT naming the file; GLM_ERR_MISMATCH naming the shard,
 * what differs from the manifest and a hint; GLM_ERR_ARG when the split is missing or empty (hint:
 * tokenize with --val-size). */
glm_status glm_loader_open(glm_loader *l, const char *path, const char *split, uint64_t seed, bool shuffle);
void glm_loader_close(glm_loader *l);

/* Makes documents (samples) the unit of the epoch instead of rows, for LLaMA-Factory's
 * `packing: false`, where a micro-batch is B samples: the epoch becomes a permutation of every
 * document of the split (same seeding as rows), and glm_loader_next / glm_loader_peek /
 * glm_loader_unit_targets / glm_loader_seek then count documents. Resets the position to (0, 0).
 * Errors: GLM_ERR_NOMEM. */
glm_status glm_loader_by_document(glm_loader *l);

/* The sum of the `n` longest documents' lengths (tokens; all of them when n >= n_docs): the
 * longest row that n samples concatenated can make, whatever the shuffle. by_doc only. */
uint64_t glm_loader_longest_docs(const glm_loader *l, uint32_t n);

/* Copies document `d` (a unit index of a by_doc loader) into ids[len], targets[len] (0/1),
 * pos[len] (0..len-1) and sets doc[len] to doc_index; returns len (tokens written) and its
 * target count in *n_targets (may be NULL). Releases the row's pages like glm_loader_row. */
uint32_t glm_loader_doc(const glm_loader *l, uint64_t d, uint32_t *ids, uint8_t *targets, int32_t *pos, int32_t *doc,
                        int32_t doc_index, int64_t *n_targets);

/* Target-token count of unit u: a row, or a document when by_doc. */
int64_t glm_loader_unit_targets(const glm_loader *l, uint64_t u);

/* Moves to (epoch, cursor), rebuilding that epoch's permutation. */
glm_status glm_loader_seek(glm_loader *l, uint64_t epoch, uint64_t cursor);

/* Takes up to `n` next global row indices of the current epoch into rows[]; *got is how many
 * (0 < *got <= n; fewer only at the epoch's end). When an epoch is exhausted the next call
 * starts the following epoch. */
glm_status glm_loader_next(glm_loader *l, uint32_t n, uint64_t *rows, uint32_t *got);

/* The rows the next glm_loader_next(l, n, ...) will take, without moving: returns how many were
 * written to rows[] (0 when that call starts a new epoch, whose order is not made yet). */
uint32_t glm_loader_peek(const glm_loader *l, uint32_t n, uint64_t *rows);
/* Copies row `row` into ids[T], targets[T] (0/1 bytes), pos[T] (position in its document,
 * restarting at 0; padding counts 0..), doc[T] (document index within the row; the padding
 * is one more document). Returns the row's count of target tokens in *n_targets. Streaming: the
 * shards are mapped, not read, and the row's pages are released after the copy
 * (glm_shard_release), so the process holds the caller's buffers and at most one row of the
 * mapping, whatever the shards' size (rows of 1M tokens: 4 MiB of ids each). */
void glm_loader_row(const glm_loader *l, uint64_t row, uint32_t *ids, uint8_t *targets, int32_t *pos,
                    int32_t *doc, int64_t *n_targets);

/* Target-token count of a row, without copying it. */
int64_t glm_loader_row_targets(const glm_loader *l, uint64_t row);

/* The shard and the local row of a global row. */
const glm_shard *glm_loader_shard_of(const glm_loader *l, uint64_t row, uint32_t *local_row);

#endif
