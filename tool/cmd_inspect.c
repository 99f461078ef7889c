/* glmtune inspect: a shard's samples decoded with their targets marked, and statistics. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/args.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/utf8.h"
#include "dataset/shard.h"
#include "tokenize/tokenizer.h"
#include "tool/cli.h"

static const char *USAGE = "usage: glmtune inspect [options] OUTDIR|SHARD";
static const char *ABOUT =
    "Shows statistics of the shards of a `glmtune tokenize` output (or one shard file) and\n"
    "samples decoded with their training targets marked.\n";

typedef struct {
    glm_shard *sh;
    size_t n;
} shard_set;

static glm_status open_set(const char *path, const char *split, shard_set *set, char **tok_path) {
    set->sh = NULL;
    set->n = 0;
    *tok_path = NULL;
    if (!glm_is_dir(path)) {
        set->sh = calloc(1, sizeof *set->sh);
        if (!set->sh) return glm_err(GLM_ERR_NOMEM, "inspect: out of memory");
        glm_status s = glm_shard_open(path, set->sh);
        if (s != GLM_OK) { /* the reader's reason, and (where it gives none) what inspect takes */
            free(set->sh);
            set->sh = NULL;
            if (strstr(glm_errmsg(), "hint:")) return s;
            char why[512];
            snprintf(why, sizeof why, "%s", glm_errmsg());
            return glm_err(s, "%s; hint: pass a glmtune tokenize output dir or a .bin shard", why);
        }
        set->n = 1;
        return GLM_OK;
    }
    char *mp = glm_path_join(path, "manifest.json");
    json_error_t je;
    json_t *m = json_load_file(mp, 0, &je);
    free(mp);
    if (!m) return glm_err(GLM_ERR_IO, "%s/manifest.json: %s; hint: pass a glmtune tokenize output dir or a .bin shard", path, je.text);
    const char *tp = json_string_value(json_object_get(json_object_get(m, "tokenizer"), "path"));
    if (tp) *tok_path = strdup(tp);
    json_t *shards = json_object_get(json_object_get(json_object_get(m, "splits"), split), "shards");
    size_t n = json_array_size(shards);
    set->sh = calloc(n ? n : 1, sizeof *set->sh);
    glm_status s = GLM_OK;
    for (size_t i = 0; i < n && s == GLM_OK; i++) {
        char *f = glm_path_join(path, json_string_value(json_object_get(json_array_get(shards, i), "file")));
        s = glm_shard_open(f, &set->sh[i]);
        free(f);
        if (s == GLM_OK) set->n++;
    }
    json_decref(m);
    if (s == GLM_OK && n == 0) s = glm_err(GLM_ERR_ARG, "%s: no \"%s\" shards", path, split);
    return s;
}

static void print_decoded(const glm_tokenizer *tok, const uint32_t *ids, const uint8_t *tg, uint32_t n, bool color) {
    glm_charvec buf = {0};
    uint32_t i = 0;
    while (i < n) {
        uint32_t j = i;
        while (j < n && tg[j] == tg[i]) j++;
        buf.n = 0;
        if (glm_tokenizer_decode(tok, ids + i, j - i, &buf) != GLM_OK) {
            printf("<%s>", glm_errmsg());
        } else {
            if (tg[i]) fputs(color ? "\x1b[32m" : "\u27e6", stdout);
            fwrite(buf.v, 1, buf.n, stdout);
            if (tg[i]) fputs(color ? "\x1b[0m" : "\u27e7", stdout);
        }
        i = j;
    }
    glm_vec_free(buf);
    putchar('\n');
}

int cmd_inspect(int argc, char **argv) {
    bool json = false, help = false;
    const char *tok_arg = NULL, *split = "train", *path = NULL;
    uint64_t first = 0, count = 0;
    size_t n_path = 0;
    const glm_arg_opt opts[] = {
        {.name = "json", .type = GLM_ARG_FLAG, .dest = &json,
         .help = "one JSON object per line per sample: {\"file\", \"record\", \"ids\", \"targets\"}"},
        {.name = "tokenizer", .type = GLM_ARG_STRING, .dest = &tok_arg, .metavar = "PATH",
         .help = "tokenizer for decoding (default: the one recorded in manifest.json)"},
        {.name = "sample", .type = GLM_ARG_U64, .dest = &first, .def = "0", .metavar = "K",
         .help = "first sample to show, 0-based"},
        {.name = "samples", .type = GLM_ARG_U64, .dest = &count, .metavar = "N",
         .help = "how many samples to show (default 1; with --json: all)"},
        {.name = "split", .type = GLM_ARG_STRING, .dest = &split, .def = "train", .metavar = "S",
         .help = "train or val, for an output directory"},
    };
    const glm_arg_cmd cmd = {.name = "inspect", .usage = USAGE, .about = ABOUT, .opts = opts,
                             .n_opts = sizeof opts / sizeof *opts, .pos = &path, .max_pos = 1, .n_pos = &n_path,
                             .pos_name = "OUTDIR or SHARD"};
    glm_status s = glm_args_parse(&cmd, argc - 1, argv + 1, &help);
    if (s == GLM_OK && help) {
        glm_args_help(stdout, &cmd);
        return GLM_EXIT_OK;
    }
    if (s == GLM_OK && !path) s = glm_err(GLM_ERR_ARG, "inspect: no OUTDIR or SHARD given; hint: glmtune inspect out/");
    if (s != GLM_OK) return cli_fail(s);
    if (!count) count = json ? UINT64_MAX : 1;

    shard_set set;
    char *tok_path = NULL;
    glm_tokenizer *tok = NULL;
    s = open_set(path, split, &set, &tok_path);
    if (s == GLM_OK && !json) {
        const char *tp = tok_arg ? tok_arg : tok_path;
        if (tp && glm_tokenizer_load(tp, &tok) != GLM_OK) {
            glm_log_warn("cannot load tokenizer %s (%s): showing ids only; hint: --tokenizer PATH", tp, glm_errmsg());
            tok = NULL;
        }
    }
    uint64_t rows = 0, docs = 0, tokens = 0, targets = 0, cap = 0, minlen = UINT64_MAX, maxlen = 0;
    uint64_t sample = 0, shown = 0;
    bool color = isatty(1);
    for (size_t k = 0; s == GLM_OK && k < set.n; k++) {
        glm_shard *sh = &set.sh[k];
        rows += sh->n_rows;
        docs += sh->n_docs;
        tokens += sh->n_tokens;
        targets += sh->n_targets;
        cap += (uint64_t)sh->n_rows * sh->seq_len;
        for (uint32_t r = 0; r < sh->n_rows; r++) {
            uint64_t off = (uint64_t)r * sh->seq_len;
            for (uint64_t d = sh->rowdocs[r]; d < sh->rowdocs[r + 1]; d++, sample++) {
                uint32_t len = sh->docs[d].len;
                if (len < minlen) minlen = len;
                if (len > maxlen) maxlen = len;
                if (sample >= first && shown < count) {
                    shown++;
                    uint8_t *tg = malloc(len);
                    for (uint32_t t = 0; t < len; t++) tg[t] = (uint8_t)glm_shard_target(sh, off + t);
                    if (json) {
                        json_t *ids = json_array(), *ta = json_array();
                        for (uint32_t t = 0; t < len; t++) {
                            json_array_append_new(ids, json_integer(sh->ids[off + t]));
                            json_array_append_new(ta, json_integer(tg[t]));
                        }
                        char *file = glm_utf8_lossy(sh->sources[sh->docs[d].source]);
                        json_t *o = json_pack("{s:s,s:I,s:o,s:o}", "file", file ? file : "?", "record",
                                              (json_int_t)sh->docs[d].record, "ids", ids, "targets", ta);
                        free(file);
                        if (!o) {
                            s = glm_err(GLM_ERR_NOMEM, "out of memory");
                            free(tg);
                            break;
                        }
                        char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
                        puts(line);
                        free(line);
                        json_decref(o);
                    } else {
                        uint32_t nt = 0;
                        for (uint32_t t = 0; t < len; t++) nt += tg[t];
                        printf("--- sample %llu: %s record %llu, %u tokens, %u targets (%s) ---\n",
                               (unsigned long long)sample, sh->sources[sh->docs[d].source],
                               (unsigned long long)sh->docs[d].record, len, nt,
                               color ? "targets in green" : "targets between \u27e6 \u27e7");
                        if (tok) {
                            print_decoded(tok, sh->ids + off, tg, len, color);
                        } else {
                            for (uint32_t t = 0; t < len; t++) printf("%s%u%s ", tg[t] ? "*" : "", sh->ids[off + t], "");
                            printf("\n(ids; * = target)\n");
                        }
                    }
                    free(tg);
                }
                off += sh->docs[d].len;
            }
        }
    }
    if (s == GLM_OK && shown == 0 && first > 0)
        s = glm_err(GLM_ERR_ARG, "no sample %llu: the shards hold %llu samples (0 to %llu)", (unsigned long long)first,
                    (unsigned long long)sample, (unsigned long long)(sample ? sample - 1 : 0));
    if (s == GLM_OK && !json) {
        printf("--- %zu shard(s): %llu rows of %u tokens, %llu samples ---\n", set.n, (unsigned long long)rows,
               set.n ? set.sh[0].seq_len : 0, (unsigned long long)docs);
        printf("tokens              %llu (%.1f%% of the rows)\n", (unsigned long long)tokens, cap ? 100.0 * tokens / cap : 0);
        printf("target tokens       %llu (%.1f%% of the rows)\n", (unsigned long long)targets, cap ? 100.0 * targets / cap : 0);
        if (docs)
            printf("sample length       min %llu, mean %.1f, max %llu\n", (unsigned long long)minlen,
                   (double)tokens / docs, (unsigned long long)maxlen);
    }
    for (size_t k = 0; k < set.n; k++) glm_shard_close(&set.sh[k]);
    free(set.sh);
    free(tok_path);
    glm_tokenizer_free(tok);
    return s == GLM_OK ? GLM_EXIT_OK : cli_fail(s);
}
