/* tests/lora/test_memcap.c: the model's use of the backend's memory truth (kernels/backend.h), on the
 * CPU backend with the memory queries replaced by known answers:
 *   - under a cap (max_bytes), the planner's budget is the cap less be->mem_overhead (the CUDA
 *     context and library workspaces no plan buffer holds), so a plan that fits without the
 *     overhead does not fit with it;
 *   - the plan's backend scratch is what be->scratch_need answers for the step's shape (B, T, heads,
 *     strides), not the planner's estimate, and glm_model_prepare grows it (be->scratch_reserve) with
 *     the plan's shape;
 *   - the memory proof (lora/model/model_prove.h) runs the first layers only: their LoRA gradients are set,
 *     the later layers' stay zero, and the workspace is the whole model's plan. */
#include <string.h>

#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "lora/model/model_prove.h"
#include "tests/check.h"
#include "tests/model_opt.h"

static glm_backend fake;
static size_t f_overhead_b, f_need_b, f_ws_b;
static glm_scratch_shape f_need_shape, f_res_shape;
static int f_res_with_ws = -1, f_n_need, f_n_res;

static size_t f_overhead(const glm_backend *be) { return f_overhead_b; }
static glm_status f_need(const glm_backend *be, const glm_scratch_shape *s, size_t *bytes, size_t *ws) {
    f_need_shape = *s;
    f_n_need++;
    *bytes = f_need_b;
    if (ws) *ws = f_ws_b;
    return GLM_OK;
}
static glm_status f_reserve(const glm_backend *be, const glm_scratch_shape *s, int with_ws) {
    f_res_shape = *s;
    f_res_with_ws = with_ws;
    f_n_res++;
    return GLM_OK;
}

static double lora_grad_abs(const glm_lora *l, int layer) {
    double t = 0;
    for (int si = 0; si < l->n_sites; si++) {
        if (l->sites[si].layer != layer) continue;
        const glm_param *p = &l->params[l->sites[si].pb]; /* lora_B: lora_A's grads are 0 while B is 0 */
        for (int64_t i = 0; i < p->numel; i++) t += fabs(p->g[i]);
    }
    return t;
}

int main(void) {
    const char *S = test_data_dir();
    char path[1024];
    snprintf(path, sizeof path, "%s/tiny-glm4/chatglm", S);
    glm_config cfg;
    CHECK(glm_config_load(path, 0, &cfg) == GLM_OK, "config: %s", glm_errmsg());
    cfg.L = 4;
    fake = *glm_backend_cpu();
    fake.mem_overhead = f_overhead;
    fake.scratch_need = f_need;
    fake.scratch_reserve = f_reserve;
    glm_model *m = NULL;
    CHECK(glm_model_create_random(&cfg, &fake, 7, &m) == GLM_OK, "model: %s", glm_errmsg());
    glm_lora_config lc = {4, 8.0f, 0.0f, false, "all"};
    glm_lora *l = NULL;
    CHECK(glm_lora_create(m, &lc, 3, &l) == GLM_OK, "lora: %s", glm_errmsg());
    if (!m || !l) return check_summary("test_memcap");
    MODEL_OPT(m, optimizer, 1);
    const int B = 1, T = 64;

    /* the budget under a cap: the cap less the overhead */
    MODEL_OPT(m, max_bytes, 64.0 * 1048576);
    f_overhead_b = 5u << 20;
    CHECK(glm_model_budget(m) == 64.0 * 1048576 - 5.0 * 1048576, "budget %.0f: the cap less the overhead",
          glm_model_budget(m));
    f_overhead_b = 0;
    CHECK(glm_model_budget(m) == 64.0 * 1048576, "budget %.0f without overhead: the cap", glm_model_budget(m));

    /* the plan's scratch is the backend's answer, asked with the step's shape */
    f_need_b = 3u << 20;
    f_ws_b = 1u << 20;
    glm_plan p;
    f_n_need = 0;
    glm_model_plan(m, l, B, T, 1, GLM_CKPT_AUTO, &p);
    CHECK(f_n_need == 1, "scratch_need asked once (%d)", f_n_need);
    CHECK(f_need_shape.B == B && f_need_shape.T == T && f_need_shape.H == cfg.H && f_need_shape.Hkv == cfg.Hkv &&
              f_need_shape.Dh == cfg.Dh && f_need_shape.backward == 1,
          "the step's shape: B %d T %d H %d Hkv %d Dh %d backward %d", f_need_shape.B, f_need_shape.T, f_need_shape.H,
          f_need_shape.Hkv, f_need_shape.Dh, f_need_shape.backward);
    CHECK(f_need_shape.ldq == (int64_t)(cfg.H + 2 * cfg.Hkv) * cfg.Dh && f_need_shape.ldo == (int64_t)cfg.H * cfg.Dh,
          "q|k|v packed strides: ldq %lld ldo %lld", (long long)f_need_shape.ldq, (long long)f_need_shape.ldo);
    CHECK(p.scratch == 3.0 * 1048576, "plan.scratch %.0f = the backend's 3 MiB", p.scratch);
    CHECK(p.buf[GLM_BUF_BACKEND].bytes == 3.0 * 1048576 && p.buf[GLM_BUF_BACKEND].count == 1,
          "the backend scratch buffer in the table: %.0f x %d", p.buf[GLM_BUF_BACKEND].bytes, p.buf[GLM_BUF_BACKEND].count);
    CHECK(p.attn_ws == 1.0 * 1048576 && !p.attn_lean, "cuDNN's workspace as the backend says: %.0f (lean %d)", p.attn_ws,
          p.attn_lean);

    /* a cap that the plan fits exactly without the overhead: with 4 MiB of overhead it does not */
    MODEL_OPT(m, max_bytes, p.total + 1024);
    glm_model_plan(m, l, B, T, 1, GLM_CKPT_FULL, &p);
    CHECK(p.fits, "fits the cap without overhead (%.0f of %.0f)", p.total, p.budget);
    const double total0 = p.total;
    MODEL_OPT(m, max_bytes, total0 + 1024);
    f_overhead_b = 4u << 20;
    glm_model_plan(m, l, B, T, 1, GLM_CKPT_FULL, &p);
    CHECK(!p.fits && p.budget == total0 + 1024 - 4.0 * 1048576, "with 4 MiB of overhead it does not fit: %.0f of %.0f",
          p.total, p.budget);
    f_overhead_b = 0;

    /* prepare grows the scratch the plan holds, for the plan's shape */
    MODEL_OPT(m, max_bytes, 0);
    f_n_res = 0;
    CHECK(glm_model_prepare(m, l, B, T, 1, GLM_CKPT_FULL, &p) == GLM_OK, "prepare: %s", glm_errmsg());
    CHECK(f_n_res == 1 && f_res_shape.T == T && f_res_shape.B == B && f_res_shape.loss_rows == p.loss_chunk &&
              f_res_with_ws == !p.attn_lean,
          "scratch_reserve once with the plan's shape (%d calls, T %d, loss rows %lld of %lld, with ws %d)", f_n_res,
          f_res_shape.T, (long long)f_res_shape.loss_rows, (long long)p.loss_chunk, f_res_with_ws);

    /* the memory proof: layers 0-1 of 4 run forward and backward in the whole model's workspace */
    uint32_t ids[64];
    uint8_t tg[64];
    int32_t pos[64], doc[64];
    for (int i = 0; i < T; i++) ids[i] = (uint32_t)(7 + 13 * i) % (uint32_t)cfg.V, tg[i] = i >= T / 2, pos[i] = i, doc[i] = 0;
    glm_batch b = {B, T, ids, tg, pos, doc, NULL};
    /* lora_B is zero at init (no gradient reaches lora_A then): nudge it so every layer's grads can flow */
    for (int si = 0; si < l->n_sites; si++) {
        glm_param *pb = &l->params[l->sites[si].pb];
        for (int64_t i = 0; i < pb->numel; i++) pb->w[i] = 0.01f * (float)((i % 7) - 3);
    }
    CHECK(glm_lora_zero_grads(l) == GLM_OK, "zero grads");
    glm_prove_result pr;
    CHECK(glm_model_prove_memory(m, l, &b, GLM_CKPT_FULL, 0, &pr) == GLM_OK, "prove: %s", glm_errmsg());
    CHECK(pr.layers == 2 && pr.seconds > 0 && check_close(pr.step_est_s, pr.seconds * 4 / 2, 1e-12, 1e-12),
          "2 layers run, %.4f s, the step extrapolated to %.4f s", pr.seconds, pr.step_est_s);
    CHECK(pr.plan.T == T && pr.plan.n_full == 4, "the whole model's plan: T %d, %d full layers", pr.plan.T, pr.plan.n_full);
    CHECK(lora_grad_abs(l, 0) > 0 && lora_grad_abs(l, 1) > 0, "layers 0 and 1 have gradients (%g, %g)", lora_grad_abs(l, 0),
          lora_grad_abs(l, 1));
    CHECK(lora_grad_abs(l, 2) == 0 && lora_grad_abs(l, 3) == 0, "layers 2 and 3 did not run (%g, %g)", lora_grad_abs(l, 2),
          lora_grad_abs(l, 3));
    CHECK(m->run_layers == 0, "run_layers restored (%d)", m->run_layers);
    /* and a whole step afterwards runs every layer again */
    glm_lora_zero_grads(l);
    double ls = 0;
    int64_t nt = 0;
    CHECK(glm_model_step(m, l, &b, 1.0f / 32, 1, GLM_CKPT_FULL, 0, &ls, &nt) == GLM_OK, "step: %s", glm_errmsg());
    CHECK(lora_grad_abs(l, 3) > 0, "a whole step reaches layer 3 (%g)", lora_grad_abs(l, 3));

    glm_lora_free(l);
    glm_model_free(m);
    return check_summary("test_memcap");
}
