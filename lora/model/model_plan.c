/* lora/model/model_plan.c: the memory plan of a training step from a request (lora/model/model_plan.h):
 * the budget it is planned for, the backend scratch the step's ops ask for, and the planner's
 * options (lora/model/plan.h computes the plan itself); the model's plan, longest row and options. */
#include <string.h>

#include "lora/model/model.h"
#include "lora/model/model_plan.h"
#include "lora/model/step_internal.h"

/* The budget formula (glm_plan_request_make): free + in use - 1 GiB, a cap less the overhead over it.
 * be NULL: a described device (nothing known free; its overhead `described`). *overhead receives
 * the overhead. */
static double budget_of(const glm_backend *be, double described, double max_bytes, double *overhead) {
    size_t fr = 0, tot = 0, use = 0, peak = 0;
    double b = 0;
    if (be) {
        glm_be_mem_info(be, &fr, &tot, &use, &peak);
        b = (double)fr + (double)use - 1073741824.0;
    }
    *overhead = be ? (double)glm_be_mem_overhead(be) : described;
    if (max_bytes > 0) { /* a cap on the whole process: its context and library workspaces come off it */
        double capped = max_bytes - *overhead;
        if (b <= 0 || capped < b) b = capped;
    }
    return b;
}

double glm_model_budget(const glm_model *m) {
    double overhead;
    return budget_of(m->be, 0, m->opt.max_bytes, &overhead);
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
    glm_scratch_shape_for(&m->cfg, m->opt.cp, m->be->world, B, T, backward, loss_chunk, s);
    s->fp8 = m->fmt.fp8;
}

glm_status glm_plan_request_make(const glm_plan_request *r, glm_plan *out, glm_plan_basis *basis) {
    if (!r->cfg || r->B < 1 || r->T < 1)
        return glm_err(GLM_ERR_ARG, "plan request: %s (B %d, T %d)", r->cfg ? "rows and their length must be >= 1"
                       : "no model config", r->B, r->T);
    const glm_backend *be = r->be;
    const int cuda = be ? strcmp(be->name, "cpu") != 0 : r->describe_cuda;
    const int backward = r->backward && r->lora;
    const int cp = r->opts.cp > 1 ? r->opts.cp : 0;
    glm_plan_opts o;
    memset(&o, 0, sizeof o);
    if (!be && cuda) { /* the attention the CUDA backend would run, as it reads the variable */
        const char *attn_env;
        const int am = glm_attention_env(&attn_env);
        if (am < 0) return glm_err(GLM_ERR_ARG, "GLMTUNE_ATTENTION=%s: " GLM_ATTENTION_ENV_HINT, attn_env);
        o.no_attn_lib = am == GLM_ATTN_OWN;
    }
    /* the scratch the backend will grow for this step, as it says (cuDNN asked for its workspace);
     * asked first: loading cuDNN adds to the overhead the budget then takes off a cap */
    if (be) {
        glm_scratch_shape sh;
        size_t need = 0, ws = 0;
        glm_scratch_shape_for(r->cfg, cp, r->world, r->B, r->T, backward, r->opts.loss_chunk, &sh);
        sh.fp8 = r->fmt.fp8;
        if (glm_be_scratch_need(be, &sh, &need, &ws) == GLM_OK && need > 0) {
            o.scratch = (double)need;
            o.attn_ws = (double)ws;
        }
    }
    double overhead = 0;
    const double described = cuda ? (double)(size_t)(GLM_PLAN_CUDA_OVERHEAD_GIB * 1073741824.0) : 0; /* whole bytes */
    o.budget = budget_of(be, described, r->opts.max_bytes, &overhead);
    const int below = r->opts.max_bytes > 0 && o.budget <= 0;
    if (below) o.budget = 1; /* nothing left (and nothing fits) */
    o.mode = r->mode;
    o.mlp_chunk = r->opts.mlp_chunk;
    o.loss_chunk = r->opts.loss_chunk;
    o.act_bytes = be ? (int)glm_dtype_size(be->act_dtype) : cuda ? 2 : 4;
    o.weight_bytes = be ? (int)glm_dtype_size(be->weight_dtype) : cuda ? 2 : 4;
    o.acc_bytes = be ? (int)glm_dtype_size(be->acc_dtype) : cuda ? 4 : 8;
    o.lora_shadow = be ? be->act_dtype != GLM_DT_F32 : cuda;
    o.optimizer = r->opts.optimizer;
    o.shard_world = r->shard_world > 1 ? r->shard_world : 0;
    o.cp = cp;
    o.base_format = r->fmt.fp8 ? GLM_WF_FP8_E4M3
                    : r->fmt.quant_bits == 4 ? r->fmt.q4
                    : o.weight_bytes == 2 ? GLM_WF_BF16 : GLM_WF_F32;
    o.double_quant = r->fmt.quant_bits == 4 && r->fmt.double_quant;
    /* layer inputs in host memory: forced (offload 1), or where the step does not fit on a GPU
     * without it, within this rank's share of the machine's free memory less a margin
     * (glm_host_budget; the CPU backend's memory is host memory) */
    o.offload = r->opts.offload > 0;
    o.offload_layers = r->opts.offload_layers;
    if (r->opts.offload == 0 && cuda)
        o.host_budget = r->host_budget > 0 ? r->host_budget
                                           : glm_host_budget(r->local_ranks > 0 ? r->local_ranks : glm_local_ranks());
    glm_plan_make(r->cfg, r->lora, r->B, r->T, backward, &o, out);
    if (basis) {
        basis->opts = o;
        basis->overhead = overhead;
        basis->cap_below_overhead = below;
    }
    return GLM_OK;
}

typedef struct {
    glm_plan_request r;
} request_at_ctx;

static void request_at(void *ctx, int T, glm_plan *p) {
    request_at_ctx *x = ctx;
    x->r.T = T;
    glm_plan_request_make(&x->r, p, NULL); /* its errors were asked for at the first length */
}

glm_status glm_plan_request_longest(const glm_plan_request *r, int64_t step, int64_t max_T, int64_t *T_out,
                                    glm_plan *best) {
    request_at_ctx x = {*r};
    glm_plan p;
    x.r.T = step > 1 ? (int)(step < INT32_MAX ? step : INT32_MAX) : 1;
    *T_out = 0;
    GLM_TRY(glm_plan_request_make(&x.r, &p, NULL));
    *T_out = glm_plan_bisect(request_at, &x, step, max_T, best);
    return GLM_OK;
}

void glm_model_plan_request(const glm_model *m, const glm_lora_info *li, int B, int T, int backward, glm_ckpt_mode mode,
                            glm_plan_request *r) {
    memset(r, 0, sizeof *r);
    r->cfg = &m->cfg;
    r->lora = li;
    r->B = B;
    r->T = T;
    r->backward = backward;
    r->mode = mode;
    r->fmt = m->fmt;
    r->opts = glm_model_get_options(m);
    r->world = m->be->world;
    r->shard_world = m->shard_world;
    r->be = m->be;
}

void glm_model_plan(const glm_model *m, const glm_lora *lora, int B, int T, int backward, glm_ckpt_mode mode, glm_plan *out) {
    glm_lora_info li;
    glm_lora_info_of(lora, &li);
    glm_plan_request r;
    glm_model_plan_request(m, lora ? &li : NULL, B, T, backward, mode, &r);
    if (glm_plan_request_make(&r, out, NULL) != GLM_OK) /* only for B or T < 1, which the step refuses first */
        memset(out, 0, sizeof *out);
}

int64_t glm_model_plan_longest(const glm_model *m, const glm_lora *lora, int B, glm_ckpt_mode mode, int64_t step,
                               int64_t max_T, glm_plan *best) {
    glm_lora_info li;
    glm_lora_info_of(lora, &li);
    glm_plan_request r;
    glm_model_plan_request(m, lora ? &li : NULL, B, (int)step, 1, mode, &r);
    int64_t T = 0;
    if (glm_plan_request_longest(&r, step, max_T, &T, best) != GLM_OK && best) memset(best, 0, sizeof *best);
    return T;
}

glm_status glm_model_set_options(glm_model *m, const glm_model_options *o) {
    if (o->loss_chunk < 0 || o->mlp_chunk < 0)
        return glm_err(GLM_ERR_ARG, "model options: negative chunk (loss_chunk %lld, mlp_chunk %lld); 0 lets the planner "
                       "choose", (long long)o->loss_chunk, (long long)o->mlp_chunk);
    if (!(o->max_bytes >= 0))
        return glm_err(GLM_ERR_ARG, "model options: max_bytes %g is negative; 0: what the device has free", o->max_bytes);
    if (o->offload < -1 || o->offload > 1 || o->offload_layers < 0)
        return glm_err(GLM_ERR_ARG, "model options: offload %d (expected -1, 0 or 1), offload_layers %d (expected >= 0)",
                       o->offload, o->offload_layers);
    if (o->cp < 0 || (o->cp > 1 && (!o->cp_comm || o->cp_comm->world != o->cp)))
        return glm_err(GLM_ERR_ARG, "model options: context parallel over %d ranks needs its group communicator of %d "
                       "ranks (got %s of %d)", o->cp, o->cp, o->cp_comm ? "a group" : "no group",
                       o->cp_comm ? o->cp_comm->world : 0);
    m->opt = *o;
    return GLM_OK;
}

glm_model_options glm_model_get_options(const glm_model *m) { return m->opt; }

void glm_model_set_grad_ready(glm_model *m, glm_status (*fn)(void *user, int layer), void *user) {
    m->grad_ready = fn;
    m->grad_ready_user = user;
}

void glm_model_set_next_batch(glm_model *m, glm_status (*fn)(void *user), void *user) {
    m->next_batch = fn;
    m->next_batch_user = user;
}
