#define _GNU_SOURCE
/* tests/lora/test_gguf.c: the GGUF writer and exports (lora/io/gguf*.h) read back by the reader of
 * gguf_reader.h: the container (every key type, tensor infos, alignment), Q8_0 against a
 * computation written here, the adapter file of both layouts of tests/fixtures/tiny-glm4 against
 * its LoRA weights, the merged model file against W + s * B A computed here, the tokenizer keys of
 * a small vocabulary and of GLM-4's real one (318,088 merges). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/safetensors.h"
#include "lora/io/export.h"
#include "lora/io/gguf.h"
#include "lora/io/gguf_export.h"
#include "lora/io/gguf_vocab.h"
#include "lora/model/family.h"
#include "tests/check.h"
#include "tests/lora/gguf_reader.h"
#include "tool/export_vocab.h"

static char g_tmp[256];

static char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, name);
    return buf[k];
}

static uint64_t g_rng = 88172645463325252ull;
static float frand(void) { /* xorshift64, uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2 - 1);
}

static float f32_at(const uint8_t *p) {
    uint32_t u = (uint32_t)gr_le(p, 4);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE half -> float, written here */
static float half_to_float(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (float)((h & 0x8000) ? -v : v);
}

/* float -> IEEE half, round to nearest even, through frexp and rint (not the library's bit path) */
static uint16_t half_ref(float f) {
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a == 0) return sign;
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    e -= 1;       /* a = M 2^e, M in [1, 2) */
    if (e < -14) return sign | (uint16_t)rint(a / ldexp(1, -24)); /* subnormal (or rounds up to the smallest normal) */
    double m = rint(a / ldexp(1, e) * 1024);
    if (m == 2048) m = 1024, e++;
    if (e > 15) return sign | 0x7c00;
    return sign | (uint16_t)((e + 15) << 10 | ((int)m - 1024));
}

/* Q8_0 of 32 values, written here from ggml-quants.c's description (quantize_row_q8_0_ref): d =
 * max|x| / 127 in float, id = 1/d, q = x * id rounded half away from zero (in double: exact). */
static void q8_ref(const float *x, uint8_t *out) {
    float amax = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
    float d = amax / 127, id = d ? 1 / d : 0;
    uint16_t h = half_ref(d);
    out[0] = (uint8_t)h;
    out[1] = (uint8_t)(h >> 8);
    for (int j = 0; j < 32; j++) {
        float v = x[j] * id;
        double q = v >= 0 ? floor((double)v + 0.5) : -floor(-(double)v + 0.5);
        out[2 + j] = (uint8_t)(int8_t)q;
    }
}

/* ------------------------------------------------------------------ the container */

static void test_container(void) {
    glm_gguf *g;
    CHECK(glm_gguf_new(&g) == GLM_OK, "new");
    CHECK(glm_gguf_kv_str(g, "a.str", "héllo") == GLM_OK, "str");
    CHECK(glm_gguf_kv_u32(g, "a.u32", 4000000000u) == GLM_OK, "u32");
    CHECK(glm_gguf_kv_i32(g, "a.i32", -7) == GLM_OK, "i32");
    CHECK(glm_gguf_kv_u64(g, "a.u64", 1ull << 40) == GLM_OK, "u64");
    CHECK(glm_gguf_kv_f32(g, "a.f32", 1.5625e-07f) == GLM_OK, "f32");
    CHECK(glm_gguf_kv_bool(g, "a.bool", true) == GLM_OK, "bool");
    const char *strs[] = {"x", "", "yz"};
    CHECK(glm_gguf_kv_strs(g, "a.strs", strs, NULL, 3) == GLM_OK, "strs");
    int32_t iv[] = {1, -2, 3};
    CHECK(glm_gguf_kv_i32s(g, "a.i32s", iv, 3) == GLM_OK, "i32s");
    CHECK(glm_gguf_kv_u32(g, "a.u32", 1) == GLM_ERR_ARG, "a key added twice is refused");
    int64_t s1[] = {5}, s2[] = {3, 64}, s3[] = {2, 32};
    CHECK(glm_gguf_add_tensor(g, "t.one", GLM_GGML_F32, 1, s1) == GLM_OK, "t1");
    CHECK(glm_gguf_add_tensor(g, "t.two", GLM_GGML_F16, 2, s2) == GLM_OK, "t2");
    CHECK(glm_gguf_add_tensor(g, "t.q8", GLM_GGML_Q8_0, 2, s3) == GLM_OK, "t3");
    CHECK(glm_gguf_add_tensor(g, "t.bf", GLM_GGML_BF16, 2, s3) == GLM_OK, "t4");
    int64_t bad[] = {2, 33};
    CHECK(glm_gguf_add_tensor(g, "t.bad", GLM_GGML_Q8_0, 2, bad) == GLM_ERR_ARG, "q8_0 rows of 33 are refused");
    CHECK(glm_gguf_add_tensor(g, "t.one", GLM_GGML_F32, 1, s1) == GLM_ERR_ARG, "a tensor name twice is refused");
    const char *path = tmp_path("c.gguf");
    CHECK(glm_gguf_begin(g, path) == GLM_OK, "begin: %s", glm_errmsg());
    CHECK(access(path, F_OK) != 0, "nothing at the final name before commit");
    float x1[5] = {1, 2, 3, 4, 5}, x2[192], x3[64];
    for (int i = 0; i < 192; i++) x2[i] = frand();
    for (int i = 0; i < 64; i++) x3[i] = frand() * 3;
    uint8_t b2[384], b3[68], b4[128];
    glm_ggml_encode(GLM_GGML_F16, x2, 192, b2);
    glm_ggml_encode(GLM_GGML_Q8_0, x3, 64, b3);
    glm_ggml_encode(GLM_GGML_BF16, x3, 64, b4);
    CHECK(glm_gguf_write_tensor(g, x1, 20) == GLM_OK, "w1");
    CHECK(glm_gguf_write_tensor(g, b2, 100) == GLM_ERR_ARG, "a wrong size is refused");
    CHECK(glm_gguf_write_tensor(g, b2, 384) == GLM_OK, "w2");
    CHECK(glm_gguf_write_tensor(g, b3, 68) == GLM_OK, "w3");
    CHECK(glm_gguf_commit(g) == GLM_ERR_ARG, "commit with a tensor unwritten is refused");
    CHECK(glm_gguf_write_tensor(g, b4, 128) == GLM_OK, "w4");
    CHECK(glm_gguf_commit(g) == GLM_OK, "commit: %s", glm_errmsg());
    glm_gguf_free(g);

    gr_file r;
    bool ok = gr_open(&r, path);
    CHECK(ok, "read: %s", r.err);
    if (!ok) return;
    CHECK(r.magic == 0x46554747u && r.version == 3, "magic GGUF, version 3");
    CHECK(r.n_kv == 9 && r.n_t == 4, "9 keys (8 + general.alignment), 4 tensors: %llu %llu", (unsigned long long)r.n_kv,
          (unsigned long long)r.n_t);
    const gr_kv *kv;
    char *s = gr_str_of(&r, "a.str");
    CHECK(s && !strcmp(s, "héllo"), "string value");
    free(s);
    CHECK((kv = gr_key(&r, "a.u32")) && kv->type == 4 && gr_le(kv->v, 4) == 4000000000u, "u32");
    CHECK((kv = gr_key(&r, "a.i32")) && kv->type == 5 && (int32_t)gr_le(kv->v, 4) == -7, "i32");
    CHECK((kv = gr_key(&r, "a.u64")) && kv->type == 10 && gr_le(kv->v, 8) == 1ull << 40, "u64");
    CHECK((kv = gr_key(&r, "a.f32")) && kv->type == 6 && f32_at(kv->v) == 1.5625e-07f, "f32");
    CHECK((kv = gr_key(&r, "a.bool")) && kv->type == 7 && kv->v[0] == 1, "bool one byte");
    CHECK((kv = gr_key(&r, "a.strs")) && kv->type == 9 && kv->elem == 8 && kv->count == 3 &&
              gr_streq(gr_arr_str(kv, 0), "x") && gr_streq(gr_arr_str(kv, 1), "") && gr_streq(gr_arr_str(kv, 2), "yz"),
          "string array");
    CHECK((kv = gr_key(&r, "a.i32s")) && kv->elem == 5 && kv->count == 3 && (int32_t)gr_le(kv->v + 4, 4) == -2, "i32 array");
    CHECK((kv = gr_key(&r, "general.alignment")) && kv->type == 4 && gr_le(kv->v, 4) == 32, "general.alignment 32");
    const gr_tensor *t = gr_find(&r, "t.two");
    CHECK(t && t->ndim == 2 && t->ne[0] == 64 && t->ne[1] == 3 && t->type == 1, "dims reversed, F16 type 1");
    CHECK(t && !memcmp(t->data, b2, 384), "F16 data");
    for (int i = 0; t && i < 192; i++)
        if ((uint16_t)gr_le(t->data + 2 * i, 2) != half_ref(x2[i])) {
            CHECK(false, "F16 value %d is not the nearest half (ties to even)", i);
            break;
        }
    t = gr_find(&r, "t.one");
    CHECK(t && t->type == 0 && t->ne[0] == 5 && t->offset == 0 && f32_at(t->data + 16) == 5, "F32 tensor at offset 0");
    t = gr_find(&r, "t.q8");
    CHECK(t && t->type == 8 && t->offset == 32 + 384, "Q8_0 type 8, offset after the padded F32 (32) and F16 (384)");
    t = gr_find(&r, "t.bf");
    CHECK(t && t->type == 30 && t->offset % 32 == 0 && t->offset == 416 + 96, "BF16 type 30, aligned after 68 -> 96 bytes");
    CHECK(r.data_start % 32 == 0 && r.data_start + 512 + 128 == r.size, "data aligned, file ends with the last tensor");
    gr_close(&r);
}

static void test_q8_0(void) {
    float x[32 * 6];
    for (int i = 0; i < 32 * 6; i++) x[i] = frand() * (1 + i / 32);
    memset(x + 64, 0, 32 * sizeof *x); /* an all-zero block: d = 0, q = 0 */
    x[96] = 127; /* d = 1, id = 1: x * id = x, ties at k + 0.5 of both signs (roundf: away from zero) */
    for (int j = 1; j < 32; j++) x[96 + j] = (float)(j - 16) + 0.5f;
    x[128] = 1e-30f;                                                  /* a tiny d: f16 subnormal / zero */
    for (int j = 1; j < 32; j++) x[128 + j] = -1e-31f * j;
    uint8_t got[6 * 34], ref[34];
    CHECK(glm_ggml_encode(GLM_GGML_Q8_0, x, 32 * 6, got) == GLM_OK, "encode");
    for (int b = 0; b < 6; b++) {
        q8_ref(x + 32 * b, ref);
        CHECK(!memcmp(got + 34 * b, ref, 34), "Q8_0 block %d equals the reference computed here", b);
        float d = half_to_float((uint16_t)(got[34 * b] | got[34 * b + 1] << 8)), amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        for (int j = 0; j < 32; j++) {
            float v = (float)(int8_t)got[34 * b + 2 + j] * d, e = fabsf(v - x[32 * b + j]);
            /* half a step of the f32 scale, plus the f16 rounding of the scale times |q| <= 127 */
            if (e > amax / 127 / 2 * 1.0001f + 127 * fabsf(d - amax / 127) + 1e-37f) {
                CHECK(false, "block %d value %d decodes to %g, %g away from %g", b, j, v, e, x[32 * b + j]);
                break;
            }
        }
    }
    CHECK(glm_ggml_encode(GLM_GGML_Q8_0, x, 33, got) == GLM_ERR_ARG, "q8_0 needs whole blocks");
    CHECK(glm_ggml_nbytes(GLM_GGML_Q8_0, 4096, 3) == 3 * 128 * 34, "q8_0 size");
}

/* ------------------------------------------------------------------ adapter */

typedef struct {
    glm_param *p;
    size_t n;
    glm_st_set *set;
} adapter;

/* The fixture's PEFT adapter with random A and B (PEFT initialises B to zero). */
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
        for (int64_t k = 0; k < t->numel; k++) a.p[i].w[k] = frand() * 0.1f;
    }
    return a;
}

static void free_adapter(adapter *a) {
    for (size_t i = 0; i < a->n; i++) free(a->p[i].w);
    free(a->p);
    glm_st_close(a->set);
}

static const glm_param *param_named(const adapter *a, const char *name) {
    for (size_t i = 0; i < a->n; i++)
        if (!strcmp(a->p[i].name, name)) return &a->p[i];
    return NULL;
}

/* llama.cpp's LoRA names for the fixture's modules, written out here */
static const char *const k_chatglm_lora[][2] = {
    {"self_attention.query_key_value", "attn_qkv"}, {"self_attention.dense", "attn_output"},
    {"mlp.dense_h_to_4h", "ffn_up"}, {"mlp.dense_4h_to_h", "ffn_down"}};
static const char *const k_hf_lora[][2] = {
    {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"}, {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"}, {"mlp.gate_up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"}};

static void test_adapter(const char *fx, bool hf, bool rslora, glm_ggml_type type) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tiny-glm4/%s/adapter_init", fx, hf ? "hf" : "chatglm");
    adapter a = load_adapter(dir);
    if (!a.set) return;
    const char *targets[] = {"x"};
    glm_adapter_cfg c = {.r = 4, .alpha = 8, .target_modules = targets, .n_targets = 1, .use_rslora = rslora};
    const char *path = tmp_path("adapter.gguf");
    glm_status st = glm_gguf_write_adapter(path, NULL, a.p, a.n, &c, type);
    CHECK(st == GLM_OK, "write adapter: %s", glm_errmsg());
    gr_file r;
    bool ok = st == GLM_OK && gr_open(&r, path);
    CHECK(ok, "read adapter: %s", r.err);
    if (!ok) {
        free_adapter(&a);
        return;
    }
    char *s;
    CHECK((s = gr_str_of(&r, "general.architecture")) && !strcmp(s, "chatglm"), "architecture chatglm");
    free(s);
    CHECK((s = gr_str_of(&r, "general.type")) && !strcmp(s, "adapter"), "general.type adapter");
    free(s);
    CHECK((s = gr_str_of(&r, "adapter.type")) && !strcmp(s, "lora"), "adapter.type lora");
    free(s);
    const gr_kv *kv = gr_key(&r, "adapter.lora.alpha");
    float want = rslora ? 16.0f : 8.0f; /* llama.cpp scales by alpha / r: rsLoRA's 8 / sqrt(4) needs alpha 16 */
    CHECK(kv && kv->type == 6 && f32_at(kv->v) == want, "adapter.lora.alpha %g", want);
    const char *const(*names)[2] = hf ? k_hf_lora : k_chatglm_lora;
    size_t nn = hf ? 6 : 4;
    CHECK(r.n_t == 2 * 2 * nn, "a pair per module and layer: %llu", (unsigned long long)r.n_t);
    for (int l = 0; l < 2; l++)
        for (size_t m = 0; m < nn; m++)
            for (int ab = 0; ab < 2; ab++) {
                char pn[256], gn[128];
                snprintf(pn, sizeof pn, "%s.%d.%s.lora_%c.weight", hf ? "model.layers" : "transformer.encoder.layers", l,
                         names[m][0], ab ? 'B' : 'A');
                snprintf(gn, sizeof gn, "blk.%d.%s.weight.lora_%c", l, names[m][1], ab ? 'b' : 'a');
                const glm_param *p = param_named(&a, pn);
                const gr_tensor *t = gr_find(&r, gn);
                CHECK(p && t, "%s and %s", pn, gn);
                if (!p || !t) continue;
                CHECK(t->type == (uint32_t)type && t->ndim == 2 && t->ne[0] == (uint64_t)p->shape[1] &&
                          t->ne[1] == (uint64_t)p->shape[0],
                      "%s: dims [%lld, %lld] reversed", gn, (long long)p->shape[0], (long long)p->shape[1]);
                bool same = true;
                for (int64_t k = 0; k < p->numel && same; k++) {
                    float v = type == GLM_GGML_F32 ? f32_at(t->data + 4 * k)
                                                   : half_to_float((uint16_t)gr_le(t->data + 2 * k, 2));
                    float w = type == GLM_GGML_F32 ? p->w[k] : half_to_float(half_ref(p->w[k]));
                    same = v == w;
                }
                CHECK(same, "%s holds %s's values", gn, pn);
            }
    gr_close(&r);
    /* a module with only A is refused */
    strcpy(a.p[1].name, a.p[0].name);
    CHECK(glm_gguf_write_adapter(tmp_path("bad.gguf"), NULL, a.p, a.n, &c, type) == GLM_ERR_MISMATCH,
          "an adapter with a LoRA weight twice is refused");
    strcpy(a.p[0].name, "transformer.embedding.word_embeddings.lora_A.weight");
    CHECK(glm_gguf_write_adapter(tmp_path("bad.gguf"), NULL, a.p, a.n, &c, type) == GLM_ERR_MISMATCH,
          "a LoRA weight on a module llama.cpp has no name for is refused");
    free_adapter(&a);
}

/* ------------------------------------------------------------------ vocabulary */

/* 256 bytes (rank = byte), then "ab", "abc", "bc", " a"; 14 specials after them; model vocabulary
 * 512: fillers from 274. */
typedef struct {
    char bytes[256];
    const char *rb[260];
    size_t rl[260];
    const char *sp[14];
    uint32_t sid[14];
    char names[14][16];
    glm_gguf_vocab v;
} small_vocab;

static void make_small(small_vocab *s, const glm_family *f) {
    for (int i = 0; i < 256; i++) s->bytes[i] = (char)i, s->rb[i] = s->bytes + i, s->rl[i] = 1;
    const char *extra[] = {"ab", "abc", "bc", " a"};
    for (int i = 0; i < 4; i++) s->rb[256 + i] = extra[i], s->rl[256 + i] = strlen(extra[i]);
    for (int i = 0; i < 14; i++) {
        snprintf(s->names[i], sizeof s->names[i], "<|s%d|>", i);
        s->sp[i] = s->names[i];
        s->sid[i] = 260 + i;
    }
    s->v = (glm_gguf_vocab){.n_ranks = 260, .rank_bytes = s->rb, .rank_len = s->rl, .n_special = 14, .special = s->sp,
                            .special_id = s->sid, .vocab_size = 512, .chat_template = "{{ x }}", .bos = 262};
    glm_gguf_vocab_use_family(&s->v, f); /* GLM-4's stop ids are outside 512: */
    s->v.eos = s->v.pad = s->v.unk = 260, s->v.eot = 261, s->v.eom = 263;
}

static void test_small_vocab(void) {
    small_vocab s;
    make_small(&s, glm_family_get(GLM_LAYOUT_CHATGLM));
    char **m = NULL;
    size_t n = 0;
    CHECK(glm_gguf_vocab_merges(&s.v, &m, &n) == GLM_OK, "merges");
    const char *want[] = {"a b", "a bc", "ab c", "b c", "Ġ a"}; /* by rank, then (left rank, right rank) */
    CHECK(n == 5, "5 merges, got %zu", n);
    for (size_t i = 0; i < 5 && i < n; i++) CHECK(!strcmp(m[i], want[i]), "merge %zu: %s, want %s", i, m[i], want[i]);
    glm_gguf_merges_free(m, n);
    char u[16];
    glm_gguf_bytes_to_unicode("\x00\x20\x7f\xad\xff!", 6, u);
    CHECK(!strcmp(u, "\xc4\x80\xc4\xa0\xc4\xa1\xc5\x83\xc3\xbf!"), "byte-to-unicode: 0->U+0100, ' '->U+0120, 0x7f->U+0121, "
          "0xad->U+0143, 0xff->U+00FF, '!'");
    glm_gguf *g;
    glm_gguf_new(&g);
    CHECK(glm_gguf_add_vocab(g, &s.v) == GLM_OK, "add vocab: %s", glm_errmsg());
    const char *path = tmp_path("vocab.gguf");
    CHECK(glm_gguf_begin(g, path) == GLM_OK && glm_gguf_commit(g) == GLM_OK, "write");
    glm_gguf_free(g);
    gr_file r;
    if (!gr_open(&r, path)) {
        CHECK(false, "read: %s", r.err);
        return;
    }
    const gr_kv *tok = gr_key(&r, "tokenizer.ggml.tokens"), *ty = gr_key(&r, "tokenizer.ggml.token_type");
    CHECK(tok && tok->count == 512 && ty && ty->count == 512, "512 tokens and types");
    if (tok && ty) {
        CHECK(gr_streq(gr_arr_str(tok, 32), "Ġ") && gr_streq(gr_arr_str(tok, 259), "Ġa") &&
                  gr_streq(gr_arr_str(tok, 260), "<|s0|>") && gr_streq(gr_arr_str(tok, 274), "[PAD274]") &&
                  gr_streq(gr_arr_str(tok, 511), "[PAD511]"),
              "tokens: ranks in byte-to-unicode form, specials, fillers");
        CHECK(gr_le(ty->v + 4 * 259, 4) == 1 && gr_le(ty->v + 4 * 273, 4) == 3 && gr_le(ty->v + 4 * 274, 4) == 5,
              "types NORMAL 1, CONTROL 3, UNUSED 5");
    }
    const gr_kv *kv;
    CHECK((kv = gr_key(&r, "tokenizer.ggml.eot_token_id")) && kv->type == 4 && gr_le(kv->v, 4) == 261, "eot");
    CHECK((kv = gr_key(&r, "tokenizer.ggml.add_bos_token")) && kv->type == 7 && kv->v[0] == 0, "add_bos_token false");
    gr_close(&r);
    s.v.eom = 100;
    glm_gguf_new(&g);
    CHECK(glm_gguf_add_vocab(g, &s.v) == GLM_ERR_ARG, "an eom id that is an ordinary token is refused");
    glm_gguf_free(g);
}

static void test_real_vocab(const char *fx) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/glm4-tokenizer", fx);
    export_vocab ev;
    glm_status st = export_vocab_load(dir, 151552, &ev);
    CHECK(st == GLM_OK, "load: %s", glm_errmsg());
    if (st != GLM_OK) return;
    glm_gguf_vocab_use_family(&ev.v, glm_family_get(GLM_LAYOUT_CHATGLM));
    CHECK(ev.v.n_ranks == 151329 && ev.v.n_special == 14, "151329 ranks, 14 specials");
    CHECK(ev.v.bos == 151331 && ev.v.eos == 151329 && ev.v.eot == 151336 && ev.v.eom == 151338 && ev.v.pad == 151329 &&
              ev.v.unk == 151329,
          "bos 151331, eos 151329, eot 151336, eom 151338, pad / unk 151329");
    char **m = NULL;
    size_t n = 0;
    CHECK(glm_gguf_vocab_merges(&ev.v, &m, &n) == GLM_OK, "merges");
    CHECK(n == 318088, "GLM-4's tokenizer has 318,088 merges, got %zu", n);
    /* the first and last merges, as transformers' TikTokenConverter derives them */
    const char *first[] = {"Ġ Ġ", "Ġ ĠĠĠ", "ĠĠ ĠĠ", "ĠĠĠ Ġ", "i n", "Ġ t"};
    for (size_t i = 0; i < 6 && i < n; i++) CHECK(!strcmp(m[i], first[i]), "merge %zu: %s, want %s", i, m[i], first[i]);
    CHECK(n > 2 && !strcmp(m[n - 1], "ĠÐ½Ðµ ÑģÐ¾Ð²ÐµÑĢÑĪÐµÐ½") && !strcmp(m[n - 2], "Ġdin a"), "the last merges");
    glm_gguf_merges_free(m, n);
    glm_gguf *g;
    glm_gguf_new(&g);
    CHECK(glm_gguf_add_vocab(g, &ev.v) == GLM_OK, "add vocab: %s", glm_errmsg());
    const char *path = tmp_path("glm4vocab.gguf");
    CHECK(glm_gguf_begin(g, path) == GLM_OK && glm_gguf_commit(g) == GLM_OK, "write");
    glm_gguf_free(g);
    gr_file r;
    if (gr_open(&r, path)) {
        const gr_kv *tok = gr_key(&r, "tokenizer.ggml.tokens"), *ty = gr_key(&r, "tokenizer.ggml.token_type");
        CHECK(tok && tok->count == 151552 && ty && ty->count == 151552, "151552 tokens");
        if (tok && ty) {
            CHECK(gr_streq(gr_arr_str(tok, 0), "!") && gr_streq(gr_arr_str(tok, 94), "¡") &&
                      gr_streq(gr_arr_str(tok, 220), "Ġ") && gr_streq(gr_arr_str(tok, 256), "ĠĠ") &&
                      gr_streq(gr_arr_str(tok, 1000), "atus"),
                  "ordinary tokens");
            CHECK(gr_streq(gr_arr_str(tok, 151329), "<|endoftext|>") && gr_streq(gr_arr_str(tok, 151331), "[gMASK]") &&
                      gr_streq(gr_arr_str(tok, 151342), "<|end_of_video|>") &&
                      gr_streq(gr_arr_str(tok, 151343), "[PAD151343]") && gr_streq(gr_arr_str(tok, 151551), "[PAD151551]"),
                  "specials and fillers");
            int count[6] = {0};
            for (uint64_t i = 0; i < ty->count; i++) {
                uint64_t t = gr_le(ty->v + 4 * i, 4);
                if (t < 6) count[t]++;
            }
            CHECK(count[1] == 151329 && count[3] == 14 && count[5] == 209, "NORMAL x151329, CONTROL x14, UNUSED x209");
        }
        const gr_kv *mk = gr_key(&r, "tokenizer.ggml.merges");
        CHECK(mk && mk->count == 318088, "318088 merges in the file");
        char *s = gr_str_of(&r, "tokenizer.ggml.pre"), *s2 = gr_str_of(&r, "tokenizer.ggml.model"),
             *tpl = gr_str_of(&r, "tokenizer.chat_template");
        CHECK(s && !strcmp(s, "glm4") && s2 && !strcmp(s2, "gpt2"), "model gpt2, pre glm4");
        CHECK(tpl && !strncmp(tpl, "[gMASK]<sop>{% for item in messages %}", 38), "the chat template");
        free(s);
        free(s2);
        free(tpl);
        gr_close(&r);
    } else {
        CHECK(false, "read: %s", r.err);
    }
    export_vocab_free(&ev);
}

/* ------------------------------------------------------------------ merged model */

static void test_merged(const char *fx, bool hf) {
    char base[512];
    snprintf(base, sizeof base, "%s/tiny-glm4/%s", fx, hf ? "hf" : "chatglm");
    char adir[600];
    snprintf(adir, sizeof adir, "%s/adapter_init", base);
    adapter a = load_adapter(adir);
    if (!a.set) return;
    const glm_family *f = glm_family_get(hf ? GLM_LAYOUT_HF : GLM_LAYOUT_CHATGLM);
    small_vocab sv;
    make_small(&sv, f);
    double scaling = 2.0;
    const char *p32 = tmp_path("m32.gguf"), *pq = tmp_path("mq8.gguf");
    glm_status st = glm_gguf_write_merged(p32, base, NULL, a.p, a.n, scaling, GLM_GGML_F32, &sv.v);
    CHECK(st == GLM_OK, "merged f32: %s", glm_errmsg());
    st = glm_gguf_write_merged(pq, base, NULL, a.p, a.n, scaling, GLM_GGML_Q8_0, &sv.v);
    CHECK(st == GLM_OK, "merged q8_0: %s", glm_errmsg());
    gr_file r, q;
    if (!gr_open(&r, p32) || !gr_open(&q, pq)) {
        CHECK(false, "read: %s", r.err);
        free_adapter(&a);
        return;
    }
    const struct {
        const char *key;
        uint32_t type;
        double v;
    } keys[] = {
        {"chatglm.context_length", 4, 1048576}, {"chatglm.embedding_length", 4, 64}, {"chatglm.feed_forward_length", 4, 160},
        {"chatglm.block_count", 4, 2},         {"chatglm.attention.head_count", 4, 4},
        {"chatglm.attention.head_count_kv", 4, 2}, {"chatglm.attention.layer_norm_rms_epsilon", 6, 1.5625e-07f},
        {"chatglm.rope.dimension_count", 4, 8}, {"chatglm.rope.freq_base", 6, 10000}, {"general.file_type", 4, 0},
    };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const gr_kv *kv = gr_key(&r, keys[i].key);
        double v = !kv ? NAN : kv->type == 6 ? f32_at(kv->v) : (double)gr_le(kv->v, 4);
        CHECK(kv && kv->type == keys[i].type && v == keys[i].v, "%s = %g (got %g)", keys[i].key, keys[i].v, v);
    }
    const gr_kv *ft = gr_key(&q, "general.file_type");
    CHECK(ft && gr_le(ft->v, 4) == 7, "q8_0 file: general.file_type 7 (MOSTLY_Q8_0)");
    char *s = gr_str_of(&r, "general.type");
    CHECK(s && !strcmp(s, "model"), "general.type model");
    free(s);
    s = gr_str_of(&r, "general.name");
    CHECK(s && !strcmp(s, hf ? "hf" : "chatglm"), "general.name: the base directory's name (%s)", s ? s : "none");
    free(s);
    CHECK(gr_key(&r, "tokenizer.ggml.merges") != NULL, "the tokenizer is in the file");
    /* every tensor: GGUF name <- checkpoint name, written out here */
    glm_st_set *bs = NULL;
    CHECK(glm_st_open(base, &bs) == GLM_OK, "base");
    char gn[128], cn[256];
    const char *layer_map_chatglm[][2] = {
        {"attn_norm.weight", "input_layernorm.weight"}, {"attn_qkv.weight", "self_attention.query_key_value.weight"},
        {"attn_qkv.bias", "self_attention.query_key_value.bias"}, {"attn_output.weight", "self_attention.dense.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"}, {"ffn_up.weight", "mlp.dense_h_to_4h.weight"},
        {"ffn_down.weight", "mlp.dense_4h_to_h.weight"}};
    const char *layer_map_hf[][2] = {
        {"attn_norm.weight", "input_layernorm.weight"}, {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_q.bias", "self_attn.q_proj.bias"}, {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_k.bias", "self_attn.k_proj.bias"}, {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_v.bias", "self_attn.v_proj.bias"}, {"attn_output.weight", "self_attn.o_proj.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"}, {"ffn_up.weight", "mlp.gate_up_proj.weight"},
        {"ffn_down.weight", "mlp.down_proj.weight"}};
    const char *(*lm)[2] = hf ? layer_map_hf : layer_map_chatglm;
    size_t nl = hf ? 11 : 7;
    CHECK(r.n_t == 3 + 2 * nl && q.n_t == r.n_t, "%zu tensors, got %llu", 3 + 2 * nl, (unsigned long long)r.n_t);
    for (size_t i = 0; i < 3 + 2 * nl; i++) {
        if (i < 3) {
            const char *g3[] = {"token_embd.weight", "output_norm.weight", "output.weight"};
            const char *c3[] = {hf ? "model.embed_tokens.weight" : "transformer.embedding.word_embeddings.weight",
                                hf ? "model.norm.weight" : "transformer.encoder.final_layernorm.weight",
                                hf ? "lm_head.weight" : "transformer.output_layer.weight"};
            snprintf(gn, sizeof gn, "%s", g3[i]);
            snprintf(cn, sizeof cn, "%s", c3[i]);
        } else {
            size_t k = (i - 3) % nl;
            int l = (int)((i - 3) / nl);
            snprintf(gn, sizeof gn, "blk.%d.%s", l, lm[k][0]);
            snprintf(cn, sizeof cn, "%s.%d.%s", hf ? "model.layers" : "transformer.encoder.layers", l, lm[k][1]);
        }
        const gr_tensor *t = gr_find(&r, gn), *tq = gr_find(&q, gn);
        const glm_st_tensor *b = bs ? glm_st_find(bs, cn) : NULL;
        CHECK(t && tq && b, "%s (%s)", gn, cn);
        if (!t || !tq || !b) continue;
        CHECK(t->ndim == (uint32_t)b->ndim && t->ne[0] == (uint64_t)b->shape[b->ndim - 1] &&
                  (b->ndim == 1 || t->ne[1] == (uint64_t)b->shape[0]),
              "%s: dims reversed", gn);
        CHECK(t->type == 0 && tq->type == (b->ndim == 1 ? 0u : 8u), "%s: f32 file all F32; q8_0 file 2-D Q8_0, 1-D F32", gn);
        float *w = malloc(b->numel * sizeof *w);
        glm_st_to_f32(b->dtype, b->data, b->numel, w);
        /* W + s B A, here in double */
        size_t mlen = strlen(cn) - 7;
        char an[300], bn[300];
        snprintf(an, sizeof an, "%.*s.lora_A.weight", (int)mlen, cn);
        snprintf(bn, sizeof bn, "%.*s.lora_B.weight", (int)mlen, cn);
        const glm_param *A = param_named(&a, an), *B = param_named(&a, bn);
        bool merged = A && B && b->ndim == 2;
        double worst = 0;
        for (int64_t o = 0; o < (b->ndim == 2 ? b->shape[0] : 1); o++)
            for (int64_t k = 0; k < b->shape[b->ndim - 1]; k++) {
                int64_t in = b->shape[b->ndim - 1];
                double ref = w[o * in + k];
                if (merged)
                    for (int64_t j = 0; j < A->shape[0]; j++) ref += scaling * (double)B->w[o * A->shape[0] + j] * A->w[j * in + k];
                double e = fabs(f32_at(t->data + 4 * (o * in + k)) - ref) / (fabs(ref) + 1e-3);
                if (e > worst) worst = e;
            }
        CHECK(merged ? worst < 1e-6 : worst == 0, "%s: %s (worst relative error %g)", gn,
              merged ? "W + s B A" : "the base weight as it is", worst);
        if (b->ndim == 2) { /* the q8_0 file's blocks: the ones computed here from the f32 file's values */
            bool same = true;
            uint8_t ref[34];
            float x[32];
            for (int64_t blk = 0; blk < b->numel / 32 && same; blk++) {
                for (int j = 0; j < 32; j++) x[j] = f32_at(t->data + 4 * (blk * 32 + j));
                q8_ref(x, ref);
                same = !memcmp(tq->data + 34 * blk, ref, 34);
            }
            CHECK(same, "%s: Q8_0 blocks equal the reference computed here", gn);
        } else {
            CHECK(!memcmp(tq->data, t->data, 4 * b->numel), "%s: 1-D tensors F32 in the q8_0 file too", gn);
        }
        free(w);
    }
    glm_st_close(bs);
    gr_close(&r);
    gr_close(&q);
    /* the vocabulary must be the model's */
    sv.v.vocab_size = 600;
    CHECK(glm_gguf_write_merged(tmp_path("bad.gguf"), base, NULL, a.p, a.n, scaling, GLM_GGML_F32, &sv.v) ==
              GLM_ERR_MISMATCH,
          "a tokenizer laid out for another vocabulary size is refused");
    free_adapter(&a);
}

static void test_modelfile(void) {
    small_vocab sv;
    const glm_family *f = glm_family_get(GLM_LAYOUT_CHATGLM);
    make_small(&sv, f);
    const char *path = tmp_path("Modelfile");
    CHECK(glm_gguf_write_modelfile(path, "model.gguf", f, &sv.v) == GLM_ERR_ARG,
          "stop ids that are not specials of the tokenizer are refused");
    /* GLM-4's specials at their ids */
    const char *sp[] = {"<|endoftext|>", "<|user|>", "<|observation|>"};
    uint32_t id[] = {151329, 151336, 151338};
    sv.v.special = sp, sv.v.special_id = id, sv.v.n_special = 3;
    CHECK(glm_gguf_write_modelfile(path, "model.gguf", f, &sv.v) == GLM_OK, "modelfile: %s", glm_errmsg());
    char *text = NULL;
    size_t len = 0;
    CHECK(glm_read_file(path, &text, &len) == GLM_OK, "read");
    if (!text) return;
    CHECK(strstr(text, "\nFROM ./model.gguf\n") != NULL, "FROM");
    CHECK(strstr(text, "TEMPLATE \"\"\"[gMASK]<sop>{{ range .Messages }}") != NULL, "TEMPLATE starts with [gMASK]<sop>");
    CHECK(strstr(text, "<|assistant|>\"\"\"") != NULL, "the template ends with the generation prompt <|assistant|>");
    CHECK(strstr(text, "PARAMETER stop \"<|user|>\"\n") && strstr(text, "PARAMETER stop \"<|observation|>\"\n") &&
              strstr(text, "PARAMETER stop \"<|endoftext|>\"\n"),
          "stops <|user|>, <|observation|>, <|endoftext|>");
    free(text);
}

int main(void) {
    const char *fx = test_data_dir();
    snprintf(g_tmp, sizeof g_tmp, "/tmp/test_gguf.XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    test_container();
    test_q8_0();
    test_adapter(fx, false, false, GLM_GGML_F32);
    test_adapter(fx, true, false, GLM_GGML_F32);
    test_adapter(fx, true, true, GLM_GGML_F16);
    test_small_vocab();
    test_merged(fx, false);
    test_merged(fx, true);
    test_modelfile();
    test_real_vocab(fx);
    glm_rmtree(g_tmp);
    return check_summary("test_gguf");
}
