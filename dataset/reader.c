/* dataset/reader.c: inputs -> libarchive streams -> jsonsplit -> jansson records (reader.h). */
#include "dataset/reader.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/hash.h"
#include "common/rng.h"
#include "common/log.h"
#include "common/pyjson.h"
#include "dataset/shard.h"
#include "common/utf8.h"
#include "common/vec.h"
#include "dataset/dataset_info.h"
#include "dataset/jsonsplit.h"

#define BLOCK_SIZE (1 << 20)           /* libarchive read block for plain files */
#define REGISTRY_PEEK_MAX (8 << 20)    /* files up to this size are checked for being a registry */

typedef struct rd_src {
    char *path;                        /* as given / walked */
    char *real;                        /* realpath, for de-duplication and registry lookup */
    const glm_dsinfo_entry *map;       /* registry entry that maps this file, or NULL */
    int64_t size;
    size_t group;                      /* its dataset (rd_group) */
    bool cli;                          /* named as a file on the command line */
} rd_src;

/* A dataset, for max_samples and num_samples: a registry entry, or an input as given. */
typedef struct rd_group {
    const glm_dsinfo_entry *entry;     /* or NULL */
    size_t input;                      /* the input argument (entry == NULL) */
    char *name;
    int64_t seen;                      /* records split from its sources so far */
    int64_t taken;                     /* records returned (repeats included) */
    int64_t limit;                     /* max_samples, -1: none */
    int64_t total;                     /* records in it (counted only for num_samples), -1 */
    int64_t sample;                    /* num_samples target (after max_samples), -1: none */
    uint32_t *mult;                    /* [total] times each record is returned (num_samples) */
    bool cut;                          /* records were left unread because of the limit */
} rd_group;

struct glm_reader {
    GLM_VEC(rd_src) srcs;
    GLM_VEC(glm_dsinfo *) infos;
    size_t next_src;                   /* index of the next source to open */
    const rd_src *cur;                 /* the open source */
    struct archive *outer;             /* the open file */
    struct archive *inner;             /* the open member of an archive (NULL for raw files) */
    bool outer_raw;                    /* the file is one stream (not an archive) */
    bool stream_open;                  /* a stream is being split */
    bool blk_eof;
    const char *blk;
    size_t blk_n;
    char *name;                        /* display name of the current stream */
    glm_jsonsplit js;
    size_t max_record;
    bool defer_parse;                  /* glm_reader_set_deferred_parse */
    int64_t total_bytes, bytes_done;
    size_t n_opened;
    size_t n_empty;                    /* streams that held no record */
    int64_t stream_recs;               /* records split from the open stream */
    const char *misnamed;              /* the compression the open stream's name says ("gzip" for .gz)
                                          when its data is not compressed at all, else NULL */
    bool failed;
    GLM_VEC(rd_group) groups;
    size_t cur_input;                  /* the input being expanded (glm_reader_open) */
    glm_reader_opts opt;
    glm_record pending;                /* a record still to be returned `pending_n` more times */
    uint32_t pending_n;
    GLM_VEC(const glm_dsinfo_entry *) missing; /* registry entries whose file does not exist */
    const char *const *opt_inputs;     /* the inputs as given (group names) */
    size_t opt_n_inputs;
};

static bool group_full(glm_reader *r, const rd_src *s);

/* ---------------------------------------------------------------- UTF-8 / surrogate checks */

/* Byte offset of the first invalid UTF-8 sequence, or -1 if valid. */
static int64_t utf8_invalid_at(const char *s, size_t n) {
    size_t at = glm_utf8_check(s, n);
    return at == n ? -1 : (int64_t)at;
}

static int hex4(const char *s, size_t n, size_t i) {
    if (i + 4 > n) return -1;
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[i + k];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

int64_t glm_json_lone_surrogate_at(const char *s, size_t n) {
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!in_str) {
            if (c == '"') in_str = true;
            continue;
        }
        if (c == '"') {
            in_str = false;
            continue;
        }
        if (c != '\\' || i + 1 >= n) continue;
        if (s[i + 1] != 'u') {
            i++;
            continue;
        }
        int v = hex4(s, n, i + 2);
        if (v < 0) {
            i++;
            continue;
        }
        if (v >= 0xDC00 && v <= 0xDFFF) return (int64_t)i;
        if (v >= 0xD800 && v <= 0xDBFF) {
            int lo = (i + 7 < n && s[i + 6] == '\\' && s[i + 7] == 'u') ? hex4(s, n, i + 8) : -1;
            if (lo < 0xDC00 || lo > 0xDFFF) return (int64_t)i;
            i += 11;
            continue;
        }
        i += 5;
    }
    return -1;
}

/* ---------------------------------------------------------------- input expansion */

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

static bool is_json_name(const char *name) {
    static const char *const base[] = {".json", ".jsonl"};
    static const char *const comp[] = {"", ".gz", ".zst", ".xz", ".bz2"};
    char buf[64];
    for (size_t b = 0; b < 2; b++)
        for (size_t c = 0; c < 5; c++) {
            snprintf(buf, sizeof buf, "%s%s", base[b], comp[c]);
            if (ends_with(name, buf)) return true;
        }
    return false;
}

static bool is_archive_name(const char *name) {
    static const char *const exts[] = {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.xz",
                                       ".txz", ".tar.bz2", ".tbz2", ".zip"};
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++)
        if (ends_with(name, exts[i])) return true;
    return false;
}

static bool is_lines_name(const char *name) {
    static const char *const exts[] = {".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.xz",
                                       ".jsonl.bz2"};
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++)
        if (ends_with(name, exts[i])) return true;
    return false;
}

/* Loads `path` as a registry when it is a small plain file whose content is one. *info is NULL
 * when it is not a registry. */
static glm_status maybe_registry(const char *path, int64_t size, glm_dsinfo **info) {
    *info = NULL;
    if (size <= 0 || size > REGISTRY_PEEK_MAX || !ends_with(path, ".json")) return GLM_OK;
    FILE *f = fopen(path, "rb");
    if (!f) return GLM_OK; /* reported when the file is read */
    int c;
    while ((c = fgetc(f)) != EOF && (c == ' ' || c == '\t' || c == '\r' || c == '\n' ||
                                     c == 0xEF || c == 0xBB || c == 0xBF)) {
    }
    fclose(f);
    if (c != '{') return GLM_OK;
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) return GLM_OK; /* not valid as a whole: read as a corpus, problems reported there */
    glm_status st = GLM_OK;
    if (glm_dsinfo_looks_like(root)) st = glm_dsinfo_from_json(root, path, info);
    json_decref(root);
    return st;
}

/* The dataset a source belongs to: its registry entry, else the input being expanded. */
static glm_status group_of(glm_reader *r, const glm_dsinfo_entry *map, size_t *g) {
    for (size_t i = 0; i < r->groups.n; i++)
        if (r->groups.v[i].entry == map && (map || r->groups.v[i].input == r->cur_input)) {
            *g = i;
            return GLM_OK;
        }
    rd_group ng = {.entry = map, .input = r->cur_input, .limit = -1, .total = -1, .sample = -1};
    if (!(ng.name = strdup(map ? map->name : r->cur_input < r->opt_n_inputs ? r->opt_inputs[r->cur_input] : "?")) ||
        glm_vec_push(r->groups, ng) != GLM_OK) {
        free(ng.name);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    *g = r->groups.n - 1;
    return GLM_OK;
}

static glm_status add_source(glm_reader *r, const char *path, int64_t size,
                             const glm_dsinfo_entry *map, bool repeat_ok) {
    char rp[PATH_MAX];
    rd_src s = {0};
    s.path = strdup(path);
    s.real = strdup(realpath(path, rp) ? rp : path);
    s.map = map;
    s.size = size;
    s.cli = repeat_ok;
    if (!s.path || !s.real) {
        free(s.path);
        free(s.real);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->srcs.n; i++)
        if (strcmp(r->srcs.v[i].real, s.real) == 0) {
            if (repeat_ok && r->srcs.v[i].cli) {
                /* a file named again on the command line: read again (upsampling) */
                glm_log_info("%s is given again: its records are read once more", path);
                break;
            }
            if (repeat_ok) { /* also reached through a registry or a folder: read once */
                r->srcs.v[i].cli = true;
                glm_log_info("%s is also named by an input before it (a registry or a folder): "
                             "read once", path);
                free(s.path);
                free(s.real);
                return GLM_OK;
            }
            if (map && r->srcs.v[i].map && r->srcs.v[i].map != map)
                continue; /* another dataset_info entry on the same file: a dataset of its own */
            if (!r->srcs.v[i].map) {
                r->srcs.v[i].map = map;
                if (group_of(r, map, &r->srcs.v[i].group) != GLM_OK) return GLM_ERR_NOMEM;
            }
            glm_log_debug("%s: reached twice through folders or links; read once", path);
            free(s.path);
            free(s.real);
            return GLM_OK;
        }
    if (group_of(r, map, &s.group) != GLM_OK || glm_vec_push(r->srcs, s) != GLM_OK) {
        free(s.path);
        free(s.real);
        return GLM_ERR_NOMEM;
    }
    return GLM_OK;
}

/* Adds file `path` as one source per registry entry that names it (the most recently loaded
 * registry that names it at all), or as one unmapped source. */
static glm_status add_mapped(glm_reader *r, const char *path, int64_t size, bool repeat_ok) {
    char rp[PATH_MAX];
    const char *real = realpath(path, rp) ? rp : path;
    for (size_t i = r->infos.n; i-- > 0;) {
        const glm_dsinfo *d = r->infos.v[i];
        bool any = false;
        for (size_t k = 0; k < d->n; k++)
            if (d->entries[k].local && strcmp(d->entries[k].path, real) == 0) {
                GLM_TRY(add_source(r, path, size, &d->entries[k], repeat_ok));
                any = true;
            }
        if (any) return GLM_OK;
    }
    return add_source(r, path, size, NULL, repeat_ok);
}

/* Remembers the entries of a registry whose file is missing (see apply_filter). */
static glm_status note_missing(glm_reader *r, const glm_dsinfo *info) {
    for (size_t i = 0; i < info->n; i++)
        if (info->entries[i].file_name && !info->entries[i].local &&
            glm_vec_push(r->missing, &info->entries[i]) != GLM_OK)
            return GLM_ERR_NOMEM;
    return GLM_OK;
}

static int cmp_names(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* The folders one walk has entered, by (device, inode): a folder reached again is not walked
 * again, so symbolic links back to a folder above them (x -> ., y -> .) are not followed round
 * (2^depth paths before any depth limit), nor is one folder read twice through two links. */
typedef struct rd_dirid {
    dev_t dev;
    ino_t ino;
    bool open;                         /* being walked: reaching it again is a loop */
} rd_dirid;
typedef struct rd_walk {
    GLM_VEC(rd_dirid) seen;
    size_t n_loops;                    /* links that led back into a folder being walked */
    char *first_loop;                  /* the first such path (malloc'd) */
} rd_walk;

/* Enters folder `dir` (stat st) in walk w: false when it was entered before (a loop, counted, when
 * it is being walked now), or on out of memory (*st set). *slot gets its index. */
static bool walk_enter(rd_walk *w, const char *dir, const struct stat *sb, size_t *slot, glm_status *st) {
    for (size_t i = 0; i < w->seen.n; i++)
        if (w->seen.v[i].dev == sb->st_dev && w->seen.v[i].ino == sb->st_ino) {
            if (w->seen.v[i].open) {
                if (w->n_loops++ == 0) w->first_loop = strdup(dir);
            } else {
                glm_log_debug("%s: a folder reached again through a link: read once", dir);
            }
            return false;
        }
    rd_dirid d = {.dev = sb->st_dev, .ino = sb->st_ino, .open = true};
    if (glm_vec_push(w->seen, d) != GLM_OK) {
        *st = glm_err(GLM_ERR_NOMEM, "out of memory");
        return false;
    }
    *slot = w->seen.n - 1;
    return true;
}

/* Says once what walk w left out as loops, and frees it. `top` is the folder walked. */
static void walk_done(rd_walk *w, const char *top) {
    if (w->n_loops)
        glm_log_warn("%s: %zu symbolic link%s lead%s back to a folder being read (a loop) and %s not "
                     "followed, %s%s; hint: remove the link, or name the folders to read as inputs",
                     top, w->n_loops, w->n_loops > 1 ? "s" : "", w->n_loops > 1 ? "" : "s",
                     w->n_loops > 1 ? "were" : "was", w->n_loops > 1 ? "the first " : "",
                     w->first_loop ? w->first_loop : "?");
    free(w->first_loop);
    glm_vec_free(w->seen);
    memset(w, 0, sizeof *w);
}

static glm_status walk_dir(glm_reader *r, const char *dir, const glm_dsinfo_entry *forced,
                           size_t depth, rd_walk *w);

/* Walks folder `dir` as a whole (walk_dir with a walk of its own). */
static glm_status walk_top(glm_reader *r, const char *dir, const glm_dsinfo_entry *forced) {
    rd_walk w = {0};
    glm_status st = walk_dir(r, dir, forced, 0, &w);
    walk_done(&w, dir);
    return st;
}

static glm_status add_registry(glm_reader *r, glm_dsinfo *info) {
    if (glm_vec_push(r->infos, info) != GLM_OK) {
        glm_dsinfo_free(info);
        return GLM_ERR_NOMEM;
    }
    return GLM_OK;
}

/* An explicit registry input: every entry with a local file becomes sources. */
static glm_status expand_registry(glm_reader *r, glm_dsinfo *info) {
    GLM_TRY(add_registry(r, info));
    GLM_TRY(note_missing(r, info));
    for (size_t i = 0; i < info->n; i++) {
        const glm_dsinfo_entry *e = &info->entries[i];
        if (!e->file_name) {
            glm_log_debug("%s: entry \"%s\" has no local file_name (hub dataset): skipped",
                          info->path, e->name);
            continue;
        }
        if (!e->local) continue; /* an error if the entry is selected, else a warning (apply_filter) */
        struct stat st;
        if (stat(e->path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) GLM_TRY(walk_top(r, e->path, e));
        else GLM_TRY(add_source(r, e->path, st.st_size, e, false));
    }
    return GLM_OK;
}

bool glm_reader_is_shards_dir(const char *dir) {
    if (!glm_is_dir(dir)) return false;
    char *m = glm_path_join(dir, "manifest.json");
    json_t *j = m && glm_is_file(m) ? json_load_file(m, 0, NULL) : NULL;
    free(m);
    const char *f = j ? json_string_value(json_object_get(j, "format")) : NULL;
    bool ours = f && !strcmp(f, GLM_SHARDS_FORMAT);
    json_decref(j);
    return ours;
}

/* Whether `real` (a realpath) is one of the sources already collected. */
static bool is_source(const glm_reader *r, const char *real) {
    for (size_t i = 0; i < r->srcs.n; i++)
        if (!strcmp(r->srcs.v[i].real, real)) return true;
    return false;
}

/* Counts the corpus files under `dir` (hidden names and tokenize outputs skipped, as the walk
 * skips them) that are not sources: the files a registry of the folder does not name. *first
 * gets the first one's path (malloc'd, when still NULL). */
static void count_unregistered(const glm_reader *r, const char *dir, const char *reg_real, size_t depth, size_t *n,
                               char **first, rd_walk *w) {
    struct dirent **names = NULL;
    struct stat ds;
    size_t slot = 0;
    glm_status wst = GLM_OK;
    if (depth > 64 || stat(dir, &ds) != 0 || !walk_enter(w, dir, &ds, &slot, &wst)) return;
    int nn = scandir(dir, &names, NULL, cmp_names);
    for (int i = 0; i < nn; i++) {
        const char *nm = names[i]->d_name;
        char *p = nm[0] == '.' ? NULL : glm_path_join(dir, nm);
        struct stat sb;
        char rp[PATH_MAX];
        bool there = p && stat(p, &sb) == 0;
        if (there && S_ISDIR(sb.st_mode) && !glm_reader_is_shards_dir(p)) {
            count_unregistered(r, p, reg_real, depth + 1, n, first, w);
        } else if (there && S_ISREG(sb.st_mode) && (is_json_name(nm) || is_archive_name(nm))) {
            const char *real = realpath(p, rp) ? rp : p;
            if (strcmp(real, reg_real) && !is_source(r, real) && (*n)++ == 0 && !*first) *first = strdup(p);
        }
        free(p);
        free(names[i]);
    }
    free(names);
    w->seen.v[slot].open = false;
}

/* A folder that holds a dataset_info.json is read as LLaMA-Factory reads its dataset_dir: the
 * datasets the registry names (every entry with a local file, or those --dataset selects), and no
 * other file in it; those are counted and named in one line, so that nothing is left out unsaid. */
static glm_status expand_registry_dir(glm_reader *r, const char *dir, glm_dsinfo *info) {
    char *reg_real = strdup(info->path);
    if (!reg_real) {
        glm_dsinfo_free(info);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    glm_status st = expand_registry(r, info);
    size_t n = 0;
    char *first = NULL;
    if (st == GLM_OK) {
        rd_walk w = {0}; /* its loops are the walk's own, said by it */
        count_unregistered(r, dir, reg_real, 0, &n, &first, &w);
        free(w.first_loop);
        glm_vec_free(w.seen);
    }
    if (n > 0)
        glm_log_info("%s: %zu file%s in the folder %s not named by its dataset_info.json and %s not read (as "
                     "LLaMA-Factory reads only registered datasets), %s%s; hint: add an entry for a file to read it, "
                     "or give the file as an input of its own", dir, n, n > 1 ? "s" : "", n > 1 ? "are" : "is",
                     n > 1 ? "are" : "is", n > 1 ? "the first " : "", first ? first : "?");
    free(first);
    free(reg_real);
    return st;
}

static glm_status walk_dir(glm_reader *r, const char *dir, const glm_dsinfo_entry *forced,
                           size_t depth, rd_walk *w) {
    if (depth > 64)
        return glm_err(GLM_ERR_ARG, "%s: folders nested more than 64 deep; "
                       "hint: name the folder that holds the data", dir);
    struct stat ds;
    if (stat(dir, &ds) != 0)
        return glm_err(GLM_ERR_IO, "%s: cannot open the folder: %s; hint: check the path and its permissions",
                       dir, strerror(errno));
    size_t slot = 0;
    glm_status st = GLM_OK;
    if (!walk_enter(w, dir, &ds, &slot, &st)) return st;
    struct dirent **names = NULL;
    int nn = scandir(dir, &names, NULL, cmp_names);
    if (nn < 0)
        return glm_err(GLM_ERR_IO, "%s: cannot list the folder: %s; hint: check its permissions",
                       dir, strerror(errno));
    /* A dataset_info.json in this folder: its datasets are what the folder holds. */
    char *reg_path = glm_path_join(dir, "dataset_info.json");
    struct stat sb;
    bool registry = false;
    if (!forced && reg_path && stat(reg_path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        glm_dsinfo *info = NULL;
        st = maybe_registry(reg_path, sb.st_size, &info);
        if (st == GLM_OK && info) {
            registry = true;
            st = expand_registry_dir(r, dir, info);
        }
    }
    for (int i = 0; i < nn && st == GLM_OK && !registry; i++) {
        const char *nm = names[i]->d_name;
        if (nm[0] == '.') continue;
        char *p = glm_path_join(dir, nm);
        if (!p) {
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
            break;
        }
        if (stat(p, &sb) != 0) {
            glm_log_debug("%s: cannot stat (%s): skipped", p, strerror(errno));
        } else if (S_ISDIR(sb.st_mode)) {
            if (glm_reader_is_shards_dir(p))
                glm_log_warn("%s: a glmtune tokenize output (shards) inside an input folder: skipped, it is "
                             "not a corpus", p);
            else
                st = walk_dir(r, p, forced, depth + 1, w);
        } else if (S_ISREG(sb.st_mode) && (is_json_name(nm) || is_archive_name(nm))) {
            st = forced ? add_source(r, p, sb.st_size, forced, false) : add_mapped(r, p, sb.st_size, false);
        } else {
            glm_log_debug("%s: not a .json/.jsonl file or archive: skipped", p);
        }
        free(p);
    }
    for (int i = 0; i < nn; i++) free(names[i]);
    free(names);
    free(reg_path);
    w->seen.v[slot].open = false;
    return st;
}

static glm_status add_input(glm_reader *r, const char *path) {
    struct stat sb;
    if (!strcmp(path, "-")) path = "/dev/stdin"; /* the usual name for standard input */
    if (stat(path, &sb) != 0)
        return glm_err(GLM_ERR_IO, "%s: cannot open: %s; hint: check the path and spelling",
                       path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return walk_top(r, path, NULL);
    if (access(path, R_OK) != 0)
        return glm_err(GLM_ERR_IO, "%s: cannot read: %s; hint: check the file's permissions",
                       path, strerror(errno));
    glm_dsinfo *info = NULL;
    GLM_TRY(maybe_registry(path, sb.st_size, &info));
    if (info) return expand_registry(r, info);
    return add_mapped(r, path, sb.st_size, true);
}

static bool has_glob_chars(const char *s) { return strpbrk(s, "*?[") != NULL; }

/* Applies --dataset / unsupported entries to the collected sources. */
static glm_status apply_filter(glm_reader *r, const char *filter) {
    GLM_VEC(const glm_dsinfo_entry *) sel = {0};
    glm_status st = GLM_OK;
    if (filter && *filter) {
        if (r->infos.n == 0)
            return glm_err(GLM_ERR_ARG,
                           "datasets %s were named (--dataset, or dataset: in a config) but no "
                           "dataset_info.json is among the inputs; hint: pass the folder that holds "
                           "dataset_info.json (--dataset-dir), or name no dataset", filter);
        char *copy = strdup(filter);
        if (!copy) return glm_err(GLM_ERR_NOMEM, "out of memory");
        char *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok && st == GLM_OK;
             tok = strtok_r(NULL, ",", &save)) {
            while (*tok == ' ') tok++;
            char *end = tok + strlen(tok);
            while (end > tok && end[-1] == ' ') *--end = 0;
            if (!*tok) continue;
            const glm_dsinfo_entry *e = NULL;
            for (size_t i = 0; i < r->infos.n && !e; i++) e = glm_dsinfo_find_name(r->infos.v[i], tok);
            if (!e) {
                char close[512];
                glm_dsinfo_close_names(r->infos.v, r->infos.n, tok, close, sizeof close, 8);
                st = glm_err(GLM_ERR_ARG, "no dataset called \"%s\" in %s%s%s%s", tok,
                             r->infos.v[0]->path, r->infos.n > 1 ? " (and other registries)" : "",
                             close[0] ? "; hint: close names: " : "; hint: check the spelling",
                             close);
            } else if (!e->file_name) {
                st = glm_err(GLM_ERR_ARG,
                             "dataset \"%s\" (%s) is a hub dataset with no local file_name; hint: "
                             "glmtune reads local files only: download it next to the registry and "
                             "give the entry a \"file_name\"", tok, e->registry);
            } else if (!e->local) {
                st = glm_err(GLM_ERR_IO,
                             "dataset \"%s\" (%s): its file %s does not exist; hint: check "
                             "\"file_name\" in the entry, or put the file next to the registry "
                             "(dataset_dir)", tok, e->registry, e->path);
            } else if (e->unsupported) {
                st = glm_err(GLM_ERR_ARG, "dataset \"%s\" cannot be used: %s (%s)", tok,
                             e->unsupported, e->registry);
            } else if (glm_vec_push(sel, e) != GLM_OK) {
                st = GLM_ERR_NOMEM;
            } else if (e->hub_keys[0]) {
                glm_log_info("dataset \"%s\" (%s): %s not used: they choose the split, configuration or folder of a "
                             "hub dataset; the local file %s is read whole", tok, e->registry, e->hub_keys, e->file_name);
            }
        }
        free(copy);
        if (st != GLM_OK) {
            glm_vec_free(sel);
            return st;
        }
    }
    if (!sel.n && r->missing.n) { /* not selected by name: skipped, but said so */
        char list[600] = "";
        size_t used = 0;
        for (size_t i = 0; i < r->missing.n && i < 6; i++) {
            int w = snprintf(list + used, sizeof list - used, "%s%s (%s)", i ? ", " : "",
                             r->missing.v[i]->name, r->missing.v[i]->file_name);
            if (w < 0 || (size_t)w >= sizeof list - used) break;
            used += (size_t)w;
        }
        glm_log_warn("%s: %zu dataset%s name%s a file that does not exist and %s not read: %s%s", r->missing.v[0]->registry,
                     r->missing.n, r->missing.n > 1 ? "s" : "", r->missing.n > 1 ? "" : "s",
                     r->missing.n > 1 ? "are" : "is", list, r->missing.n > 6 ? ", ..." : "");
    }
    size_t w = 0;
    for (size_t i = 0; i < r->srcs.n; i++) {
        rd_src *s = &r->srcs.v[i];
        bool keep = true;
        if (sel.n) {
            keep = false;
            for (size_t k = 0; k < sel.n; k++) keep |= s->map == sel.v[k];
            if (!keep) glm_log_debug("%s: not selected by --dataset: skipped", s->path);
        } else if (s->map && s->map->unsupported) {
            glm_log_warn("%s: skipped: dataset \"%s\" in %s: %s", s->path, s->map->name,
                         s->map->registry, s->map->unsupported);
            keep = false;
        }
        if (keep) r->srcs.v[w++] = *s;
        else {
            free(s->path);
            free(s->real);
        }
    }
    r->srcs.n = w;
    glm_vec_free(sel);
    return GLM_OK;
}

glm_status glm_reader_open(const char *const *inputs, size_t n, const char *dataset_filter,
                           glm_reader **out) {
    glm_reader_opts o = {.dataset_filter = dataset_filter, .max_samples = -1};
    return glm_reader_open_ex(inputs, n, &o, out);
}

static glm_status setup_selection(glm_reader *r);

glm_status glm_reader_open_ex(const char *const *inputs, size_t n, const glm_reader_opts *opts,
                              glm_reader **out) {
    *out = NULL;
    glm_reader *r = calloc(1, sizeof *r);
    if (!r) return glm_err(GLM_ERR_NOMEM, "out of memory");
    r->max_record = (size_t)256 << 20;
    r->opt = *opts;
    r->opt_inputs = inputs;
    r->opt_n_inputs = n;
    const char *dataset_filter = opts->dataset_filter;
    glm_status st = GLM_OK;
    for (size_t i = 0; i < n && st == GLM_OK; i++) {
        const char *in = inputs[i];
        r->cur_input = i;
        struct stat sb;
        if (has_glob_chars(in) && stat(in, &sb) != 0) {
            glob_t g;
            int rc = glob(in, 0, NULL, &g);
            if (rc == GLOB_NOMATCH) {
                st = glm_err(GLM_ERR_ARG, "%s: no file matches this pattern; hint: check the "
                             "pattern, and quote it so the shell passes it unexpanded", in);
            } else if (rc != 0) {
                st = glm_err(GLM_ERR_IO, "%s: cannot expand the pattern (glob error %d)", in, rc);
            } else {
                for (size_t k = 0; k < g.gl_pathc && st == GLM_OK; k++)
                    st = add_input(r, g.gl_pathv[k]);
            }
            if (rc == 0 || rc == GLOB_NOMATCH) globfree(&g);
        } else {
            size_t before = r->srcs.n;
            st = add_input(r, in);
            if (st == GLM_OK && r->srcs.n == before && glm_is_dir(in))
                glm_log_warn("%s: the folder holds no .json/.jsonl files or archives", in);
        }
    }
    if (st == GLM_OK) st = apply_filter(r, dataset_filter);
    if (st == GLM_OK && r->srcs.n == 0)
        st = glm_err(GLM_ERR_ARG, "no corpus file found in the inputs (%zu given); hint: inputs "
                     "are .json/.jsonl files (optionally .gz/.zst/.xz/.bz2), archives "
                     "(.tar/.tar.gz/.zip ...) or folders holding them", n);
    if (st != GLM_OK) {
        glm_reader_close(r);
        return st;
    }
    for (size_t i = 0; i < r->srcs.n; i++) r->total_bytes += r->srcs.v[i].size;
    if ((st = setup_selection(r)) != GLM_OK) {
        glm_reader_close(r);
        return st;
    }
    *out = r;
    return GLM_OK;
}

/* Counts the records of dataset g by splitting its sources once (no JSON parse). */
static glm_status count_records(glm_reader *r, size_t g, int64_t *count) {
    glm_reader *c = calloc(1, sizeof *c);
    if (!c) return glm_err(GLM_ERR_NOMEM, "out of memory");
    c->max_record = r->max_record;
    c->defer_parse = true;
    c->opt.max_samples = -1;
    glm_status st = GLM_OK;
    for (size_t i = 0; i < r->srcs.n && st == GLM_OK; i++) {
        rd_src s = r->srcs.v[i];
        if (s.group != g) continue;
        s.path = strdup(s.path);
        s.real = strdup(s.real);
        s.group = 0;
        if (!s.path || !s.real || glm_vec_push(c->srcs, s) != GLM_OK) {
            free(s.path);
            free(s.real);
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
        }
    }
    rd_group one = {.limit = -1, .total = -1, .sample = -1};
    if (st == GLM_OK && glm_vec_push(c->groups, one) != GLM_OK) st = glm_err(GLM_ERR_NOMEM, "out of memory");
    *count = 0;
    glm_record rec;
    while (st == GLM_OK && (st = glm_reader_next(c, &rec)) == GLM_OK) {
        (*count)++;
        free(rec.raw);
        json_decref(rec.value);
    }
    glm_reader_close(c);
    return st == GLM_EOF ? GLM_OK : st;
}

/* max_samples and num_samples of every dataset (see glm_reader_open_ex). */
static glm_status setup_selection(glm_reader *r) {
    for (size_t g = 0; g < r->groups.n; g++) {
        rd_group *d = &r->groups.v[g];
        d->limit = r->opt.max_samples;
        if (!d->entry || d->entry->num_samples < 0) continue;
        bool used = false;
        for (size_t i = 0; i < r->srcs.n; i++) used |= r->srcs.v[i].group == g;
        if (!used) continue;
        int64_t k = d->entry->num_samples, N = 0;
        if (d->limit >= 0 && d->limit < k) k = d->limit;
        GLM_TRY(count_records(r, g, &N));
        d->total = N;
        d->sample = k;
        d->limit = -1; /* folded into k */
        d->mult = calloc(N ? (size_t)N : 1, sizeof *d->mult);
        if (!d->mult) return glm_err(GLM_ERR_NOMEM, "out of memory");
        if (k > 0 && N == 0)
            return glm_err(GLM_ERR_ARG, "dataset \"%s\" (%s): num_samples %lld, but its file holds no "
                           "record", d->entry->name, d->entry->registry, (long long)k);
        glm_rng rng;
        glm_rng_seed(&rng, r->opt.seed, glm_fnv1a64(GLM_FNV1A64_INIT, d->entry->name, strlen(d->entry->name)));
        int64_t take = k < N ? k : N, left = take;
        for (int64_t i = 0; i < N && left > 0; i++) /* Knuth's selection sampling: a uniform subset */
            if ((int64_t)glm_rng_below(&rng, (uint64_t)(N - i)) < left) {
                d->mult[i] = 1;
                left--;
            }
        for (int64_t i = take; i < k; i++) d->mult[glm_rng_below(&rng, (uint64_t)N)]++; /* k > N */
        glm_log_info("dataset \"%s\": num_samples %lld of its %lld records%s", d->entry->name,
                     (long long)k, (long long)N, k > N ? " (every record once, the rest drawn again)" : "");
    }
    return GLM_OK;
}

size_t glm_reader_n_datasets(const glm_reader *r) { return r->groups.n; }

void glm_reader_dataset_info(const glm_reader *r, size_t i, glm_reader_dataset *o) {
    const rd_group *d = &r->groups.v[i];
    *o = (glm_reader_dataset){d->name, r->opt.max_samples, d->sample, d->total, d->taken, d->cut};
}



void glm_reader_set_deferred_parse(glm_reader *r, bool defer) { r->defer_parse = defer; }

void glm_reader_set_max_record(glm_reader *r, size_t bytes) {
    r->max_record = bytes ? bytes : ((size_t)256 << 20);
}

int64_t glm_reader_total_bytes(const glm_reader *r) { return r->total_bytes; }

int64_t glm_reader_bytes_read(const glm_reader *r) {
    int64_t cur = r->outer ? (int64_t)archive_filter_bytes(r->outer, -1) : 0;
    if (cur < 0) cur = 0;
    return r->bytes_done + cur;
}

size_t glm_reader_n_sources(const glm_reader *r) { return r->n_opened; }
size_t glm_reader_n_empty(const glm_reader *r) { return r->n_empty; }

/* A stream that held no record is named once (the first 20; the count is kept for all). */
static void note_empty(glm_reader *r, const char *name) {
    if (r->n_empty++ < 20)
        glm_log_warn("%s: holds no record (empty); hint: check that it is the file you meant", name);
}

/* ---------------------------------------------------------------- streaming */

static void close_stream(glm_reader *r) {
    if (r->inner) {
        archive_read_free(r->inner);
        r->inner = NULL;
    }
    if (r->stream_open) glm_jsonsplit_free(&r->js);
    r->stream_open = false;
    r->blk = NULL;
    r->blk_n = 0;
    r->blk_eof = false;
}

static void close_file(glm_reader *r) {
    close_stream(r);
    if (r->outer) {
        int64_t b = archive_filter_bytes(r->outer, -1);
        r->bytes_done += b > 0 ? b : 0;
        archive_read_free(r->outer);
        r->outer = NULL;
    }
    r->cur = NULL;
}

void glm_reader_close(glm_reader *r) {
    if (!r) return;
    close_file(r);
    for (size_t i = 0; i < r->srcs.n; i++) {
        free(r->srcs.v[i].path);
        free(r->srcs.v[i].real);
    }
    glm_vec_free(r->srcs);
    for (size_t i = 0; i < r->infos.n; i++) glm_dsinfo_free(r->infos.v[i]);
    glm_vec_free(r->infos);
    for (size_t i = 0; i < r->groups.n; i++) {
        free(r->groups.v[i].name);
        free(r->groups.v[i].mult);
    }
    glm_vec_free(r->groups);
    glm_vec_free(r->missing);
    free(r->pending.raw);
    json_decref(r->pending.value);
    free(r->name);
    free(r);
}

static glm_status set_name(glm_reader *r, const char *file, const char *member) {
    free(r->name);
    r->name = NULL;
    size_t n = strlen(file) + (member ? strlen(member) + 1 : 0) + 1;
    if (!(r->name = malloc(n))) return glm_err(GLM_ERR_NOMEM, "out of memory");
    snprintf(r->name, n, member ? "%s:%s" : "%s", file, member ? member : "");
    return GLM_OK;
}

static glm_status archive_fail(glm_reader *r, struct archive *a, const char *what) {
    const char *msg = archive_error_string(a);
    int err = archive_errno(a);
    r->failed = true;
    return glm_err(err == ENOMEM ? GLM_ERR_NOMEM : GLM_ERR_FORMAT,
                   "%s: %s after %lld decompressed bytes: %s; hint: the file is corrupt or cut "
                   "off: test it (gzip -t / zstd -t / xz -t / bzip2 -t / unzip -t) and re-download",
                   r->name ? r->name : r->cur->path, what, (long long)r->js.offset,
                   msg ? msg : "unknown libarchive error");
}

/* The inner archive reads the outer archive's current member. */
static la_ssize_t inner_read_cb(struct archive *a, void *ud, const void **buf) {
    glm_reader *r = ud;
    size_t sz = 0;
    la_int64_t off = 0;
    int rc = archive_read_data_block(r->outer, buf, &sz, &off);
    if (rc == ARCHIVE_EOF) return 0;
    if (rc < ARCHIVE_WARN) {
        const char *m = archive_error_string(r->outer);
        archive_set_error(a, archive_errno(r->outer) ? archive_errno(r->outer) : EIO, "%s",
                          m ? m : "read error in the archive member");
        return -1;
    }
    return (la_ssize_t)sz;
}

/* The compression a name ends in (".gz": "gzip", ".zst", ".xz", ".bz2", and the archive
 * spellings .tgz ...), or NULL. */
static const char *named_compression(const char *name) {
    static const char *const ext[][2] = {{".gz", "gzip"},   {".tgz", "gzip"}, {".zst", "zstd"}, {".tzst", "zstd"},
                                         {".xz", "xz"},     {".txz", "xz"},   {".bz2", "bzip2"}, {".tbz2", "bzip2"}};
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++)
        if (ends_with(name, ext[i][0])) return ext[i][1];
    return NULL;
}

/* A name that says compressed data over data libarchive found no compression in: remembered
 * (r->misnamed), so that data that is not JSON either is reported as "not gzip", and data that is
 * JSON is read with a warning. */
static void check_compression(glm_reader *r, struct archive *a, const char *name) {
    r->misnamed = named_compression(name);
    for (int i = 0; r->misnamed && i < archive_filter_count(a); i++)
        if (archive_filter_code(a, i) != ARCHIVE_FILTER_NONE) r->misnamed = NULL;
}

static void start_split(glm_reader *r, const char *name_for_hint) {
    glm_jsonsplit_init(&r->js, r->max_record, is_lines_name(name_for_hint));
    r->stream_open = true;
    r->blk = NULL;
    r->blk_n = 0;
    r->blk_eof = false;
    r->n_opened++;
    r->stream_recs = 0;
}

/* Opens member `ent` of the open archive as a stream when it is a JSON file. *opened tells. */
static glm_status try_member(glm_reader *r, struct archive_entry *ent, bool *opened) {
    *opened = false;
    const char *mn = archive_entry_pathname(ent);
    const char *base = mn ? strrchr(mn, '/') : NULL;
    base = base ? base + 1 : mn;
    if (archive_entry_filetype(ent) != AE_IFREG || !mn || !is_json_name(mn) || base[0] == '.' ||
        strncmp(mn, "__MACOSX/", 9) == 0) {
        glm_log_debug("%s: member %s is not a .json/.jsonl file: skipped", r->cur->path,
                      mn ? mn : "?");
        return GLM_OK;
    }
    if (strcmp(base, "dataset_info.json") == 0) {
        glm_log_warn("%s: member %s skipped: registries inside archives are not used; hint: "
                     "extract the archive to use its dataset_info.json", r->cur->path, mn);
        return GLM_OK;
    }
    GLM_TRY(set_name(r, r->cur->path, mn));
    /* The member may itself be compressed (x.jsonl.gz inside a .tar): a second libarchive
     * reader with the raw format decompresses it while reading from the first. */
    r->inner = archive_read_new();
    if (!r->inner) return glm_err(GLM_ERR_NOMEM, "out of memory");
    archive_read_support_filter_all(r->inner);
    archive_read_support_format_raw(r->inner);
    archive_read_support_format_empty(r->inner);
    if (archive_read_open(r->inner, r, NULL, inner_read_cb, NULL) != ARCHIVE_OK)
        return archive_fail(r, r->inner, "cannot open the member");
    struct archive_entry *ie;
    int rc = archive_read_next_header(r->inner, &ie);
    if (rc == ARCHIVE_EOF) { /* empty member */
        r->n_opened++;
        note_empty(r, r->name);
        archive_read_free(r->inner);
        r->inner = NULL;
        return GLM_OK;
    }
    if (rc < ARCHIVE_WARN) return archive_fail(r, r->inner, "cannot read the member");
    check_compression(r, r->inner, mn);
    start_split(r, mn);
    *opened = true;
    return GLM_OK;
}

/* Opens the next stream: the next member of the open archive, or the next file. Returns
 * GLM_EOF when all sources are done. */
static glm_status open_next_stream(glm_reader *r) {
    for (;;) {
        if (r->outer && r->outer_raw) { /* the single stream of a plain file is done */
            close_file(r);
            continue;
        }
        if (r->outer && group_full(r, r->cur)) { /* max_samples reached: the rest is not read */
            close_file(r);
            continue;
        }
        if (r->outer) {
            struct archive_entry *ent;
            int rc = archive_read_next_header(r->outer, &ent);
            if (rc == ARCHIVE_EOF) {
                close_file(r);
                continue;
            }
            if (rc < ARCHIVE_WARN) return archive_fail(r, r->outer, "cannot read the next member");
            bool opened;
            GLM_TRY(try_member(r, ent, &opened));
            if (opened) return GLM_OK;
            continue;
        }
        if (r->next_src >= r->srcs.n) return GLM_EOF;
        r->cur = &r->srcs.v[r->next_src++];
        if (group_full(r, r->cur)) {
            r->cur = NULL;
            continue;
        }
        GLM_TRY(set_name(r, r->cur->path, NULL));
        r->outer = archive_read_new();
        if (!r->outer) return glm_err(GLM_ERR_NOMEM, "out of memory");
        archive_read_support_filter_all(r->outer);
        /* Archive formats only for archive names: libarchive's format detection can take a plain
         * JSONL file for an archive (compact lines look like mtree), which would read as nothing.
         * Compression is still detected by content for every file. */
        if (is_archive_name(r->cur->path)) archive_read_support_format_all(r->outer);
        archive_read_support_format_raw(r->outer);
        archive_read_support_format_empty(r->outer);
        if (archive_read_open_filename(r->outer, r->cur->path, BLOCK_SIZE) != ARCHIVE_OK) {
            const char *m = archive_error_string(r->outer);
            r->failed = true;
            return glm_err(GLM_ERR_IO, "%s: cannot open: %s; hint: %s", r->cur->path, m ? m : "unknown error",
                           access(r->cur->path, R_OK) == 0
                               ? "the file is cut off or corrupt (test it with gzip -t, zstd -t, xz -t or bzip2 -t)"
                               : "check that the file exists and is readable");
        }
        r->outer_raw = false;
        struct archive_entry *ent;
        int rc = archive_read_next_header(r->outer, &ent);
        if (rc == ARCHIVE_EOF) { /* an empty file or an empty archive */
            r->n_opened++;
            note_empty(r, r->cur->path);
            close_file(r);
            continue;
        }
        if (rc < ARCHIVE_WARN) return archive_fail(r, r->outer, "cannot read the start");
        if (archive_format(r->outer) == ARCHIVE_FORMAT_RAW) {
            r->outer_raw = true;
            check_compression(r, r->outer, r->cur->path);
            start_split(r, r->cur->path);
            return GLM_OK;
        }
        bool opened;
        GLM_TRY(try_member(r, ent, &opened));
        if (opened) return GLM_OK;
    }
}

static const char *problem_hint(const char *reason) {
    if (!strcmp(reason, "invalid_utf8"))
        return "the text is not UTF-8: convert the file (iconv -f <encoding> -t UTF-8)";
    if (!strcmp(reason, "lone_surrogate"))
        return "an escaped UTF-16 surrogate has no partner (broken emoji/CJK text); fix or drop "
               "the record";
    if (!strcmp(reason, "nul_character"))
        return "remove the \\u0000 characters from the text";
    if (!strcmp(reason, "not_an_object"))
        return "each record must be a JSON object such as {\"messages\": [...]}";
    if (!strcmp(reason, "record_too_large"))
        return "split the record, or check that the file's layout is what you expect";
    if (!strcmp(reason, "truncated_json"))
        return "re-download or re-export the file";
    if (!strcmp(reason, "too_deep")) return "the record nests brackets too deeply";
    return "check the record with a JSON validator (python3 -m json.tool)";
}

/* Parses data[0..n) into rec->value with jansson, or classifies the failure into rec->reason
 * and rec->detail (rec->source, index, line and offset must be set). */
static void parse_record(glm_record *rec, const char *data, size_t n) {
    const char *what = NULL;
    char buf[320];
    int64_t line = rec->line, off = rec->offset;
    json_error_t jerr;
    /* as Python's json.loads: integers of any size and inf/NaN kept as written (common/pyjson.h) */
    json_t *v = glm_json_loadb_py(data, n, 0, &jerr);
    if (v && !json_is_object(v)) {
        json_decref(v);
        rec->reason = "not_an_object";
        what = "the record is a JSON array, not an object";
    } else if (v) {
        rec->value = v;
        return;
    } else {
        unsigned char c0 = n ? (unsigned char)data[0] : 0;
        int64_t at = utf8_invalid_at(data, n);
        if (json_error_code(&jerr) == json_error_invalid_utf8 || at >= 0) {
            rec->reason = "invalid_utf8";
            if (at >= 0) {
                off = rec->offset + at;
                for (int64_t k = 0; k < at; k++) line += data[k] == '\n';
                snprintf(buf, sizeof buf, "byte 0x%02x at offset %lld is not valid UTF-8", (unsigned char)data[at],
                         (long long)off);
            } else {
                snprintf(buf, sizeof buf, "invalid UTF-8: %s", jerr.text);
            }
        } else if ((at = glm_json_lone_surrogate_at(data, n)) >= 0) {
            rec->reason = "lone_surrogate";
            off = rec->offset + at;
            for (int64_t k = 0; k < at; k++) line += data[k] == '\n';
            snprintf(buf, sizeof buf, "the escape %.6s at offset %lld is half of a UTF-16 "
                     "surrogate pair with no other half", data + at, (long long)off);
        } else if (json_error_code(&jerr) == json_error_null_character) {
            rec->reason = "nul_character";
            snprintf(buf, sizeof buf, "a string holds \\u0000 (NUL)");
        } else if (strstr(jerr.text, "depth")) {
            rec->reason = "too_deep";
            snprintf(buf, sizeof buf, "%s", jerr.text);
        } else if (c0 != '{' && c0 != '[') {
            rec->reason = "not_an_object";
            snprintf(buf, sizeof buf, "the record is a JSON scalar (starts with '%c'), not an object",
                     c0 >= 0x20 && c0 < 0x7f ? c0 : '?');
        } else {
            rec->reason = "invalid_json";
            line = rec->line + (jerr.line > 0 ? jerr.line - 1 : 0);
            off = rec->offset + (jerr.position > 0 ? jerr.position : 0);
            snprintf(buf, sizeof buf, "invalid JSON near offset %lld: %s", (long long)off, jerr.text);
        }
        what = buf;
    }
    snprintf(rec->detail, sizeof rec->detail, "%s:%lld: record %lld (offset %lld): %s; hint: %s", rec->source,
             (long long)line, (long long)rec->index, (long long)off, what, problem_hint(rec->reason));
}

void glm_record_parse(glm_record *rec) {
    if (!rec->raw) return;
    parse_record(rec, rec->raw, rec->nbytes);
    free(rec->raw);
    rec->raw = NULL;
}

void glm_record_parse_keep(glm_record *rec) {
    if (rec->raw && !rec->value && !rec->reason) parse_record(rec, rec->raw, rec->nbytes);
}

/* Turns one split record into *rec: parses it (or, deferred, copies its bytes) and classifies
 * failures. */
static void make_record(glm_reader *r, const glm_jsplit_rec *sr, glm_record *rec) {
    memset(rec, 0, sizeof *rec);
    rec->source = r->name;
    rec->index = sr->index;
    rec->line = sr->line;
    rec->offset = sr->offset;
    rec->nbytes = sr->n;
    rec->mapping = r->cur ? r->cur->map : NULL;
    const char *what = NULL;
    switch (sr->problem) {
    case GLM_JSPLIT_TOO_LARGE: rec->reason = "record_too_large"; what = sr->what; break;
    case GLM_JSPLIT_TRUNCATED: rec->reason = "truncated_json"; what = sr->what; break;
    case GLM_JSPLIT_SYNTAX: rec->reason = "invalid_json"; what = sr->what; break;
    case GLM_JSPLIT_OK: break;
    }
    if (!rec->reason) {
        if (r->defer_parse && (rec->raw = malloc(sr->n ? sr->n : 1))) {
            memcpy(rec->raw, sr->data, sr->n);
            return;
        }
        parse_record(rec, sr->data, sr->n);
        return;
    }
    if (sr->column > 0) /* text after a record on its line: named by line:column */
        snprintf(rec->detail, sizeof rec->detail, "%s:%lld:%lld: record %lld (offset %lld): %s; hint: remove what "
                 "follows the record on that line", r->name, (long long)sr->line, (long long)sr->column,
                 (long long)sr->index, (long long)sr->offset, what);
    else
        snprintf(rec->detail, sizeof rec->detail, "%s:%lld: record %lld (offset %lld): %s; hint: %s", r->name,
                 (long long)sr->line, (long long)sr->index, (long long)sr->offset, what, problem_hint(rec->reason));
}

/* Has dataset s->group given its max_samples records already? */
static bool group_full(glm_reader *r, const rd_src *s) {
    rd_group *g = &r->groups.v[s->group];
    if (g->mult || g->limit < 0 || g->taken < g->limit) return false;
    g->cut = true;
    return true;
}

/* A copy of rec's data (raw bytes or parsed value) for one more return of the same record. */
static glm_status dup_record(const glm_record *rec, glm_record *copy) {
    *copy = *rec;
    if (rec->raw && !(copy->raw = malloc(rec->nbytes ? rec->nbytes : 1)))
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    if (rec->raw) memcpy(copy->raw, rec->raw, rec->nbytes);
    if (rec->value) json_incref(rec->value);
    return GLM_OK;
}

glm_status glm_reader_next(glm_reader *r, glm_record *rec) {
    GLM_ASSERT(!r->failed, "glm_reader_next called after a fatal error");
    if (r->pending_n) { /* a record that num_samples draws more than once */
        rd_group *g = &r->groups.v[r->cur->group];
        if (--r->pending_n) {
            GLM_TRY(dup_record(&r->pending, rec));
        } else {
            *rec = r->pending;
            memset(&r->pending, 0, sizeof r->pending);
        }
        g->taken++;
        return GLM_OK;
    }
    for (;;) {
        if (!r->stream_open) {
            glm_status st = open_next_stream(r);
            if (st != GLM_OK) {
                if (st != GLM_EOF) r->failed = true;
                return st;
            }
        }
        struct archive *a = r->inner ? r->inner : r->outer;
        glm_jsplit_rec sr;
        bool have = false;
        if (r->blk_n == 0 && !r->blk_eof) {
            const void *b;
            size_t sz = 0;
            la_int64_t o;
            int rc = archive_read_data_block(a, &b, &sz, &o);
            if (rc == ARCHIVE_EOF) r->blk_eof = true;
            else if (rc < ARCHIVE_WARN) return archive_fail(r, a, "cannot decompress/read the data");
            else {
                r->blk = b;
                r->blk_n = sz;
            }
        }
        glm_status st;
        if (r->blk_n > 0) {
            size_t used = 0;
            st = glm_jsonsplit_feed(&r->js, r->blk, r->blk_n, &used, &sr, &have);
            r->blk += used;
            r->blk_n -= used;
        } else if (r->blk_eof) {
            st = glm_jsonsplit_finish(&r->js, &sr, &have);
            if (st == GLM_OK && !have) {
                if (r->stream_recs == 0) note_empty(r, r->name);
                close_stream(r);
                continue;
            }
        } else {
            continue;
        }
        if (st != GLM_OK && r->misnamed && st == GLM_ERR_FORMAT) {
            char why[512];
            snprintf(why, sizeof why, "%s", glm_errmsg());
            why[strcspn(why, ";")] = 0; /* what the data is; the hint is this one */
            r->failed = true;
            return glm_err(st, "%s: not %s data although its name says so, and not JSON either (%s); hint: check what "
                           "the file is (file %s): a download may have failed, or the file was renamed", r->name,
                           r->misnamed, why, r->cur->path);
        }
        if (st != GLM_OK) {
            r->failed = true;
            return glm_err_context(st, "%s", r->name);
        }
        if (have && r->misnamed && r->stream_recs == 0)
            glm_log_warn("%s: its name says %s, but the data is not compressed: read as it is; hint: rename it "
                         "without the compression suffix", r->name, r->misnamed);
        if (have) {
            r->stream_recs++;
            make_record(r, &sr, rec);
            rd_group *g = &r->groups.v[r->cur->group];
            int64_t idx = g->seen++;
            uint32_t times = g->mult ? (idx < g->total ? g->mult[idx] : 0) : group_full(r, r->cur) ? 0 : 1;
            if (times == 0) { /* not drawn, or past max_samples (then the rest is not read) */
                free(rec->raw);
                json_decref(rec->value);
                memset(rec, 0, sizeof *rec);
                if (!g->mult) close_stream(r);
                continue;
            }
            g->taken++;
            if (times > 1) {
                GLM_TRY(dup_record(rec, &r->pending));
                r->pending_n = times - 1;
            }
            return GLM_OK;
        }
    }
}
