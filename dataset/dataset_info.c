/* dataset/dataset_info.c: LLaMA-Factory dataset registry (see dataset_info.h). */
#include "dataset/dataset_info.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/strdist.h"

static const char *const HUB_KEYS[] = {"file_name", "hf_hub_url", "ms_hub_url", "om_hub_url",
                                       "script_url", "cloud_file_name"};

bool glm_dsinfo_looks_like(const json_t *root) {
    if (!json_is_object(root) || json_object_size(root) == 0) return false;
    const char *k;
    json_t *v;
    bool any = false;
    json_object_foreach((json_t *)root, k, v) {
        if (!json_is_object(v)) return false;
        for (size_t i = 0; i < sizeof HUB_KEYS / sizeof *HUB_KEYS; i++)
            if (json_object_get(v, HUB_KEYS[i])) any = true;
    }
    return any;
}

static void entry_free(glm_dsinfo_entry *e) {
    char **fields[] = {&e->name, &e->registry, &e->file_name, &e->path, &e->formatting,
                       &e->prompt, &e->query, &e->response, &e->history, &e->system, &e->tools,
                       &e->messages, &e->text_column, &e->role_tag, &e->content_tag, &e->user_tag,
                       &e->assistant_tag, &e->observation_tag, &e->function_tag, &e->system_tag};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        free(*fields[i]);
        *fields[i] = NULL;
    }
}

void glm_dsinfo_free(glm_dsinfo *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n; i++) entry_free(&d->entries[i]);
    free(d->entries);
    free(d->path);
    free(d->dir);
    free(d);
}

/* Reads obj[key] as a string into *dst (strdup) or leaves the default; wrong type = error. */
static glm_status get_str(const char *path, const char *entry, const char *section,
                          const json_t *obj, const char *key, const char *def, char **dst) {
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    const char *s = def;
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return glm_err(GLM_ERR_FORMAT,
                           "%s: entry \"%s\": %s\"%s\" must be a string; hint: see LLaMA-Factory's "
                           "data/README.md for the dataset_info.json layout",
                           path, entry, section, key);
        s = json_string_value(v);
    }
    free(*dst);
    *dst = NULL;
    if (s && !(*dst = strdup(s))) return glm_err(GLM_ERR_NOMEM, "out of memory");
    return GLM_OK;
}

static bool has_json_ext(const char *name) {
    static const char *const exts[] = {".json", ".jsonl", ".json.gz", ".jsonl.gz", ".json.zst",
                                       ".jsonl.zst", ".json.xz", ".jsonl.xz", ".json.bz2",
                                       ".jsonl.bz2"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
        size_t k = strlen(exts[i]);
        if (n >= k && strcasecmp(name + n - k, exts[i]) == 0) return true;
    }
    return false;
}

static glm_status parse_entry(glm_dsinfo *d, const char *name, const json_t *v,
                              glm_dsinfo_entry *e) {
    const char *path = d->path;
    GLM_TRY(get_str(path, name, "", v, "file_name", NULL, &e->file_name));
    GLM_TRY(get_str(path, name, "", v, "formatting", "alpaca", &e->formatting));
    bool share = strcmp(e->formatting, "sharegpt") == 0;
    bool openai = strcmp(e->formatting, "openai") == 0;
    const json_t *cols = json_object_get(v, "columns");
    const json_t *tags = json_object_get(v, "tags");
    if (cols && !json_is_object(cols))
        return glm_err(GLM_ERR_FORMAT, "%s: entry \"%s\": \"columns\" must be an object", path,
                       name);
    if (tags && !json_is_object(tags))
        return glm_err(GLM_ERR_FORMAT, "%s: entry \"%s\": \"tags\" must be an object", path, name);
    /* Defaults from LLaMA-Factory's DatasetAttr (parser.py). */
    GLM_TRY(get_str(path, name, "columns.", cols, "prompt", "instruction", &e->prompt));
    GLM_TRY(get_str(path, name, "columns.", cols, "query", "input", &e->query));
    GLM_TRY(get_str(path, name, "columns.", cols, "response", "output", &e->response));
    GLM_TRY(get_str(path, name, "columns.", cols, "history", NULL, &e->history));
    GLM_TRY(get_str(path, name, "columns.", cols, "system", NULL, &e->system));
    GLM_TRY(get_str(path, name, "columns.", cols, "tools", NULL, &e->tools));
    GLM_TRY(get_str(path, name, "columns.", cols, "messages", openai ? "messages" : "conversations",
                    &e->messages));
    GLM_TRY(get_str(path, name, "tags.", tags, "role_tag", openai ? "role" : "from", &e->role_tag));
    GLM_TRY(get_str(path, name, "tags.", tags, "content_tag", openai ? "content" : "value",
                    &e->content_tag));
    GLM_TRY(get_str(path, name, "tags.", tags, "user_tag", openai ? "user" : "human", &e->user_tag));
    GLM_TRY(get_str(path, name, "tags.", tags, "assistant_tag", openai ? "assistant" : "gpt",
                    &e->assistant_tag));
    GLM_TRY(get_str(path, name, "tags.", tags, "observation_tag", openai ? "tool" : "observation",
                    &e->observation_tag));
    GLM_TRY(get_str(path, name, "tags.", tags, "function_tag", "function_call", &e->function_tag));
    GLM_TRY(get_str(path, name, "tags.", tags, "system_tag", "system", &e->system_tag));

    static const char *const hub_only[] = {"split", "subset", "folder"};
    for (size_t k = 0; k < 3; k++) {
        const json_t *hv = json_object_get(v, hub_only[k]);
        if (!hv || json_is_null(hv) || (k == 0 && json_is_string(hv) && !strcmp(json_string_value(hv), "train")))
            continue; /* split "train" is LLaMA-Factory's default: what a local file is */
        size_t used = strlen(e->hub_keys);
        snprintf(e->hub_keys + used, sizeof e->hub_keys - used, "%s%s: %s", used ? ", " : "", hub_only[k],
                 json_is_string(hv) ? json_string_value(hv) : "(not text)");
    }
    e->num_samples = -1;
    const json_t *ns = json_object_get(v, "num_samples");
    if (ns && !json_is_null(ns)) {
        if (!json_is_integer(ns) || json_integer_value(ns) < 0)
            return glm_err(GLM_ERR_FORMAT, "%s: entry \"%s\": \"num_samples\" must be a whole number "
                           ">= 0", path, name);
        e->num_samples = (int64_t)json_integer_value(ns);
    }
    if (!share && !openai && cols && json_is_string(json_object_get(cols, "prompt"))) {
        static const char *const others[] = {"query", "response", "history", "messages", "chosen",
                                             "rejected", "kto_tag"};
        bool only_prompt = true;
        for (size_t k = 0; k < sizeof others / sizeof *others; k++)
            if (json_object_get(cols, others[k])) only_prompt = false;
        if (only_prompt && !(e->text_column = strdup(e->prompt))) return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    e->ranking = json_is_true(json_object_get(v, "ranking"));
    e->kto = cols && json_object_get(cols, "kto_tag");
    if (!share && !openai && strcmp(e->formatting, "alpaca") != 0)
        e->unsupported = "its \"formatting\" is not alpaca, sharegpt or openai";
    else if (e->ranking)
        e->unsupported = "it is a ranking (preference / DPO) dataset; glmtune does supervised "
                         "fine-tuning only: preference training is not available yet (it is planned: stage: dpo)";
    else if (e->kto)
        e->unsupported = "it is a KTO dataset (desirable/undesirable labels); glmtune does supervised fine-tuning "
                         "only: preference training is not available yet (it is planned: stage: dpo)";
    else if (cols && (json_object_get(cols, "images") || json_object_get(cols, "videos") ||
                      json_object_get(cols, "audios")))
        e->unsupported = "it has image/video/audio columns; glmtune trains text-only models";

    if (e->file_name) {
        char *joined = e->file_name[0] == '/' ? strdup(e->file_name)
                                               : glm_path_join(d->dir, e->file_name);
        if (!joined) return glm_err(GLM_ERR_NOMEM, "out of memory");
        char rp[PATH_MAX];
        if (realpath(joined, rp)) {
            free(joined);
            if (!(e->path = strdup(rp))) return glm_err(GLM_ERR_NOMEM, "out of memory");
            e->local = true;
        } else {
            e->path = joined;
        }
        /* A folder is read recursively (as LLaMA-Factory does); a file must be JSON. */
        if (!e->unsupported && !has_json_ext(e->file_name) && !(e->local && glm_is_dir(e->path)))
            e->unsupported = "its file is not .json/.jsonl (text, CSV and Parquet files are not "
                             "read; convert it to JSON Lines)";
    }
    return GLM_OK;
}

glm_status glm_dsinfo_from_json(const json_t *root, const char *path, glm_dsinfo **out) {
    *out = NULL;
    if (!glm_dsinfo_looks_like(root))
        return glm_err(GLM_ERR_FORMAT,
                       "%s: not a dataset registry: expected one JSON object mapping dataset names "
                       "to objects with \"file_name\" (LLaMA-Factory's dataset_info.json)",
                       path);
    glm_dsinfo *d = calloc(1, sizeof *d);
    if (!d) return glm_err(GLM_ERR_NOMEM, "out of memory");
    char rp[PATH_MAX];
    d->path = strdup(realpath(path, rp) ? rp : path);
    /* file_name is relative to the folder the registry was found in (LLaMA-Factory's
     * dataset_dir), which for a symlinked dataset_info.json is not the link target's folder. */
    char *given_dir = strdup(path);
    if (given_dir) {
        char *slash = strrchr(given_dir, '/');
        if (slash) *(slash == given_dir ? slash + 1 : slash) = 0;
        else strcpy(given_dir, ".");
        d->dir = strdup(realpath(given_dir, rp) ? rp : given_dir);
        free(given_dir);
    }
    d->entries = calloc(json_object_size(root), sizeof *d->entries);
    if (!d->path || !d->dir || !d->entries) {
        glm_dsinfo_free(d);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)root, k, v) {
        glm_dsinfo_entry *e = &d->entries[d->n++];
        if (!(e->name = strdup(k)) || !(e->registry = strdup(d->path))) {
            glm_dsinfo_free(d);
            return glm_err(GLM_ERR_NOMEM, "out of memory");
        }
        glm_status st = parse_entry(d, k, v, e);
        if (st != GLM_OK) {
            glm_dsinfo_free(d);
            return st;
        }
    }
    *out = d;
    return GLM_OK;
}

glm_status glm_dsinfo_load(const char *path, glm_dsinfo **out) {
    json_error_t jerr;
    *out = NULL;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        return glm_err(GLM_ERR_FORMAT, "%s:%d:%d (offset %d): invalid JSON: %s; hint: fix the "
                       "registry with a JSON validator (python3 -m json.tool)",
                       path, jerr.line, jerr.column, jerr.position, jerr.text);
    glm_status st = glm_dsinfo_from_json(root, path, out);
    json_decref(root);
    return st;
}

const glm_dsinfo_entry *glm_dsinfo_find_path(const glm_dsinfo *d, const char *real) {
    for (size_t i = 0; i < d->n; i++)
        if (d->entries[i].local && strcmp(d->entries[i].path, real) == 0) return &d->entries[i];
    return NULL;
}

const glm_dsinfo_entry *glm_dsinfo_find_name(const glm_dsinfo *d, const char *name) {
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->entries[i].name, name) == 0) return &d->entries[i];
    return NULL;
}

void glm_dsinfo_close_names(glm_dsinfo *const *infos, size_t n, const char *name, char *buf,
                            size_t bufsize, int max) {
    size_t used = 0;
    int found = 0;
    buf[0] = 0;
    int lim = (int)strlen(name) / 3;
    if (lim < 2) lim = 2;
    for (size_t i = 0; i < n && found < max; i++)
        for (size_t j = 0; j < infos[i]->n && found < max; j++) {
            const char *c = infos[i]->entries[j].name;
            if (glm_edit_distance(name, c) <= (size_t)lim || strstr(c, name) || strstr(name, c)) {
                int w = snprintf(buf + used, bufsize - used, "%s%s", found ? ", " : "", c);
                if (w < 0 || (size_t)w >= bufsize - used) return;
                used += (size_t)w;
                found++;
            }
        }
}
