/* lora/plan.c: the memory planner (lora/plan.h). Every byte count below mirrors a buffer the
 * model's workspace allocates (lora/model.c ws_create); keep the two in step. */
#include "lora/plan.h"

#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *glm_ckpt_name(glm_ckpt_mode m) {
    switch (m) {
    case GLM_CKPT_NONE: return "none";
    case GLM_CKPT_FULL: return "full";
    case GLM_CKPT_SELECTIVE: return "selective";
    default: return "auto";
    }
}

glm_status glm_ckpt_parse(const char *s, glm_ckpt_mode *out) {
    if (!s) return glm_err(GLM_ERR_ARG, "gradient checkpointing: no value");
    if (!strcmp(s, "none") || !strcmp(s, "false") || !strcmp(s, "0") || !strcmp(s, "off") || !strcmp(s, "no"))
        *out = GLM_CKPT_NONE;
    else if (!strcmp(s, "full") || !strcmp(s, "true") || !strcmp(s, "1") || !strcmp(s, "on") || !strcmp(s, "yes"))
        *out = GLM_CKPT_FULL;
    else if (!strcmp(s, "selective"))
        *out = GLM_CKPT_SELECTIVE;
    else if (!strcmp(s, "auto"))
        *out = GLM_CKPT_AUTO;
    else
        return glm_err(GLM_ERR_ARG, "gradient checkpointing '%s': expected auto, none, selective or full (or true = full, "
                       "false = none)", s);
    return GLM_OK;
}

glm_ckpt_mode glm_plan_layer(const glm_plan *p, int l) {
    if (l < p->n_keep) return GLM_CKPT_NONE;
    if (l < p->n_keep + p->n_selective) return GLM_CKPT_SELECTIVE;
    return GLM_CKPT_FULL;
}

static double qkv_rows(const glm_config *c) { return (double)(c->H + 2 * c->Hkv) * c->Dh; }

/* xn1, qkv, o, x_mid, xn2, h, a (act) + rstd1, rstd2, lse (f32) */
double glm_plan_bytes_keep(const glm_config *c, int e) {
    double qd = (double)c->H * c->Dh;
    return e * (3.0 * c->C + qkv_rows(c) + qd + 3.0 * c->F) + 4.0 * (2 + c->H);
}

/* qkv, o, x_mid (act) + lse (f32) */
double glm_plan_bytes_selective(const glm_config *c, int e) {
    double qd = (double)c->H * c->Dh;
    return e * (qkv_rows(c) + qd + c->C) + 4.0 * c->H;
}

/* The base weights a rank holds: whole, or with --shard-base over W ranks its shard of each
 * matrix (embedding, output layer, per layer query_key_value, dense, dense_h_to_4h,
 * dense_4h_to_h) plus the whole norms and bias; *gathered: the gather slots (two layers' four
 * matrices and one [V, C]) that sharding adds (0 without). Mirrors lora/model.c and model_step.c. */
static double weight_bytes(const glm_config *c, int wb, int W, double *gathered) {
    int64_t C = c->C, qd = (int64_t)c->H * c->Dh, F = c->F, V = c->V, qkv = (int64_t)qkv_rows(c);
    int64_t mats[4] = {qkv * C, C * qd, 2 * F * C, C * F};
    double small = C + c->L * (2.0 * C + (c->qkv_bias ? (double)qkv : 0));
    double layer = 0, layer_full = 0;
    for (int i = 0; i < 4; i++) {
        layer += (double)glm_shard_elems(mats[i], W);
        layer_full += (double)glm_shard_elems(mats[i], W) * (W > 1 ? W : 1);
    }
    double vc = (double)glm_shard_elems(V * C, W);
    *gathered = W > 1 ? wb * (2.0 * layer_full + vc * W) : 0;
    return wb * (2.0 * vc + small + c->L * layer);
}

/* Buffers whose size does not depend on the per-layer policy (any_full: the attention-part
 * scratch for layers that recompute everything). */
static double fixed_bytes(const glm_config *c, const glm_lora_info *li, double N, double mc, double lc, int backward,
                          int any_full, int e, int cp) {
    double C = c->C, F = c->F, qd = (double)c->H * c->Dh, H = c->H;
    double b = 0;
    b += e * N * C + 8 * N;                                    /* xn1 scratch, rstd1/rstd2 scratch */
    if (any_full || !backward) b += e * N * (qkv_rows(c) + qd + C) + 4 * N * H; /* qkv, o, x_mid, lse scratch */
    b += e * mc * (C + 3 * F);                                 /* MLP chunk: xn2, h, a */
    if (backward) {
        b += e * mc * 3 * F;                                   /* d_a, d_h chunks */
        b += e * N * (2 * C + qd + qkv_rows(c));               /* dx, d_xn, d_o, d_qkv */
        b += 4 * N * H + 8 * N;                                /* attention D, document bounds (backend scratch) */
        if (e == 2 && !cp)                                     /* cuDNN's attention backward (CUDA, whole rows; the
                                                                  ring's blocks run glmtune's kernels): its workspace
                                                                  (8 bytes per query element measured with 9.19: 4.02
                                                                  GiB at 131072 x 4096), lse copies, document runs */
            b += 8 * N * qd + 8 * N * H + 4 * N;
    } else {
        b += 8 * N;
    }
    if (li && li->r > 0) {
        double rows_u = N * li->r * (li->max_sites_lin > 0 ? li->max_sites_lin : 1);
        b += e * rows_u * (backward ? 2 : 1);                  /* u (and du) */
        if (li->dropout) {
            double d1 = N * li->max_in_attn, d2 = mc * li->max_in_mlp;
            b += e * (d1 > d2 ? d1 : d2);                      /* dropped-out input copy */
        }
    }
    b += 16 * N * (cp ? 1 : 2);                                /* ids, pos, doc, labels (two batches: the
                                                                  next one's upload overlaps this step) */
    b += (32.0 + 256.0) * 1048576;                             /* cuBLASLt workspace, allocator slack */
    return b;
}

static double loss_bytes(const glm_config *c, double lc, int backward, int e) {
    return lc * (e * (double)c->C * (backward ? 2 : 1) + e * (double)c->V + 4 + 8);
}

/* The ring's buffers (lora/model_step.c ws_create): two K|V blocks (act), two dK|dV accumulators
 * (acc, backward only), the output / dQ and lse accumulators (acc), the rows' document ids. */
static double ring_bytes(const glm_config *c, double N, double B, double Tp, int backward, int e, int ea) {
    double kd2 = 2.0 * c->Hkv * c->Dh, qd = (double)c->H * c->Dh;
    return e * N * kd2 * 2 + (backward ? ea * N * kd2 * 2 : 0) + ea * N * (qd + c->H) + 4 * B * Tp;
}

static void plan_once(const glm_config *c, const glm_lora_info *li, int B, int T, int backward, const glm_plan_opts *o,
                      glm_plan *p) {
    memset(p, 0, sizeof *p);
    const int e = o->act_bytes > 0 ? o->act_bytes : 2;
    const int cp = o->cp > 1 ? o->cp : 0;
    const int64_t Tp = cp ? ((int64_t)T + 2 * cp - 1) / (2 * cp) * (2 * cp) : T, TL = cp ? Tp / cp : T;
    const double N = (double)B * TL, C = c->C, F = c->F;
    p->B = B;
    p->T = T;
    p->cp = cp;
    p->T_local = TL;
    p->T_padded = Tp;
    p->N = (int64_t)B * TL;
    p->backward = backward;
    p->requested = o->mode;
    p->budget = o->budget;
    p->shard_world = o->shard_world > 1 ? o->shard_world : 0;
    p->weights = weight_bytes(c, o->weight_bytes > 0 ? o->weight_bytes : e, p->shard_world, &p->gathered);
    if (li && li->r > 0)
        p->lora = (double)li->params * (8.0 + (o->optimizer ? 8.0 : 0.0) + (o->lora_shadow ? e : 0));
    p->checkpoints = backward ? (c->L + 1.0) * N * C * e : 2.0 * N * C * e;
    p->offload = backward && o->offload;
    if (p->offload) { /* every layer input in host memory, 2 device slots (a layer's input and output) */
        p->host = p->checkpoints;
        p->checkpoints = 2.0 * N * C * e;
    }
    p->ring = cp ? ring_bytes(c, N, B, (double)Tp, backward, e, o->acc_bytes > 0 ? o->acc_bytes : 4) : 0;
    double persistent = p->weights + p->gathered + p->lora + p->checkpoints + p->ring;
    double room = o->budget - persistent;

    /* chunks: at most 2048 tokens of logits and 8192 tokens of MLP (GEMMs of that height already
     * run at full speed), fewer when they would take more than 1/16 (logits) or 1/8 (MLP) of the
     * room left */
    int64_t lc = o->loss_chunk, mc = o->mlp_chunk;
    if (lc <= 0) {
        lc = 2048;
        while (lc > 64 && loss_bytes(c, (double)lc, backward, e) > fmax(room / 16, 64.0 * 1048576)) lc /= 2;
    }
    if (lc > p->N) lc = p->N;
    if (mc <= 0) {
        mc = p->N < 8192 ? p->N : 8192;
        double per = e * (C + 6 * F);
        while (mc > 512 && mc * per > fmax(room / 8, 256.0 * 1048576)) mc = (mc + 1) / 2;
    }
    if (mc > p->N) mc = p->N;
    p->mlp_chunk = mc;
    p->loss_chunk = lc;
    p->loss_head = loss_bytes(c, (double)lc, backward, e);

    const double mk = glm_plan_bytes_keep(c, e) * N, ms = glm_plan_bytes_selective(c, e) * N;
    const double qd = (double)c->H * c->Dh;
    /* recomputation per token and layer, in FLOP: selective redoes dense_h_to_4h; full redoes
     * query_key_value, dense, dense_h_to_4h and the attention forward (4 (T/2) H Dh: QK^T and PV
     * over half the keys on average). The planner's cost weighs attention x2 (it runs at about
     * half a GEMM's rate); the reported figure counts FLOP once. */
    const double f_attn = 4.0 * (T / 2.0) * qd, f_sel = 2.0 * 2 * F * C,
                 f_full = 2.0 * (qkv_rows(c) + qd + 2 * F) * C + f_attn, f_full_cost = f_full + f_attn;
    const int L = c->L;
    int best_k = 0, best_s = 0, found = 0;
    double best_cost = INFINITY;
    if (!backward) {
        best_k = best_s = 0;
        found = 1;
    } else if (o->mode != GLM_CKPT_AUTO) {
        best_k = o->mode == GLM_CKPT_NONE ? L : 0;
        best_s = o->mode == GLM_CKPT_SELECTIVE ? L : 0;
        found = 1;
    } else {
        for (int k = L; k >= 0; k--) {
            for (int pass = 0; pass < 2; pass++) { /* pass 0: no full layers; pass 1: with full layers */
                double fx = fixed_bytes(c, li, N, (double)mc, (double)lc, 1, pass, e, cp) + p->loss_head;
                double left = o->budget - persistent - fx - k * mk;
                if (left < 0) continue;
                double sd = ms > 0 ? floor(left / ms) : (double)(L - k);
                int s = sd > L - k ? L - k : (int)sd; /* compared in double: a huge budget must not overflow */
                int fl = L - k - s;
                if ((fl > 0) != pass) continue;
                double cost = s * f_sel + fl * f_full_cost;
                if (cost < best_cost - 1e-9) {
                    best_cost = cost;
                    best_k = k;
                    best_s = s;
                    found = 1;
                }
            }
        }
        if (!found) { /* nothing fits: report the leanest plan */
            best_k = 0;
            best_s = 0;
        }
    }
    p->n_keep = best_k;
    p->n_selective = best_s;
    p->n_full = L - best_k - best_s;
    p->saved = backward ? p->n_keep * mk + p->n_selective * ms : 0;
    p->working = fixed_bytes(c, li, N, (double)mc, (double)lc, backward, p->n_full > 0, e, cp);
    p->fixed = p->working;
    p->total = persistent + p->saved + p->working + p->loss_head; /* persistent includes the ring */
    p->recompute_gflop = backward ? N * (p->n_selective * f_sel + p->n_full * f_full) / 1e9 : 0;
    p->fits = p->total <= o->budget;
}

void glm_plan_make(const glm_config *c, const glm_lora_info *li, int B, int T, int backward, const glm_plan_opts *o,
                   glm_plan *p) {
    plan_once(c, li, B, T, backward, o, p);
    if (p->fits || !p->backward || o->offload || o->host_budget <= 0) return;
    /* auto: the layer inputs in host memory when that is what makes the step fit */
    glm_plan_opts oo = *o;
    oo.offload = 1;
    glm_plan q;
    plan_once(c, li, B, T, backward, &oo, &q);
    if (q.fits && q.host <= o->host_budget) *p = q;
}

/* GLMTUNE_HOST_MEMORY_GIB in GiB when it is a plain positive decimal number, else 0 (a warning
 * once when it is set but not one) */
static double env_host_gib(void) {
    const char *env = getenv("GLMTUNE_HOST_MEMORY_GIB"); /* plan for another machine's memory (and tests) */
    if (!env) return 0;
    char *end;
    double g = strtod(env, &end);
    if (*env && strspn(env, "0123456789.eE+") == strlen(env) && end != env && !*end && isfinite(g) && g > 0 && g < 1e9)
        return g;
    static int warned;
    if (!warned++)
        glm_log_warn("GLMTUNE_HOST_MEMORY_GIB=\"%s\" is not a positive number of GiB (e.g. 512): planning with this "
                     "machine's memory", env);
    return 0;
}

int glm_host_memory_from_env(void) { return env_host_gib() > 0; }

double glm_host_memory(void) {
    double g = env_host_gib();
    if (g > 0) return g * 1073741824.0;
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : 0;
}

int glm_local_ranks(void) {
    /* glmtune --gpus starts all its ranks on this machine; MPI launchers, Slurm and torchrun say how many are here */
    const char *vars[] = {"GLMTUNE_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE",
                          "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        int n = v ? atoi(v) : 0; /* Slurm may write "8(x2)": the count before the parenthesis */
        if (n >= 1 && n <= 1 << 20) return n;
    }
    return 1;
}

double glm_host_budget(int ranks_here) {
    return 0.75 * glm_host_memory() / (ranks_here > 1 ? ranks_here : 1);
}

int64_t glm_plan_longest(const glm_config *c, const glm_lora_info *li, int B, int backward, const glm_plan_opts *o,
                         int64_t step, int64_t max_T, glm_plan *best) {
    glm_plan p;
    if (step < 1) step = 1;
    if (max_T > INT32_MAX) max_T = INT32_MAX;
    int64_t lo = 0, hi = max_T / step; /* in steps: lo fits (0: nothing yet), hi + 1 does not, or hi = the cap */
    glm_plan_make(c, li, B, (int)step, backward, o, &p);
    if (!p.fits) return 0;
    lo = 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        glm_plan_make(c, li, B, (int)(mid * step), backward, o, &p);
        if (p.fits) lo = mid;
        else hi = mid - 1;
    }
    if (best) glm_plan_make(c, li, B, (int)(lo * step), backward, o, best);
    return lo * step;
}

static void layers_line(FILE *f, int from, int n, const char *what) {
    if (n <= 0) return;
    if (n == 1) fprintf(f, "  layer %d: %s\n", from, what);
    else fprintf(f, "  layers %d-%d: %s\n", from, from + n - 1, what);
}

void glm_plan_print(const glm_plan *p, const glm_config *c, FILE *f) {
    const double G = 1073741824.0;
    if (p->cp > 1) {
        fprintf(f, "memory plan: %d x %d tokens, context parallel over %d ranks: each holds 2 of the %d chunks of %lld "
                   "tokens of a row (rank c: chunks c and %d-c; %lld tokens per micro-batch), gradient checkpointing %s\n",
                p->B, p->T, p->cp, 2 * p->cp, (long long)(p->T_local / 2), 2 * p->cp - 1, (long long)p->N,
                glm_ckpt_name(p->requested));
        if (p->T_padded > p->T)
            fprintf(f, "  the row padded from %d to %lld tokens (a multiple of 2 x %d) with untargeted tokens of their own "
                       "document\n", p->T, (long long)p->T_padded, p->cp);
    } else {
        fprintf(f, "memory plan: %d x %d tokens (%lld per micro-batch), gradient checkpointing %s\n", p->B, p->T,
                (long long)p->N, glm_ckpt_name(p->requested));
    }
    if (p->backward) {
        layers_line(f, 0, p->n_keep, "keep all activations (no recomputation)");
        layers_line(f, p->n_keep, p->n_selective, "selective: keep attention results, recompute norms and MLP");
        layers_line(f, p->n_keep + p->n_selective, p->n_full, "full: keep the layer input, recompute the layer");
    } else {
        fprintf(f, "  forward only: nothing kept between layers\n");
    }
    fprintf(f, "  MLP in chunks of %lld tokens, loss head in chunks of %lld tokens\n", (long long)p->mlp_chunk,
            (long long)p->loss_chunk);
    if (p->shard_world > 1)
        fprintf(f, "  frozen base sharded over %d ranks (--shard-base): this rank holds 1/%d of every base matrix "
                   "(%.2f GiB) and all-gathers the layer it runs and the next into %.2f GiB of gather slots\n",
                p->shard_world, p->shard_world, p->weights / G, p->gathered / G);
    if (p->offload)
        fprintf(f, "  layer inputs offloaded to host memory: %.2f GiB of page-locked host memory per rank, the GPU "
                   "keeping 2 layers' inputs (copied while the neighbouring layers compute)\n", p->host / G);
    char ring[64] = "";
    if (p->cp > 1) snprintf(ring, sizeof ring, " + ring buffers %.2f", p->ring / G);
    fprintf(f, "  predicted device memory (GiB): weights %.2f%s + LoRA and optimizer %.2f + layer inputs %.2f%s + kept "
               "activations %.2f + working buffers %.2f%s + loss head %.2f = %.2f of a %.2f budget\n",
            (p->weights + p->gathered) / G, p->shard_world > 1 ? " (shard + gather slots)" : "", p->lora / G,
            p->checkpoints / G, p->offload ? " (on the GPU)" : "", p->saved / G, p->working / G, ring, p->loss_head / G,
            p->total / G, p->budget / G);
    if (p->backward) fprintf(f, "  recomputation: %.1f TFLOP per micro-batch\n", p->recompute_gflop / 1000);
    if (!p->fits) {
        fprintf(f, "  does NOT fit: %.2f GiB more than the budget. ", (p->total - p->budget) / G);
        if (p->weights + p->lora + p->gathered >= p->budget) {
            /* no activation setting helps: the model itself is too big for this memory */
            fprintf(f, "The weights alone take %.2f GiB: a card with more memory, or several GPUs with the frozen base "
                       "sharded over them (--gpus N --shard-base).\n",
                    (p->weights + p->lora + p->gathered) / G);
        } else {
            if (p->requested != GLM_CKPT_AUTO && p->requested != GLM_CKPT_FULL)
                fprintf(f, "Try --gradient-checkpointing auto (or full); ");
            fprintf(f, "a shorter --seq-len (T = %d now), more ranks per row (--context-parallel N with --gpus) or a "
                       "smaller --per-device-train-batch-size (%d now%s) shrinks every activation; the layer inputs alone "
                       "take %.2f GiB (a run offloads them to host memory where that makes the step fit and the "
                       "machine has the memory: GLMTUNE_HOST_MEMORY_GIB plans for another machine's).",
                    p->T, p->B, p->B > 1 ? "; --gradient-accumulation-steps keeps the global batch" : "", p->checkpoints / G);
            if (p->shard_world <= 1 && p->weights >= 0.25 * p->budget)
                fprintf(f, " On several GPUs, --shard-base splits the frozen base (%.2f GiB here) over them.",
                        p->weights / G);
            fputc('\n', f);
        }
    }
    (void)c;
}
