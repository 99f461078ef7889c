#define _GNU_SOURCE
/* tests/lora/test_export.c: PEFT adapter export vs the fixtures' PEFT-written adapter_init, and
 * the merged export vs W + s * B @ A recomputed here. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/pyjson.h"
#include "lora/io/export.h"
#include "lora/model/config.h"
#include "common/safetensors.h"
#include "tests/check.h"

static char g_tmp[256];

/* adapter_config keys that only newer PEFT versions know (absent from ours on purpose). */
static const char *const k_new_only[] = {
    "alora_invocation_tokens", "arrow_config", "auto_mapping", "corda_config", "ensure_weight_tying",
    "eva_config", "exclude_modules", "kasa_config", "layer_replication", "loftq_config", "lora_bias",
    "lora_ga_config", "megatron_config", "megatron_core", "monteclora_config", "peft_version",
    "qalora_group_size", "target_parameters", "trainable_token_indices", "use_bdlora", "use_dora",
    "use_qalora", "velora_config", NULL};
/* LoraConfig fields PEFT 0.6 accepts (ours must stay inside this set). */
static const char *const k_old_ok[] = {
    "alpha_pattern", "base_model_name_or_path", "bias", "fan_in_fan_out", "inference_mode",
    "init_lora_weights", "layers_pattern", "layers_to_transform", "lora_alpha", "lora_dropout",
    "modules_to_save", "peft_type", "r", "rank_pattern", "revision", "target_modules", "task_type",
    "use_rslora", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (strcmp(*l, k) == 0) return true;
    return false;
}

typedef struct {
    glm_param *p;
    size_t n;
    glm_st_set *set;
} adapter;

static adapter load_adapter(const char *dir) {
    adapter a = {0};
    CHECK(glm_st_open(dir, &a.set) == GLM_OK, "%s", glm_errmsg());
    if (!a.set) return a;
    a.n = glm_st_count(a.set);
    a.p = calloc(a.n, sizeof(glm_param));
    for (size_t i = 0; i < a.n; i++) {
        const glm_st_tensor *t = glm_st_at(a.set, i);
        snprintf(a.p[i].name, sizeof a.p[i].name, "%s", t->name + strlen(GLM_PEFT_PREFIX));
        a.p[i].ndim = 2;
        a.p[i].shape[0] = t->shape[0];
        a.p[i].shape[1] = t->shape[1];
        a.p[i].numel = t->numel;
        a.p[i].w = malloc(t->numel * sizeof(float));
        glm_st_read_f32(a.set, t->name, 2, t->shape, a.p[i].w);
    }
    return a;
}

static void free_adapter(adapter *a) {
    for (size_t i = 0; i < a->n; i++) free(a->p[i].w);
    free(a->p);
    glm_st_close(a->set);
}

static bool files_equal(const char *a, const char *b) {
    char *x, *y;
    size_t lx, ly;
    if (glm_read_file(a, &x, &lx) != GLM_OK) return false;
    if (glm_read_file(b, &y, &ly) != GLM_OK) {
        free(x);
        return false;
    }
    bool eq = lx == ly && memcmp(x, y, lx) == 0;
    free(x);
    free(y);
    return eq;
}

static void test_adapter(const char *data_dir, const char *layout) {
    char *fxdir = NULL, *out = NULL, *cfgp = NULL;
    asprintf(&fxdir, "%s/tiny-glm4/%s/adapter_init", data_dir, layout);
    asprintf(&out, "%s/%s-adapter", g_tmp, layout);
    asprintf(&cfgp, "%s/adapter_config.json", fxdir);
    adapter a = load_adapter(fxdir);
    json_error_t je;
    json_t *fc = json_load_file(cfgp, 0, &je);
    CHECK(fc != NULL, "fixture config");
    json_t *jt = json_object_get(fc, "target_modules");
    const char *targets[16];
    size_t nt = 0;
    for (size_t i = 0; i < json_array_size(jt) && nt < 16; i++) targets[nt++] = json_string_value(json_array_get(jt, i));
    glm_adapter_cfg c = {.r = 4, .alpha = 8, .dropout = 0.0, .target_modules = targets, .n_targets = nt,
                         .use_rslora = false, .base_model_name_or_path = NULL};
    CHECK(glm_export_adapter(out, NULL, a.p, a.n, &c, GLM_ST_F32) == GLM_OK, "export: %s", glm_errmsg());
    char *tmpname = NULL;
    asprintf(&tmpname, "%s.tmp", out);
    CHECK(!glm_is_dir(tmpname), "no temp dir left");
    /* tensors: same keys, shapes, dtypes, bytes */
    glm_st_set *b = NULL;
    CHECK(glm_st_open(out, &b) == GLM_OK, "reopen: %s", glm_errmsg());
    if (b && a.set) {
        CHECK(glm_st_count(b) == glm_st_count(a.set), "count %zu vs %zu", glm_st_count(b), glm_st_count(a.set));
        for (size_t i = 0; i < glm_st_count(a.set); i++) {
            const glm_st_tensor *x = glm_st_at(a.set, i), *y = glm_st_find(b, x->name);
            CHECK(y != NULL, "key %s", x->name);
            if (!y) continue;
            CHECK(y->dtype == x->dtype && y->ndim == x->ndim && y->shape[0] == x->shape[0] &&
                      y->shape[1] == x->shape[1], "%s meta", x->name);
            CHECK(y->nbytes == x->nbytes && memcmp(x->data, y->data, x->nbytes) == 0, "%s bytes", x->name);
        }
        CHECK(glm_st_metadata(b, "format") && strcmp(glm_st_metadata(b, "format"), "pt") == 0, "format pt");
    }
    glm_st_close(b);
    /* config: every fixture key is ours with the same value or a new-PEFT-only key */
    char *ocp = NULL;
    asprintf(&ocp, "%s/adapter_config.json", out);
    json_t *oc = json_load_file(ocp, 0, &je);
    CHECK(oc != NULL, "our config parses: %s", je.text);
    const char *k;
    json_t *v;
    json_object_foreach(fc, k, v) {
        json_t *o = json_object_get(oc, k);
        if (!o) {
            /* use_rslora is written only when true (PEFT <= 0.7 rejects the key) */
            CHECK(in_list(k_new_only, k) || (!strcmp(k, "use_rslora") && json_is_false(v)),
                  "fixture key %s missing from ours", k);
            continue;
        }
        if (strcmp(k, "task_type") == 0) {
            CHECK(strcmp(json_string_value(o), "CAUSAL_LM") == 0, "task_type");
        } else if (strcmp(k, "lora_dropout") == 0) {
            CHECK(json_number_value(o) == json_number_value(v), "dropout");
        } else {
            CHECK(json_equal(o, v), "key %s differs", k);
        }
    }
    json_object_foreach(oc, k, v) CHECK(in_list(k_old_ok, k), "our key %s is not an old-PEFT key", k);
    json_decref(oc);
    /* bf16 export rounds each value to nearest even */
    CHECK(glm_export_adapter(out, NULL, a.p, a.n, &c, GLM_ST_BF16) == GLM_OK, "bf16 export (replaces)");
    CHECK(glm_st_open(out, &b) == GLM_OK, "reopen bf16");
    if (b) {
        const glm_st_tensor *y = glm_st_at(b, 0);
        float *f = malloc(y->numel * sizeof(float));
        CHECK(y->dtype == GLM_ST_BF16, "bf16 dtype");
        glm_st_to_f32(y->dtype, y->data, y->numel, f);
        const glm_param *p = NULL;
        for (size_t i = 0; i < a.n; i++)
            if (strcmp(y->name + strlen(GLM_PEFT_PREFIX), a.p[i].name) == 0) p = &a.p[i];
        CHECK(p != NULL, "param of %s", y->name);
        for (int64_t j = 0; p && j < y->numel; j++)
            if (!check_close(f[j], p->w[j], 1.0 / 256, 1e-30)) {
                CHECK(0, "bf16 value %lld: %g vs %g", (long long)j, f[j], p->w[j]);
                break;
            }
        free(f);
        glm_st_close(b);
    }
    /* refused inputs */
    CHECK(glm_export_adapter(out, NULL, a.p, a.n, &c, GLM_ST_I64) == GLM_ERR_ARG, "i64 refused");
    {   /* a non-finite weight: refused, naming the tensor; the earlier export stays whole */
        const float keep = a.p[1].w[3];
        a.p[1].w[3] = NAN;
        CHECK(glm_export_adapter(out, NULL, a.p, a.n, &c, GLM_ST_F32) == GLM_ERR_NUMERIC && strstr(glm_errmsg(), a.p[1].name) &&
                  strstr(glm_errmsg(), "element 3") && strstr(glm_errmsg(), "hint"),
              "a NaN weight refused: %s", glm_errmsg());
        char *f = glm_path_join(out, "adapter_model.safetensors");
        glm_st_set *b = NULL;
        CHECK(glm_st_open(f, &b) == GLM_OK, "the earlier export is still there after the refusal");
        glm_st_close(b);
        free(f);
        a.p[1].w[3] = keep;
    }
    json_decref(fc); /* targets point into it */
    free_adapter(&a);
    free(tmpname);
    free(ocp);
    free(fxdir);
    free(out);
    free(cfgp);
}

static double bf16_round(double x) {
    float f = (float)x;
    uint16_t h;
    glm_st_from_f32(GLM_ST_BF16, &f, 1, &h);
    float r;
    glm_st_to_f32(GLM_ST_BF16, &h, 1, &r);
    return r;
}

static void test_merge(const char *data_dir, const char *layout, const char *module, const char *keep,
                       const char *other_layout) {
    char *base = NULL, *adir = NULL, *out = NULL, *oadir = NULL;
    asprintf(&base, "%s/tiny-glm4/%s", data_dir, layout);
    asprintf(&adir, "%s/adapter_init", base);
    asprintf(&oadir, "%s/tiny-glm4/%s/adapter_init", data_dir, other_layout);
    asprintf(&out, "%s/%s-merged", g_tmp, layout);
    adapter a = load_adapter(adir);
    const double s = 8.0 / 4.0;
    CHECK(glm_export_merged(base, out, NULL, a.p, a.n, s, GLM_EXPORT_SAME_DTYPE) == GLM_OK, "merge: %s",
          glm_errmsg());
    glm_st_set *bs = NULL, *ms = NULL;
    glm_st_open(base, &bs);
    CHECK(glm_st_open(out, &ms) == GLM_OK, "open merged: %s", glm_errmsg());
    if (bs && ms) {
        CHECK(glm_st_count(bs) == glm_st_count(ms), "tensor count");
        /* same shard names, tensor by tensor */
        for (size_t i = 0; i < glm_st_count(bs); i++) {
            const glm_st_tensor *x = glm_st_at(bs, i), *y = glm_st_find(ms, x->name);
            CHECK(y && strcmp(strrchr(x->file, '/'), strrchr(y->file, '/')) == 0 && y->dtype == x->dtype,
                  "%s shard/dtype", x->name);
        }
        /* untouched tensor: byte-exact */
        const glm_st_tensor *x = glm_st_find(bs, keep), *y = glm_st_find(ms, keep);
        CHECK(x && y && x->nbytes == y->nbytes && memcmp(x->data, y->data, x->nbytes) == 0, "%s byte-exact", keep);
        /* adapted tensor: W + s * B @ A */
        char wname[300], an[300], bn[300];
        snprintf(wname, sizeof wname, "%s.weight", module);
        snprintf(an, sizeof an, "%s.lora_A.weight", module);
        snprintf(bn, sizeof bn, "%s.lora_B.weight", module);
        x = glm_st_find(bs, wname);
        y = glm_st_find(ms, wname);
        const glm_param *A = NULL, *B = NULL;
        for (size_t i = 0; i < a.n; i++) {
            if (strcmp(a.p[i].name, an) == 0) A = &a.p[i];
            if (strcmp(a.p[i].name, bn) == 0) B = &a.p[i];
        }
        CHECK(x && y && A && B, "found %s", module);
        if (x && y && A && B) {
            int64_t O = x->shape[0], I = x->shape[1], r = A->shape[0];
            float *w = malloc(O * I * sizeof(float)), *m = malloc(O * I * sizeof(float));
            glm_st_to_f32(x->dtype, x->data, O * I, w);
            glm_st_to_f32(y->dtype, y->data, O * I, m);
            size_t bad = 0, changed = 0;
            for (int64_t o = 0; o < O; o++)
                for (int64_t i = 0; i < I; i++) {
                    double d = 0;
                    for (int64_t k = 0; k < r; k++) d += (double)B->w[o * r + k] * A->w[k * I + i];
                    double want = bf16_round((float)(w[o * I + i] + s * d));
                    if (m[o * I + i] != want) bad++;
                    if (m[o * I + i] != w[o * I + i]) changed++;
                }
            CHECK(bad == 0, "%s: %zu merged values differ from W + s*B@A", module, bad);
            CHECK(changed > (size_t)(O * I / 2), "merge changed the weight (%zu of %lld)", changed, (long long)(O * I));
            free(w);
            free(m);
        }
    }
    glm_st_close(bs);
    glm_st_close(ms);
    /* index and side files */
    char *p1 = NULL, *p2 = NULL;
    asprintf(&p1, "%s/model.safetensors.index.json", base);
    asprintf(&p2, "%s/model.safetensors.index.json", out);
    json_error_t je;
    json_t *i1 = json_load_file(p1, 0, &je), *i2 = json_load_file(p2, 0, &je);
    CHECK(i1 && i2 && json_equal(json_object_get(i1, "weight_map"), json_object_get(i2, "weight_map")),
          "same weight_map");
    json_decref(i1);
    json_decref(i2);
    free(p1);
    free(p2);
    /* config.json: the base's, plus the layout's aliases for llama.cpp's converter (THUDM's names,
     * vocab_size) with the base's values; glmtune reads it back the same */
    asprintf(&p1, "%s/config.json", base);
    asprintf(&p2, "%s/config.json", out);
    json_t *c1 = json_load_file(p1, 0, &je), *c2 = json_load_file(p2, 0, &je);
    const char *k;
    json_t *v;
    bool same = c1 && c2;
    json_object_foreach(c1, k, v) same = same && json_equal(v, json_object_get(c2, k));
    CHECK(same, "%s: merged config.json keeps every key of the base's", layout);
    bool chatglm = strcmp(layout, "chatglm") == 0;
    json_t *want = chatglm ? json_pack("{s:i}", "vocab_size", 512)
                           : json_pack("{s:f,s:f,s:i}", "rope_ratio", 1.0, "layernorm_epsilon", 1.5625e-07,
                                       "seq_length", 1048576);
    CHECK(c2 && json_object_size(c2) == json_object_size(c1) + json_object_size(want), "%s: %zu keys, want %zu + %zu",
          layout, c2 ? json_object_size(c2) : 0, json_object_size(c1), json_object_size(want));
    json_object_foreach(want, k, v) {
        json_t *g = json_object_get(c2, k);
        CHECK(g && json_is_number(g) && json_number_value(g) == json_number_value(v) &&
                  json_is_integer(g) == json_is_integer(v), "%s: merged config.json %s = %g (got %s)", layout, k,
              json_number_value(v), g ? "a value" : "none");
    }
    json_decref(want);
    json_decref(c1);
    json_decref(c2);
    glm_config g1, g2;
    CHECK(glm_config_load(base, 0, &g1) == GLM_OK && glm_config_load(out, 0, &g2) == GLM_OK &&
              memcmp(&g1, &g2, sizeof g1) == 0, "%s: the merged config.json loads as the base's", layout);
    free(p1);
    free(p2);
    const char *side[] = {"generation_config.json"};
    for (int i = 0; i < 1; i++) {
        asprintf(&p1, "%s/%s", base, side[i]);
        asprintf(&p2, "%s/%s", out, side[i]);
        if (glm_is_file(p1)) CHECK(files_equal(p1, p2), "%s copied", side[i]);
        free(p1);
        free(p2);
    }
    /* the other layout's adapter does not fit this base */
    adapter o = load_adapter(oadir);
    char *out2 = NULL;
    asprintf(&out2, "%s/%s-wrong", g_tmp, layout);
    glm_status st = glm_export_merged(base, out2, NULL, o.p, o.n, s, GLM_EXPORT_SAME_DTYPE);
    CHECK(st == GLM_ERR_MISMATCH && strstr(glm_errmsg(), "layout"), "wrong layout: %s", glm_errmsg());
    CHECK(!glm_is_dir(out2), "nothing written on failure");
    printf("  %s: wrong-layout merge refused: %s\n", layout, glm_errmsg());
    free_adapter(&o);
    free(out2);
    free_adapter(&a);
    free(base);
    free(adir);
    free(oadir);
    free(out);
}

/* A base the model loader refuses (a tensor of no module, a layer past num_layers) is refused by the
 * merge with the loader's message, naming the tensor and the file; not copied into the merged model. */
static void test_merge_refuses_base(const char *data_dir) {
    char *base = NULL, *adir = NULL;
    asprintf(&base, "%s/tiny-glm4/chatglm", data_dir);
    asprintf(&adir, "%s/adapter_init", base);
    adapter a = load_adapter(adir);
    const char *extra[2] = {"foo.bar", "transformer.encoder.layers.7.input_layernorm.weight"};
    static float vals[64];
    for (int e = 0; e < 2; e++) {
        char *bad = NULL, *out = NULL, *st_path = NULL, *c1 = NULL, *c2 = NULL, *text = NULL;
        asprintf(&bad, "%s/bad-base-%d", g_tmp, e);
        asprintf(&out, "%s/bad-merged-%d", g_tmp, e);
        glm_mkdir_p(bad);
        st_path = glm_path_join(bad, "model.safetensors");
        c1 = glm_path_join(base, "config.json");
        c2 = glm_path_join(bad, "config.json");
        size_t len = 0;
        CHECK(glm_read_file(c1, &text, &len) == GLM_OK && glm_write_file_atomic(c2, text, len) == GLM_OK, "copy config");
        glm_st_set *bs = NULL;
        if (glm_st_open(base, &bs) == GLM_OK) {
            size_t n = glm_st_count(bs);
            glm_st_tensor *ts = calloc(n + 1, sizeof *ts);
            for (size_t i = 0; i < n; i++) ts[i] = *glm_st_at(bs, i);
            ts[n] = (glm_st_tensor){.name = (char *)extra[e], .dtype = GLM_ST_F32, .ndim = 1, .shape = {64},
                                    .numel = 64, .data = vals, .nbytes = sizeof vals};
            CHECK(glm_st_write(st_path, ts, n + 1, NULL, 0) == GLM_OK, "write the base: %s", glm_errmsg());
            free(ts);
            glm_st_close(bs);
        }
        glm_status st = glm_export_merged(bad, out, NULL, a.p, a.n, 2.0, GLM_EXPORT_SAME_DTYPE);
        const char *msg = st == GLM_ERR_MISMATCH ? glm_errmsg() : "";
        CHECK(strstr(msg, extra[e]) && strstr(msg, st_path) && strstr(msg, "is not part of the") && strstr(msg, "hint"),
              "merge onto a base with %s refused: %s", extra[e], glm_errmsg());
        CHECK(!glm_is_dir(out), "nothing written for a refused base");
        printf("  merge onto a base with %s: %s\n", extra[e], glm_errmsg());
        free(bad), free(out), free(st_path), free(c1), free(c2), free(text);
    }
    free_adapter(&a);
    free(base);
    free(adir);
}

/* adapter_config.json's text: use_rslora only when true, floats in their shortest form. */
static void test_config_text(void) {
    const char *targets[] = {"query_key_value"};
    /* dropout as the trainer held it (a float: 0.1f is 0.100000001490116...), alpha a fraction */
    glm_adapter_cfg c = {.r = 8, .alpha = 12.5, .dropout = (double)0.1f, .target_modules = targets,
                         .n_targets = 1, .use_rslora = false};
    json_t *j = glm_adapter_config_json(&c);
    char *p = glm_path_join(g_tmp, "cfg.json"), *text = NULL;
    size_t n;
    CHECK(glm_json_write_file(p, j, 2) == GLM_OK && glm_read_file(p, &text, &n) == GLM_OK, "write");
    CHECK(text && strstr(text, "\"lora_dropout\": 0.1,") && !strstr(text, "0.10000000149011612"),
          "dropout shortest: %s", text);
    CHECK(text && strstr(text, "\"lora_alpha\": 12.5,"), "alpha 12.5");
    CHECK(text && !strstr(text, "use_rslora"), "no use_rslora key when false");
    CHECK(text && n && text[n - 1] == '\n', "ends with a newline");
    free(text);
    json_decref(j);
    c.use_rslora = true;
    c.alpha = 16;
    c.dropout = 0.05;
    j = glm_adapter_config_json(&c);
    CHECK(glm_json_write_file(p, j, 2) == GLM_OK && glm_read_file(p, &text, &n) == GLM_OK, "write");
    CHECK(text && strstr(text, "\"use_rslora\": true") && strstr(text, "\"lora_alpha\": 16,") &&
              strstr(text, "\"lora_dropout\": 0.05,"), "rslora true, integer alpha: %s", text);
    free(text);
    json_decref(j);
    free(p);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/glm_test_export_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    test_config_text();
    const char *data_dir = test_data_dir();
    test_adapter(data_dir, "chatglm");
    test_adapter(data_dir, "hf");
    test_merge(data_dir, "chatglm", "transformer.encoder.layers.1.self_attention.query_key_value",
               "transformer.embedding.word_embeddings.weight", "hf");
    test_merge(data_dir, "hf", "model.layers.0.self_attn.k_proj", "model.embed_tokens.weight", "chatglm");
    test_merge_refuses_base(data_dir);
    glm_rmtree(g_tmp);
    return check_summary("test_export");
}
