/* tests/lora/test_layer.c: the decoder layer without the training workspace (lora/model/step_internal.h's
 * glm_layer_ctx): a driver of its own, as a decode loop would have (its buffers from be->alloc,
 * the tiny GLM-4 fixture tests/fixtures/tiny-glm4/chatglm with its adapter, the golden batch),
 * runs the embedding, glm_layer_fwd over every layer and the output layer, and must give
 * glm_model_logits' logits bit for bit on the CPU backend (the same ops over the same chunks);
 * then again with the attention override (what a KV-cache driver plugs in) set to a function that
 * calls the backend's attention itself: the same bits, one call per layer, and glm_layer_bwd
 * refuses such a context. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/backend.h"
#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "lora/model/step_internal.h"
#include "tests/check.h"
#include "tests/model_opt.h"
#include "tests/golden_batch.h"

/* The attention override: the backend's attention over the call's documents, counted. */
typedef struct attn_user {
    const glm_layer_ctx *cx;
    int calls;
} attn_user;

static glm_status my_attention(void *user, int layer, const void *qkv, int64_t ldqkv, void *o, int64_t ldo, float *lse) {
    attn_user *u = user;
    const glm_layer_ctx *cx = u->cx;
    const glm_config *c = &cx->m->cfg;
    const int64_t qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh;
    const float *q = qkv;
    (void)layer;
    u->calls++;
    return glm_be_attention_fwd(cx->be, o, ldo, lse, q, ldqkv, q + qd, ldqkv, q + qd + kd, ldqkv, cx->doc, cx->B, cx->T, c->H,
                                c->Hkv, c->Dh);
}

static void *dev(const glm_backend *be, int64_t bytes, void ***all, int *n) {
    void *p = NULL;
    if (glm_be_alloc(be, (size_t)(bytes > 0 ? bytes : 16), "test", &p) != GLM_OK) return NULL;
    *all = realloc(*all, (size_t)(*n + 1) * sizeof **all);
    (*all)[(*n)++] = p;
    return p;
}

/* The logits [N, V] of batch b through the layer context: chunks of mc tokens in the layers, lc
 * in the output layer (glm_model_logits' plan). */
static glm_status forward(glm_model *m, glm_lora *l, const glm_batch *b, int64_t mc, int64_t lc, int override, int *calls,
                          float *logits) {
    const glm_backend *be = m->be;
    const glm_config *c = &m->cfg;
    const int64_t N = (int64_t)b->B * b->T, C = c->C, F = c->F, V = c->V, Dqkv = (int64_t)(c->H + 2 * c->Hkv) * c->Dh;
    void **all = NULL;
    int na = 0;
    glm_status st = GLM_OK;
    float *x[2] = {dev(be, N * C * 4, &all, &na), dev(be, N * C * 4, &all, &na)};
    uint32_t *ids = dev(be, N * 4, &all, &na);
    int32_t *pos = dev(be, N * 4, &all, &na), *doc = dev(be, N * 4, &all, &na);
    void **A = calloc((size_t)l->n_sites, sizeof *A), **B = calloc((size_t)l->n_sites, sizeof *B);
    for (int si = 0; si < l->n_sites; si++) {
        A[si] = l->params[l->sites[si].pa].w;
        B[si] = l->params[l->sites[si].pb].w;
    }
    glm_layer_acts acts = {.pol = GLM_CKPT_FULL, .qkv = dev(be, N * Dqkv * 4, &all, &na),
                           .o = dev(be, N * c->H * c->Dh * 4, &all, &na), .lse = dev(be, N * c->H * 4, &all, &na)};
    glm_layer_ctx cx = {.be = be, .m = m, .lora = l, .lora_A = A, .lora_B = B, .acts = &acts, .B = b->B, .T = b->T, .N = N,
                        .pos = pos, .doc = doc, .T_row = b->T, .chunk = mc, .xn_c = dev(be, mc * C * 4, &all, &na),
                        .rstd_c = dev(be, mc * 4, &all, &na), .h_c = dev(be, mc * 2 * F * 4, &all, &na),
                        .a_c = dev(be, mc * F * 4, &all, &na), .lora_u = dev(be, mc * 8 * l->r * 4, &all, &na),
                        .esz = 4};
    attn_user au = {&cx, 0};
    if (override) {
        cx.attn = my_attention;
        cx.attn_user = &au;
    }
    void *xn = dev(be, lc * C * 4, &all, &na), *lg = dev(be, lc * V * 4, &all, &na);
    float *rs = dev(be, lc * 4, &all, &na);
    if (!st) st = glm_be_upload(be, ids, b->ids, (size_t)N * 4);
    if (!st) st = glm_be_upload(be, pos, b->pos, (size_t)N * 4);
    if (!st) st = glm_be_upload(be, doc, b->doc, (size_t)N * 4);
    if (!st) st = glm_be_embedding(be, x[0], m->embed.data, ids, N, C, V);
    for (int li = 0; li < c->L && !st; li++) {
        cx.lw = &m->layers[li];
        st = glm_layer_fwd(&cx, li, x[li & 1], x[(li + 1) & 1]);
    }
    if (!st && override) { /* no backward through a driver's attention */
        glm_layer_bwd_bufs bw = {0};
        cx.bwd = &bw;
        CHECK(glm_layer_bwd(&cx, 0, x[0]) == GLM_ERR_ARG, "glm_layer_bwd with an attention override: refused");
        glm_err_clear();
    }
    const float *xf = x[c->L & 1];
    for (int64_t n0 = 0; n0 < N && !st; n0 += lc) {
        const int64_t nc = N - n0 < lc ? N - n0 : lc;
        st = glm_be_rmsnorm_fwd(be, xn, rs, xf + n0 * C, m->final_ln, nc, C, c->eps);
        if (!st) st = glm_base_matmul(be, 0, nc, xn, C, &m->out_w, 0.0f, lg, V);
        if (!st) st = glm_be_download_f32(be, logits + n0 * V, be->act_dtype, lg, nc * V);
    }
    for (int i = 0; i < na; i++) glm_be_free(be, all[i]);
    free(all);
    free(A);
    free(B);
    *calls = au.calls;
    return st;
}

int main(void) {
    char fixtures[1024], dir[1200], adir[1300];
    snprintf(fixtures, sizeof fixtures, "%s/tiny-glm4", test_data_dir());
    snprintf(dir, sizeof dir, "%s/chatglm", fixtures);
    snprintf(adir, sizeof adir, "%s/adapter_init", dir);
    const glm_backend *be = glm_backend_cpu();
    golden g;
    if (!golden_load(fixtures, "chatglm", &g)) return check_summary("test_layer");
    glm_model *m = NULL;
    glm_lora *l = NULL;
    CHECK(glm_model_load(dir, be, 0, &m) == GLM_OK, "load: %s", glm_errmsg());
    glm_lora_config lc = {.r = 4, .alpha = 8, .dropout = 0, .use_rslora = false, .targets = "all"};
    if (m) CHECK(glm_lora_create(m, &lc, 1, &l) == GLM_OK && glm_lora_load_peft(l, adir) == GLM_OK, "adapter: %s", glm_errmsg());
    if (m && l) {
        MODEL_OPT(m, loss_chunk, 7);
        MODEL_OPT(m, mlp_chunk, 5); /* chunks of the token-local ops, the last one partial */
        glm_batch b = golden_batch(&g, 0, g.B);
        const int64_t NV = (int64_t)g.B * g.T * m->cfg.V;
        float *ref = malloc((size_t)NV * 4), *got = malloc((size_t)NV * 4);
        CHECK(glm_model_logits(m, l, &b, ref) == GLM_OK, "logits: %s", glm_errmsg());
        const glm_plan *p = glm_model_current_plan(m);
        CHECK(p && p->mlp_chunk == 5 && p->loss_chunk == 7, "the plan's chunks");
        for (int ov = 0; ov < 2 && p; ov++) {
            int calls = 0;
            CHECK(forward(m, l, &b, p->mlp_chunk, p->loss_chunk, ov, &calls, got) == GLM_OK, "layer driver: %s", glm_errmsg());
            CHECK(!memcmp(got, ref, (size_t)NV * 4), "%s: the layer driver's logits differ from glm_model_logits'",
                  ov ? "attention override" : "the layer's attention");
            CHECK(calls == (ov ? m->cfg.L : 0), "attention override called %d times", calls);
        }
        free(ref);
        free(got);
    }
    glm_lora_free(l);
    glm_model_free(m);
    golden_free(&g);
    return check_summary("test_layer");
}
