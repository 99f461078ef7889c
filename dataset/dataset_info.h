/* dataset/dataset_info.h: LLaMA-Factory's dataset registry (dataset_info.json).
 *
 * The registry is one JSON object: dataset name -> {file_name | hf_hub_url | ms_hub_url | ...,
 * formatting ("alpaca" default | "sharegpt" | "openai"), columns {prompt, query, response,
 * history, system, tools, messages, ...}, tags {role_tag, content_tag, user_tag, assistant_tag,
 * observation_tag, function_tag, system_tag}, ranking}. Source of the keys and their defaults:
 * LLaMA-Factory data/README.md and src/llamafactory/data/parser.py (DatasetAttr); an example
 * is tests/fixtures/corpora/llamafactory/dataset_info.json.
 *
 * glmtune reads only entries with a local file (file_name relative to the registry's folder);
 * hub entries are skipped. Ranking (DPO), KTO and multimodal (images/videos/audios) entries
 * and non-JSON files are marked unsupported. */
#ifndef GLM_DATASET_DATASET_INFO_H
#define GLM_DATASET_DATASET_INFO_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/status.h"

/* One registry entry, with LLaMA-Factory's defaults filled in for its formatting. */
typedef struct glm_dsinfo_entry {
    char *name;         /* the registry key, e.g. "glaive_toolcall_en_demo" */
    char *registry;     /* path of the dataset_info.json it came from */
    char *file_name;    /* as written, or NULL for a hub-only entry */
    char *path;         /* file_name resolved against the registry's folder (realpath when it
                           exists), or NULL */
    bool local;         /* path exists */
    char *formatting;   /* "alpaca", "sharegpt" or "openai" */
    const char *unsupported; /* why glmtune cannot read it (static text), or NULL */
    bool ranking;       /* "ranking": true: preference pairs (DPO); its records are "preference_pair" */
    bool kto;           /* a "kto_tag" column: KTO's desirable/undesirable label; its records are "kto_label" */
    /* columns (NULL = not used) */
    char *prompt, *query, *response, *history, *system, *tools, *messages;
    /* a pretraining entry (alpaca formatting whose "columns" name only "prompt", as LLaMA-
     * Factory's pt datasets c4_demo, wikipedia, ... are written): that column holds the text */
    char *text_column;
    int64_t num_samples;    /* "num_samples" (records drawn, see glm_reader_open_ex), -1: none */
    char hub_keys[96];      /* "split", "subset", "folder" as given ("split: test, subset: x"), or "":
                               they choose what to load from a hub dataset; a local file is read whole
                               (the reader says so in one line when the entry is selected) */
    /* tags (sharegpt/openai) */
    char *role_tag, *content_tag, *user_tag, *assistant_tag, *observation_tag, *function_tag,
        *system_tag;
} glm_dsinfo_entry;

typedef struct glm_dsinfo {
    char *path;              /* the dataset_info.json file */
    char *dir;               /* its folder */
    glm_dsinfo_entry *entries;
    size_t n;
} glm_dsinfo;

/* True when `root` looks like a registry: a non-empty object whose values are all objects and
 * at least one of them has "file_name", "hf_hub_url", "ms_hub_url", "om_hub_url",
 * "script_url" or "cloud_file_name". (A corpus record always has a non-object value.) */
bool glm_dsinfo_looks_like(const json_t *root);

/* Builds a registry from a parsed dataset_info.json at `path` (used to resolve file names).
 * Errors: GLM_ERR_FORMAT when an entry is not an object or a field has the wrong type (the
 * message names the file and the entry); GLM_ERR_NOMEM. */
glm_status glm_dsinfo_from_json(const json_t *root, const char *path, glm_dsinfo **out);

/* Reads and parses `path`. Errors: GLM_ERR_IO, GLM_ERR_FORMAT (invalid JSON with line/column,
 * or not a registry). */
glm_status glm_dsinfo_load(const char *path, glm_dsinfo **out);

/* The entry whose resolved path equals `realpath_of_file` (compare realpath()s), or NULL. */
const glm_dsinfo_entry *glm_dsinfo_find_path(const glm_dsinfo *d, const char *realpath_of_file);

/* The entry called `name`, or NULL. */
const glm_dsinfo_entry *glm_dsinfo_find_name(const glm_dsinfo *d, const char *name);

/* Writes up to `max` names from the registries that are close to `name` (edit distance at most
 * max(2, len/3), or one contains the other) into buf as "a, b, c" (or "" when none). */
void glm_dsinfo_close_names(glm_dsinfo *const *infos, size_t n, const char *name, char *buf,
                            size_t bufsize, int max);

void glm_dsinfo_free(glm_dsinfo *d);

#endif
