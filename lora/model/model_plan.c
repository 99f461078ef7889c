/* lora/model/model_plan.c: the memory plan of a model's training step: the budget it is planned
 * for, the backend scratch the step's ops ask for, and the planner's options for this model on its
 * backend (lora/model/plan.h computes the plan itself). */
#include <string.h>

#include "lora/model/model.h"
#include "lora/model/step_internal.h"

double glm_model_budget(const glm_model *m) {
    size_t fr = 0, tot = 0, use = 0, peak = 0;
    glm_be_mem_info(m->be, &fr, &tot, &use, &peak);
    double b = (double)fr + (double)use - 1073741824.0;
    if (m->max_bytes > 0) { /* a cap on the whole process: its context and library workspaces come off it */
        double capped = m->max_bytes - (double)glm_be_mem_overhead(m->be);
        if (b <= 0 || capped < b) b = capped;
    }
    return b;
}

void glm_scratch_shape_for(const glm_config *c, int cp, int world, int B, int T, int backward, int64_t loss_chunk,
                           glm_scratch_shape *s) {
    memset(s, 0, sizeof *s);
    cp = cp > 1 ? cp : 0;
    const int64_t Tp = cp ? ((int64_t)T + 2 * cp - 1) / (2 * cp) * (2 * cp) : T;
    s->B = B;
    s->T = T;
    s->H = c->H;
    s->Hkv = c->Hkv;
    s->Dh = c->Dh;
    s->ldq = s->ldk = s->ldv = (int64_t)(c->H + 2 * c->Hkv) * c->Dh; /* q|k|v column blocks of one buffer */
    s->ldo = (int64_t)c->H * c->Dh;
    s->backward = backward;
    s->cp_block = cp ? (int)(Tp / cp) : 0; /* the ring's query blocks: this rank's two chunks at most */
    s->loss_rows = loss_chunk > 0 ? loss_chunk : 2048; /* the planner's largest loss chunk */
    s->comm_doubles = world > 1 ? 64 : 0;
}

void glm_model_scratch_shape(const glm_model *m, int B, int T, int backward, int64_t loss_chunk, glm_scratch_shape *s) {
    glm_scratch_shape_for(&m->cfg, m->cp, m->be->world, B, T, backward, loss_chunk, s);
    s->fp8 = m->fmt.fp8;
}

/* The planner's options for this model on its backend. */
static void plan_opts(const glm_model *m, glm_ckpt_mode mode, glm_plan_opts *o) {
    memset(o, 0, sizeof *o);
    o->mode = mode;
    o->budget = glm_model_budget(m);
    o->mlp_chunk = m->mlp_chunk;
    o->loss_chunk = m->loss_chunk;
    o->act_bytes = (int)glm_dtype_size(m->be->act_dtype);
    o->weight_bytes = (int)glm_dtype_size(m->be->weight_dtype);
    o->lora_shadow = m->be->act_dtype != GLM_DT_F32;
    o->optimizer = m->optimizer;
    o->shard_world = m->shard_world;
    o->cp = m->cp;
    o->acc_bytes = (int)glm_dtype_size(m->be->acc_dtype);
    o->base_format = m->fmt.fp8 ? GLM_WF_FP8_E4M3
                     : m->fmt.quant_bits == 4 ? m->fmt.q4
                     : m->be->weight_dtype == GLM_DT_BF16 ? GLM_WF_BF16 : GLM_WF_F32;
    o->double_quant = m->fmt.double_quant;
    /* layer inputs in host memory: forced (m->offload 1), or where the step does not fit on a GPU
     * without it, within this rank's share of the machine's free memory less a margin
     * (glm_host_budget; the CPU backend's memory is host memory) */
    o->offload = m->offload > 0;
    o->offload_layers = m->offload_layers;
    o->host_budget = m->offload == 0 && strcmp(m->be->name, "cpu") ? glm_host_budget(glm_local_ranks()) : 0;
}

void glm_model_plan(const glm_model *m, const glm_lora *lora, int B, int T, int backward, glm_ckpt_mode mode, glm_plan *out) {
    glm_lora_info li;
    glm_lora_info_of(lora, &li);
    glm_plan_opts o;
    plan_opts(m, mode, &o);
    /* the scratch the backend will grow for this step, as it says (cuDNN asked for its workspace);
     * asked first: loading cuDNN adds to the overhead the budget then takes off a cap */
    glm_scratch_shape sh;
    size_t need = 0, ws = 0;
    glm_model_scratch_shape(m, B, T, backward && lora, m->loss_chunk, &sh);
    if (glm_be_scratch_need(m->be, &sh, &need, &ws) == GLM_OK && need > 0) {
        o.scratch = (double)need;
        o.attn_ws = (double)ws;
    }
    o.budget = glm_model_budget(m);
    glm_plan_make(&m->cfg, lora ? &li : NULL, B, T, backward && lora, &o, out);
}
