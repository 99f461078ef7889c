/* tests/lora/test_qlora.c: the 4-bit (QLoRA) base on the CPU backend, the reference. A step on the
 * tiny GLM-4 fixture loaded with --quantization-bit 4 (nf4, with and without double quantization)
 * equals bit for bit a step on a checkpoint whose linear matrices bitsandbytes 0.50.2 quantized and
 * dequantized to bf16 (tests/fixtures/bnb4/tiny-chatglm-nf4*, made by make_qlora_tiny.py): the
 * dequantized weights, the loss and every LoRA gradient. Also: the layer weights really are
 * 4-bit (their bytes), sharding's format helpers, and the plan's count of them; the hf layout
 * (nf4 and fp4, with and without double quantization) quantizes q_proj, k_proj and v_proj one by
 * one into segments of query_key_value (hf_segments), and the plan counts the bytes the load
 * allocates in both layouts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "common/safetensors.h"
#include "kernels/quant4.h"
#include "lora/adapter/lora.h"
#include "lora/model/family.h"
#include "lora/model/model.h"
#include "tests/check.h"
#include "tests/qlora_util.h"

enum { T = QLORA_T };

static void make_batch(int V, uint32_t *ids, uint8_t *tg, int32_t *pos, int32_t *doc, glm_batch *b) {
    qlora_batch(12345, V, ids, tg, pos, doc, b);
}

static glm_lora *adapter(glm_model *m) { return qlora_adapter(m); }

static void one(const char *data_dir, const char *src, int dq) {
    const glm_backend *be = glm_backend_cpu();
    char orig[1024], ref[1024];
    snprintf(orig, sizeof orig, "%s/tiny-glm4/chatglm", data_dir);
    snprintf(ref, sizeof ref, "%s/tests/fixtures/bnb4/tiny-chatglm-nf4%s", src, dq ? "-dq" : "");
    glm_base_format f = {4, GLM_WF_NF4, dq, 0};
    glm_model *q = NULL, *d = NULL;
    CHECK(glm_model_load_fmt(orig, be, 0, 0, &f, &q) == GLM_OK, "load nf4%s: %s", dq ? " dq" : "", glm_errmsg());
    CHECK(glm_model_load(ref, be, 0, &d) == GLM_OK, "load the bitsandbytes checkpoint %s: %s", ref, glm_errmsg());
    if (!q || !d) goto out;
    CHECK(!strcmp(glm_base_format_name(q), dq ? "nf4 + double quantization" : "nf4"), "name %s", glm_base_format_name(q));
    /* the stored weights are 4-bit: their buffers' bytes, and dequantized they are bitsandbytes' */
    for (int l = 0; l < q->cfg.L; l++) {
        const glm_weight *qw[4] = {&q->layers[l].wqkv, &q->layers[l].wo, &q->layers[l].w1, &q->layers[l].w2};
        const glm_weight *dw[4] = {&d->layers[l].wqkv, &d->layers[l].wo, &d->layers[l].w1, &d->layers[l].w2};
        for (int i = 0; i < 4; i++) {
            int64_t n = dw[i]->rows * dw[i]->cols;
            CHECK(qw[i]->fmt == GLM_WF_NF4 && qw[i]->n == n && qw[i]->double_quant == dq && (dq ? qw[i]->offset != NULL : 1),
                  "layer %d matrix %d: nf4 of %lld elements", l, i, (long long)n);
            float *x = malloc((size_t)n * 4);
            CHECK(glm_be_weight_dequantize(be, x, GLM_DT_F32, qw[i]) == GLM_OK, "dequantize: %s", glm_errmsg());
            CHECK(!memcmp(x, dw[i]->data, (size_t)n * 4), "layer %d matrix %d: glmtune's dequantized nf4%s == bitsandbytes'",
                  l, i, dq ? " dq" : "");
            free(x);
        }
    }
    /* a training step on each: the same loss and LoRA gradients, bit for bit */
    glm_lora *lq = adapter(q), *ld = adapter(d);
    if (!lq || !ld) goto out2;
    uint32_t ids[T];
    uint8_t tg[T];
    int32_t pos[T], doc[T];
    glm_batch b;
    make_batch(q->cfg.V, ids, tg, pos, doc, &b);
    double sq = 0, sd = 0;
    int64_t nq = 0, nd = 0;
    CHECK(glm_model_step(q, lq, &b, 1.0f / 38, 1, GLM_CKPT_FULL, 0, &sq, &nq) == GLM_OK, "step nf4: %s", glm_errmsg());
    CHECK(glm_model_step(d, ld, &b, 1.0f / 38, 1, GLM_CKPT_FULL, 0, &sd, &nd) == GLM_OK, "step bnb: %s", glm_errmsg());
    CHECK(sq == sd && nq == nd && nq == 38, "nf4%s loss sum %.17g == bitsandbytes checkpoint's %.17g (%lld targets)",
          dq ? " dq" : "", sq, sd, (long long)nq);
    int same = lq->n_params == ld->n_params;
    for (int i = 0; same && i < lq->n_params; i++)
        same = !memcmp(lq->params[i].g, ld->params[i].g, (size_t)lq->params[i].numel * 4);
    CHECK(same, "nf4%s: every LoRA gradient bit-identical to the bitsandbytes checkpoint's", dq ? " dq" : "");
    /* and the dense base differs (the test can fail): the original's loss is another number */
    {
        glm_model *o = NULL;
        CHECK(glm_model_load(orig, be, 0, &o) == GLM_OK, "load the bf16 original");
        glm_lora *lo = o ? adapter(o) : NULL;
        double so = 0;
        int64_t no = 0;
        if (lo) CHECK(glm_model_step(o, lo, &b, 1.0f / 38, 1, GLM_CKPT_FULL, 0, &so, &no) == GLM_OK, "step bf16");
        CHECK(so != sq, "the bf16 base's loss %.17g differs from the 4-bit one's %.17g", so, sq);
        glm_lora_free(lo);
        glm_model_free(o);
    }
    /* the plan counts the 4-bit bytes and a dequantization slot */
    glm_plan pq, pd;
    glm_model_plan(q, lq, 1, T, 1, GLM_CKPT_FULL, &pq);
    glm_model_plan(d, ld, 1, T, 1, GLM_CKPT_FULL, &pd);
    CHECK(pq.weights < pd.weights && pq.dequant > 0 && pd.dequant == 0 && pq.base_format == GLM_WF_NF4,
          "plan: 4-bit weights %.0f < dense %.0f bytes, dequantization slot %.0f", pq.weights, pd.weights, pq.dequant);
out2:
    glm_lora_free(lq);
    glm_lora_free(ld);
out:
    glm_model_free(q);
    glm_model_free(d);
}

/* The CPU backend counting the bytes its buffers hold (allocations less frees). */
enum { NTRACK = 4096 };
static struct {
    void *p;
    size_t n;
} g_track[NTRACK];
static size_t g_in_use;
static glm_status count_alloc(const glm_backend *be, size_t bytes, const char *what, void **out) {
    GLM_TRY(glm_backend_cpu()->alloc(be, bytes, what, out));
    for (int i = 0; i < NTRACK; i++)
        if (!g_track[i].p) {
            g_track[i].p = *out, g_track[i].n = bytes, g_in_use += bytes;
            return GLM_OK;
        }
    return glm_err(GLM_ERR_NOMEM, "test: too many buffers to count");
}
static void count_free(const glm_backend *be, void *p) {
    for (int i = 0; p && i < NTRACK; i++)
        if (g_track[i].p == p) {
            g_in_use -= g_track[i].n, g_track[i].p = NULL;
            break;
        }
    glm_backend_cpu()->free(be, p);
}
static const glm_backend *counting_cpu(void) {
    static glm_backend b;
    b = *glm_backend_cpu();
    b.alloc = count_alloc;
    b.free = count_free;
    return &b;
}

/* bytes of a buffer that may be absent */
static int same_bytes(const void *a, const void *b, size_t n) { return n == 0 || (a && b && !memcmp(a, b, n)); }

/* The hf layout (q_proj, k_proj, v_proj apart in the checkpoint) with a 4-bit base: query_key_value
 * is quantized per source tensor, as bitsandbytes quantizes each Linear of transformers' Glm. Its
 * segments' buffers are glm_q4's quantization of q, k and v each alone (their own blocks of 64,
 * double quantization's own mean and groups of 256), and dequantized it is their three
 * dequantizations stacked (test_quant4 ties glm_q4 to bitsandbytes' fixtures). The other matrices
 * and the chatglm layout quantize whole tensors. The plan counts what the model allocates. */
static void hf_segments(const char *data_dir, glm_wformat q4, int dq) {
    const glm_backend *be = glm_backend_cpu();
    const char *what = q4 == GLM_WF_FP4 ? (dq ? "fp4 dq" : "fp4") : (dq ? "nf4 dq" : "nf4");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tiny-glm4/hf", data_dir);
    glm_base_format f = {4, q4, dq, 0};
    glm_model *m = NULL;
    size_t used0 = g_in_use;
    CHECK(glm_model_load_fmt(dir, counting_cpu(), 0, 0, &f, &m) == GLM_OK, "load hf %s: %s", what, glm_errmsg());
    size_t used1 = g_in_use;
    glm_st_set *set = NULL;
    CHECK(glm_st_open(dir, &set) == GLM_OK, "open %s: %s", dir, glm_errmsg());
    if (!m || !set) goto out;
    const glm_config *c = &m->cfg;
    const glm_family *fam = glm_family_get(c->layout);
    const int64_t C = c->C, rows[3] = {(int64_t)c->H * c->Dh, (int64_t)c->Hkv * c->Dh, (int64_t)c->Hkv * c->Dh};
    const glm_family_tensor src[3] = {GLM_FT_Q, GLM_FT_K, GLM_FT_V};
    const int64_t R = glm_config_qkv_rows(c), n = R * C;
    const glm_q4_type qt = q4 == GLM_WF_FP4 ? GLM_Q4_FP4 : GLM_Q4_NF4;
    float *w = malloc((size_t)n * 4), *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4), *fused = malloc((size_t)n * 4);
    int fused_differs = 0;
    for (int l = 0; l < c->L; l++) {
        const glm_weight *qkv = &m->layers[l].wqkv;
        CHECK(qkv->fmt == q4 && qkv->segs.n == 3 && qkv->segs.rows[0] == rows[0] && qkv->segs.rows[1] == rows[1] &&
                  qkv->segs.rows[2] == rows[2] && qkv->n == glm_weight_whole_elems(qkv) && qkv->rows == R,
              "%s layer %d: query_key_value in 3 segments (%d)", what, l, qkv->segs.n);
        CHECK(m->layers[l].wo.segs.n == 0 && m->layers[l].w1.segs.n == 0, "%s: the other matrices are one tensor", what);
        int64_t row = 0;
        for (int i = 0; i < 3; i++) { /* q, k, v each quantized alone, from the checkpoint */
            char name[256];
            glm_family_tensor_name(fam, src[i], l, false, name, sizeof name);
            int64_t shape[2] = {rows[i], C}, ni = rows[i] * C;
            CHECK(glm_st_read_f32(set, name, 2, shape, w + row * C) == GLM_OK, "read %s: %s", name, glm_errmsg());
            glm_q4_tensor t;
            CHECK(glm_q4_alloc(&t, qt, ni, dq) == GLM_OK && glm_q4_quantize_f32(&t, w + row * C) == GLM_OK,
                  "quantize %s alone: %s", name, glm_errmsg());
            uint16_t *h = malloc((size_t)ni * 2);
            CHECK(glm_q4_dequantize_bf16(&t, h) == GLM_OK, "dequantize %s", name);
            for (int64_t k = 0; k < ni; k++) want[row * C + k] = glm_bf16_to_f32(h[k]);
            free(h);
            glm_weight sg;
            CHECK(glm_weight_seg(qkv, i, &sg) == GLM_OK && sg.n == ni && sg.rows == rows[i] && sg.segs.n == 0,
                  "segment %d view: %s", i, glm_errmsg());
            glm_q4_sizes z = glm_q4_size(ni, dq);
            CHECK(same_bytes(sg.data, t.codes, z.codes) &&
                      same_bytes(sg.absmax, dq ? (void *)t.absmax_codes : (void *)t.absmax, dq ? z.absmax_codes : z.absmax) &&
                      same_bytes(sg.absmax2, t.absmax2, z.absmax2) && same_bytes(sg.offset, t.offset, z.offset),
                  "%s layer %d: %s's codes, absmax%s are bitsandbytes' quantize_4bit of it alone", what, l, name,
                  dq ? " codes, absmax2 and offset (its own mean)" : "");
            glm_q4_free(&t);
            row += rows[i];
        }
        CHECK(glm_be_weight_dequantize(be, got, GLM_DT_F32, qkv) == GLM_OK, "dequantize wqkv: %s", glm_errmsg());
        CHECK(!memcmp(got, want, (size_t)n * 4), "%s layer %d: query_key_value dequantized == q, k, v dequantized one by one",
              what, l);
        /* the fused quantization (one mean, groups across q | k | v) is another weight with double quantization */
        glm_q4_tensor t;
        CHECK(glm_q4_alloc(&t, qt, n, dq) == GLM_OK && glm_q4_quantize_f32(&t, w) == GLM_OK, "quantize fused");
        uint16_t *h = malloc((size_t)n * 2);
        glm_q4_dequantize_bf16(&t, h);
        for (int64_t k = 0; k < n; k++) fused[k] = glm_bf16_to_f32(h[k]);
        free(h);
        glm_q4_free(&t);
        fused_differs += memcmp(fused, want, (size_t)n * 4) != 0;
    }
    /* without double quantization q, k and v are whole blocks of 64: the fused tensor is the same */
    CHECK(dq ? fused_differs == c->L : fused_differs == 0, "%s: quantizing q | k | v as one tensor %s", what,
          dq ? "gives other weights (the test sees it)" : "gives the same weights (whole blocks)");
    free(w), free(want), free(got), free(fused);
    {   /* the plan counts the bytes the load allocated (the weights; the rope table besides) */
        glm_plan p;
        glm_model_plan(m, NULL, 1, T, 0, GLM_CKPT_FULL, &p);
        double alloc = (double)(used1 - used0) - (double)(c->rope_dim / 2) * 4;
        CHECK(p.weights == alloc, "%s: plan's weights %.0f bytes == the load's %.0f", what, p.weights, alloc);
        glm_wsegs qs = glm_plan_qkv_segs(c, q4);
        glm_weight_bytes_t b = glm_weight_seg_bytes(q4, glm_weight_stored_elems(q4, &qs, R, C), dq, &qs);
        CHECK(qs.n == 3 && b.offset == (dq ? 12u : 0u), "%s: 3 segments, %zu offset bytes", what, b.offset);
    }
out:
    if (set) glm_st_close(set);
    glm_model_free(m);
}

/* The chatglm layout's fused query_key_value is one tensor of the checkpoint: one segment, and
 * the plan counts the load's bytes there too. */
static void chatglm_one_segment(const char *data_dir) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tiny-glm4/chatglm", data_dir);
    glm_base_format f = {4, GLM_WF_NF4, 1, 0};
    glm_model *m = NULL;
    size_t used0 = g_in_use;
    CHECK(glm_model_load_fmt(dir, counting_cpu(), 0, 0, &f, &m) == GLM_OK, "load chatglm nf4 dq: %s", glm_errmsg());
    size_t used1 = g_in_use;
    if (!m) return;
    const glm_weight *qkv = &m->layers[0].wqkv;
    CHECK(qkv->segs.n == 0 && glm_wsegs_count(qkv->fmt, &qkv->segs) == 1 && qkv->n == qkv->rows * qkv->cols &&
              glm_plan_qkv_segs(&m->cfg, GLM_WF_NF4).n == 0,
          "chatglm: query_key_value is one tensor, quantized as one");
    glm_plan p;
    glm_model_plan(m, NULL, 1, T, 0, GLM_CKPT_FULL, &p);
    double alloc = (double)(used1 - used0) - (double)(m->cfg.rope_dim / 2) * 4;
    CHECK(p.weights == alloc, "chatglm nf4 dq: plan's weights %.0f bytes == the load's %.0f", p.weights, alloc);
    glm_model_free(m);
}

int main(void) {
    const char *data_dir = test_data_dir();
    const char *src = getenv("GLM_SRC");
    if (!src) src = ".";
    one(data_dir, src, 0);
    one(data_dir, src, 1);
    chatglm_one_segment(data_dir);
    for (int dq = 0; dq < 2; dq++) {
        hf_segments(data_dir, GLM_WF_NF4, dq);
        hf_segments(data_dir, GLM_WF_FP4, dq);
    }
    /* shards of a 4-bit tensor are whole double-quantization groups */
    CHECK(glm_weight_shard_elems(GLM_WF_NF4, 1000000, 3) % 16384 == 0 && glm_weight_shard_elems(GLM_WF_NF4, 1000000, 3) * 3 >= 1000000,
          "4-bit shards of whole groups");
    CHECK(glm_weight_shard_elems(GLM_WF_BF16, 1000000, 3) == 333334, "dense shards: ceil(n / world)");
    {   /* GLM-4-9B's q, k, v (4096, 256, 256 rows of 4096) are whole double-quantization groups: the hf layout's
         * segmented query_key_value stores no padding, only 2 more offsets than chatglm's fused one */
        glm_wsegs s9 = {3, {4096, 256, 256}};
        CHECK(glm_weight_stored_elems(GLM_WF_NF4, &s9, 4608, 4096) == 4608LL * 4096 &&
                  glm_weight_seg_start(GLM_WF_NF4, &s9, 4096, 2) == 4352LL * 4096,
              "9B query_key_value: segments without padding");
        glm_weight_bytes_t a = glm_weight_seg_bytes(GLM_WF_NF4, 4608LL * 4096, 1, &s9), b = glm_weight_bytes(GLM_WF_NF4, 4608LL * 4096, 1);
        CHECK(a.data == b.data && a.absmax == b.absmax && a.absmax2 == b.absmax2 && a.offset == 12 && b.offset == 4,
              "9B query_key_value: the same buffers, 3 offsets");
        glm_wsegs s1 = {3, {64, 32, 32}}; /* the tiny fixture: each segment starts at a whole group */
        CHECK(glm_weight_stored_elems(GLM_WF_NF4, &s1, 128, 64) == 2 * 16384 + 2048 &&
                  glm_weight_stored_elems(GLM_WF_BF16, &s1, 128, 64) == 128 * 64 && glm_wsegs_count(GLM_WF_FP8_E4M3, &s1) == 1,
              "tiny query_key_value: 4-bit segments padded to whole groups; dense and fp8 ignore segments");
    }
    glm_weight_bytes_t wb = glm_weight_bytes(GLM_WF_NF4, 4096LL * 13696, 1);
    CHECK(wb.data + wb.absmax + wb.absmax2 + wb.offset == 28939652, "nf4 dq bytes of a 4096 x 13696 matrix (%zu)",
          wb.data + wb.absmax + wb.absmax2 + wb.offset);
    return check_summary("test_qlora");
}
