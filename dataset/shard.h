/* dataset/shard.h: packed training shards, specified byte by byte.
 *
 * A shard holds R rows of T tokens. Each row packs whole documents (conversations) one after
 * another; what is left at the end of a row is padding (id 0, never a target, attends only to
 * itself). All integers are little-endian.
 *
 *   offset  size  field
 *   0       8     magic "GLMSHARD"
 *   8       4     version = 1
 *   12      4     header_bytes = 128
 *   16      4     seq_len T
 *   20      4     n_rows R
 *   24      8     n_docs D
 *   32      8     n_tokens   (document tokens, padding excluded)
 *   40      8     n_targets  (tokens whose target bit is 1)
 *   48      8     tokenizer fingerprint (glm_tokenizer_fingerprint; 0 = pre-tokenized, unknown)
 *   56      4     vocab_size of that tokenizer (every id is below it; 0 = unknown)
 *   60      4     flags (0)
 *   64      8     ids_offset      = 128:                 R*T uint32 token ids, row-major
 *   72      8     targets_offset  = ids_offset + 4RT:    ceil(RT/8) bytes, bit (i%8) of byte i/8 = 1
 *                                                        when token i is a training target (it is
 *                                                        predicted from token i-1 of the same
 *                                                        document; never a document's first token)
 *   80      8     rowdocs_offset  = targets_offset + pad8(ceil(RT/8)): R+1 uint64, documents of row
 *                                                        r are docs[rowdocs[r] .. rowdocs[r+1])
 *   88      8     docs_offset     = rowdocs_offset + 8(R+1): D entries of 16 bytes:
 *                                                        uint32 length, uint32 source index,
 *                                                        uint64 record index (0-based, in source)
 *   96      8     sources_offset  = docs_offset + 16D:   uint32 count S, then S times
 *                                                        (uint32 byte length, UTF-8 name), then
 *                                                        zero padding to a multiple of 8
 *   104     8     file_bytes (total size of the file)
 *   112     4     payload crc32 (zlib CRC-32 of bytes [128, file_bytes))
 *   116     8     reserved, zero
 *   124     4     header crc32 (zlib CRC-32 of bytes [0, 124))
 *
 * Shards are written atomically (temp name, fsync, rename). */
#ifndef GLM_SHARD_H
#define GLM_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/fileio.h"
#include "common/status.h"
#include "common/vec.h"

#define GLM_SHARD_MAGIC "GLMSHARD"
#define GLM_SHARD_VERSION 1
/* The "format" of a tokenize output's manifest.json. */
#define GLM_SHARDS_FORMAT "glmtune-shards"
#define GLM_SHARD_HEADER_BYTES 128

typedef struct glm_shard_doc {
    uint32_t len;
    uint32_t source;   /* index into the shard's source-name table */
    uint64_t record;   /* 0-based record index within that source */
} glm_shard_doc;

/* An open, validated shard (read-only mapping). */
typedef struct glm_shard {
    char *path;
    glm_mmap map;
    uint32_t seq_len, n_rows, vocab_size;
    uint64_t n_docs, n_tokens, n_targets, fingerprint;
    uint32_t payload_crc;       /* the header's payload CRC-32, checked against the data at open */
    const uint32_t *ids;        /* [R*T] */
    const uint8_t *targets;     /* bitmask over R*T */
    const uint64_t *rowdocs;    /* [R+1] (in the mapping, or in aligned_meta) */
    const glm_shard_doc *docs;  /* [D] (in the mapping, or in aligned_meta) */
    void *aligned_meta;         /* rowdocs and docs copied to 8-aligned memory when the file has them at an
                                   offset that is 4 mod 8 (R*T odd), so that no 64-bit read is misaligned;
                                   NULL when they are read from the mapping */
    uint32_t n_sources;
    char **sources;             /* [S] names */
} glm_shard;

/* Opens and fully validates a shard: magic, version, header CRC, section offsets and file size,
 * payload CRC, per-row document lengths (sum <= T), target bits (none on a document's first
 * token or on padding), ids below vocab_size, and the counts in the header.
 * Errors: GLM_ERR_IO (cannot open), GLM_ERR_FORMAT (any mismatch: the message gives the byte
 * offset, what was expected and found, and a hint), GLM_ERR_UNSUPPORTED (other version). */
glm_status glm_shard_open(const char *path, glm_shard *sh);
void glm_shard_close(glm_shard *sh);

/* Drops the pages holding bytes [off, off + len) of the shard's mapping from this process
 * (madvise MADV_DONTNEED on the read-only file mapping, the range rounded out to 2 MiB, the size
 * of the page-cache folios the kernel may map: neighbouring bytes go too): they stay in the page
 * cache and the next read maps them again, so reading a shard row by row keeps one row's pages
 * resident at a time, not the file's. glm_shard_open releases the whole file after validating
 * it; the loader releases each row after copying it. Never fails (a no-op where madvise refuses). */
void glm_shard_release(const glm_shard *sh, uint64_t off, uint64_t len);

/* Target bit of token i (0 <= i < R*T). */
static inline int glm_shard_target(const glm_shard *sh, uint64_t i) {
    return (sh->targets[i >> 3] >> (i & 7)) & 1;
}

/* Builds shards in memory row by row and writes each atomically when complete. */
typedef struct glm_shard_writer {
    uint32_t seq_len, vocab_size;
    uint64_t fingerprint;
    uint32_t rows_per_shard;
    char *dir, *prefix;          /* files <dir>/<prefix>-00000.bin ... */
    uint32_t next_index;
    /* current shard */
    glm_u32vec ids;
    glm_u8vec targets;           /* one byte per token while building */
    GLM_VEC(uint64_t) rowdocs;
    GLM_VEC(glm_shard_doc) docs;
    GLM_VEC(char *) sources;     /* names interned per shard */
    uint64_t n_tokens, n_targets;
    /* totals and the list of written files (for manifest.json) */
    struct glm_shard_info {
        char *file;              /* file name relative to dir */
        uint32_t rows;
        uint64_t docs, tokens, targets;
        uint32_t crc;            /* payload CRC-32 */
        uint64_t bytes;          /* file size */
    } *written;
    size_t n_written, cap_written;
} glm_shard_writer;

glm_status glm_shard_writer_init(glm_shard_writer *w, const char *dir, const char *prefix,
                                 uint32_t seq_len, uint32_t rows_per_shard, uint64_t fingerprint,
                                 uint32_t vocab_size);
/* Appends one row made of n documents: doc k has lens[k] tokens starting at ids[k] with target
 * flags tg[k] (1 byte per token), from source name srcs[k], record recs[k]. The sum of lens
 * must be <= T; the rest of the row is padding. */
glm_status glm_shard_writer_add_row(glm_shard_writer *w, size_t n, const uint32_t *const *ids,
                                    const uint8_t *const *tg, const uint32_t *lens,
                                    const char *const *srcs, const uint64_t *recs);
/* Whether `name` is a shard file name the writer gives for `prefix`: "<prefix>-<digits>.bin"
 * (at least five digits, "train-00000.bin"). */
bool glm_shard_is_file_name(const char *name, const char *prefix);
/* Writes the last, partial shard (if any rows). */
glm_status glm_shard_writer_finish(glm_shard_writer *w);
void glm_shard_writer_free(glm_shard_writer *w);

#endif
