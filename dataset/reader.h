/* dataset/reader.h: corpus inputs -> JSON records, streamed (docs/design.md §2).
 *
 * Inputs are files, folders (walked recursively in sorted order, hidden names skipped) and glob
 * patterns. Every file goes through libarchive in blocks: plain or compressed single files
 * (.json .jsonl, + .gz .zst .xz .bz2; the raw and empty formats) and archives (.tar .tar.gz .tgz
 * .tar.zst .tar.xz .tar.bz2 .zip), whose members ending in .json/.jsonl (optionally compressed)
 * are read in archive order. Each stream is cut into records by dataset/jsonsplit (array, JSON
 * Lines or single object, detected by content) and each record is parsed by jansson, so memory
 * stays bounded by the largest record (limit 256 MiB, see glm_reader_set_max_record).
 *
 * LLaMA-Factory registries (dataset_info.json, detected by content) are understood: given as
 * an input, its entries with a local file are read with their column/tag mapping; found in a
 * walked folder, the folder gives those entries and nothing else (as LLaMA-Factory reads its
 * dataset_dir: the other corpus files there are counted and named in one log line, not read),
 * and the registry is not itself read as a corpus. A file whose name says compressed (.gz ...)
 * but whose data is not is read as it is, with a warning.
 *
 * Problems with one record (invalid JSON or UTF-8, lone surrogate, not an object, too large,
 * ...) are returned as records with `reason` set, so the caller counts them; problems with a
 * whole stream (corrupt archive or compressed data, I/O) are fatal errors. */
#ifndef GLM_DATASET_READER_H
#define GLM_DATASET_READER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct glm_reader glm_reader;

typedef struct glm_record {
    const char *source;  /* file path, or "archive.tar.gz:member.jsonl" for archive members;
                            valid until the next call */
    int64_t index;       /* 0-based record index within source */
    int64_t line;        /* 1-based line where the record starts */
    int64_t offset;      /* byte offset in the (decompressed) stream where it starts */
    size_t nbytes;       /* raw bytes of the record */
    json_t *value;       /* the parsed record; caller owns (json_decref); NULL when `reason` set */
    const char *reason;  /* per-record problem key or NULL: "invalid_json", "invalid_utf8",
                            "lone_surrogate", "nul_character", "not_an_object", "too_deep",
                            "truncated_json", "record_too_large" */
    char detail[512];    /* human message for that problem: file:line (offset): record, what,
                            hint */
    const void *mapping; /* the glm_dsinfo_entry (dataset/dataset_info.h) that applies to this
                            source, or NULL */
    char *raw;           /* deferred parsing only (glm_reader_set_deferred_parse): a malloc'd copy
                            of the record's nbytes bytes, to hand to glm_record_parse; else NULL */
} glm_record;

/* Whether dir is a folder that glmtune tokenize wrote (its manifest.json has "format":
 * GLM_SHARDS_FORMAT, dataset/shard.h): shards, not a corpus. The reader skips such folders inside
 * an input folder; tokenize refuses one given as an input. */
bool glm_reader_is_shards_dir(const char *dir);

/* Options of glm_reader_open_ex (zero = glm_reader_open's behaviour, except max_samples: set it
 * to -1 for none). */
typedef struct glm_reader_opts {
    const char *dataset_filter; /* as glm_reader_open's */
    int64_t max_samples;        /* per dataset, the first N records (-1: all); LLaMA-Factory's
                                   max_samples */
    uint64_t seed;              /* the draw of dataset_info "num_samples" */
} glm_reader_opts;

/* A dataset's selection: a dataset_info entry, or an input as given on the command line (a
 * file, a folder, an archive, each file a pattern matches). */
typedef struct glm_reader_dataset {
    const char *name;           /* the entry's name, or the input */
    int64_t max_samples;        /* -1: none */
    int64_t num_samples;        /* the entry's num_samples (after max_samples), -1: none */
    int64_t records;            /* records in it: counted for num_samples, else -1 */
    int64_t returned;           /* records returned (num_samples repeats included) */
    bool cut;                   /* max_samples left records unread */
} glm_reader_dataset;

/* Expands `inputs` (n of them) into the list of sources and prepares to read them.
 * dataset_filter: NULL, or a comma list of registry names (--dataset): only those entries of the
 * dataset_info.json registries among the inputs (given directly or found in walked folders) are
 * read. Nothing is decompressed here; registries are parsed.
 * A folder without corpus files is a warning. Errors: GLM_ERR_ARG when a glob pattern matches
 * no corpus file, when nothing at all matched, when a --dataset name is unknown (the message lists close names) or names an entry
 * without a local file / of an unsupported kind, or when --dataset is given without any
 * registry; GLM_ERR_IO for a missing or unreadable file; GLM_ERR_FORMAT for a broken registry. */
glm_status glm_reader_open(const char *const *inputs, size_t n, const char *dataset_filter,
                           glm_reader **out);

/* glm_reader_open with options. Each dataset gives its first max_samples records (then stops
 * reading it). A dataset_info entry with "num_samples": k gives k records drawn as LLaMA-Factory
 * draws them (data/loader.py): k <= N records: k distinct ones chosen at random; k > N: every
 * record once plus k - N more drawn with replacement; with max_samples, k = min(k, max_samples).
 * The draw uses glmtune's generator seeded by opts->seed and the entry's name (not numpy's:
 * the same rule and sizes, other records), and the chosen records come in file order, a record
 * drawn twice twice in a row. Counting N reads the entry's files once more. Errors: as
 * glm_reader_open; GLM_ERR_ARG for "num_samples" below 0 or not an integer. */
glm_status glm_reader_open_ex(const char *const *inputs, size_t n, const glm_reader_opts *opts,
                              glm_reader **out);

/* The number of datasets, and dataset i's selection (pointers valid until glm_reader_close). */
size_t glm_reader_n_datasets(const glm_reader *r);
void glm_reader_dataset_info(const glm_reader *r, size_t i, glm_reader_dataset *out);

/* Sets the largest record kept in memory, in bytes (default 256 MiB); a longer record is skipped
 * as a "record_too_large" problem. Call before the first glm_reader_next. */
void glm_reader_set_max_record(glm_reader *r, size_t bytes);

/* With defer = true, glm_reader_next only splits: a well-formed-looking record comes back with
 * value == NULL, reason == NULL and its bytes in rec->raw; glm_record_parse(rec) then does the
 * JSON parse and the classification of problems that glm_reader_next would have done. This lets
 * the parse run on worker threads (it is thread-safe; rec->source must stay valid meanwhile). */
void glm_reader_set_deferred_parse(glm_reader *r, bool defer);

/* Parses rec->raw (deferred parsing) into rec->value, or sets rec->reason and rec->detail;
 * frees rec->raw. A record without raw bytes is left as it is. */
void glm_record_parse(glm_record *rec);

/* The same, leaving rec->raw to the caller to free: a worker thread parses, and the thread that
 * allocated the bytes (the reader's) frees them, so no thread frees into another's malloc arena
 * (that takes the arena's lock while its owner allocates). */
void glm_record_parse_keep(glm_record *rec);

/* Reads the next record into *rec (overwriting it; rec->value must have been taken or freed).
 * Returns GLM_OK with a record (value set) or a per-record problem (reason + detail set);
 * GLM_EOF after the last source; or a fatal error: GLM_ERR_FORMAT for corrupt/truncated
 * compressed data or archives, a stream that is not JSON (said to be "not gzip" first when its
 * name ends in .gz but its data is not compressed; .zst, .xz, .bz2 alike), a top-level array followed by other
 * text (the message names the file or "archive:member", line and offset); a top-level array cut
 * off is not fatal: the records before the cut come as usual, the tail as a truncated_json
 * problem;
 * GLM_ERR_IO for read errors; GLM_ERR_NOMEM. After a fatal error the reader is only closed. */
glm_status glm_reader_next(glm_reader *r, glm_record *rec);

/* Sum of the input files' sizes on disk, in bytes (for progress / ETA). */
int64_t glm_reader_total_bytes(const glm_reader *r);

/* Bytes of the input files consumed so far (compressed bytes for compressed inputs). */
int64_t glm_reader_bytes_read(const glm_reader *r);

/* Number of streams (plain files or archive members) opened so far. */
size_t glm_reader_n_sources(const glm_reader *r);

/* Number of streams that held no record (each of the first 20 is named in a warning when it
 * ends). */
size_t glm_reader_n_empty(const glm_reader *r);

/* Closes everything; NULL is accepted. */
void glm_reader_close(glm_reader *r);

/* Helpers shared with the tests. */


/* Byte offset of the first "\uXXXX" escape that is an unpaired UTF-16 surrogate (a high one not
 * followed by "\u" + low, or a low one alone), scanning only inside JSON strings; -1 if none. */
int64_t glm_json_lone_surrogate_at(const char *s, size_t n);

#endif
