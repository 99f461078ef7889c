/* lora/model/comm_plan.c: the predicted communication of one optimizer step (lora/model/comm_plan.h). */
#include "lora/model/comm_plan.h"

#include <math.h>

#include "kernels/backend.h"
#include "kernels/comm.h"

/* Bytes of one rank's shard of a [rows, cols] matrix in format f over `world` ranks (the model
 * holds glm_weight_shard_elems elements; a 4-bit shard its codes, absmax and absmax2). */
static double shard_bytes(glm_wformat f, int64_t rows, int64_t cols, int world, int dq, const glm_wsegs *segs) {
    int64_t sn = glm_weight_shard_elems(f, glm_weight_stored_elems(f, segs, rows, cols), world);
    glm_weight_bytes_t b = glm_weight_bytes(f, sn, glm_wformat_packed(f) ? dq : 0);
    return (double)b.data + (double)b.absmax + (double)b.absmax2;
}

void glm_comm_plan_make(const glm_comm_plan_in *in, glm_comm_plan *o) {
    const glm_config *c = in->cfg;
    const glm_plan *p = in->plan;
    const int W = in->world > 1 ? in->world : 1, n = in->cp > 1 ? in->cp : 1, A = in->accum > 0 ? in->accum : 1;
    const int L = c->L;
    *o = (glm_comm_plan){0};
    o->all_reduce = glm_comm_all_reduce_bytes(4.0 * (double)in->lora_params, W);
    if (in->shard_base && W > 1) {
        const int64_t C = c->C, qkv = glm_config_qkv_rows(c), hd = (int64_t)c->H * c->Dh, F = c->F;
        const glm_wsegs qs = glm_plan_qkv_segs(c, in->base_format); /* hf: q, k, v quantized apart */
        double layer = shard_bytes(in->base_format, qkv, C, W, in->double_quant, &qs) +
                       shard_bytes(in->base_format, C, hd, W, in->double_quant, NULL) +
                       shard_bytes(in->base_format, 2 * F, C, W, in->double_quant, NULL) +
                       shard_bytes(in->base_format, C, F, W, in->double_quant, NULL);
        glm_wformat dense = in->weight_bytes == 2 ? GLM_WF_BF16 : GLM_WF_F32;
        o->gather_layer = glm_comm_all_gather_bytes(layer, W);
        o->gather_big = glm_comm_all_gather_bytes(shard_bytes(dense, c->V, C, W, 0, NULL), W);
        o->gathers_fwd = L > 2 ? L - 2 : 0;
        o->gathers_bwd = L > 2 ? L - 2 : 0;
        o->all_gather = A * ((o->gathers_fwd + o->gathers_bwd) * o->gather_layer + 2 * o->gather_big);
        o->first_step_extra = (L < 2 ? L : 2) * o->gather_layer;
    }
    if (n > 1) {
        double row_elems = (double)p->B * (double)p->T_local * 2.0 * c->Hkv * c->Dh;
        o->ring_kv_block = row_elems * in->act_bytes;
        o->ring_dkv_block = row_elems * (in->acc_bytes > 0 ? in->acc_bytes : 4);
        o->ring_kv = A * (double)(n - 1) * o->ring_kv_block * (2.0 * L + p->n_full);
        o->ring_dkv = A * (double)n * o->ring_dkv_block * L;
    }
    /* compute: useful FLOP of the rank's tokens plus the plan's recomputation */
    double nmat = (double)L * ((double)glm_config_qkv_rows(c) * c->C + (double)c->C * c->H * c->Dh + 3.0 * c->F * c->C) +
                  (double)c->V * c->C;
    double tokens = (double)A * p->B * (double)p->T_local;
    double useful = tokens * (4.0 * nmat + 6.0 * L * (double)p->T * c->H * c->Dh);
    double recomp = A * p->recompute_gflop * 1e9;
    double rate = (in->tflops > 0 ? in->tflops : GLM_DEFAULT_GPU_TFLOPS) * 1e12;
    o->flop = useful + recomp;
    o->fwd_s = useful / 3.0 / rate;
    o->bwd_s = (useful * 2.0 / 3.0 + recomp) / rate;
    o->compute_s = o->fwd_s + o->bwd_s;
}

static double pos(double x) { return x > 0 ? x : 0; }

void glm_comm_plan_exposed(const glm_comm_plan_in *in, const glm_comm_plan *o, double gbps, double ex[3]) {
    const glm_config *c = in->cfg;
    const glm_plan *p = in->plan;
    const int A = in->accum > 0 ? in->accum : 1, L = c->L, n = in->cp > 1 ? in->cp : 1;
    const double bw = gbps * 1e9, rate = (in->tflops > 0 ? in->tflops : GLM_DEFAULT_GPU_TFLOPS) * 1e12;
    const double fwd_mb = o->fwd_s / A, bwd_mb = o->bwd_s / A;
    /* the all-reduce: behind the last micro-batch's backward, but for the last layer's bucket */
    double t_ar = o->all_reduce / bw;
    ex[0] = L > 0 ? t_ar - fmin(t_ar * (L - 1) / L, bwd_mb) : t_ar;
    /* the gathers: each layer's behind the previous layer's compute, all of them on one stream */
    ex[1] = 0;
    if (o->all_gather > 0) {
        double t_l = o->gather_layer / bw, t_b = o->gather_big / bw;
        double per_layer = o->gathers_fwd * pos(t_l - fwd_mb / L) + o->gathers_bwd * pos(t_l - bwd_mb / L);
        double total = pos(o->gathers_fwd * t_l + t_b - fwd_mb) + pos(o->gathers_bwd * t_l - bwd_mb);
        ex[1] = A * (t_b /* the embedding's, at the start */ + fmax(per_layer, total));
    }
    /* the ring: each block behind one ring step's attention (a layer's attention / n) */
    ex[2] = 0;
    if (n > 1) {
        double attn = (double)p->B * p->T_local * 6.0 * (double)p->T * c->H * c->Dh / rate; /* one layer, fwd + bwd */
        double sf = attn / 3.0 / n, sb = attn * 2.0 / 3.0 / n;
        double t_kv = o->ring_kv_block / bw, t_dkv = o->ring_dkv_block / bw;
        double fwd = (n - 1) * pos(t_kv - sf);
        double bwd = (n - 1) * pos(t_kv + t_dkv - sb) + pos(t_dkv - sb);
        ex[2] = A * ((L + p->n_full) * fwd + L * bwd);
    }
}

static void human(double b, char *s, size_t n) {
    if (b >= 1e9) snprintf(s, n, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(s, n, "%.1f MB", b / 1e6);
    else if (b >= 1e3) snprintf(s, n, "%.1f kB", b / 1e3);
    else snprintf(s, n, "%.0f B", b);
}

static void ms(double s, char *o, size_t n) {
    if (s >= 10) snprintf(o, n, "%.1f s", s);
    else if (s >= 1e-3) snprintf(o, n, "%.1f ms", s * 1e3);
    else snprintf(o, n, "%.3f ms", s * 1e3);
}

void glm_comm_plan_print(const glm_comm_plan_in *in, const glm_comm_plan *o, const glm_link *links, int nl, FILE *f) {
    const int W = in->world, n = in->cp > 1 ? in->cp : 1, A = in->accum > 0 ? in->accum : 1;
    const glm_config *c = in->cfg;
    char b[32], t[32];
    fprintf(f, "communication of one optimizer step, per rank (%d ranks%s; %d micro-batch%s; bytes each rank sends "
            "under ring algorithms; time at each link, and what the overlap cannot hide):\n", W,
            in->shard_base && W > 1 ? ", --shard-base" : "", A, A == 1 ? "" : "es");
    if (n > 1) fprintf(f, "  (context parallel: %d ranks per row, %d data-parallel group%s)\n", n, W / n, W / n > 1 ? "s" : "");
    fprintf(f, "  %-44s %12s", "", "bytes");
    for (int i = 0; i < nl; i++) fprintf(f, " | %-30.30s", links[i].name);
    fprintf(f, "\n");
    struct {
        const char *what;
        double bytes;
        int kind; /* 0 all-reduce, 1 gathers, 2 ring */
    } rows[4] = {{"gradient all-reduce (fp32 LoRA grads)", o->all_reduce, 0},
                 {"--shard-base all-gathers", o->all_gather, 1},
                 {"ring K|V blocks (fwd, recomputation, bwd)", o->ring_kv, 2},
                 {"ring dK|dV blocks (bwd)", o->ring_dkv, 2}};
    double ex[8][3];
    for (int i = 0; i < nl && i < 8; i++) glm_comm_plan_exposed(in, o, links[i].gbps, ex[i]);
    for (int r = 0; r < 4; r++) {
        if (rows[r].bytes <= 0 && !(r == 0)) continue;
        human(rows[r].bytes, b, sizeof b);
        fprintf(f, "  %-44s %12s", rows[r].what, b);
        for (int i = 0; i < nl && i < 8; i++) {
            char cell[128];
            ms(rows[r].bytes / (links[i].gbps * 1e9), t, sizeof t);
            if (r == 3) snprintf(cell, sizeof cell, "%s", t); /* the ring's exposed time is on the K|V row */
            else {
                char e[32];
                ms(ex[i][rows[r].kind], e, sizeof e);
                snprintf(cell, sizeof cell, "%s (%s exposed)", t, e);
            }
            fprintf(f, " | %-30s", cell);
        }
        fprintf(f, "\n");
    }
    if (o->all_gather > 0) {
        char gl[32], gb[32], fx[32];
        human(o->gather_layer, gl, sizeof gl);
        human(o->gather_big, gb, sizeof gb);
        human(o->first_step_extra, fx, sizeof fx);
        fprintf(f, "    gathers per micro-batch: one layer's 4 matrices (%s) x %d in the forward, 0 for the "
                "recomputation (it uses the backward's), x %d in the backward; the embedding and the output layer "
                "(%s each); the run's first step gathers %s more (layers 0 and 1)\n",
                gl, o->gathers_fwd, o->gathers_bwd, gb, fx);
    }
    if (n > 1) {
        char kv[32], dkv[32];
        human(o->ring_kv_block, kv, sizeof kv);
        human(o->ring_dkv_block, dkv, sizeof dkv);
        fprintf(f, "    ring per layer and micro-batch: %d K|V blocks of %s in the forward (again in the backward of the "
                "%d layers recomputed in full), %d K|V and %d dK|dV blocks of %s in the backward\n",
                n - 1, kv, in->plan->n_full, n - 1, n, dkv);
    }
    ms(o->compute_s, t, sizeof t);
    fprintf(f, "  compute: %.1f TFLOP per step per rank (%lld tokens; useful 4 N_matmul + 6 L T H Dh per token, "
            "and the recomputation) = %s at %.0f TFLOP/s%s\n",
            o->flop / 1e12, (long long)((double)A * in->plan->B * in->plan->T_local), t,
            in->tflops > 0 ? in->tflops : GLM_DEFAULT_GPU_TFLOPS,
            in->tflops > 0 && in->tflops != GLM_DEFAULT_GPU_TFLOPS
                ? " (--gpu-tflops)"
                : " (default: glmtune's measured 11,986 tokens/s at 8k on one H200, docs/design.md §6; --gpu-tflops)");
    for (int i = 0; i < nl && i < 8; i++) {
        double e = ex[i][0] + ex[i][1] + ex[i][2];
        double comm = (o->all_reduce + o->all_gather + o->ring_kv + o->ring_dkv) / (links[i].gbps * 1e9);
        char cs[32], es[32], ss[32];
        ms(comm, cs, sizeof cs);
        ms(e, es, sizeof es);
        ms(o->compute_s + e, ss, sizeof ss);
        fprintf(f, "  at %s: communication %s, of which %s exposed (the rest hidden behind compute): step %s, %.0f%% "
                "of it waiting (%.0f tokens/s per rank)\n",
                links[i].name, cs, es, ss, 100 * e / (o->compute_s + e),
                (double)A * in->plan->B * in->plan->T_local / (o->compute_s + e));
    }
    (void)c;
    fprintf(f, "comm bytes per step per rank: all_reduce %.0f all_gather %.0f sendrecv %.0f\n", o->all_reduce, o->all_gather,
            o->ring_kv + o->ring_dkv);
}
