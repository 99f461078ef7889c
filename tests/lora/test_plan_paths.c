/* tests/lora/test_plan_paths.c: the dry run plans what the run will, byte for byte. Over a grid of
 * configurations (micro-batch B, row length T, the checkpointing modes, offloading forced or planned,
 * context parallel, the base sharded over W ranks, the base formats dense / nf4 / fp4 with double
 * quantization / fp8, no cap and several --max-gpu-memory caps, one below the CUDA overhead), on the
 * CPU:
 *   - the model's own plan (glm_model_plan of a model loaded with the run's format and sharding and
 *     given the run's options, tool/train/train_files.h train_model_options) equals the plan that
 *     `train --dry-run` and train's check before loading make from the settings alone
 *     (train_plan_request -> glm_plan_request_make), memcmp of the whole glm_plan: on a CPU-like
 *     backend, and on a CUDA-like one (bf16 sizes, an overhead, the planner's scratch estimate);
 *   - a CUDA device described (no backend: a dry run on a machine without a GPU) plans what that
 *     CUDA-like backend plans live;
 *   - the longest-row search over the request equals the one over the model.
 * The backends are the CPU backend with deterministic memory answers (free memory, overhead, ranks),
 * so that two calls can be compared; GLMTUNE_HOST_MEMORY_GIB fixes the host budget. */
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "lora/model/model_plan.h"
#include "tests/check.h"
#include "tool/train/train.h"
#include "tool/train/train_files.h"

static const double GiB = 1073741824.0;
static size_t f_free, f_overhead;

static void f_mem_info(const glm_backend *be, size_t *fr, size_t *tot, size_t *use, size_t *peak) {
    if (fr) *fr = f_free;
    if (tot) *tot = f_free;
    if (use) *use = 0;
    if (peak) *peak = 0;
}
static size_t f_mem_overhead(const glm_backend *be) { return f_overhead; }

/* A field-level account of where two plans differ (the first few fields that matter). */
static void plan_diff(const char *what, const glm_plan *a, const glm_plan *b) {
    fprintf(stderr, "  %s: B %d/%d T %d/%d N %lld/%lld cp %d/%d keep %d/%d sel %d/%d full %d/%d mlp %lld/%lld loss %lld/%lld "
            "total %.0f/%.0f budget %.0f/%.0f scratch %.0f/%.0f host %.0f/%.0f n_host %d/%d fits %d/%d shard %d/%d\n",
            what, a->B, b->B, a->T, b->T, (long long)a->N, (long long)b->N, a->cp, b->cp, a->n_keep, b->n_keep,
            a->n_selective, b->n_selective, a->n_full, b->n_full, (long long)a->mlp_chunk, (long long)b->mlp_chunk,
            (long long)a->loss_chunk, (long long)b->loss_chunk, a->total, b->total, a->budget, b->budget, a->scratch,
            b->scratch, a->host, b->host, a->n_host, b->n_host, a->fits, b->fits, a->shard_world, b->shard_world);
    for (int i = 0; i < GLM_BUF_COUNT; i++)
        if (a->buf[i].bytes != b->buf[i].bytes || a->buf[i].count != b->buf[i].count)
            fprintf(stderr, "  buffer %s: %.0f x %d vs %.0f x %d\n", glm_buf_name((glm_buf_id)i), a->buf[i].bytes,
                    a->buf[i].count, b->buf[i].bytes, b->buf[i].count);
}

static int same_plan(const glm_plan *a, const glm_plan *b) { return memcmp(a, b, sizeof *a) == 0; }

typedef struct {
    const char *name;
    int quant_bits;
    const char *quant_type;
    int double_quant, fp8;
} fmt_case;

int main(void) {
    const char *S = test_data_dir();
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tiny-glm4/chatglm", S);
    setenv("GLMTUNE_HOST_MEMORY_GIB", "126", 1);
    unsetenv("GLMTUNE_ATTENTION");
    const fmt_case fmts[] = {{"dense", 0, "nf4", 0, 0}, {"nf4", 4, "nf4", 0, 0}, {"fp4 + double quantization", 4, "fp4", 1, 0},
                             {"fp8", 0, "nf4", 0, 1}};
    const int worlds[] = {1, 2};
    const int cps[] = {1, 2};
    const int Bs[] = {1, 2};
    const int Ts[] = {64, 200};
    const glm_ckpt_mode modes[] = {GLM_CKPT_NONE, GLM_CKPT_FULL, GLM_CKPT_SELECTIVE, GLM_CKPT_AUTO};
    /* caps in GiB: none, tight and loose for the tiny model on the CPU-like backend; below the CUDA
     * overhead, tight and loose above it on the CUDA-like one */
    const double caps_cpu[] = {0, 0.002, 0.004, 0.05}, caps_cuda[] = {0.5, 0.975, 0.98, 2.0};
    int n_cmp = 0, n_fits = 0, n_nofit = 0, n_offloaded = 0;
    for (size_t fi = 0; fi < sizeof fmts / sizeof *fmts; fi++) {
        for (size_t wi = 0; wi < 2; wi++) {
            const int W = worlds[wi];
            const fmt_case *f = &fmts[fi];
            if (f->fp8 && W > 1) continue; /* fp8 is refused with --shard-base */
            char ws[16];
            snprintf(ws, sizeof ws, "%d", W);
            setenv("GLMTUNE_WORLD_SIZE", ws, 1); /* the ranks on this machine (glm_local_ranks) */
            glm_backend cpu_like = *glm_backend_cpu(), cuda_like = *glm_backend_cpu(), comm = *glm_backend_cpu();
            cpu_like.world = cuda_like.world = W;
            cpu_like.mem_info = cuda_like.mem_info = f_mem_info;
            cpu_like.mem_overhead = cuda_like.mem_overhead = f_mem_overhead;
            cuda_like.name = "cuda-like";
            cuda_like.weight_dtype = cuda_like.act_dtype = GLM_DT_BF16;
            cuda_like.acc_dtype = GLM_DT_F32;
            train_settings ts;
            memset(&ts, 0, sizeof ts);
            ts.opt.model = dir;
            ts.opt.lora_rank = 4;
            ts.opt.lora_alpha = 8;
            ts.opt.lora_dropout = fi % 2 ? 0.1 : 0; /* the dropped-out input buffer in half the cases */
            ts.lora_target = "all";
            ts.quant_bits = f->quant_bits;
            ts.quant_type = f->quant_type;
            ts.double_quant = f->double_quant;
            ts.fp8 = f->fp8;
            ts.opt.shard_base = W > 1;
            glm_base_format bf = train_base_format(&ts);
            glm_model *m = NULL;
            glm_status st = glm_model_load_fmt(dir, &cpu_like, 0, ts.opt.shard_base, &bf, &m);
            CHECK(st == GLM_OK, "%s, world %d: load: %s", f->name, W, glm_errmsg());
            if (st) continue;
            CHECK(m->shard_world == glm_shard_world(ts.opt.shard_base, W), "%s, world %d: shard world %d", f->name, W,
                  m->shard_world);
            glm_lora_config lc = {(int)ts.opt.lora_rank, (float)ts.opt.lora_alpha, (float)ts.opt.lora_dropout, false, ts.lora_target};
            glm_lora *lora = NULL;
            CHECK(glm_lora_create(m, &lc, 3, &lora) == GLM_OK, "lora: %s", glm_errmsg());
            glm_config cfg;
            CHECK(glm_config_load(dir, 0, &cfg) == GLM_OK, "config: %s", glm_errmsg());
            glm_lora_info li;
            CHECK(glm_lora_info_for(&cfg, &lc, &li) == GLM_OK, "lora info: %s", glm_errmsg());
            for (int dev = 0; dev < 2 && lora; dev++) {
                /* the model as the CPU backend or a CUDA one holds it: its plan reads only the backend's
                 * sizes and memory answers */
                m->be = dev ? &cuda_like : &cpu_like;
                f_free = dev ? 0 : (size_t)(3 * GiB);
                f_overhead = dev ? (size_t)(GLM_PLAN_CUDA_OVERHEAD_GIB * GiB) : 0;
                const double *caps = dev ? caps_cuda : caps_cpu;
                for (size_t ci = 0; ci < 2; ci++) {
                    const int cp = cps[ci];
                    comm.world = cp;
                    for (int ki = 0; ki < 4; ki++) {
                        ts.max_gpu_gib = caps[ki];
                        glm_model_options mo = train_model_options(&ts, cp, &comm);
                        CHECK(glm_model_set_options(m, &mo) == GLM_OK, "options: %s", glm_errmsg());
                        for (int off = 0; off < 2; off++) {
                            if (off) { /* offloading forced, on both sides alike */
                                glm_model_options mf = mo;
                                mf.offload = 1;
                                CHECK(glm_model_set_options(m, &mf) == GLM_OK, "options: %s", glm_errmsg());
                            }
                            for (size_t bi = 0; bi < 2; bi++)
                                for (size_t ti = 0; ti < 2; ti++)
                                    for (size_t mi = 0; mi < 4; mi++) {
                                        const int B = Bs[bi], T = Ts[ti];
                                        ts.ckpt_mode = (int)modes[mi];
                                        char what[256];
                                        snprintf(what, sizeof what, "%s, %s, world %d, cp %d, cap %g GiB%s, B %d, T %d, %s",
                                                 dev ? "cuda-like" : "cpu-like", f->name, W, cp, caps[ki],
                                                 off ? ", offload forced" : "", B, T, glm_ckpt_name(modes[mi]));
                                        glm_plan pm, pr, pd;
                                        glm_model_plan(m, lora, B, T, 1, modes[mi], &pm);
                                        glm_plan_request rq = train_plan_request(&ts, &cfg, &li, B, T, W, cp, m->be, W);
                                        if (off) rq.opts.offload = 1;
                                        CHECK(glm_plan_request_make(&rq, &pr, NULL) == GLM_OK, "%s: %s", what, glm_errmsg());
                                        int same = same_plan(&pm, &pr);
                                        CHECK(same, "%s: the model's plan and the dry run's differ", what);
                                        if (!same) plan_diff(what, &pm, &pr);
                                        if (dev) { /* a dry run without a GPU: the CUDA backend described */
                                            rq.be = NULL;
                                            rq.describe_cuda = 1;
                                            CHECK(glm_plan_request_make(&rq, &pd, NULL) == GLM_OK, "%s: %s", what,
                                                  glm_errmsg());
                                            same = same_plan(&pd, &pm);
                                            CHECK(same, "%s: the described CUDA device's plan and the live one's differ",
                                                  what);
                                            if (!same) plan_diff(what, &pd, &pm);
                                        }
                                        n_cmp++;
                                        n_fits += pm.fits;
                                        n_nofit += !pm.fits;
                                        n_offloaded += pm.n_host > 0;
                                    }
                        }
                        /* the longest row: the request's search and the model's */
                        glm_plan lb_m, lb_r;
                        glm_model_set_options(m, &mo);
                        ts.ckpt_mode = GLM_CKPT_AUTO;
                        int64_t tm = glm_model_plan_longest(m, lora, 1, GLM_CKPT_AUTO, 32, 4096, &lb_m), tr = -1;
                        glm_plan_request rq = train_plan_request(&ts, &cfg, &li, 1, 32, W, cp, m->be, W);
                        CHECK(glm_plan_request_longest(&rq, 32, 4096, &tr, &lb_r) == GLM_OK, "longest: %s", glm_errmsg());
                        CHECK(tm == tr && same_plan(&lb_m, &lb_r), "%s, %s, world %d, cp %d, cap %g: longest row %lld vs %lld",
                              dev ? "cuda-like" : "cpu-like", f->name, W, cp, caps[ki], (long long)tm, (long long)tr);
                    }
                }
            }
            m->be = &cpu_like;
            glm_lora_free(lora);
            glm_model_free(m);
        }
    }
    /* the grid is not trivially uniform: plans that fit, that do not, and that offload */
    CHECK(n_cmp > 1000 && n_fits > 0 && n_nofit > 0 && n_offloaded > 0,
          "%d plans compared: %d fit, %d do not, %d offload layer inputs", n_cmp, n_fits, n_nofit, n_offloaded);
    /* a described device with an invalid GLMTUNE_ATTENTION is an error, as the CUDA backend makes it */
    setenv("GLMTUNE_ATTENTION", "bogus", 1);
    {
        glm_config cfg;
        glm_config_load(dir, 0, &cfg);
        glm_plan p;
        glm_plan_request rq = {.cfg = &cfg, .B = 1, .T = 64, .describe_cuda = 1, .opts = {.max_bytes = 2 * GiB}};
        CHECK(glm_plan_request_make(&rq, &p, NULL) == GLM_ERR_ARG && strstr(glm_errmsg(), "GLMTUNE_ATTENTION"),
              "GLMTUNE_ATTENTION=bogus refused: %s", glm_errmsg());
    }
    unsetenv("GLMTUNE_ATTENTION");
    return check_summary("test_plan_paths");
}
