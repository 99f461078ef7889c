/* lora/io/gguf_export.c: the adapter and merged-model GGUF files and the Ollama Modelfile (see
 * gguf_export.h). */
#define _GNU_SOURCE
#include "lora/io/gguf_export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/log.h"
#include "common/safetensors.h"
#include "lora/model/config.h"
#include "lora/model/family.h"

#define GGML_QUANT_VERSION 2 /* ggml.h GGML_QNT_VERSION, general.quantization_version */

static const char k_lora_a[] = ".lora_A.weight", k_lora_b[] = ".lora_B.weight";

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Where param `name` sits in row f: its linear (index into f->linears), layer and A/B. */
static bool param_place(const glm_family *f, const char *name, int *lin, int *layer, bool *is_b) {
    size_t pl = strlen(f->layer_prefix), len = strlen(name);
    *is_b = ends_with(name, k_lora_b);
    if (!*is_b && !ends_with(name, k_lora_a)) return false;
    if (strncmp(name, f->layer_prefix, pl) || name[pl] != '.') return false;
    char *end;
    long l = strtol(name + pl + 1, &end, 10);
    if (end == name + pl + 1 || *end != '.' || l < 0 || l > 1000000) return false;
    size_t mlen = len - strlen(k_lora_a); /* both suffixes have the same length */
    char path[512];
    for (int k = 0; k < f->n_linears; k++)
        if (glm_family_module_path(f, f->linears[k], (int)l, path, sizeof path) && strlen(path) == mlen &&
            !strncmp(path, name, mlen)) {
            *lin = k;
            *layer = (int)l;
            return true;
        }
    return false;
}

glm_status glm_gguf_adapter_family(const glm_param *params, size_t n, const glm_family **out) {
    *out = NULL;
    if (!n) return glm_err(GLM_ERR_ARG, "the adapter has no LoRA weights");
    const char *unplaced = NULL;
    for (int r = 0; r < glm_family_count() && !*out; r++) {
        const glm_family *f = glm_family_at(r);
        size_t i = 0;
        int lin, layer;
        bool b;
        while (i < n && param_place(f, params[i].name, &lin, &layer, &b)) i++;
        if (i == n) *out = f;
        else if (!unplaced) unplaced = params[i].name;
    }
    if (*out) return GLM_OK;
    return glm_err(GLM_ERR_MISMATCH, "LoRA weight %s is not on a linear module of a layer of any model layout glmtune "
                   "knows, so it has no llama.cpp name", unplaced);
}

/* ------------------------------------------------------------------ adapter */

typedef struct {
    int layer, lin;
    long a, b; /* param indices */
} lora_module;

static int cmp_module(const void *x, const void *y) {
    const lora_module *p = x, *q = y;
    if (p->layer != q->layer) return p->layer < q->layer ? -1 : 1;
    return (p->lin > q->lin) - (p->lin < q->lin);
}

/* The adapted modules of params in (layer, linear) order, each with both of its params. */
static glm_status adapter_modules(const glm_family *f, const glm_param *params, size_t n, lora_module **out,
                                  size_t *n_out) {
    lora_module *m = calloc(n ? n : 1, sizeof *m);
    size_t k = 0;
    if (!m) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status st = GLM_OK;
    for (size_t i = 0; st == GLM_OK && i < n; i++) {
        int lin, layer;
        bool is_b;
        param_place(f, params[i].name, &lin, &layer, &is_b); /* placed: glm_gguf_adapter_family */
        size_t j = 0;
        while (j < k && (m[j].layer != layer || m[j].lin != lin)) j++;
        if (j == k) m[k++] = (lora_module){layer, lin, -1, -1};
        long *slot = is_b ? &m[j].b : &m[j].a;
        if (*slot >= 0) st = glm_err(GLM_ERR_MISMATCH, "LoRA weight %s appears twice", params[i].name);
        *slot = (long)i;
    }
    for (size_t j = 0; st == GLM_OK && j < k; j++) {
        const glm_param *pa = m[j].a >= 0 ? &params[m[j].a] : NULL, *pb = m[j].b >= 0 ? &params[m[j].b] : NULL;
        if (!pa || !pb)
            st = glm_err(GLM_ERR_MISMATCH, "LoRA weight %s has no %s", (pa ? pa : pb)->name, pa ? "lora_B" : "lora_A");
        else if (pa->ndim != 2 || pb->ndim != 2 || pa->shape[0] != pb->shape[1])
            st = glm_err(GLM_ERR_MISMATCH, "%s [%lld, %lld] and %s [%lld, %lld] are not A [r, in] and B [out, r]",
                         pa->name, (long long)pa->shape[0], (long long)pa->shape[1], pb->name,
                         (long long)pb->shape[0], (long long)pb->shape[1]);
    }
    if (st != GLM_OK) {
        free(m);
        return st;
    }
    qsort(m, k, sizeof *m, cmp_module);
    *out = m;
    *n_out = k;
    return GLM_OK;
}

/* Encodes float32 values as `type` into a malloc'd buffer (*buf, *nbytes). */
static glm_status encode(glm_ggml_type type, const float *x, int64_t ne0, int64_t rows, void **buf, uint64_t *nbytes) {
    *nbytes = glm_ggml_nbytes(type, ne0, rows);
    *buf = malloc(*nbytes ? (size_t)*nbytes : 1);
    if (!*buf) return glm_err(GLM_ERR_NOMEM, "out of memory encoding a tensor");
    glm_status st = glm_ggml_encode(type, x, ne0 * rows, *buf);
    if (st != GLM_OK) {
        free(*buf);
        *buf = NULL;
    }
    return st;
}

static glm_status general_keys(glm_gguf *g, const glm_family *f, const char *type, glm_ggml_type ft) {
    GLM_TRY(glm_gguf_kv_str(g, "general.architecture", f->gguf_arch));
    GLM_TRY(glm_gguf_kv_str(g, "general.type", type));
    GLM_TRY(glm_gguf_kv_u32(g, "general.file_type", glm_gguf_file_type(ft)));
    return glm_gguf_kv_u32(g, "general.quantization_version", GGML_QUANT_VERSION);
}

glm_status glm_gguf_write_adapter(const char *path, const struct glm_backend *be, const glm_param *params, size_t n,
                                  const glm_adapter_cfg *c, glm_ggml_type type) {
    if (type != GLM_GGML_F32 && type != GLM_GGML_F16 && type != GLM_GGML_BF16)
        return glm_err(GLM_ERR_ARG, "a GGUF adapter is written as f32, f16 or bf16, not %s", glm_ggml_type_name(type));
    if (c->r < 1) return glm_err(GLM_ERR_ARG, "LoRA rank r must be >= 1 (got %d)", c->r);
    const glm_family *f;
    GLM_TRY(glm_gguf_adapter_family(params, n, &f));
    lora_module *m = NULL;
    size_t nm = 0;
    GLM_TRY(adapter_modules(f, params, n, &m, &nm));
    glm_gguf *g = NULL;
    glm_status st = glm_gguf_new(&g);
    /* llama.cpp: scale = alpha / r (src/llama-adapter.cpp); PEFT: alpha / r, or alpha / sqrt(r) */
    double alpha = c->use_rslora ? c->alpha * sqrt((double)c->r) : c->alpha;
    if (st == GLM_OK) st = general_keys(g, f, "adapter", type);
    if (st == GLM_OK) st = glm_gguf_kv_str(g, "adapter.type", "lora");
    if (st == GLM_OK) st = glm_gguf_kv_f32(g, "adapter.lora.alpha", (float)alpha);
    char name[160], base[128];
    for (size_t j = 0; st == GLM_OK && j < nm; j++)
        for (int ab = 0; st == GLM_OK && ab < 2; ab++) {
            const glm_param *p = &params[ab ? m[j].b : m[j].a];
            glm_family_gguf_name(f, f->linears[m[j].lin], m[j].layer, false, base, sizeof base);
            snprintf(name, sizeof name, "%s.%s", base, ab ? "lora_b" : "lora_a");
            st = glm_gguf_add_tensor(g, name, type, 2, p->shape);
        }
    if (st == GLM_OK) st = glm_gguf_begin(g, path);
    float *x = NULL;
    for (size_t j = 0; st == GLM_OK && j < nm; j++)
        for (int ab = 0; st == GLM_OK && ab < 2; ab++) {
            const glm_param *p = &params[ab ? m[j].b : m[j].a];
            float *x2 = realloc(x, (size_t)p->numel * sizeof *x);
            if (!x2) {
                st = glm_err(GLM_ERR_NOMEM, "out of memory exporting %s", p->name);
                break;
            }
            x = x2;
            st = glm_param_download(be, p, x);
            for (int64_t k = 0; st == GLM_OK && k < p->numel; k++)
                if (!isfinite(x[k]))
                    st = glm_err(GLM_ERR_NUMERIC, "%s: element %lld is %g; an adapter with non-finite weights is not "
                                 "written; hint: resume from the last good checkpoint-N with a lower learning rate",
                                 p->name, (long long)k, (double)x[k]);
            void *buf = NULL;
            uint64_t nb = 0;
            if (st == GLM_OK) st = encode(type, x, p->shape[1], p->shape[0], &buf, &nb);
            if (st == GLM_OK) st = glm_gguf_write_tensor(g, buf, nb);
            free(buf);
        }
    if (st == GLM_OK) st = glm_gguf_commit(g);
    free(x);
    free(m);
    glm_gguf_free(g);
    return st;
}

/* ------------------------------------------------------------------ merged model */

/* One tensor of the model file: its base tensor and GGUF name and type. */
typedef struct {
    const glm_st_tensor *t;
    char name[96];
    glm_ggml_type type;
} model_tensor;

static glm_status type_of(const glm_st_tensor *t, int want, glm_ggml_type *out) {
    if (t->ndim == 1) { /* norms and biases: F32 (llama.cpp's converter keeps 1-D tensors F32) */
        *out = GLM_GGML_F32;
        return GLM_OK;
    }
    if (want != GLM_GGUF_SAME_TYPE) {
        *out = (glm_ggml_type)want;
        if (want == GLM_GGML_Q8_0 && t->shape[t->ndim - 1] % GLM_GGUF_Q8_0_BLOCK) {
            glm_log_info("%s: rows of %lld values are not whole q8_0 blocks of %d: written f16", t->name,
                         (long long)t->shape[t->ndim - 1], GLM_GGUF_Q8_0_BLOCK);
            *out = GLM_GGML_F16;
        }
        return GLM_OK;
    }
    switch (t->dtype) {
    case GLM_ST_F32: *out = GLM_GGML_F32; return GLM_OK;
    case GLM_ST_F16: *out = GLM_GGML_F16; return GLM_OK;
    case GLM_ST_BF16: *out = GLM_GGML_BF16; return GLM_OK;
    default:
        return glm_err(GLM_ERR_UNSUPPORTED, "%s: tensor %s is %s; a GGUF model is written from F32, F16 or BF16 "
                       "weights", t->file, t->name, glm_st_dtype_name(t->dtype));
    }
}

/* The model file's tensors: token_embd, output_norm, output, then per layer the row's tensors,
 * each followed by its bias when the base has one; every one must be in the base, the embedding
 * and the output layer [V, C] as config.json says. consumed[i]: base tensor i was taken. */
static glm_status model_tensors(const glm_family *f, const glm_config *cfg, const glm_st_set *s, int want,
                                model_tensor **out, size_t *n_out, bool *consumed) {
    size_t cap = 3 + (size_t)cfg->L * GLM_FT_COUNT * 2, n = 0;
    model_tensor *mt = calloc(cap, sizeof *mt);
    if (!mt) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status st = GLM_OK;
    char name[256];
    for (int l = 0; st == GLM_OK && l < (cfg->L > 0 ? cfg->L : 1); l++)
        for (int t = 0; st == GLM_OK && t < GLM_FT_COUNT; t++) {
            bool layer_t = t >= GLM_FT_ATTN_NORM;
            if ((l > 0 && !layer_t) || !f->tensors[t].name) continue;
            for (int bias = 0; st == GLM_OK && bias < 2; bias++) {
                glm_family_tensor_name(f, (glm_family_tensor)t, l, bias, name, sizeof name);
                const glm_st_tensor *bt = glm_st_find(s, name);
                if (!bt && bias) continue; /* a bias is there when the checkpoint has it */
                if (!bt) {
                    st = glm_err(GLM_ERR_FORMAT, "the base checkpoint has no tensor %s", name);
                    break;
                }
                if (bt->ndim != (bias || t == GLM_FT_FINAL_NORM || t == GLM_FT_ATTN_NORM || t == GLM_FT_FFN_NORM ? 1 : 2)) {
                    st = glm_err(GLM_ERR_FORMAT, "%s: tensor %s has %d dimensions", bt->file, name, bt->ndim);
                    break;
                }
                if ((t == GLM_FT_EMBED || t == GLM_FT_OUTPUT) && (bt->shape[0] != cfg->V || bt->shape[1] != cfg->C)) {
                    st = glm_err(GLM_ERR_FORMAT, "%s: tensor %s is [%lld, %lld]; config.json says [V, C] = [%d, %d]",
                                 bt->file, name, (long long)bt->shape[0], (long long)bt->shape[1], cfg->V, cfg->C);
                    break;
                }
                consumed[bt - glm_st_at(s, 0)] = true;
                model_tensor *m = &mt[n++];
                m->t = bt;
                glm_family_gguf_name(f, (glm_family_tensor)t, l, bias, m->name, sizeof m->name);
                st = type_of(bt, want, &m->type);
            }
        }
    if (st != GLM_OK) {
        free(mt);
        return st;
    }
    *out = mt;
    *n_out = n;
    return GLM_OK;
}

static glm_status model_keys(glm_gguf *g, const glm_family *f, const glm_config *cfg, const char *base_dir) {
    char key[128];
#define ARCH_KEY(k) (snprintf(key, sizeof key, "%s." k, f->gguf_arch), key)
    char dir[4096]; /* general.name: the base directory's name */
    snprintf(dir, sizeof dir, "%s", base_dir);
    glm_path_strip_slash(dir);
    const char *slash = strrchr(dir, '/'), *name = slash && slash[1] ? slash + 1 : dir;
    GLM_TRY(glm_gguf_kv_str(g, "general.name", name));
    int64_t ctx = cfg->max_positions > 0 ? cfg->max_positions : f->written_max_positions;
    GLM_TRY(glm_gguf_kv_u32(g, ARCH_KEY("context_length"), (uint32_t)ctx));
    GLM_TRY(glm_gguf_kv_u32(g, ARCH_KEY("embedding_length"), (uint32_t)cfg->C));
    GLM_TRY(glm_gguf_kv_u32(g, ARCH_KEY("feed_forward_length"), (uint32_t)cfg->F));
    GLM_TRY(glm_gguf_kv_u32(g, ARCH_KEY("block_count"), (uint32_t)cfg->L));
    GLM_TRY(glm_gguf_kv_u32(g, ARCH_KEY("attention.head_count"), (uint32_t)cfg->H));
    GLM_TRY(glm_gguf_kv_u32(g, ARCH_KEY("attention.head_count_kv"), (uint32_t)cfg->Hkv));
    if (cfg->Dh * cfg->H != cfg->C) { /* llama.cpp's default head size is C / H */
        GLM_TRY(glm_gguf_kv_u32(g, ARCH_KEY("attention.key_length"), (uint32_t)cfg->Dh));
        GLM_TRY(glm_gguf_kv_u32(g, ARCH_KEY("attention.value_length"), (uint32_t)cfg->Dh));
    }
    GLM_TRY(glm_gguf_kv_f32(g, ARCH_KEY("attention.layer_norm_rms_epsilon"), cfg->eps));
    GLM_TRY(glm_gguf_kv_u32(g, ARCH_KEY("rope.dimension_count"), (uint32_t)cfg->rope_dim));
    GLM_TRY(glm_gguf_kv_f32(g, ARCH_KEY("rope.freq_base"), (float)cfg->rope_base));
#undef ARCH_KEY
    return GLM_OK;
}

glm_status glm_gguf_write_merged(const char *path, const char *base_dir, const struct glm_backend *be,
                                 const glm_param *params, size_t n, double scaling, int type,
                                 const glm_gguf_vocab *vocab) {
    if (type != GLM_GGUF_SAME_TYPE && type != GLM_GGML_F32 && type != GLM_GGML_F16 && type != GLM_GGML_BF16 &&
        type != GLM_GGML_Q8_0)
        return glm_err(GLM_ERR_ARG, "a GGUF model is written as f32, f16, bf16 or q8_0");
    glm_config cfg;
    GLM_TRY(glm_config_load(base_dir, 0, &cfg));
    const glm_family *f = glm_family_get(cfg.layout);
    if (vocab->vocab_size != cfg.V)
        return glm_err(GLM_ERR_MISMATCH, "the tokenizer is laid out for a vocabulary of %lld, %s's config.json has %d",
                       (long long)vocab->vocab_size, base_dir, cfg.V);
    glm_st_set *s = NULL;
    GLM_TRY(glm_st_open(base_dir, &s));
    size_t ns = glm_st_count(s), nt = 0;
    bool *consumed = calloc(ns ? ns : 1, sizeof *consumed), *used = calloc(n ? n : 1, sizeof *used);
    model_tensor *mt = NULL;
    glm_gguf *g = NULL;
    glm_status st = consumed && used ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    if (st == GLM_OK) st = model_tensors(f, &cfg, s, type, &mt, &nt, consumed);
    for (size_t i = 0; st == GLM_OK && i < ns; i++)
        if (!consumed[i] && !glm_family_ignored(f, glm_st_at(s, i)->name))
            st = glm_err(GLM_ERR_MISMATCH, "%s: tensor %s has no place in a %s GGUF model", glm_st_at(s, i)->file,
                         glm_st_at(s, i)->name, f->gguf_arch);
    if (st == GLM_OK) st = glm_gguf_new(&g);
    /* general.file_type: the type of the 2-D tensors (the embedding's) */
    if (st == GLM_OK) st = general_keys(g, f, "model", mt[0].type);
    if (st == GLM_OK) st = model_keys(g, f, &cfg, base_dir);
    if (st == GLM_OK) st = glm_gguf_add_vocab(g, vocab);
    for (size_t i = 0; st == GLM_OK && i < nt; i++)
        st = glm_gguf_add_tensor(g, mt[i].name, mt[i].type, mt[i].t->ndim, mt[i].t->shape);
    if (st == GLM_OK) st = glm_gguf_begin(g, path);
    for (size_t i = 0; st == GLM_OK && i < nt; i++) {
        const glm_st_tensor *t = mt[i].t;
        float *x = malloc((size_t)t->numel * sizeof *x);
        void *buf = NULL;
        uint64_t nb = 0;
        st = x ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory reading %s", t->name);
        if (st == GLM_OK) st = glm_export_merged_f32(t, be, params, n, scaling, used, x);
        int64_t ne0 = t->shape[t->ndim - 1];
        if (st == GLM_OK) st = encode(mt[i].type, x, ne0, t->numel / ne0, &buf, &nb);
        if (st == GLM_OK) st = glm_gguf_write_tensor(g, buf, nb);
        free(buf);
        free(x);
    }
    for (size_t i = 0; st == GLM_OK && i < n; i++)
        if (!used[i])
            st = glm_err(GLM_ERR_MISMATCH, "LoRA weight %s has no base tensor to merge into in %s; hint: was the adapter "
                         "trained on the other checkpoint layout (chatglm vs hf)?", params[i].name, base_dir);
    if (st == GLM_OK) st = glm_gguf_commit(g);
    glm_gguf_free(g);
    free(mt);
    free(used);
    free(consumed);
    glm_st_close(s);
    return st;
}

/* ------------------------------------------------------------------ Ollama */

/* The special token of id `id` in vocab, or NULL. */
static const char *special_str(const glm_gguf_vocab *v, int64_t id) {
    for (size_t i = 0; i < v->n_special; i++)
        if ((int64_t)v->special_id[i] == id) return v->special[i];
    return NULL;
}

/* GLM-4's chat format (docs/design.md §3; tokenizer_config.json's chat_template without tools)
 * in Ollama's Go template form: a message is written when it has content, as
 * "<|role|>\n<content>"; Ollama's role "tool" is GLM-4's observation. */
static const char k_ollama_template[] =
    "[gMASK]<sop>{{ range .Messages }}{{ if .Content }}"
    "{{ if eq .Role \"system\" }}<|system|>{{ else if eq .Role \"user\" }}<|user|>"
    "{{ else if eq .Role \"assistant\" }}<|assistant|>{{ else if eq .Role \"tool\" }}<|observation|>{{ end }}\n"
    "{{ .Content }}{{ end }}{{ end }}<|assistant|>";

glm_status glm_gguf_write_modelfile(const char *path, const char *model_file, const glm_family *f,
                                    const glm_gguf_vocab *vocab) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) return glm_err(GLM_ERR_NOMEM, "out of memory");
    fprintf(m, "# Ollama Modelfile written by glmtune export-adapter: ollama create NAME -f Modelfile\n");
    fprintf(m, "FROM ./%s\n\nTEMPLATE \"\"\"%s\"\"\"\n\n", model_file, k_ollama_template);
    glm_status st = GLM_OK;
    for (int i = 0; i < f->n_stop_ids; i++) { /* the family row's chat stop ids */
        const char *s = special_str(vocab, f->stop_ids[i]);
        if (!s) {
            st = glm_err(GLM_ERR_ARG, "chat stop id %lld is not a special token of the tokenizer",
                         (long long)f->stop_ids[i]);
            break;
        }
        fprintf(m, "PARAMETER stop \"%s\"\n", s);
    }
    fclose(m);
    if (st == GLM_OK) st = glm_write_file_atomic(path, text, len);
    free(text);
    return st;
}

/* ------------------------------------------------------------------ directories */

typedef struct {
    const char *base_dir;
    const struct glm_backend *be;
    const glm_param *params;
    size_t n;
    const glm_adapter_cfg *c;
    double scaling;
    int type;
    const glm_gguf_vocab *vocab;
} gguf_job;

static glm_status fill_adapter(const char *tmp, void *arg) {
    const gguf_job *j = arg;
    char *p = glm_path_join(tmp, GLM_GGUF_ADAPTER_FILE);
    glm_status st = p ? glm_gguf_write_adapter(p, j->be, j->params, j->n, j->c, (glm_ggml_type)j->type)
                      : glm_err(GLM_ERR_NOMEM, "out of memory");
    free(p);
    return st;
}

static glm_status fill_merged(const char *tmp, void *arg) {
    const gguf_job *j = arg;
    char *p = glm_path_join(tmp, GLM_GGUF_MODEL_FILE), *mf = glm_path_join(tmp, GLM_GGUF_MODELFILE);
    glm_config cfg;
    glm_status st = p && mf ? glm_config_load(j->base_dir, 0, &cfg) : glm_err(GLM_ERR_NOMEM, "out of memory");
    if (st == GLM_OK) st = glm_gguf_write_merged(p, j->base_dir, j->be, j->params, j->n, j->scaling, j->type, j->vocab);
    if (st == GLM_OK) st = glm_gguf_write_modelfile(mf, GLM_GGUF_MODEL_FILE, glm_family_get(cfg.layout), j->vocab);
    free(p);
    free(mf);
    return st;
}

glm_status glm_gguf_export_adapter(const char *outdir, const struct glm_backend *be, const glm_param *params,
                                   size_t n, const glm_adapter_cfg *c, glm_ggml_type type) {
    gguf_job j = {.be = be, .params = params, .n = n, .c = c, .type = (int)type};
    return glm_export_dir(outdir, fill_adapter, &j);
}

glm_status glm_gguf_export_merged(const char *base_dir, const char *outdir, const struct glm_backend *be,
                                  const glm_param *params, size_t n, double scaling, int type,
                                  const glm_gguf_vocab *vocab) {
    if (!glm_is_dir(base_dir)) return glm_err(GLM_ERR_IO, "%s: the base checkpoint must be a directory", base_dir);
    gguf_job j = {.base_dir = base_dir, .be = be, .params = params, .n = n, .scaling = scaling, .type = type,
                  .vocab = vocab};
    return glm_export_dir(outdir, fill_merged, &j);
}
