/* tests/lora/test_plan.c: the memory planner (lora/model/plan.h) on GLM-4-9B-Chat-1M's shape, against
 * byte counts derived by hand, and its choices at the budgets of an H200 and a 24 GB card. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lora/model/config.h"
#include "lora/adapter/lora.h"
#include "lora/model/plan.h"
#include "tests/check.h"

static const double GiB = 1073741824.0;

static glm_plan plan(const glm_config *c, const glm_lora_info *li, int T, glm_ckpt_mode mode, double budget_gib) {
    glm_plan_opts o = {.mode = mode, .budget = budget_gib * GiB, .act_bytes = 2, .weight_bytes = 2, .lora_shadow = 1,
                       .optimizer = 1};
    glm_plan p;
    glm_plan_make(c, li, 1, T, 1, &o, &p);
    return p;
}

int main(void) {
    glm_config c;
    CHECK(glm_config_preset("glm-4-9b-chat-1m", &c) == GLM_OK && c.Hkv == 4 && c.rope_base == 1e8, "preset 1m");
    glm_config c2;
    CHECK(glm_config_preset("glm-4-9b-chat", &c2) == GLM_OK && c2.Hkv == 2 && c2.rope_base == 5e6, "preset chat");
    CHECK(glm_config_preset("glm-5", &c2) == GLM_ERR_ARG && strstr(glm_errmsg(), "glm-4-9b-chat-1m"), "unknown preset named");

    /* LoRA r=8 on every linear (chatglm modules): per layer r (in + out) for query_key_value
     * (4096 + 5120), dense (4096 + 4096), dense_h_to_4h (4096 + 27392), dense_4h_to_h (13696 +
     * 4096): 8 * 66688 = 533504; 40 layers: 21340160 */
    glm_lora_config lc = {8, 16, 0, false, "all"};
    glm_lora_info li;
    CHECK(glm_lora_info_for(&c, &lc, &li) == GLM_OK, "lora info: %s", glm_errmsg());
    CHECK(li.params == 21340160 && li.max_sites_lin == 1 && li.max_in_attn == 4096 && li.max_in_mlp == 13696,
          "lora info: %lld params", (long long)li.params);
    glm_config ch = c;
    ch.layout = GLM_LAYOUT_HF;
    glm_lora_config lq = {8, 16, 0.1f, false, "q_proj,k_proj,v_proj"};
    CHECK(glm_lora_info_for(&ch, &lq, &li) == GLM_OK && li.max_sites_lin == 3 && li.dropout, "hf q/k/v share a linear");
    CHECK(glm_lora_info_for(&c, &lc, &li) == GLM_OK, "lora info");

    /* weights: 2 V C (embedding, output layer) + C (final norm) + L (qkv (5120 C + 5120 bias) +
     * dense 4096 C + dense_h_to_4h 27392 C + dense_4h_to_h 13696 C + 2 C norms) = 9483857920 bf16
     * parameters = 18967715840 bytes */
    glm_plan p = plan(&c, &li, 8192, GLM_CKPT_AUTO, 137);
    CHECK(p.weights == 18967715840.0, "weights %.0f bytes", p.weights);
    /* LoRA: w, g, AdamW m and v in fp32 plus a bf16 copy of the 160 adapters' weights, each lora_A and
     * lora_B aligned to 256 bytes (at most 512 bytes of padding per adapter), rounded to 256 */
    CHECK(p.lora == 21340160.0 * 16 + ceil((21340160.0 * 2 + 512 * 160 + 256) / 256) * 256, "lora %.0f", p.lora);
    /* layer inputs: 41 x 8192 x 4096 bf16 */
    CHECK(p.checkpoints == 41.0 * 8192 * 4096 * 2, "checkpoints %.0f", p.checkpoints);
    /* kept per token and layer: (3 C + 5120 + 4096 + 3 F) bf16 + (2 + H) fp32 */
    CHECK(glm_plan_bytes_keep(&c, 2) == 2.0 * (3 * 4096 + 5120 + 4096 + 3 * 13696) + 4 * 34, "keep bytes");
    CHECK(glm_plan_bytes_selective(&c, 2) == 2.0 * (5120 + 4096 + 4096) + 4 * 32, "selective bytes");

    /* an H200 (137 GiB budget): 8k keeps everything; 32k recomputes some, never whole layers; the
     * longest still fit by recomputing more */
    glm_plan_print(&p, &c, stdout);
    CHECK(p.fits && p.n_keep == 40 && p.recompute_gflop == 0, "8k on an H200: keep all (%d)", p.n_keep);
    p = plan(&c, &li, 32768, GLM_CKPT_AUTO, 137);
    glm_plan_print(&p, &c, stdout);
    CHECK(p.fits && p.n_keep < 40 && p.n_full == 0, "32k: keep %d selective %d full %d", p.n_keep, p.n_selective, p.n_full);
    glm_plan q = plan(&c, &li, 32768, GLM_CKPT_NONE, 137);
    CHECK(!q.fits, "32k without recomputation does not fit an H200 (%.1f GiB)", q.total / GiB);
    for (int T = 65536; T <= 262144; T *= 2) {
        p = plan(&c, &li, T, GLM_CKPT_AUTO, 137);
        glm_plan_print(&p, &c, stdout);
        CHECK(p.fits && p.total <= 137 * GiB, "T=%d fits an H200: %.1f GiB", T, p.total / GiB);
        CHECK(p.mlp_chunk < T, "T=%d: the MLP runs in chunks (%lld)", T, (long long)p.mlp_chunk);
    }
    /* a 24 GB card (--max-gpu-memory 22): 4k and 8k fit */
    for (int T = 4096; T <= 8192; T *= 2) {
        p = plan(&c, &li, T, GLM_CKPT_AUTO, 22);
        glm_plan_print(&p, &c, stdout);
        CHECK(p.fits, "T=%d in 22 GiB: %.2f GiB", T, p.total / GiB);
    }
    /* full checkpointing at 8k stays under 24 GiB (so that 8k rows train on a 24 GB card) */
    p = plan(&c, &li, 8192, GLM_CKPT_FULL, 137);
    CHECK(p.n_full == 40 && p.total < 24 * GiB, "full at 8k: %.2f GiB", p.total / GiB);
    /* more memory never means more recomputation */
    double last = INFINITY;
    for (double b = 40; b <= 140; b += 10) {
        p = plan(&c, &li, 65536, GLM_CKPT_AUTO, b);
        if (p.fits) {
            CHECK(p.recompute_gflop <= last, "budget %.0f GiB: recompute %.0f > %.0f", b, p.recompute_gflop, last);
            last = p.recompute_gflop;
        }
    }
    /* a plan that cannot fit says so, with the leanest layout */
    p = plan(&c, &li, 8192, GLM_CKPT_AUTO, 16);
    CHECK(!p.fits && p.n_full == 40, "16 GiB cannot hold the weights");
    glm_ckpt_mode m;
    CHECK(glm_ckpt_parse("sometimes", &m) == GLM_ERR_ARG && strstr(glm_errmsg(), "selective"), "bad mode");
    /* context parallel: 1,048,576 tokens over 8 ranks (chunks of 65536: 131072 per rank) on
     * 137 GiB each. Every per-token buffer is the unsplit plan's for 131072 tokens, plus the
     * ring: two K|V blocks (bf16, 2 x 4 x 128 per token), two f32 dK|dV accumulators, the f32
     * output / dQ (32 x 128) and lse (32) accumulators, and the row's document ids (4 bytes per
     * token of the whole row). */
    {
        glm_plan_opts o = {.mode = GLM_CKPT_AUTO, .budget = 137 * GiB, .act_bytes = 2, .weight_bytes = 2, .lora_shadow = 1,
                           .optimizer = 1, .cp = 8, .acc_bytes = 4};
        glm_plan q, u;
        glm_plan_make(&c, &li, 1, 1048576, 1, &o, &q);
        glm_plan_print(&q, &c, stdout);
        CHECK(q.cp == 8 && q.T == 1048576 && q.T_padded == 1048576 && q.T_local == 131072 && q.N == 131072,
              "1M over 8 ranks: %lld tokens per rank", (long long)q.N);
        double ring = 2.0 * 131072 * 1024 * 2 + 4.0 * 131072 * 1024 * 2 + 4.0 * 131072 * (4096 + 32) + 4.0 * 1048576;
        CHECK(q.ring == ring, "ring buffers %.0f bytes, want %.0f", q.ring, ring);
        CHECK(q.checkpoints == 41.0 * 131072 * 4096 * 2, "layer inputs for the rank's tokens");
        CHECK(q.fits, "1M on 8 x 137 GiB fits (%.2f GiB)", q.total / GiB);
        CHECK(q.saved == 131072.0 * (q.n_keep * glm_plan_bytes_keep(&c, 2) + q.n_selective * glm_plan_bytes_selective(&c, 2)),
              "kept activations for the rank's tokens (%d keep, %d selective)", q.n_keep, q.n_selective);
        glm_plan_opts o1 = o;
        o1.cp = 0;
        /* padding: 1,000,003 tokens over 3 ranks: padded to 1,000,008 (a multiple of 6), 333,336 per rank */
        o.cp = 3;
        glm_plan_make(&c, &li, 1, 1000003, 1, &o, &q);
        CHECK(q.T_padded == 1000008 && q.T_local == 333336, "padded to %lld, %lld per rank", (long long)q.T_padded,
              (long long)q.T_local);
        /* the longest row: fits, and one step more does not */
        o.cp = 8;
        int64_t step = 16384, tmax = glm_plan_longest(&c, &li, 1, 1, &o, step, (int64_t)1 << 28, &q);
        glm_plan_make(&c, &li, 1, (int)(tmax + step), 1, &o, &u);
        CHECK(tmax % step == 0 && tmax >= 1048576 && q.fits && q.T == tmax && !u.fits,
              "longest on 8 x 137 GiB: %lld tokens (the next step does not fit)", (long long)tmax);
        /* 2 ranks: 1M does not fit; with the layer inputs offloaded it does, the GPU keeping 2 */
        o.cp = 2;
        glm_plan_make(&c, &li, 1, 1048576, 1, &o, &q);
        CHECK(!q.fits, "1M on 2 x 137 GiB does not fit with the layer inputs on the GPU (%.1f GiB)", q.total / GiB);
        o.offload = 1;
        glm_plan_make(&c, &li, 1, 1048576, 1, &o, &u);
        CHECK(u.offload && u.fits && u.checkpoints == 2.0 * 524288 * 4096 * 2 && u.host == 40.0 * 524288 * 4096 * 2,
              "offloaded: %.1f GiB on the GPU, %.1f GiB of host memory", u.total / GiB, u.host / GiB);
        /* auto (host_budget): offloaded only when it fits the host budget */
        o.offload = 0;
        o.host_budget = 200 * GiB;
        glm_plan_make(&c, &li, 1, 1048576, 1, &o, &q);
        CHECK(q.offload && q.fits, "auto: 1M on 2 x 137 GiB offloads within 200 GiB of host memory");
        /* ... and only as many layer inputs as it takes: the first n_host, the fewest that fit */
        o.host_budget = 100 * GiB;
        glm_plan_make(&c, &li, 1, 1048576, 1, &o, &q);
        CHECK(q.offload && q.fits && q.n_host > 0 && q.n_host < 40 && q.host == q.n_host * 524288.0 * 4096 * 2 &&
                  q.host <= 100 * GiB,
              "auto within 100 GiB: %d of 40 layer inputs offloaded (%.1f GiB)", q.n_host, q.host / GiB);
        {
            glm_plan_opts of = o;
            glm_plan r;
            of.offload = 1;
            of.offload_layers = q.n_host - 1;
            glm_plan_make(&c, &li, 1, 1048576, 1, &of, &r);
            CHECK(!r.fits && r.n_host == q.n_host - 1, "one layer input fewer offloaded does not fit (%.2f GiB)", r.total / GiB);
        }
        o.host_budget = 20 * GiB;
        glm_plan_make(&c, &li, 1, 1048576, 1, &o, &q);
        CHECK(!q.offload && !q.fits, "auto: ... but not within 20 GiB");
        o.host_budget = 0;
        o.cp = 0;
        glm_plan_make(&c, &li, 1, 8192, 1, &o, &q);
        CHECK(!q.offload, "auto: 8k fits without offloading");
        o.cp = 2;
        o.offload = 1;
        CHECK(glm_plan_longest(&c, &li, 1, 1, &o, 4096, (int64_t)1 << 28, NULL) > glm_plan_longest(&c, &li, 1, 1, &o1, 4096, (int64_t)1 << 28, NULL),
              "offloading plans longer rows");
        o.offload = 0;
        o.budget = 1 * GiB;
        CHECK(glm_plan_longest(&c, &li, 1, 1, &o, 4096, (int64_t)1 << 28, NULL) == 0, "nothing fits 1 GiB: 0");
    }
    return check_summary("test_plan");
}
