/* lora/model/plan_print.c: the memory plan as the dry run, bench and an out-of-memory message print
 * it (lora/model/plan.h glm_plan_print). */
#include "lora/model/plan.h"

#include <stdio.h>

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
        fprintf(f, "  layer inputs offloaded to host memory: %d of %d (layers 0-%d), %.2f GiB of page-locked host memory "
                   "per rank, copied through 2 device slots while the neighbouring layers compute\n", p->n_host,
                c->L, p->n_host - 1, p->host / G);
    if (glm_wformat_packed(p->base_format))
        fprintf(f, "  frozen linear layers in %s (4-bit, blocks of 64): each layer dequantized to bf16 just before its GEMMs "
                   "(a %.2f GiB slot)\n", glm_wformat_name(p->base_format), p->dequant / G);
    if (p->base_format == GLM_WF_FP8_E4M3)
        fprintf(f, "  frozen linear layers in FP8 E4M3 (a byte per weight, an f32 scale per output channel), their GEMMs "
                   "on FP8 tensor cores%s\n", p->dequant > 0 ? "; each layer's codes transposed for its input gradients "
                   "(a slot in the weights' count)" : "");
    char ring[64] = "";
    if (p->cp > 1) snprintf(ring, sizeof ring, " + ring buffers %.2f", p->ring / G);
    fprintf(f, "  predicted device memory (GiB): weights %.2f%s + LoRA and optimizer %.2f + layer inputs %.2f%s + kept "
               "activations %.2f + working buffers %.2f%s + loss head %.2f = %.2f of a %.2f budget\n",
            (p->weights + p->gathered + p->dequant) / G,
            p->shard_world > 1 ? " (shard + gather slots)"
            : p->dequant > 0 ? (p->base_format == GLM_WF_FP8_E4M3 ? " (incl. the transposed layer)" : " (incl. the dequantized layer)")
                             : "",
            p->lora / G,
            p->checkpoints / G, p->offload ? " (on the GPU)" : "", p->saved / G, p->working / G, ring, p->loss_head / G,
            p->total / G, p->budget / G);
    if (p->attn_lean)
        fprintf(f, "  attention: glmtune's kernels (no room for a fused-attention library's workspace in this budget)\n");
    if (p->N > 0) {
        static const glm_buf_id row[] = {GLM_BUF_QKV, GLM_BUF_O,    GLM_BUF_LSE,    GLM_BUF_XMID,
                                         GLM_BUF_DX,  GLM_BUF_DQKV, GLM_BUF_ATTN_D, GLM_BUF_BATCH};
        double rb = 0;
        for (size_t i = 0; i < sizeof row / sizeof row[0]; i++) rb += p->buf[row[i]].bytes * p->buf[row[i]].count;
        double chunks = p->working - rb - p->scratch;
        char ws_note[96] = "";
        if (p->attn_ws > 0)
            snprintf(ws_note, sizeof ws_note, " (cuDNN's attention workspace in it: %.1f KB more per token)",
                     p->attn_ws / (double)p->N / 1000.0);
        fprintf(f, "  working buffers %.2f GiB: %.1f KB per token across the row (attention's operands, the residual "
                   "gradient, the batch) + %.2f GiB in chunks of %lld tokens + the backend's scratch %.2f GiB%s\n",
                p->working / G, rb / (double)p->N / 1000.0, chunks / G, (long long)p->mlp_chunk, p->scratch / G, ws_note);
    }
    if (p->backward) fprintf(f, "  recomputation: %.1f TFLOP per micro-batch\n", p->recompute_gflop / 1000);
    if (!p->fits) {
        fprintf(f, "  does NOT fit: %.2f GiB more than the budget. ", (p->total - p->budget) / G);
        if (p->weights + p->lora + p->gathered + p->dequant >= p->budget) {
            /* no activation setting helps: the model itself is too big for this memory */
            fprintf(f, "The weights alone take %.2f GiB: %sa card with more memory, or several GPUs with the frozen base "
                       "sharded over them (--gpus N --shard-base).\n",
                    (p->weights + p->lora + p->gathered + p->dequant) / G,
                    glm_wformat_packed(p->base_format) ? "" : "--quantization-bit 4 (QLoRA: the linear layers in 4 bits), ");
        } else {
            if (p->requested != GLM_CKPT_AUTO && p->requested != GLM_CKPT_FULL)
                fprintf(f, "Try --gradient-checkpointing auto (or full); ");
            fprintf(f, "a shorter --seq-len (T = %d now), more ranks per row (--context-parallel N with --gpus) or a "
                       "smaller --per-device-train-batch-size (%d now%s) shrinks every activation.",
                    p->T, p->B, p->B > 1 ? "; --gradient-accumulation-steps keeps the global batch" : "");
            if (p->host_short_layers > 0)
                fprintf(f, " Offloading %d of the %d layer inputs to host memory would make it fit, but takes %.2f GiB of "
                           "page-locked host memory per rank, more than the %.2f GiB this run may use (GLMTUNE_HOST_MEMORY_GIB "
                           "plans for another machine's).", p->host_short_layers, c->L, p->host_short / G,
                        p->host_budget / G);
            else if (p->all_offloaded_total > 0)
                fprintf(f, " Even with every layer input in host memory the step takes %.2f GiB of the device.",
                        p->all_offloaded_total / G);
            if (p->base_format == GLM_WF_FP8_E4M3) /* 4-bit replaces fp8 (the two do not combine) */
                fprintf(f, " --quantization-bit 4 (QLoRA) instead of --base-dtype fp8 keeps the frozen linear layers in "
                           "4 bits (about half of fp8's; the base %.2f GiB here).", p->weights / G);
            else if (!glm_wformat_packed(p->base_format))
                fprintf(f, " --quantization-bit 4 (QLoRA) keeps the frozen linear layers in 4 bits (about a quarter of "
                           "their %.2f GiB).", p->weights / G);
            if (p->shard_world <= 1 && p->weights >= 0.25 * p->budget)
                fprintf(f, " On several GPUs, --shard-base splits the frozen base (%.2f GiB here) over them.",
                        p->weights / G);
            fputc('\n', f);
        }
    }
}
