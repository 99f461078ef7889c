/* tokenize/bpe/bpe.h (internal to tokenize/): tiktoken-style byte-level BPE with the GLM-4 split
 * regex. Used by tokenizer.c; not a public interface. */
#ifndef GLM_TOKENIZE_BPE_H
#define GLM_TOKENIZE_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/vec.h"

typedef struct glm_bpe glm_bpe;

/* The GLM-4 split pattern, exactly as in tests/fixtures/README.md (tiktoken's pat_str). */
extern const char glm_bpe_glm4_pattern[];

/* The pattern actually compiled: glm_bpe_glm4_pattern with \p{L}, \p{N} and \s spelled out
 * so that PCRE2 10.42's Unicode tables agree with tiktoken's (see bpe_split.c). */
const char *glm_bpe_pcre2_pattern(void);

/* True when `data` looks like a tiktoken BPE file: its first line matches
 * ^[A-Za-z0-9+/=]+ [0-9]+$ (a base64 token, one space, a decimal rank). */
bool glm_bpe_detect(const char *data, size_t len);

/* Parses a tiktoken BPE file (lines "base64(token) rank", LF or CRLF, blank lines ignored) held
 * in data[0..len), builds its lookup tables and compiles the GLM-4 split regex (PCRE2, UTF+UCP,
 * JIT). The tables built from the same bytes by an earlier load are taken from the table cache
 * when it has them and they check out ($GLMTUNE_CACHE_DIR, else $XDG_CACHE_HOME/glmtune, else
 * ~/.cache/glmtune, about 31 MB per tokenizer file; GLMTUNE_CACHE_DIR=off disables it; see
 * bpe_cache.c); otherwise they are built (about 0.15 CPU-seconds for GLM-4) and saved there, on
 * a best-effort basis (a cache that cannot be written is no error).
 * `path` only names the file in messages. Errors: GLM_ERR_FORMAT (bad base64, bad rank,
 * duplicate token or rank; the message gives the line number), GLM_ERR_NOMEM,
 * GLM_ERR_LIBRARY (PCRE2 cannot compile the split regex). */
glm_status glm_bpe_load(const char *path, const char *data, size_t len, glm_bpe **out);
void glm_bpe_free(glm_bpe *b);

/* FNV-1a 64 (GLM_FNV1A64_INIT) of the bytes the table was loaded from: the start of the
 * tokenizer's fingerprint, and the key of its table cache. */
uint64_t glm_bpe_file_hash(const glm_bpe *b);

/* True when the tables were mapped from the table cache rather than built (see bpe_cache.c). */
bool glm_bpe_from_cache(const glm_bpe *b);

/* Max rank + 1 (ids above are unassigned in the BPE table). */
uint32_t glm_bpe_n_ranks(const glm_bpe *b);

/* The bytes of token `id`; false if `id` is not a rank in the table. */
bool glm_bpe_token(const glm_bpe *b, uint32_t id, const char **bytes, size_t *n);

/* Rank of the byte string s[0..n), or -1 if it is not a token. */
int64_t glm_bpe_rank(const glm_bpe *b, const void *s, size_t n);

/* Ordinary text -> ids appended to *out; text must already be valid UTF-8 (the caller checks:
 * glm_utf8_check in common/utf8.h). Thread-safe. Errors: GLM_ERR_NOMEM, GLM_ERR_LIBRARY (a PCRE2 match
 * error), GLM_ERR_INTERNAL (an invariant of the split or merge fails: a bug). */
glm_status glm_bpe_encode(const glm_bpe *b, const char *text, size_t len, glm_u32vec *out);

/* Byte-pair merge of s[0..n) alone (no regex split, no whole-piece lookup), APPENDING the ids:
 * method 0 = tiktoken's merge loop (bpe.c: the O(n^2) loop up to 16 bytes, a heap above),
 * method 1 = the backtracking encoder (bpe_backtrack.c). Both give tiktoken's result; for tests
 * that compare them. Errors: GLM_ERR_NOMEM, GLM_ERR_INTERNAL (a bug), GLM_ERR_ARG (unknown method). */
glm_status glm_bpe_merge(const glm_bpe *b, const void *s, size_t n, int method, glm_u32vec *out);

/* Length in bytes of the split-regex piece that starts at text[pos] (text valid UTF-8, whole
 * text given for the look-ahead). use_fast: 0 = PCRE2 only; 1 = the ASCII hand path where it
 * decides, else PCRE2; 2 = the BMP hand path where it decides, else PCRE2; 3 = both hand paths
 * then PCRE2 (what glm_bpe_encode does). 0 when pos >= len or on a regex error (message set).
 * For tests that compare the paths and the classes. */
size_t glm_bpe_piece_len(const glm_bpe *b, const char *text, size_t len, size_t pos, int use_fast);


#endif
