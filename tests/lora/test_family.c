/* tests/lora/test_family.c: the model-family table (lora/model/family.h) and what it decides:
 * which config.json is taken (an unknown or missing model_type refused with the supported list,
 * GLM-4-0414 and GLM-4.5 refused by name), the RoPE warning only for the row it is true of, the
 * loader refusing a checkpoint tensor nothing reads (named with its file), and the table's own
 * consistency (PEFT names, module paths, GGUF names, block switches).
 *
 * The checkpoints are tiny: glm_model_init_random's, rewritten with extra tensors and another
 * config.json where a case needs it. */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/log.h"
#include "common/safetensors.h"
#include "kernels/backend.h"
#include "lora/adapter/lora.h"
#include "lora/model/config.h"
#include "lora/model/family.h"
#include "lora/model/model.h"
#include "tests/check.h"

static char tmp[256];

/* The shape of every checkpoint here: 2 layers, C 32, H 4, Hkv 2, Dh 8, F 48, V 96. */
static glm_config tiny(void) {
    glm_config c = {.C = 32, .L = 2, .H = 4, .Hkv = 2, .Dh = 8, .F = 48, .V = 96, .eps = 1e-6f, .rope_base = 1e4,
                    .rope_dim = 4, .qkv_bias = true};
    return c;
}

/* dir/config.json replaced by `text`. */
static void write_config(const char *dir, const char *text) {
    char *p = glm_path_join(dir, "config.json");
    CHECK(glm_write_file_atomic(p, text, strlen(text)) == GLM_OK, "write %s: %s", p, glm_errmsg());
    free(p);
}

/* dir/config.json with key `key` set to the JSON text `json` ("null": removed). */
static void edit_config(const char *dir, const char *key, const char *json) {
    char *p = glm_path_join(dir, "config.json");
    json_t *c = json_load_file(p, JSON_PRESERVE_ORDER, NULL);
    CHECK(c != NULL, "read %s", p);
    if (c) {
        if (!strcmp(json, "null")) json_object_del(c, key);
        else json_object_set_new(c, key, json_loads(json, JSON_DECODE_ANY, NULL));
        char *s = json_dumps(c, JSON_PRESERVE_ORDER | JSON_INDENT(2));
        write_config(dir, s);
        free(s);
        json_decref(c);
    }
    free(p);
}

/* dir/model.safetensors with the tensors `extra` (n names, bf16 of `len` elements each) added. */
static void add_tensors(const char *dir, const char *const *extra, int n, int64_t len) {
    char *p = glm_path_join(dir, "model.safetensors");
    glm_st_set *s = NULL;
    CHECK(glm_st_open(p, &s) == GLM_OK, "open %s: %s", p, glm_errmsg());
    if (!s) {
        free(p);
        return;
    }
    size_t nt = glm_st_count(s);
    glm_st_tensor *ts = calloc(nt + (size_t)n, sizeof *ts);
    uint16_t *ones = calloc((size_t)len, sizeof *ones);
    for (int64_t i = 0; i < len; i++) ones[i] = 0x3f80; /* bf16 1.0 */
    for (size_t i = 0; i < nt; i++) ts[i] = *glm_st_at(s, i);
    for (int i = 0; i < n; i++) {
        glm_st_tensor *t = &ts[nt + (size_t)i];
        t->name = (char *)extra[i];
        t->dtype = GLM_ST_BF16;
        t->ndim = 1;
        t->shape[0] = t->numel = len;
        t->data = ones;
        t->nbytes = (size_t)len * 2;
    }
    const char *meta[] = {"format", "pt"};
    CHECK(glm_st_write(p, ts, nt + (size_t)n, meta, 1) == GLM_OK, "rewrite %s: %s", p, glm_errmsg());
    glm_st_close(s);
    free(ones);
    free(ts);
    free(p);
}

/* A fresh random checkpoint of `layout` in tmp. */
static void fresh(glm_layout layout, const glm_config *c) {
    glm_rmtree(tmp);
    CHECK(glm_model_init_random(c, 5, tmp, layout) == GLM_OK, "init-model %s: %s", glm_layout_name(layout), glm_errmsg());
}

/* Loads tmp on the CPU; returns the status (the model freed). */
static glm_status load(void) {
    glm_model *m = NULL;
    glm_status st = glm_model_load(tmp, glm_backend_cpu(), 0, &m);
    glm_model_free(m);
    return st;
}

/* glm_config_load of `dir` with stderr captured into err (n bytes). */
static glm_status config_load_quiet(const char *dir, glm_config *c, char *err, size_t n) {
    char ep[300];
    snprintf(ep, sizeof ep, "%s.stderr", tmp);
    fflush(stderr);
    int saved = dup(2), fd = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    glm_status st = glm_config_load(dir, 0, c);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(ep, "r");
    size_t k = f ? fread(err, 1, n - 1, f) : 0;
    err[k] = 0;
    if (f) fclose(f);
    unlink(ep);
    return st;
}

static void test_table(void) {
    char b[300];
    CHECK(glm_family_count() == 2, "two rows: %d", glm_family_count());
    for (int i = 0; i < glm_family_count(); i++) {
        const glm_family *f = glm_family_at(i);
        CHECK(glm_family_get(f->layout) == f, "row %d is the row of its layout", i);
        CHECK(glm_family_check_block(f) == GLM_OK, "%s: glmtune implements its block: %s", f->title, glm_errmsg());
        for (int k = 0; k < f->n_linears; k++) {
            CHECK(f->linear_names[k] == f->tensors[f->linears[k]].name, "%s: PEFT name %d is its tensor's name (%s)",
                  f->title, k, f->linear_names[k]);
            int n;
            CHECK(glm_lora_module_names(f->layout, &n)[k] == f->linear_names[k] && n == f->n_linears,
                  "%s: glm_lora_module_names is the row's", f->title);
        }
        CHECK(f->qkv_fused == (f->tensors[GLM_FT_QKV].name != NULL) && f->qkv_fused == !f->tensors[GLM_FT_Q].name,
              "%s: fused QKV or Q, K, V", f->title);
        glm_layout l;
        CHECK(glm_layout_parse(f->layout_name, &l) == GLM_OK && l == f->layout, "parse %s", f->layout_name);
        CHECK(glm_layout_parse(f->model_types[0], &l) == GLM_OK && l == f->layout, "parse %s", f->model_types[0]);
        CHECK(f->n_stop_ids == 3 && f->stop_ids[0] == 151329 && f->stop_ids[1] == 151336 && f->stop_ids[2] == 151338,
              "%s: GLM-4's chat stop ids", f->title);
    }
    glm_layout l;
    CHECK(glm_layout_parse("glm4", &l) == GLM_ERR_ARG && strstr(glm_errmsg(), "valid: chatglm, hf"), "unknown layout: %s",
          glm_errmsg());

    const glm_family *cg = glm_family_get(GLM_LAYOUT_CHATGLM), *hf = glm_family_get(GLM_LAYOUT_HF);
    CHECK(glm_family_tensor_name(cg, GLM_FT_QKV, 3, true, b, sizeof b) &&
              !strcmp(b, "transformer.encoder.layers.3.self_attention.query_key_value.bias"), "chatglm qkv bias: %s", b);
    CHECK(glm_family_tensor_name(cg, GLM_FT_EMBED, 7, false, b, sizeof b) &&
              !strcmp(b, "transformer.embedding.word_embeddings.weight"), "chatglm embedding: %s", b);
    CHECK(glm_family_tensor_name(cg, GLM_FT_FFN_NORM, 0, false, b, sizeof b) &&
              !strcmp(b, "transformer.encoder.layers.0.post_attention_layernorm.weight"), "chatglm ffn norm: %s", b);
    CHECK(!glm_family_tensor_name(cg, GLM_FT_Q, 0, false, b, sizeof b) && !b[0], "chatglm has no q_proj");
    CHECK(glm_family_tensor_name(hf, GLM_FT_OUTPUT, 0, false, b, sizeof b) && !strcmp(b, "lm_head.weight"), "hf output: %s", b);
    CHECK(glm_family_tensor_name(hf, GLM_FT_K, 12, true, b, sizeof b) && !strcmp(b, "model.layers.12.self_attn.k_proj.bias"),
          "hf k bias: %s", b);
    CHECK(glm_family_module_path(hf, GLM_FT_GATE_UP, 1, b, sizeof b) && !strcmp(b, "model.layers.1.mlp.gate_up_proj"),
          "hf gate_up module: %s", b);
    glm_lora_module_path(GLM_LAYOUT_CHATGLM, 3, 1, b, sizeof b);
    CHECK(!strcmp(b, "transformer.encoder.layers.3.self_attention.dense"), "chatglm PEFT module 1: %s", b);
    glm_lora_module_path(GLM_LAYOUT_HF, 3, 0, b, sizeof b);
    CHECK(!strcmp(b, "model.layers.3.self_attn.q_proj"), "hf PEFT module 0: %s", b);
    /* llama.cpp's chatglm names (docs/design.md §9) */
    CHECK(!strcmp(cg->gguf_arch, "chatglm") && !strcmp(hf->gguf_arch, "chatglm"), "GGUF architecture chatglm");
    CHECK(glm_family_gguf_name(cg, GLM_FT_EMBED, 0, false, b, sizeof b) && !strcmp(b, "token_embd.weight"), "gguf %s", b);
    CHECK(glm_family_gguf_name(cg, GLM_FT_FINAL_NORM, 0, false, b, sizeof b) && !strcmp(b, "output_norm.weight"), "gguf %s", b);
    CHECK(glm_family_gguf_name(hf, GLM_FT_OUTPUT, 0, false, b, sizeof b) && !strcmp(b, "output.weight"), "gguf %s", b);
    CHECK(glm_family_gguf_name(cg, GLM_FT_QKV, 5, true, b, sizeof b) && !strcmp(b, "blk.5.attn_qkv.bias"), "gguf %s", b);
    CHECK(!glm_family_gguf_name(hf, GLM_FT_QKV, 5, false, b, sizeof b), "hf: no attn_qkv (q, k, v apart)");
    CHECK(glm_family_gguf_name(hf, GLM_FT_V, 0, true, b, sizeof b) && !strcmp(b, "blk.0.attn_v.bias"), "gguf %s", b);
    const char *want[] = {"attn_norm", "attn_output", "ffn_norm", "ffn_up", "ffn_down"};
    const glm_family_tensor ts[] = {GLM_FT_ATTN_NORM, GLM_FT_O, GLM_FT_FFN_NORM, GLM_FT_GATE_UP, GLM_FT_DOWN};
    for (int i = 0; i < 5; i++) {
        char w[64];
        snprintf(w, sizeof w, "blk.2.%s.weight", want[i]);
        CHECK(glm_family_gguf_name(hf, ts[i], 2, false, b, sizeof b) && !strcmp(b, w), "gguf %s, expected %s", b, w);
    }
    CHECK(glm_family_ignored(cg, "transformer.rotary_pos_emb.inv_freq") && !glm_family_ignored(hf, "transformer.rotary_pos_emb.inv_freq"),
          "the chatglm row ignores its inv_freq buffer");
}

/* config.json: GLM-4-0414, GLM-4.5, unknown and missing model_type; the RoPE warning's row. */
static void test_configs(void) {
    glm_config c, t = tiny();
    char err[4096];
    fresh(GLM_LAYOUT_HF, &t);
    /* GLM-4-0414 shaped like GLM-4-9B, with rope_theta 10000: refused by name, no RoPE advice */
    write_config(tmp, "{\"model_type\": \"glm4\", \"architectures\": [\"Glm4ForCausalLM\"], \"hidden_size\": 4096,"
                      " \"num_hidden_layers\": 40, \"num_attention_heads\": 32, \"num_key_value_heads\": 2, \"head_dim\": 128,"
                      " \"intermediate_size\": 13696, \"vocab_size\": 151552, \"rms_norm_eps\": 1e-05,"
                      " \"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.5, \"attention_bias\": true}");
    glm_status st = config_load_quiet(tmp, &c, err, sizeof err);
    CHECK(st == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "GLM-4-0414") && strstr(glm_errmsg(), "Glm4ForCausalLM") &&
              strstr(glm_errmsg(), "post_self_attn_layernorm") && strstr(glm_errmsg(), "post_mlp_layernorm") &&
              strstr(glm_errmsg(), "supported: chatglm (ChatGLMModel") && strstr(glm_errmsg(), "glm (GlmForCausalLM") &&
              strstr(glm_errmsg(), "config.json"),
          "GLM-4-0414 refused by name (%d): %s", st, glm_errmsg());
    CHECK(!strstr(err, "rope"), "no RoPE warning for GLM-4-0414: %s", err);
    if (getenv("GLM_TEST_VERBOSE")) printf("glm4: %s\n", glm_errmsg());
    /* by its architecture alone */
    edit_config(tmp, "model_type", "null");
    CHECK(glm_config_load(tmp, 0, &c) == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "GLM-4-0414"),
          "Glm4ForCausalLM without model_type refused by name: %s", glm_errmsg());
    edit_config(tmp, "model_type", "\"glm4_moe\"");
    edit_config(tmp, "architectures", "[\"Glm4MoeForCausalLM\"]");
    CHECK(glm_config_load(tmp, 0, &c) == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "GLM-4.5") &&
              strstr(glm_errmsg(), "mixture-of-experts"),
          "GLM-4.5 refused by name: %s", glm_errmsg());
    /* a GPTQ / AWQ checkpoint (transformers' quantization_config): refused by its quant_method with the way glmtune
     * quantizes, not "tensor not found" */
    static const char *const qc[] = {
        "{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 128, \"desc_act\": false}",
        "{\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 128, \"version\": \"gemm\", \"zero_point\": true}"};
    for (int i = 0; i < 2; i++) {
        fresh(i ? GLM_LAYOUT_CHATGLM : GLM_LAYOUT_HF, &t);
        edit_config(tmp, "quantization_config", qc[i]);
        const char *name = i ? "awq, 4-bit" : "gptq, 4-bit";
        st = glm_config_load(tmp, 0, &c);
        CHECK(st == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "config.json") && strstr(glm_errmsg(), "quantization_config") &&
                  strstr(glm_errmsg(), name) && strstr(glm_errmsg(), "bf16 checkpoint") &&
                  strstr(glm_errmsg(), "--quantization-bit 4") && strstr(glm_errmsg(), "--base-dtype fp8"),
              "%s checkpoint refused by its quant_method (%d): %s", name, st, glm_errmsg());
        CHECK(load() == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), name), "... by the loader too: %s", glm_errmsg());
        if (getenv("GLM_TEST_VERBOSE")) printf("quantized: %s\n", glm_errmsg());
    }
    /* a model_type no row describes, though its keys are the hf layout's */
    fresh(GLM_LAYOUT_HF, &t);
    edit_config(tmp, "model_type", "\"llama\"");
    edit_config(tmp, "architectures", "[\"LlamaForCausalLM\"]");
    st = glm_config_load(tmp, 0, &c);
    CHECK(st == GLM_ERR_FORMAT && strstr(glm_errmsg(), "\"llama\"") && strstr(glm_errmsg(), "chatglm (ChatGLMModel") &&
              strstr(glm_errmsg(), "glm (GlmForCausalLM"),
          "unknown model_type refused with the supported list: %s", glm_errmsg());
    if (getenv("GLM_TEST_VERBOSE")) printf("llama: %s\n", glm_errmsg());
    CHECK(load() == GLM_ERR_FORMAT && strstr(glm_errmsg(), "\"llama\""), "... by the loader too: %s", glm_errmsg());
    /* no model_type: no guessing from the keys */
    fresh(GLM_LAYOUT_CHATGLM, &t);
    edit_config(tmp, "model_type", "null");
    CHECK(glm_config_load(tmp, 0, &c) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "model_type is missing") &&
              strstr(glm_errmsg(), "supported: chatglm"),
          "missing model_type refused: %s", glm_errmsg());
    /* the RoPE warning belongs to the hf row (GLM-4-9B -hf); a THUDM config of that shape with base 10000 is taken */
    write_config(tmp, "{\"model_type\": \"chatglm\", \"hidden_size\": 4096, \"num_layers\": 40, \"num_attention_heads\": 32,"
                      " \"multi_query_group_num\": 2, \"kv_channels\": 128, \"ffn_hidden_size\": 13696,"
                      " \"padded_vocab_size\": 151552, \"layernorm_epsilon\": 1.5625e-07, \"rope_ratio\": 1}");
    st = config_load_quiet(tmp, &c, err, sizeof err);
    CHECK(st == GLM_OK && !c.rope_suspect && c.rope_base == 1e4 && !strstr(err, "WARNING"),
          "no RoPE warning for a chatglm config: %s / %s", glm_errmsg(), err);
    write_config(tmp, "{\"model_type\": \"glm\", \"hidden_size\": 4096, \"num_hidden_layers\": 40, \"num_attention_heads\": 32,"
                      " \"num_key_value_heads\": 2, \"head_dim\": 128, \"intermediate_size\": 13696, \"vocab_size\": 151552,"
                      " \"rope_theta\": 10000.0}");
    st = config_load_quiet(tmp, &c, err, sizeof err);
    CHECK(st == GLM_OK && c.rope_suspect && strstr(err, "WARNING: rope_theta is 10000") && strstr(err, "--rope-theta 1e8"),
          "the GLM-4-9B -hf warning: %s", err);
}

/* The loader: every checkpoint tensor is read or ignored. */
static void test_unconsumed(void) {
    glm_config t = tiny();
    /* both layouts load as written, the chatglm one with its inv_freq buffer */
    fresh(GLM_LAYOUT_HF, &t);
    CHECK(load() == GLM_OK, "hf loads: %s", glm_errmsg());
    fresh(GLM_LAYOUT_CHATGLM, &t);
    const char *inv[] = {"transformer.rotary_pos_emb.inv_freq"};
    add_tensors(tmp, inv, 1, 4);
    CHECK(load() == GLM_OK, "chatglm with transformer.rotary_pos_emb.inv_freq loads: %s", glm_errmsg());
    /* an extra tensor */
    fresh(GLM_LAYOUT_HF, &t);
    const char *extra[] = {"model.layers.0.mlp.extra.weight"};
    add_tensors(tmp, extra, 1, 32);
    glm_status st = load();
    CHECK(st == GLM_ERR_MISMATCH && strstr(glm_errmsg(), "model.layers.0.mlp.extra.weight") &&
              strstr(glm_errmsg(), "model.safetensors"),
          "an extra tensor refused with its name and file: %s", glm_errmsg());
    if (getenv("GLM_TEST_VERBOSE")) printf("extra: %s\n", glm_errmsg());
    fresh(GLM_LAYOUT_CHATGLM, &t);
    const char *two[] = {"transformer.encoder.layers.1.mlp.extra.weight", "lm_head.weight"};
    add_tensors(tmp, two, 2, 32);
    CHECK(load() == GLM_ERR_MISMATCH && strstr(glm_errmsg(), "and 1 more"), "two extra tensors counted: %s", glm_errmsg());
    /* a GLM-4-0414 checkpoint whose config.json claims the glm layout: its post-norms are refused */
    fresh(GLM_LAYOUT_HF, &t);
    const char *post[] = {"model.layers.0.post_self_attn_layernorm.weight", "model.layers.0.post_mlp_layernorm.weight",
                          "model.layers.1.post_self_attn_layernorm.weight", "model.layers.1.post_mlp_layernorm.weight"};
    add_tensors(tmp, post, 4, 32);
    st = load();
    CHECK(st == GLM_ERR_MISMATCH && strstr(glm_errmsg(), "_layernorm.weight") && strstr(glm_errmsg(), "post_") &&
              strstr(glm_errmsg(), "and 3 more"),
          "GLM-4-0414 weights under a glm config refused: %s", glm_errmsg());
    /* ... and with its own config.json, by name */
    edit_config(tmp, "model_type", "\"glm4\"");
    edit_config(tmp, "architectures", "[\"Glm4ForCausalLM\"]");
    CHECK(load() == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "GLM-4-0414") && strstr(glm_errmsg(), "post_mlp_layernorm"),
          "a GLM-4-0414 checkpoint refused by name: %s", glm_errmsg());
    /* a bias the config turns off */
    fresh(GLM_LAYOUT_HF, &t);
    edit_config(tmp, "attention_bias", "false");
    CHECK(load() == GLM_ERR_MISMATCH && strstr(glm_errmsg(), "self_attn.") && strstr(glm_errmsg(), "_proj.bias") &&
              strstr(glm_errmsg(), "attention_bias"),
          "q/k/v biases with attention_bias false refused: %s", glm_errmsg());
    /* layers past the config's count */
    fresh(GLM_LAYOUT_CHATGLM, &t);
    edit_config(tmp, "num_layers", "1");
    CHECK(load() == GLM_ERR_MISMATCH && strstr(glm_errmsg(), "transformer.encoder.layers.1.") && strstr(glm_errmsg(), "num_layers"),
          "a layer past num_layers refused: %s", glm_errmsg());
    /* a missing tensor is still named as before */
    fresh(GLM_LAYOUT_CHATGLM, &t);
    edit_config(tmp, "num_layers", "3");
    CHECK(load() == GLM_ERR_FORMAT && strstr(glm_errmsg(), "transformer.encoder.layers.2.input_layernorm.weight"),
          "a missing layer named: %s", glm_errmsg());
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/glm_test_family_%d", (int)getpid());
    test_table();
    test_configs();
    test_unconsumed();
    glm_rmtree(tmp);
    return check_summary("test_family");
}
