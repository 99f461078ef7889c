#define _GNU_SOURCE
/* lora/io/export.c: PEFT adapter export and merged-model export (see export.h). */
#include "lora/io/export.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/log.h"
#include "common/pyjson.h"
#include "kernels/backend.h"
#include "lora/model/family.h"
#include "lora/model/model.h"

glm_status glm_param_download(const struct glm_backend *be, const glm_param *p, float *dst) {
    size_t bytes = (size_t)p->numel * sizeof(float);
    GLM_ASSERT(p->w || !p->numel, "param %s has no weights", p->name);
    if (be) return glm_be_download(be, dst, p->w, bytes);
    memcpy(dst, p->w, bytes);
    return GLM_OK;
}

/* A value held as float32 somewhere (lora->alpha, lora->dropout) is written as its shortest
 * float32 decimal (0.1, not 0.10000000149011612); other doubles as they are. */
static double shortest(double x) {
    return isfinite(x) && (double)(float)x == x ? glm_f32_shortest((float)x) : x;
}

json_t *glm_adapter_config_json(const glm_adapter_cfg *c) {
    json_t *o = json_object();
    json_t *tm = json_array();
    if (!o || !tm) {
        json_decref(o);
        json_decref(tm);
        return NULL;
    }
    for (size_t i = 0; i < c->n_targets; i++) json_array_append_new(tm, json_string(c->target_modules[i]));
    json_object_set_new(o, "alpha_pattern", json_object());
    json_object_set_new(o, "base_model_name_or_path",
                        c->base_model_name_or_path ? json_string(c->base_model_name_or_path) : json_null());
    json_object_set_new(o, "bias", json_string("none"));
    json_object_set_new(o, "fan_in_fan_out", json_false());
    json_object_set_new(o, "inference_mode", json_true());
    json_object_set_new(o, "init_lora_weights", json_true());
    json_object_set_new(o, "layers_pattern", json_null());
    json_object_set_new(o, "layers_to_transform", json_null());
    /* lora_alpha: an integer when it is one (PEFT writes what the user gave, usually an int) */
    if (c->alpha == floor(c->alpha) && fabs(c->alpha) < 1e15)
        json_object_set_new(o, "lora_alpha", json_integer((json_int_t)c->alpha));
    else
        json_object_set_new(o, "lora_alpha", json_real(shortest(c->alpha)));
    json_object_set_new(o, "lora_dropout", json_real(shortest(c->dropout)));
    json_object_set_new(o, "modules_to_save", json_null());
    json_object_set_new(o, "peft_type", json_string("LORA"));
    json_object_set_new(o, "r", json_integer(c->r));
    json_object_set_new(o, "rank_pattern", json_object());
    json_object_set_new(o, "revision", json_null());
    json_object_set_new(o, "target_modules", tm);
    json_object_set_new(o, "task_type", json_string("CAUSAL_LM"));
    /* only when true: PEFT <= 0.7 rejects the key (LoraConfig.__init__() got an unexpected
     * keyword argument 'use_rslora'), and false is its default */
    if (c->use_rslora) json_object_set_new(o, "use_rslora", json_true());
    return o;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static glm_status write_json(const char *dir, const char *name, json_t *j) {
    char *path = glm_path_join(dir, name);
    glm_status st = path ? glm_json_write_file(path, j, 2) : glm_err(GLM_ERR_NOMEM, "out of memory writing %s", name);
    free(path);
    return st;
}

glm_status glm_adapter_write_files(const char *dir, const struct glm_backend *be,
                                   const glm_param *params, size_t n, const glm_adapter_cfg *c,
                                   glm_st_dtype dtype) {
    if (dtype != GLM_ST_F32 && dtype != GLM_ST_BF16 && dtype != GLM_ST_F16)
        return glm_err(GLM_ERR_ARG, "adapter dtype %s is not supported; hint: use f32, bf16 or f16",
                       glm_st_dtype_name(dtype));
    if (c->r < 1) return glm_err(GLM_ERR_ARG, "LoRA rank r must be >= 1 (got %d)", c->r);
    glm_st_tensor *t = calloc(n ? n : 1, sizeof(*t));
    char **names = calloc(n ? n : 1, sizeof(char *));
    void **bufs = calloc(n ? n : 1, sizeof(void *));
    float *tmp = NULL;
    glm_status st = (t && names && bufs) ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == GLM_OK && i < n; i++) {
        const glm_param *p = &params[i];
        if (!ends_with(p->name, ".lora_A.weight") && !ends_with(p->name, ".lora_B.weight")) {
            st = glm_err(GLM_ERR_ARG, "param '%s' is not a LoRA weight (.lora_A.weight / .lora_B.weight)",
                         p->name);
            break;
        }
        if (asprintf(&names[i], GLM_PEFT_PREFIX "%s", p->name) < 0) {
            names[i] = NULL;
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
            break;
        }
        size_t es = glm_st_dtype_size(dtype);
        bufs[i] = malloc(p->numel ? (size_t)p->numel * es : 1);
        float *t2 = realloc(tmp, (p->numel ? (size_t)p->numel : 1) * sizeof(float));
        if (!bufs[i] || !t2) {
            if (t2) tmp = t2;
            st = glm_err(GLM_ERR_NOMEM, "out of memory exporting %s", p->name);
            break;
        }
        tmp = t2;
        st = glm_param_download(be, p, tmp);
        for (int64_t k = 0; st == GLM_OK && k < p->numel; k++)
            if (!isfinite(tmp[k]))
                st = glm_err(GLM_ERR_NUMERIC, "%s: element %lld is %g; an adapter with non-finite weights is not written "
                             "to %s; hint: lower the learning rate (or --loraplus-lr-ratio), and resume from the last "
                             "good checkpoint-N", p->name, (long long)k, (double)tmp[k], dir);
        if (st == GLM_OK) st = glm_st_from_f32(dtype, tmp, (size_t)p->numel, bufs[i]);
        t[i].name = names[i];
        t[i].dtype = dtype;
        t[i].ndim = p->ndim;
        for (int d = 0; d < p->ndim && d < 2; d++) t[i].shape[d] = p->shape[d];
        t[i].numel = p->numel;
        t[i].data = bufs[i];
        t[i].nbytes = (size_t)p->numel * es;
    }
    if (st == GLM_OK) {
        char *path = glm_path_join(dir, "adapter_model.safetensors");
        const char *meta[] = {"format", "pt"};
        st = path ? glm_st_write(path, t, n, meta, 1) : glm_err(GLM_ERR_NOMEM, "out of memory");
        free(path);
    }
    if (st == GLM_OK) {
        json_t *cfg = glm_adapter_config_json(c);
        st = cfg ? write_json(dir, "adapter_config.json", cfg) : glm_err(GLM_ERR_NOMEM, "out of memory");
        json_decref(cfg);
    }
    for (size_t i = 0; i < n && names && bufs; i++) {
        free(names[i]);
        free(bufs[i]);
    }
    free(names);
    free(bufs);
    free(t);
    free(tmp);
    return st;
}

/* Creates a fresh "<outdir>.tmp.<pid>" (after cleaning what killed exports left beside outdir)
 * and returns its path. outdir is the real location (glm_output_target_dir). */
static glm_status make_tmpdir(const char *outdir, char **tmp) {
    glm_cleanup_leftovers(outdir);
    if (asprintf(tmp, "%s.tmp.%d", outdir, (int)getpid()) < 0) return glm_err(GLM_ERR_NOMEM, "out of memory");
    if (glm_is_dir(*tmp)) glm_rmtree(*tmp);
    glm_status st = glm_mkdir_aside(*tmp, outdir);
    if (st != GLM_OK) {
        free(*tmp);
        *tmp = NULL;
    }
    return st;
}

glm_status glm_export_dir(const char *outdir_in, glm_status (*fill)(const char *tmpdir, void *arg), void *arg) {
    char *tmp = NULL, *outdir = NULL;
    GLM_TRY(glm_output_target_dir(outdir_in, &outdir)); /* a symbolic link: its target is replaced */
    glm_status st = make_tmpdir(outdir, &tmp);
    if (st == GLM_OK) st = fill(tmp, arg);
    if (st == GLM_OK) st = glm_commit_dir(tmp, outdir);
    if (st != GLM_OK && tmp) glm_rmtree(tmp);
    free(tmp);
    free(outdir);
    return st;
}

typedef struct {
    const struct glm_backend *be;
    const glm_param *params;
    size_t n;
    const glm_adapter_cfg *c;
    glm_st_dtype dtype;
} adapter_job;

static glm_status fill_adapter(const char *tmp, void *arg) {
    const adapter_job *j = arg;
    return glm_adapter_write_files(tmp, j->be, j->params, j->n, j->c, j->dtype);
}

glm_status glm_export_adapter(const char *outdir, const struct glm_backend *be,
                              const glm_param *params, size_t n, const glm_adapter_cfg *c,
                              glm_st_dtype dtype) {
    adapter_job j = {be, params, n, c, dtype};
    return glm_export_dir(outdir, fill_adapter, &j);
}

/* ------------------------------------------------------------------ merge */

static glm_status copy_file(const char *src, const char *dst) {
    char *data = NULL;
    size_t len = 0;
    GLM_TRY(glm_read_file(src, &data, &len));
    glm_status st = glm_write_file_atomic(dst, data, len);
    free(data);
    return st;
}

static const char *const k_copy_files[] = {
    "config.json", "generation_config.json", "tokenizer.model", "tokenizer_config.json",
    "tokenizer.json", "special_tokens_map.json", "added_tokens.json",
};

static glm_status copy_side_files(const char *base_dir, const char *out) {
    DIR *d = opendir(base_dir);
    if (!d) return glm_err(GLM_ERR_IO, "%s: cannot list the base checkpoint directory", base_dir);
    glm_status st = GLM_OK;
    struct dirent *de;
    while (st == GLM_OK && (de = readdir(d))) {
        bool want = ends_with(de->d_name, ".py") || ends_with(de->d_name, ".tiktoken");
        for (size_t i = 0; !want && i < sizeof k_copy_files / sizeof *k_copy_files; i++)
            want = strcmp(de->d_name, k_copy_files[i]) == 0;
        if (!want || de->d_name[0] == '.') continue;
        char *src = glm_path_join(base_dir, de->d_name), *dst = glm_path_join(out, de->d_name);
        if (src && dst && glm_is_file(src)) st = copy_file(src, dst);
        free(src);
        free(dst);
    }
    closedir(d);
    return st;
}

/* Index of param named "<module>.<suffix>" or -1. */
static long find_param(const glm_param *params, size_t n, const char *module, size_t mlen,
                       const char *suffix) {
    for (size_t i = 0; i < n; i++)
        if (strncmp(params[i].name, module, mlen) == 0 && strcmp(params[i].name + mlen, suffix) == 0)
            return (long)i;
    return -1;
}

/* W' = W + s * B @ A into `out` (float32, out x in). Errors: GLM_ERR_NOMEM. */
static glm_status merge_into(float *w, const float *A, const float *B, int64_t out, int64_t in, int64_t r,
                             double s) {
    double *row = malloc((size_t)(in ? in : 1) * sizeof(double));
    if (!row) return glm_err(GLM_ERR_NOMEM, "out of memory merging a LoRA module");
    for (int64_t o = 0; o < out; o++) {
        for (int64_t i = 0; i < in; i++) row[i] = 0;
        for (int64_t k = 0; k < r; k++) {
            double b = B[o * r + k];
            const float *a = A + k * in;
            for (int64_t i = 0; i < in; i++) row[i] += b * a[i];
        }
        float *wr = w + o * in;
        for (int64_t i = 0; i < in; i++) wr[i] = (float)((double)wr[i] + s * row[i]);
    }
    free(row);
    return GLM_OK;
}

/* A tensor that is not adapted: copied as it is, or converted when a dtype is asked for and
 * it is a floating-point tensor of another dtype (fills *buf, malloc'd). */
static glm_status convert_tensor(const glm_st_tensor *t, int dtype, glm_st_tensor *outt, void **buf) {
    bool is_float = t->dtype == GLM_ST_F32 || t->dtype == GLM_ST_F16 || t->dtype == GLM_ST_BF16 || t->dtype == GLM_ST_F64;
    if (dtype == GLM_EXPORT_SAME_DTYPE || !is_float || t->dtype == (glm_st_dtype)dtype) return GLM_OK;
    glm_st_dtype dt = (glm_st_dtype)dtype;
    float *w = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    *buf = malloc((size_t)(t->numel ? t->numel : 1) * glm_st_dtype_size(dt));
    glm_status st = (w && *buf) ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory converting %s", t->name);
    if (st == GLM_OK) st = glm_st_to_f32(t->dtype, t->data, (size_t)t->numel, w);
    if (st == GLM_OK) st = glm_st_from_f32(dt, w, (size_t)t->numel, *buf);
    free(w);
    if (st != GLM_OK) {
        free(*buf);
        *buf = NULL;
        return st;
    }
    outt->dtype = dt;
    outt->data = *buf;
    outt->nbytes = (size_t)t->numel * glm_st_dtype_size(dt);
    return GLM_OK;
}

/* The LoRA params of base tensor t ("<module>.weight"): *ia, *ib (-1: none); returns the length
 * of "<module>". */
static size_t lora_pair(const glm_st_tensor *t, const glm_param *params, size_t n, long *ia, long *ib) {
    size_t len = strlen(t->name), mlen = len > 7 ? len - 7 : 0;
    *ia = *ib = -1;
    if (len >= 8 && strcmp(t->name + len - 7, ".weight") == 0) {
        *ia = find_param(params, n, t->name, mlen, ".lora_A.weight");
        *ib = find_param(params, n, t->name, mlen, ".lora_B.weight");
    }
    return mlen;
}

glm_status glm_export_merged_f32(const glm_st_tensor *t, const struct glm_backend *be, const glm_param *params,
                                 size_t n, double scaling, bool *used, float *out) {
    long ia, ib;
    size_t mlen = lora_pair(t, params, n, &ia, &ib);
    if ((ia >= 0) != (ib >= 0))
        return glm_err(GLM_ERR_MISMATCH, "module %.*s has only one of lora_A / lora_B", (int)mlen, t->name);
    const glm_param *A = ia >= 0 ? &params[ia] : NULL, *B = ib >= 0 ? &params[ib] : NULL;
    int64_t r = A ? A->shape[0] : 0;
    if (A && (t->ndim != 2 || B->shape[1] != r || B->shape[0] != t->shape[0] || A->shape[1] != t->shape[1]))
        return glm_err(GLM_ERR_MISMATCH,
                       "%s: module %.*s: base weight [%lld, %lld] does not fit lora_B [%lld, %lld] "
                       "@ lora_A [%lld, %lld]",
                       t->file, (int)mlen, t->name, (long long)t->shape[0],
                       (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)B->shape[0],
                       (long long)B->shape[1], (long long)A->shape[0], (long long)A->shape[1]);
    GLM_TRY(glm_st_to_f32(t->dtype, t->data, (size_t)t->numel, out));
    if (!A) return GLM_OK;
    float *a = malloc((size_t)A->numel * sizeof(float)), *b = malloc((size_t)B->numel * sizeof(float));
    glm_status st = (a && b) ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory merging %s", t->name);
    if (st == GLM_OK) st = glm_param_download(be, A, a);
    if (st == GLM_OK) st = glm_param_download(be, B, b);
    if (st == GLM_OK) st = merge_into(out, a, b, t->shape[0], t->shape[1], r, scaling);
    if (st == GLM_OK && used) used[ia] = used[ib] = true;
    free(a);
    free(b);
    return st;
}

/* Builds the merged version of base tensor t (an adapted "<module>.weight"): fills *buf
 * (malloc'd, dtype dt) or leaves it NULL when t is not adapted. */
static glm_status merge_tensor(const glm_st_tensor *t, const struct glm_backend *be,
                               const glm_param *params, size_t n, double scaling, int dtype,
                               bool *used, glm_st_tensor *outt, void **buf) {
    *buf = NULL;
    *outt = *t;
    long ia, ib;
    lora_pair(t, params, n, &ia, &ib);
    if (ia < 0 && ib < 0) return convert_tensor(t, dtype, outt, buf); /* not adapted: a copy (or a conversion) */
    glm_st_dtype dt = dtype == GLM_EXPORT_SAME_DTYPE ? t->dtype : (glm_st_dtype)dtype;
    float *w = malloc((size_t)t->numel * sizeof(float));
    glm_status st = w ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory merging %s", t->name);
    if (st == GLM_OK) st = glm_export_merged_f32(t, be, params, n, scaling, used, w);
    if (st == GLM_OK) *buf = malloc((size_t)t->numel * glm_st_dtype_size(dt));
    if (st == GLM_OK && !*buf) st = glm_err(GLM_ERR_NOMEM, "out of memory merging %s", t->name);
    if (st == GLM_OK) st = glm_st_from_f32(dt, w, (size_t)t->numel, *buf);
    if (st == GLM_OK) {
        outt->dtype = dt;
        outt->data = *buf;
        outt->nbytes = (size_t)t->numel * glm_st_dtype_size(dt);
    } else {
        free(*buf);
        *buf = NULL;
    }
    free(w);
    return st;
}

static glm_status write_merged(const char *base_dir, const char *tmp, const glm_st_set *s,
                               const struct glm_backend *be, const glm_param *params, size_t n,
                               double scaling, int dtype) {
    size_t nt = glm_st_count(s);
    bool *used = calloc(n ? n : 1, sizeof(bool));
    glm_st_tensor *outt = calloc(nt ? nt : 1, sizeof(*outt));
    void **bufs = calloc(nt ? nt : 1, sizeof(void *));
    json_t *wm = json_object();
    glm_status st = (used && outt && bufs && wm) ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    const char *fmt = glm_st_metadata(s, "format");
    const char *meta[] = {"format", fmt ? fmt : "pt"};
    uint64_t total = 0;
    size_t nfiles = 0;
    /* tensors are grouped by file in the set (files are parsed one after the other) */
    for (size_t i = 0; st == GLM_OK && i < nt;) {
        const char *file = glm_st_at(s, i)->file;
        size_t j = i;
        while (j < nt && glm_st_at(s, j)->file == file) j++;
        for (size_t k = i; st == GLM_OK && k < j; k++) {
            st = merge_tensor(glm_st_at(s, k), be, params, n, scaling, dtype, used, &outt[k], &bufs[k]);
            total += outt[k].nbytes;
        }
        const char *base = strrchr(file, '/');
        base = base ? base + 1 : file;
        for (size_t k = i; st == GLM_OK && k < j; k++) json_object_set_new(wm, outt[k].name, json_string(base));
        if (st == GLM_OK) {
            char *dst = glm_path_join(tmp, base);
            st = dst ? glm_st_write(dst, outt + i, j - i, meta, 1) : glm_err(GLM_ERR_NOMEM, "out of memory");
            free(dst);
        }
        for (size_t k = i; k < j; k++) {
            free(bufs[k]);
            bufs[k] = NULL;
        }
        nfiles++;
        i = j;
    }
    for (size_t i = 0; st == GLM_OK && i < n; i++)
        if (!used[i])
            st = glm_err(GLM_ERR_MISMATCH,
                         "LoRA weight %s has no base tensor to merge into in %s; hint: was the "
                         "adapter trained on the other checkpoint layout (chatglm vs hf)?",
                         params[i].name, base_dir);
    /* an index whenever the base had one */
    char *idx_in = glm_path_join(base_dir, "model.safetensors.index.json");
    if (st == GLM_OK && idx_in && glm_is_file(idx_in)) {
        json_t *idx = json_object(), *md = json_object();
        json_object_set_new(md, "total_size", json_integer((json_int_t)total));
        json_object_set_new(idx, "metadata", md);
        json_object_set(idx, "weight_map", wm);
        st = write_json(tmp, "model.safetensors.index.json", idx);
        json_decref(idx);
    }
    free(idx_in);
    json_decref(wm);
    free(bufs);
    free(outt);
    free(used);
    return st;
}

/* The copied config.json names the merged model's dtype ("torch_dtype", and "dtype" where the
 * config has it, as transformers 5 writes): float32, bfloat16 or float16. */
static glm_status set_config_dtype(const char *dir, glm_st_dtype dt) {
    char *p = glm_path_join(dir, "config.json");
    json_error_t je;
    json_t *cfg = glm_is_file(p) ? json_load_file(p, JSON_PRESERVE_ORDER, &je) : NULL;
    glm_status st = GLM_OK;
    if (cfg) {
        const char *name = dt == GLM_ST_F32 ? "float32" : dt == GLM_ST_F16 ? "float16" : "bfloat16";
        json_object_set_new(cfg, "torch_dtype", json_string(name));
        if (json_object_get(cfg, "dtype")) json_object_set_new(cfg, "dtype", json_string(name));
        st = write_json(dir, "config.json", cfg);
        json_decref(cfg);
    }
    free(p);
    return st;
}

/* The merged model's config.json (copied from the base) with a pad_token_id inside the vocabulary,
 * in the hf layout: transformers' GlmModel builds the embedding with padding_idx = pad_token_id,
 * which must be < vocab_size, and GlmConfig's default when the key is absent is 151329, outside
 * any vocabulary smaller than GLM-4's. Such a pad_token_id (or an absent one whose default is
 * outside) becomes the first eos_token_id inside the vocabulary, else null; anything else, and
 * THUDM configs (their remote code builds the embedding without padding_idx), stay as they are. */
static glm_status fix_config_pad(const char *dir) {
    char *p = glm_path_join(dir, "config.json");
    json_error_t je;
    json_t *cfg = p && glm_is_file(p) ? json_load_file(p, JSON_PRESERVE_ORDER, &je) : NULL;
    glm_status st = GLM_OK;
    const glm_family *fam = NULL;
    if (json_is_object(cfg) && glm_family_for_config(cfg, p, &fam) != GLM_OK) {
        glm_err_clear(); /* a base the merge took is one glmtune trained on; any other is left as it is */
        fam = NULL;
    }
    if (fam && fam->embedding_padding_idx) { /* GlmForCausalLM: nn.Embedding(vocab_size, C, padding_idx=pad_token_id) */
        json_int_t V = json_integer_value(json_object_get(cfg, fam->keys[GLM_FK_VOCAB]));
        json_t *pad = json_object_get(cfg, "pad_token_id");
        bool bad = V > 0 &&
                   ((json_is_integer(pad) && (json_integer_value(pad) < 0 || json_integer_value(pad) >= V)) ||
                    (!pad && fam->pad_token_id >= V));
        if (bad) {
            json_t *eos = json_object_get(cfg, "eos_token_id"), *fix = json_null();
            for (size_t i = 0; i < (json_is_array(eos) ? json_array_size(eos) : 1); i++) {
                json_t *e = json_is_array(eos) ? json_array_get(eos, i) : eos;
                if (json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) < V) {
                    json_decref(fix);
                    fix = json_integer(json_integer_value(e));
                    break;
                }
            }
            char was[64];
            snprintf(was, sizeof was, "absent (%s's default %lld)", fam->config_class, (long long)fam->pad_token_id);
            if (pad) snprintf(was, sizeof was, "%lld", (long long)json_integer_value(pad));
            char now[32] = "null";
            if (!json_is_null(fix)) snprintf(now, sizeof now, "%lld", (long long)json_integer_value(fix));
            glm_log_info("merged config.json: pad_token_id %s is outside the vocabulary of %lld; written as %s so that "
                         "transformers can build the embedding (padding_idx)", was, (long long)V, now);
            json_object_set_new(cfg, "pad_token_id", fix);
            st = write_json(dir, "config.json", cfg);
        }
    }
    json_decref(cfg);
    free(p);
    return st;
}

/* The merged model's config.json (copied from the base) gets the family row's key aliases it
 * lacks (family.h glm_family_alias: vocab_size in the chatglm layout; rope_ratio, layernorm_epsilon,
 * seq_length in the hf one), from the keys it has (the RoPE base from the row's rope object first),
 * so that llama.cpp's converter, which reads those names, finds them; the rest stays as it is. */
static glm_status add_config_aliases(const char *dir) {
    char *p = glm_path_join(dir, "config.json");
    json_error_t je;
    json_t *cfg = p && glm_is_file(p) ? json_load_file(p, JSON_PRESERVE_ORDER, &je) : NULL;
    const glm_family *fam = NULL;
    if (json_is_object(cfg) && glm_family_for_config(cfg, p, &fam) != GLM_OK) {
        glm_err_clear();
        fam = NULL;
    }
    bool changed = false;
    for (size_t i = 0; fam && i < fam->n_aliases; i++) {
        const glm_family_alias *a = &fam->aliases[i];
        const char *src = fam->keys[a->key];
        json_t *ro = fam->rope_object ? json_object_get(cfg, fam->rope_object) : NULL;
        json_t *v = a->key == GLM_FK_ROPE && json_is_object(ro) && json_is_number(json_object_get(ro, src))
                        ? json_object_get(ro, src)
                        : json_object_get(cfg, src);
        if (json_object_get(cfg, a->name) || !json_is_number(v)) continue;
        json_object_set_new(cfg, a->name, a->key == GLM_FK_ROPE
                                              ? json_real(json_number_value(v) * fam->rope_scale / a->rope_scale)
                                              : json_deep_copy(v));
        changed = true;
    }
    glm_status st = changed ? write_json(dir, "config.json", cfg) : GLM_OK;
    json_decref(cfg);
    free(p);
    return st;
}

glm_status glm_export_merged(const char *base_dir, const char *outdir_in,
                             const struct glm_backend *be, const glm_param *params, size_t n,
                             double scaling, int dtype) {
    if (dtype != GLM_EXPORT_SAME_DTYPE && dtype != GLM_ST_F32 && dtype != GLM_ST_BF16 &&
        dtype != GLM_ST_F16)
        return glm_err(GLM_ERR_ARG, "merge dtype %s is not supported; hint: use f32, bf16 or f16",
                       glm_st_dtype_name((glm_st_dtype)dtype));
    if (!glm_is_dir(base_dir))
        return glm_err(GLM_ERR_IO, "%s: the base checkpoint must be a directory", base_dir);
    glm_st_set *s = NULL;
    char *outdir = NULL;
    GLM_TRY(glm_output_target_dir(outdir_in, &outdir)); /* a symbolic link: its target is replaced */
    glm_status st0 = glm_st_open(base_dir, &s);
    if (st0 != GLM_OK) {
        free(outdir);
        return st0;
    }
    /* the base the model loader takes: a tensor it refuses would be copied into the merged model unmerged */
    glm_config cfg;
    glm_status st = glm_config_load(base_dir, 0, &cfg);
    if (st == GLM_OK) st = glm_model_check_tensors(&cfg, s);
    if (st != GLM_OK) {
        free(outdir);
        glm_st_close(s);
        return glm_err_context(st, "merging into the base model %s", base_dir);
    }
    char *tmp = NULL;
    st = make_tmpdir(outdir, &tmp);
    if (st == GLM_OK) st = write_merged(base_dir, tmp, s, be, params, n, scaling, dtype);
    if (st == GLM_OK) st = copy_side_files(base_dir, tmp);
    if (st == GLM_OK && dtype != GLM_EXPORT_SAME_DTYPE) st = set_config_dtype(tmp, (glm_st_dtype)dtype);
    if (st == GLM_OK) st = fix_config_pad(tmp);
    if (st == GLM_OK) st = add_config_aliases(tmp);
    if (st == GLM_OK) st = glm_commit_dir(tmp, outdir);
    if (st != GLM_OK && tmp) glm_rmtree(tmp);
    if (st == GLM_OK) glm_log_info("merged %zu LoRA modules into %s", n / 2, outdir);
    free(tmp);
    free(outdir);
    glm_st_close(s);
    return st;
}
