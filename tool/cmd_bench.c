/* glmtune bench: "how fast will this train on my GPU, and will it fit": random bf16 weights of a
 * GLM-4 shape made directly in GPU memory (no checkpoint, no disk), a LoRA adapter and AdamW, then
 * timed training steps (forward, loss, backward, gradient norm, AdamW) at each sequence length,
 * and a table: tokens/s, useful TFLOP/s and MFU (docs/design.md §6), peak memory, the memory plan and
 * the time per phase. The batch is one document of T tokens per row with the second half of the
 * tokens as targets, as ../shared/bench/hf_bench.py measures transformers + PEFT. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/args.h"
#include "common/log.h"
#include "common/rng.h"
#include "kernels/backend.h"
#include "lora/model/config.h"
#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "lora/model/model_plan.h"
#include "lora/model/model_prove.h"
#include "lora/adapter/optim.h"
#include "lora/model/plan.h"
#include "tool/cli.h"

static const char *USAGE =
    "usage: glmtune bench [--shape NAME | --model DIR | --config FILE] [--seq-len T[,T...]] [--steps N] [--warmup N]\n"
    "                     [--batch-size B] [--gradient-checkpointing auto|none|selective|full]\n"
    "                     [--max-gpu-memory GiB] [--lora-rank R] [--lora-alpha A] [--lora-target LIST]\n"
    "                     [--quantization-bit 4 [--quantization-type nf4|fp4] [--double-quantization B]]\n"
    "                     [--base-dtype bf16|fp8] [--device cuda|cpu] [--json]\n"
    "       glmtune bench --max-seq-len [--max-gpu-memory GiB[,GiB...]] [--seq-len MAX_T] [--seq-step N]\n"
    "                     [--max-step-seconds S] [--prove-memory] [model and LoRA options as above]";
static const char *ABOUT =
    "Times LoRA training steps of a GLM-4 model with random bf16 weights made on the GPU (seconds for\n"
    "the 9B shape; no checkpoint is read), and prints per sequence length: tokens/s, useful TFLOP/s,\n"
    "MFU, peak GPU memory, the memory plan, and the time of each phase of a step.\n";
static const char *EPILOG =
    "Useful work per token = 4 N_matmul + 6 L T H Dh (forward and input-gradient GEMMs, causal\n"
    "attention forward and backward; recomputation not counted); MFU = useful FLOP/s / 989e12.\n";

typedef struct bench_opts {
    const char *shape, *model, *config, *targets, *device, *ckpt;
    int64_t seqs[32];
    int nseq, steps, warmup, B, rank;
    bool json;
    double alpha, max_gib;
    double budgets[16];    /* --max-gpu-memory's list (GiB); max_gib = budgets[0] */
    int nbud;
    bool max_seq_len, prove; /* --max-seq-len, --prove-memory */
    int64_t seq_step;      /* --seq-step */
    double max_step_s;     /* --max-step-seconds */
    glm_base_format fmt;   /* the linear layers' format (quant_bits 0: bf16) */
} bench_opts;

/* --shape names the shape: a --model or --config before it no longer does */
static glm_status shape_given(const glm_arg_opt *opt, const char *flag, const char *value, void *user) {
    bench_opts *o = user;
    o->model = o->config = NULL;
    return GLM_OK;
}

static glm_status quant_bits_check(const glm_arg_opt *opt, const char *flag, const char *value, void *user) {
    uint64_t u = *(const uint64_t *)opt->dest;
    if (u != 0 && u != 4) return glm_err(GLM_ERR_ARG, "%s %s: expected 4 (QLoRA) or 0", flag, value);
    return GLM_OK;
}

static glm_status step_seconds_check(const glm_arg_opt *opt, const char *flag, const char *value, void *user) {
    if (!(*(const double *)opt->dest > 0)) return glm_err(GLM_ERR_ARG, "%s %s: expected seconds > 0", flag, value);
    return GLM_OK;
}

/* The options; *help: --help was given (nothing else is checked then). */
static glm_status parse(int argc, char **argv, bench_opts *o, bool *help) {
    memset(o, 0, sizeof *o);
    o->alpha = NAN;
    uint64_t steps = 0, warmup = 0, B = 0, rank = 0, quant_bits = 0, seq_step = 0; /* set from the defaults below */
    size_t nseq = 0, nbud = 0;
    int device = 0, q4 = GLM_WF_NF4;
    bool double_quant = true, seq_given = false;
    static const glm_arg_choice devices[] = {{"cuda", 0}, {"cpu", 1}, {NULL, 0}};
    static const glm_arg_choice q4_types[] = {{"nf4", GLM_WF_NF4}, {"fp4", GLM_WF_FP4}, {NULL, 0}};
    static const glm_arg_choice base_dtypes[] = {{"bf16", 0}, {"fp8", 1}, {NULL, 0}};
    int base_fp8 = 0;
    const glm_arg_opt opts[] = {
        {.name = "shape", .type = GLM_ARG_STRING, .dest = &o->shape, .def = "glm-4-9b-chat-1m", .metavar = "NAME",
         .hook = shape_given, .help = "glm-4-9b-chat-1m, glm-4-9b-chat or glm-4-9b"},
        {.name = "model", .type = GLM_ARG_STRING, .dest = &o->model, .metavar = "DIR",
         .help = "the shape of DIR/config.json (weights are not read)"},
        {.name = "config", .type = GLM_ARG_STRING, .dest = &o->config, .metavar = "FILE",
         .help = "the shape of a config.json file"},
        {.name = "seq-len", .type = GLM_ARG_LIST, .elem = GLM_ARG_INT, .dest = o->seqs, .max_items = 32, .count = &nseq,
         .def = "8192", .metavar = "T,...", .ranged = true, .min = 2, .max = 1 << 30, .unit = "tokens",
         .given = &seq_given,
         .help = "tokens per row, one benchmark each. With --max-seq-len: one value, the longest row to search up "
                 "to, 4194304 when not given"},
        {.name = "steps", .type = GLM_ARG_U64, .dest = &steps, .def = "3", .ranged = true, .min = 1, .max = 1000,
         .help = "timed steps; the median is reported"},
        {.name = "warmup", .type = GLM_ARG_U64, .dest = &warmup, .def = "1", .ranged = true, .min = 0, .max = 100,
         .help = "untimed steps first: the first step also plans GEMMs and allocates; 0 for the longest sequences, "
                 "where one step takes minutes"},
        {.name = "batch-size", .type = GLM_ARG_U64, .dest = &B, .def = "1", .metavar = "B", .ranged = true, .min = 1,
         .max = 4096, .help = "rows per micro-batch"},
        {.name = "gradient-checkpointing", .type = GLM_ARG_STRING, .dest = &o->ckpt, .def = "auto", .metavar = "MODE",
         .help = "auto (the planner's choice) | none | selective | full, as glmtune train"},
        {.name = "max-gpu-memory", .type = GLM_ARG_LIST, .elem = GLM_ARG_DOUBLE, .dest = o->budgets, .max_items = 16,
         .count = &nbud, .metavar = "GiB", .ranged = true, .min = 0, .max = 1e6,
         .help = "plan for a smaller card, e.g. 22 for 24 GB (default: the GPU's); a hard cap on everything the "
                 "process holds on the GPU as nvidia-smi counts it (CUDA context and library workspaces included): an "
                 "allocation past it fails. With --max-seq-len: a list of budgets, e.g. 12,16,22,40,80 (default: the "
                 "GPU's free memory)"},
        {.name = "lora-rank", .type = GLM_ARG_U64, .dest = &rank, .def = "8", .metavar = "R", .ranged = true, .min = 1,
         .max = 4096, .help = "the adapter's rank"},
        {.name = "lora-alpha", .type = GLM_ARG_DOUBLE, .dest = &o->alpha, .metavar = "A",
         .help = "the adapter's alpha (default: 2 R)"},
        {.name = "lora-target", .type = GLM_ARG_STRING, .dest = &o->targets, .def = "all", .metavar = "LIST",
         .help = "the adapted modules, as glmtune train"},
        {.name = "quantization-bit", .type = GLM_ARG_U64, .dest = &quant_bits, .def = "0", .metavar = "4",
         .hook = quant_bits_check,
         .help = "4: the QLoRA base, as glmtune train: the linear layers quantized to 4 bits where they are "
                 "made, in bitsandbytes' format; 0: bf16"},
        {.name = "quantization-type", .type = GLM_ARG_ENUM, .dest = &q4, .def = "nf4", .choices = q4_types,
         .help = "the 4-bit code book"},
        {.name = "double-quantization", .type = GLM_ARG_BOOL, .dest = &double_quant, .def = "true",
         .help = "4-bit: quantize the blocks' absmax too"},
        {.name = "base-dtype", .type = GLM_ARG_ENUM, .dest = &base_fp8, .def = "bf16", .choices = base_dtypes,
         .help = "fp8: the linear layers in FP8 E4M3 (a scale per output channel), their GEMMs on FP8 tensor cores "
                 "(sm_89 / sm_90), as glmtune train; bf16: the bf16 base"},
        {.name = "device", .type = GLM_ARG_ENUM, .dest = &device, .def = "cuda", .choices = devices,
         .help = "the backend; cpu: small shapes only"},
        {.name = "json", .type = GLM_ARG_FLAG, .dest = &o->json,
         .help = "one JSON object per sequence length instead of the tables"},
        {.name = "max-seq-len", .type = GLM_ARG_FLAG, .dest = &o->max_seq_len,
         .help = "for each budget of --max-gpu-memory, the longest row that trains there (found with the memory "
                 "planner, in steps of --seq-step tokens, up to --seq-len), proven by one real training step at that "
                 "length under that cap, and a table: budget, longest T, tokens/s, the process's peak GPU memory as "
                 "nvidia-smi counts it (sampled during the step) and whether it stayed within the budget"},
        {.name = "seq-step", .type = GLM_ARG_U64, .dest = &seq_step, .def = "1024", .ranged = true, .min = 1,
         .max = 1 << 24, .unit = "tokens", .help = "--max-seq-len: the step of the search"},
        {.name = "max-step-seconds", .type = GLM_ARG_DOUBLE, .dest = &o->max_step_s, .def = "600", .metavar = "S",
         .hook = step_seconds_check,
         .help = "--max-seq-len: a step estimated to take longer (from the plan's work and the speed measured at "
                 "4096 tokens) is not run whole: the memory proof instead"},
        {.name = "prove-memory", .type = GLM_ARG_FLAG, .dest = &o->prove,
         .help = "--max-seq-len: the memory proof for every budget: every buffer of the step allocated at the full "
                 "T, the first 2 layers' forward and backward (and, where the plan offloads layer inputs, one round "
                 "trip to host memory), the peak within the budget, and the step time extrapolated from the layers "
                 "run (labelled so)"},
    };
    const glm_arg_cmd cmd = {.name = "bench", .usage = USAGE, .about = ABOUT, .epilog = EPILOG, .opts = opts,
                             .n_opts = sizeof opts / sizeof *opts, .user = o};
    GLM_TRY(glm_args_parse(&cmd, argc - 1, argv + 1, help));
    if (*help) {
        glm_args_help(stdout, &cmd);
        return GLM_OK;
    }
    o->nseq = (int)nseq;
    o->steps = (int)steps;
    o->warmup = (int)warmup;
    o->B = (int)B;
    o->rank = (int)rank;
    o->fmt.quant_bits = (int)quant_bits;
    o->fmt.q4 = (glm_wformat)q4;
    o->fmt.double_quant = double_quant;
    o->fmt.fp8 = base_fp8;
    o->device = device ? "cpu" : "cuda";
    o->nbud = (int)nbud;
    if (nbud) o->max_gib = o->budgets[0];
    o->seq_step = (int64_t)seq_step;
    if (isnan(o->alpha)) o->alpha = 2.0 * o->rank;
    if (o->nbud > 1 && !o->max_seq_len)
        return glm_err(GLM_ERR_ARG, "--max-gpu-memory: a list of budgets is for --max-seq-len; hint: one budget, or add "
                       "--max-seq-len");
    if (o->prove && !o->max_seq_len) return glm_err(GLM_ERR_ARG, "--prove-memory is a --max-seq-len mode; hint: add --max-seq-len");
    if (o->max_seq_len) {
        if (o->nseq > 1) return glm_err(GLM_ERR_ARG, "--max-seq-len: --seq-len is the longest row to search up to (one value)");
        if (!seq_given) o->seqs[0] = (int64_t)1 << 22;
        if (o->seqs[0] < o->seq_step)
            return glm_err(GLM_ERR_ARG, "--max-seq-len: --seq-len %lld is shorter than --seq-step %lld",
                           (long long)o->seqs[0], (long long)o->seq_step);
    }
    return GLM_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Useful FLOP per token (docs/design.md §6): 4 N_matmul + 6 L T H Dh. */
static double useful_flop_per_token(const glm_config *c, int64_t T) {
    double C = c->C, qd = (double)c->H * c->Dh, nm = (double)c->L * (glm_config_qkv_rows(c) * C + qd * C + 3.0 * c->F * C) +
                                                     (double)c->V * C;
    return 4.0 * nm + 6.0 * c->L * (double)T * qd;
}

/* The process's peak device memory as nvidia-smi counts it (be->mem_process), sampled every 2 ms by a
 * thread while a step runs; no thread on the CPU backend (nothing on a device). */
typedef struct sampler {
    const glm_backend *be;
    atomic_int stop;
    atomic_size_t peak;
    pthread_t th;
    int on;
} sampler;

static void *sample_loop(void *u) {
    sampler *s = u;
    for (;;) {
        size_t v = glm_be_mem_process(s->be);
        if (v > atomic_load(&s->peak)) atomic_store(&s->peak, v);
        if (atomic_load(&s->stop)) break;
        usleep(2000);
    }
    return NULL;
}

static void sampler_start(sampler *s, const glm_backend *be) {
    s->be = be;
    atomic_init(&s->stop, 0);
    atomic_init(&s->peak, 0);
    s->on = strcmp(be->name, "cpu") && pthread_create(&s->th, NULL, sample_loop, s) == 0;
}

/* the peak in bytes (0 when nothing was sampled: the CPU backend) */
static size_t sampler_stop(sampler *s) {
    if (!s->on) return 0;
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    s->on = 0;
    return atomic_load(&s->peak);
}

typedef struct result {
    int64_t T;
    int ok;
    char err[512];
    glm_plan plan;
    double step_s, tok_s, tflops, mfu, peak_gib, loss, phase_ms[GLM_PHASE_COUNT];
    double proc_peak_gib;  /* the process's peak as nvidia-smi counts it (sampled); 0: not measured (CPU) */
    int64_t prefetched;   /* timed steps whose batch was uploaded during the step before */
} result;

/* The next_batch hook: the next of three batches is uploaded while this step's backward runs, as
 * train does with the next micro-batch (three, so that the model's two batch sets never already
 * hold it). */
typedef struct alternate {
    glm_model *m;
    const glm_batch *b[3];
    int next;
} alternate;

static glm_status prefetch_other(void *user) {
    alternate *a = user;
    return glm_model_prefetch(a->m, a->b[a->next]);
}

/* One sequence length: plan, warm-up, timed steps. */
static glm_status run_one(glm_model *m, glm_lora *lora, glm_optim *opt, const bench_opts *o, glm_ckpt_mode mode, int64_t T,
                          result *res) {
    const glm_backend *be = m->be;
    const glm_config *c = &m->cfg;
    int B = o->B;
    int64_t N = (int64_t)B * T;
    /* three batches of random tokens (the same positions and targets), taken in turn: each step's
     * batch is uploaded during the step before, as in training */
    uint32_t *ids = malloc((size_t)N * 12);
    uint8_t *tg = malloc((size_t)N);
    int32_t *pos = malloc((size_t)N * 4), *doc = malloc((size_t)N * 4);
    double *times = malloc(sizeof(double) * (size_t)o->steps);
    glm_status st = (ids && tg && pos && doc && times) ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory for the batch");
    glm_rng rng;
    glm_rng_seed(&rng, 1234, (uint64_t)T);
    int64_t ntg = 0;
    for (int64_t i = 0; !st && i < 3 * N; i++) {
        int64_t t = i % T;
        uint32_t id = 100 + (uint32_t)(glm_rng_uniform(&rng) * (double)((c->V > 151000 ? 151000 : c->V) - 100));
        ids[i] = id < (uint32_t)c->V ? id : (uint32_t)c->V - 1;
        if (i >= N) continue;
        pos[i] = (int32_t)t;
        doc[i] = 0;
        tg[i] = t >= T / 2 && t > 0;
        ntg += tg[i];
    }
    glm_batch bs[3] = {{B, (int)T, ids, tg, pos, doc, NULL}, {B, (int)T, ids + N, tg, pos, doc, NULL},
                          {B, (int)T, ids + 2 * N, tg, pos, doc, NULL}};
    alternate alt = {m, {&bs[0], &bs[1], &bs[2]}, 0};
    int n_params = 0;
    glm_param *params = glm_lora_params(lora, &n_params);
    sampler smp;
    sampler_start(&smp, be);
    if (!st) st = glm_model_prepare(m, lora, B, (int)T, 1, mode, &res->plan);
    if (!st) glm_be_mem_reset_peak(be);
    memset(res->phase_ms, 0, sizeof res->phase_ms);
    const int W = o->warmup;
    glm_model_set_next_batch(m, prefetch_other, &alt);
    for (int s = 0; s < W + o->steps && !st; s++) {
        if (s == W) {
            glm_be_prof_enable(be, 1);
            res->prefetched = -m->batches_prefetched;
        }
        alt.next = (s + 1) % 3;
        double t0 = now_s(), ls = 0;
        int64_t nt = 0;
        st = glm_lora_zero_grads(lora);
        if (!st) st = glm_model_step(m, lora, &bs[s % 3], (float)(1.0 / (double)ntg), 1, mode, 0, &ls, &nt);
        glm_be_phase(be, GLM_PHASE_OPTIMIZER);
        if (!st) st = glm_optim_step(opt, params, (size_t)n_params, 1e-5, NULL);
        if (st == GLM_ERR_NUMERIC) st = GLM_OK; /* random weights: a non-finite step is skipped, as train does */
        if (!st) st = glm_be_sync(be);
        double t1 = now_s();
        if (s >= W) {
            times[s - W] = t1 - t0;
            if (!st) st = glm_be_prof_collect(be, res->phase_ms);
        }
        res->loss = nt ? ls / (double)nt : NAN;
    }
    glm_be_prof_enable(be, 0);
    glm_model_set_next_batch(m, NULL, NULL);
    res->proc_peak_gib = sampler_stop(&smp) / 1073741824.0;
    res->prefetched += m->batches_prefetched;
    if (!st) {
        qsort(times, (size_t)o->steps, sizeof(double), cmp_d);
        res->step_s = times[o->steps / 2];
        res->tok_s = (double)N / res->step_s;
        res->tflops = useful_flop_per_token(c, T) * res->tok_s / 1e12;
        res->mfu = res->tflops * 1e12 / 989e12;
        for (int p = 0; p < GLM_PHASE_COUNT; p++) res->phase_ms[p] /= o->steps;
        size_t fr, tot, use, peak;
        glm_be_mem_info(be, &fr, &tot, &use, &peak);
        res->peak_gib = peak / 1073741824.0;
        res->ok = 1;
    }
    free(ids), free(tg), free(pos), free(doc), free(times);
    return st;
}

/* --max-seq-len: one budget's row */
typedef struct longest_row {
    double budget_gib;     /* 0: the device's free memory, no cap */
    int64_t T;             /* the planner's longest row (0: nothing fits) */
    glm_plan plan;
    int proved;            /* 0 not run, 1 a real step, 2 the memory proof */
    double est_s;          /* the step's estimated time (from the calibration) */
    double tok_s, step_s;  /* measured (proof: step_s extrapolated) */
    double peak_gib;       /* the process's peak as nvidia-smi counts it (0: not measured, the CPU) */
    int within;            /* peak <= budget */
    char err[512];
} longest_row;

/* The longest row length, a multiple of step up to max_T, whose plan (the model's: the backend's scratch
 * for that length, its overhead off the cap) fits; 0 when step tokens do not fit. */
/* The work of a step for the time estimate, in FLOP weighted by speed: the useful work, attention once
 * more (it runs at about half the GEMMs' rate), and the plan's recomputation. */
static double step_cost(const glm_config *c, int B, int64_t T, const glm_plan *p) {
    double N = (double)B * T, qd = (double)c->H * c->Dh;
    return N * (useful_flop_per_token(c, T) + 6.0 * c->L * (double)T * qd) + p->recompute_gflop * 1e9;
}

static int cmp_budget(const void *a, const void *b) {
    const longest_row *x = a, *y = b;
    double u = x->budget_gib > 0 ? x->budget_gib : 1e30, v = y->budget_gib > 0 ? y->budget_gib : 1e30;
    return u < v ? -1 : u > v;
}

/* The memory proof's batch: one document of T tokens per row, the second half targets (as run_one). */
static glm_status proof_step(glm_model *m, glm_lora *lora, const bench_opts *o, glm_ckpt_mode mode, int64_t T,
                             glm_prove_result *pr, double *peak_gib) {
    const int64_t N = (int64_t)o->B * T;
    uint32_t *ids = malloc((size_t)N * 4);
    uint8_t *tg = malloc((size_t)N);
    int32_t *pos = malloc((size_t)N * 4), *doc = malloc((size_t)N * 4);
    glm_status st = ids && tg && pos && doc ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory for the batch");
    glm_rng rng;
    glm_rng_seed(&rng, 99, (uint64_t)T);
    for (int64_t i = 0; !st && i < N; i++) {
        int64_t t = i % T;
        uint32_t id = 100 + (uint32_t)(glm_rng_uniform(&rng) * (double)((m->cfg.V > 151000 ? 151000 : m->cfg.V) - 100));
        ids[i] = id < (uint32_t)m->cfg.V ? id : (uint32_t)m->cfg.V - 1;
        pos[i] = (int32_t)t;
        doc[i] = 0;
        tg[i] = t >= T / 2 && t > 0;
    }
    sampler smp;
    sampler_start(&smp, m->be);
    if (!st) {
        glm_batch b = {o->B, (int)T, ids, tg, pos, doc, NULL};
        st = glm_lora_zero_grads(lora);
        if (!st) st = glm_model_prove_memory(m, lora, &b, mode, 2, pr);
    }
    *peak_gib = sampler_stop(&smp) / 1073741824.0;
    free(ids), free(tg), free(pos), free(doc);
    return st;
}

/* The model's cap (bytes; 0: none), its other options as they are. */
static void set_max_bytes(glm_model *m, double bytes) {
    glm_model_options mo = glm_model_get_options(m);
    mo.max_bytes = bytes > 0 ? bytes : 0;
    glm_model_set_options(m, &mo); /* valid: the options were, and the cap is not negative */
}

/* glmtune bench --max-seq-len: plans every budget, calibrates the speed at a short row, then proves
 * each budget's longest row (a real step, or the memory proof) under that budget as a hard cap.
 * Returns the exit status. */
static int longest_mode(glm_model *m, glm_lora *lora, glm_optim *opt, const bench_opts *o, glm_ckpt_mode mode,
                        const char *shape_name, const char *devname) {
    const glm_backend *be = m->be;
    const glm_config *c = &m->cfg;
    const double G = 1073741824.0;
    const int cpu = !strcmp(be->name, "cpu");
    const int nb = o->nbud > 0 ? o->nbud : 1;
    longest_row *rows = calloc((size_t)nb, sizeof *rows);
    if (!rows) return cli_fail(glm_err(GLM_ERR_NOMEM, "out of memory"));
    for (int k = 0; k < nb; k++) rows[k].budget_gib = o->nbud > 0 ? o->budgets[k] : 0;
    qsort(rows, (size_t)nb, sizeof *rows, cmp_budget); /* ascending: the grow-only scratch never outgrows a plan */
    /* 1. the planner's longest row for each budget */
    int64_t shortest = 0;
    for (int k = 0; k < nb; k++) {
        longest_row *r = &rows[k];
        set_max_bytes(m, r->budget_gib * G);
        glm_model_prepare(m, lora, 1, 2, 1, GLM_CKPT_FULL, NULL); /* the last budget's buffers freed */
        r->T = glm_model_plan_longest(m, lora, o->B, mode, o->seq_step, o->seqs[0], &r->plan);
        if (r->T > 0 && (!shortest || r->T < shortest)) shortest = r->T;
    }
    /* 2. the speed at a short row (4096 tokens, or the shortest longest row), for the estimates: planned
     * for and capped at the smallest budget, so that the process never holds more than it allows */
    double t0_s = 0, cost0 = 0;
    if (shortest) {
        int64_t T0 = shortest < 4096 ? shortest : 4096;
        bench_opts oc = *o;
        oc.steps = 1;
        oc.warmup = 1;
        result cr;
        memset(&cr, 0, sizeof cr);
        set_max_bytes(m, rows[0].budget_gib * G);
        glm_status st = glm_be_set_mem_cap(be, (size_t)(rows[0].budget_gib * G));
        if (!st) st = run_one(m, lora, opt, &oc, mode, T0, &cr);
        glm_be_set_mem_cap(be, 0);
        glm_model_prepare(m, lora, 1, 2, 1, GLM_CKPT_FULL, NULL);
        if (st) {
            cli_fail(st);
            free(rows);
            return GLM_EXIT_FAIL;
        }
        t0_s = cr.step_s;
        cost0 = step_cost(c, o->B, T0, &cr.plan);
        if (!o->json)
            printf("speed for the estimates: %.0f tokens/s at %lld tokens (one step after one warm-up)\n\n", cr.tok_s,
                   (long long)T0);
    }
    if (!o->json) {
        printf("| budget GiB | longest T | proven by | tokens/s | step s | peak GiB (nvidia-smi) | within budget | plan |\n");
        printf("|---|---|---|---|---|---|---|---|\n");
        fflush(stdout);
    }
    int bad = 0;
    /* 3. each budget proven under its cap */
    for (int k = 0; k < nb; k++) {
        longest_row *r = &rows[k];
        const size_t cap = (size_t)(r->budget_gib * G);
        set_max_bytes(m, r->budget_gib * G);
        glm_model_prepare(m, lora, 1, 2, 1, GLM_CKPT_FULL, NULL);
        glm_status st = glm_be_set_mem_cap(be, cap);
        /* planned again now: the calibration and the budgets before leave the process (its measured
         * overhead, the host memory it can pin) otherwise than when step 1 planned, and a row found
         * at the edge of the budget must be the row this state can hold */
        if (!st && r->T > 0) r->T = glm_model_plan_longest(m, lora, o->B, mode, o->seq_step, o->seqs[0], &r->plan);
        if (!st && r->T > 0) {
            r->est_s = cost0 > 0 ? t0_s * step_cost(c, o->B, r->T, &r->plan) / cost0 : 0;
            if (!o->prove && r->est_s <= o->max_step_s) {
                bench_opts oc = *o;
                oc.steps = 1;
                oc.warmup = 2 * r->est_s <= o->max_step_s ? 1 : 0;
                result rr;
                memset(&rr, 0, sizeof rr);
                st = run_one(m, lora, opt, &oc, mode, r->T, &rr);
                r->proved = st ? 0 : 1;
                r->tok_s = rr.tok_s;
                r->step_s = rr.step_s;
                r->peak_gib = rr.proc_peak_gib;
                r->plan = rr.plan;
            } else {
                glm_prove_result pr;
                st = proof_step(m, lora, o, mode, r->T, &pr, &r->peak_gib);
                r->proved = st ? 0 : 2;
                r->step_s = pr.step_est_s;
                r->tok_s = pr.step_est_s > 0 ? (double)o->B * r->T / pr.step_est_s : 0;
                if (!st) r->plan = pr.plan;
            }
        }
        glm_be_set_mem_cap(be, 0);
        if (st) {
            snprintf(r->err, sizeof r->err, "%s", glm_errmsg());
            glm_model_prepare(m, lora, 1, 2, 1, GLM_CKPT_FULL, NULL);
        }
        r->within = cpu || r->budget_gib <= 0 || r->peak_gib <= r->budget_gib;
        if (st || (r->T > 0 && !r->within)) bad = 1;
        char bud[32], how[160] = "", planstr[200] = "";
        if (r->budget_gib > 0) snprintf(bud, sizeof bud, "%g", r->budget_gib);
        else snprintf(bud, sizeof bud, "free (%.1f)", r->plan.budget / G);
        if (r->proved == 1) snprintf(how, sizeof how, "one training step");
        else if (r->proved == 2)
            snprintf(how, sizeof how, "memory proof: every buffer at T, layers 0-1 fwd+bwd%s; step time extrapolated "
                     "(%d/2 x the measured)", r->plan.offload ? ", an offload round trip" : "", c->L);
        if (r->T > 0)
            snprintf(planstr, sizeof planstr, "keep %d / selective %d / full %d, %d layer inputs offloaded, %.3g of %.3g GiB "
                     "planned", r->plan.n_keep, r->plan.n_selective, r->plan.n_full, r->plan.n_host, r->plan.total / G,
                     r->plan.budget / G);
        char peakj[32] = "null"; /* no device on the CPU backend */
        if (!cpu) snprintf(peakj, sizeof peakj, "%.3f", r->peak_gib);
        if (o->json) {
            printf("{\"who\": \"glmtune\", \"mode\": \"max-seq-len\", \"base\": \"%s\", \"budget_gib\": %g, "
                   "\"longest_T\": %lld, \"proven_by\": \"%s\", \"tok_s\": %.1f, \"step_s\": %.3f, \"estimated_s\": %.3f, "
                   "\"peak_gib\": %s, \"within_budget\": %s, \"predicted_gib\": %.3f, \"budget_planned_gib\": %.3f",
                   glm_base_format_name(m), r->budget_gib, (long long)r->T,
                   r->proved == 1 ? "step" : r->proved == 2 ? "memory proof (step time extrapolated)" : "none", r->tok_s,
                   r->step_s, r->est_s, peakj, cpu ? "null" : r->within ? "true" : "false", r->plan.total / G,
                   r->plan.budget / G);
            if (r->err[0]) {
                json_t *js = json_string(r->err);
                char *d = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
                printf(", \"error\": %s", d ? d : "\"(the message is not UTF-8)\"");
                free(d);
                json_decref(js);
            }
            printf("}\n");
        } else if (r->T == 0) {
            printf("| %s | none: even %lld tokens do not fit | | | | | | the model itself: %.2f GiB planned |\n", bud,
                   (long long)o->seq_step, r->plan.weights / G);
        } else if (r->err[0]) {
            printf("| %s | %lld | FAILED: %s | | | | NO | %s |\n", bud, (long long)r->T, r->err, planstr);
        } else {
            char peak[32];
            if (cpu) snprintf(peak, sizeof peak, "n/a (cpu)");
            else snprintf(peak, sizeof peak, "%.2f", r->peak_gib);
            printf("| %s | %lld | %s | %.0f%s | %.2f%s | %s | %s | %s |\n", bud, (long long)r->T, how, r->tok_s,
                   r->proved == 2 ? " (extrapolated)" : "", r->step_s, r->proved == 2 ? " (extrapolated)" : "", peak,
                   cpu ? "n/a" : r->within ? "yes" : "NO", planstr);
        }
        fflush(stdout);
    }
    if (!o->json)
        printf("\n%s on %s, base %s, micro-batch %d: the longest row per budget found by the memory planner in steps of "
               "%lld tokens; --max-gpu-memory set as a hard cap on the process during its proof; peak = the process's "
               "device memory as nvidia-smi counts it, sampled every 2 ms; CUDA context and library workspaces: %.2f GiB\n",
               shape_name, devname, glm_base_format_name(m), o->B, (long long)o->seq_step, glm_be_mem_overhead(be) / G);
    free(rows);
    return bad ? GLM_EXIT_FAIL : GLM_EXIT_OK;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    bool help = false;
    glm_status st = parse(argc, argv, &o, &help);
    if (!st && help) return GLM_EXIT_OK;
    if (st) {
        cli_fail(st);
        return GLM_EXIT_USAGE;
    }
    glm_ckpt_mode mode;
    if ((st = glm_ckpt_parse(o.ckpt, &mode))) {
        cli_fail(st);
        return GLM_EXIT_USAGE;
    }
    glm_config cfg;
    char shape_name[512];
    if (o.model || o.config) {
        st = glm_config_load(o.model ? o.model : o.config, 0, &cfg);
        snprintf(shape_name, sizeof shape_name, "%s", o.model ? o.model : o.config);
    } else {
        st = glm_config_preset(o.shape, &cfg);
        snprintf(shape_name, sizeof shape_name, "%s shape", o.shape);
    }
    if (st) return cli_fail(st);
    const glm_backend *be = NULL;
    char devname[300] = "cpu";
    if (!strcmp(o.device, "cpu")) {
        be = glm_backend_cpu();
    } else if (!strcmp(o.device, "cuda")) {
#ifdef GLMTUNE_HAVE_CUDA
        be = glm_backend_cuda(0, &st);
        if (!be) return cli_fail(st);
        snprintf(devname, sizeof devname, "%s", glm_cuda_device_name(0));
#else
        return cli_fail(glm_err(GLM_ERR_UNSUPPORTED, "this build has no CUDA backend; hint: --device cpu (small shapes only)"));
#endif
    } else {
        cli_fail(glm_err(GLM_ERR_ARG, "--device %s: expected cuda or cpu", o.device));
        return GLM_EXIT_USAGE;
    }
    glm_model *m = NULL;
    glm_lora *lora = NULL;
    glm_optim opt;
    int have_opt = 0;
    double t0 = now_s();
    {
        /* the weights must fit before anything is allocated (the 9B shape on a small machine) */
        size_t fr = 0, tot = 0, use = 0, peak = 0;
        glm_be_mem_info(be, &fr, &tot, &use, &peak);
        glm_plan_request rq = {.cfg = &cfg, .B = 1, .T = 2, .mode = GLM_CKPT_FULL, .fmt = o.fmt, .world = 1,
                               .describe_cuda = strcmp(be->name, "cpu") != 0}; /* described: the weights only */
        glm_plan wp;
        st = glm_plan_request_make(&rq, &wp, NULL);
        double most = o.max_gib; /* --max-seq-len: the weights must fit the largest budget */
        for (int k = 0; o.max_seq_len && k < o.nbud; k++) most = o.budgets[k] <= 0 || most <= 0 ? 0 : fmax(most, o.budgets[k]);
        double have = most > 0 ? most * 1073741824.0 : (double)fr;
        if (!st && have > 0 && wp.weights > have)
            st = glm_err(GLM_ERR_NOMEM, "the %s weights take %.2f GiB (%s) and this %s has %.2f GiB %s; hint: %s", shape_name,
                         wp.weights / 1073741824.0, glm_dtype_size(be->weight_dtype) == 2 ? "bf16" : "fp32",
                         strcmp(be->name, "cpu") ? "GPU" : "machine", have / 1073741824.0,
                         o.max_gib > 0 ? "by --max-gpu-memory" : "free",
                         strcmp(be->name, "cpu") ? "a GPU with more memory, or a smaller --config"
                                                 : "--device cuda on a GPU, or a smaller shape (--config FILE)");
    }
    /* --max-gpu-memory: a hard cap on the process from here (weights included); --max-seq-len sets each
     * budget's in turn */
    if (!st && o.max_gib > 0 && !o.max_seq_len) st = glm_be_set_mem_cap(be, (size_t)(o.max_gib * 1073741824.0));
    if (!st) st = glm_model_create_random_fmt(&cfg, be, 7, &o.fmt, &m);
    glm_lora_config lc = {o.rank, (float)o.alpha, 0.0f, false, o.targets};
    if (!st) st = glm_lora_create(m, &lc, 7, &lora);
    int n_params = 0;
    glm_param *params = st ? NULL : glm_lora_params(lora, &n_params);
    glm_adamw_cfg ac = {0.9, 0.999, 1e-8, 0.0, 1.0, 1.0};
    if (!st && !(st = glm_optim_init(&opt, be, params, (size_t)n_params, &ac))) have_opt = 1;
    if (!st) {
        glm_model_options mo = {.optimizer = 1, .max_bytes = o.max_gib > 0 ? o.max_gib * 1073741824.0 : 0};
        st = glm_model_set_options(m, &mo);
    }
    double t_init = now_s() - t0;
    int64_t np = 0;
    for (int i = 0; i < n_params; i++) np += params[i].numel;
    if (!st && o.max_seq_len) {
        if (!o.json)
            printf("glmtune bench --max-seq-len: %s on %s; base %s; LoRA r=%d alpha=%g on %s (%lld parameters), AdamW; "
                   "micro-batch %d, one document per row, second half of the tokens as targets; random weights made in "
                   "%.1f s\n\n", shape_name, devname, glm_base_format_name(m), o.rank, o.alpha, o.targets, (long long)np, o.B,
                   t_init);
        int rc = longest_mode(m, lora, &opt, &o, mode, shape_name, devname);
        glm_optim_free(&opt);
        glm_lora_free(lora);
        glm_model_free(m);
#ifdef GLMTUNE_HAVE_CUDA
        if (!strcmp(be->name, "cuda")) glm_backend_cuda_close(be);
#endif
        return rc;
    }
    if (!st && !o.json) {
        printf("glmtune bench: %s on %s; base %s; LoRA r=%d alpha=%g on %s (%lld parameters), AdamW; micro-batch %d, one "
               "document per row, second half of the tokens as targets; random weights made in %.1f s\n\n",
               shape_name, devname, glm_base_format_name(m), o.rank, o.alpha, o.targets, (long long)np, o.B, t_init);
        printf("| seq len | tokens/s | step s | useful TFLOP/s | MFU | peak GiB | plan | peak GiB (nvidia-smi) |\n");
        printf("|---|---|---|---|---|---|---|---|\n");
        fflush(stdout);
    }
    result *res = calloc((size_t)o.nseq, sizeof *res);
    int failed = 0;
    for (int k = 0; !st && k < o.nseq; k++) {
        result *r = &res[k];
        r->T = o.seqs[k];
        glm_status s2 = run_one(m, lora, &opt, &o, mode, r->T, r);
        if (s2) {
            snprintf(r->err, sizeof r->err, "%s", glm_errmsg());
            failed = 1;
            /* free the step's buffers before the next length; the model and adapter stay */
            glm_model_prepare(m, lora, 1, 2, 1, GLM_CKPT_FULL, NULL);
        }
        char planstr[160];
        snprintf(planstr, sizeof planstr, "keep %d / selective %d / full %d, MLP chunk %lld", r->plan.n_keep, r->plan.n_selective,
                 r->plan.n_full, (long long)r->plan.mlp_chunk);
        if (o.json) {
            printf("{\"who\": \"glmtune\", \"base\": \"%s\", \"seq\": %lld, \"batch\": %d, \"gc\": \"%s\", ",
                   glm_base_format_name(m), (long long)r->T, o.B, glm_ckpt_name(mode));
            if (r->ok) {
                char mfu[32] = "null", peak[32] = "null", ppeak[32] = "null"; /* no GPU: MFU and device memory do not apply */
                if (strcmp(be->name, "cpu")) {
                    snprintf(mfu, sizeof mfu, "%.4f", r->mfu);
                    snprintf(peak, sizeof peak, "%.2f", r->peak_gib);
                    snprintf(ppeak, sizeof ppeak, "%.3f", r->proc_peak_gib);
                }
                printf("\"process_peak_gib\": %s, ", ppeak);
                printf("\"step_s\": %.4f, \"tok_s\": %.1f, \"useful_tflops\": %.1f, \"mfu\": %s, \"peak_gib\": %s, "
                       "\"predicted_gib\": %.2f, \"loss\": %.4f, \"keep\": %d, \"selective\": %d, \"full\": %d, \"mlp_chunk\": %lld, "
                       "\"offload\": %s, \"prefetched_steps\": %lld, \"phase_ms\": {",
                       r->step_s, r->tok_s, r->tflops, mfu, peak, r->plan.total / 1073741824.0, r->loss, r->plan.n_keep,
                       r->plan.n_selective, r->plan.n_full, (long long)r->plan.mlp_chunk, r->plan.offload ? "true" : "false",
                       (long long)r->prefetched);
                for (int p = 0; p < GLM_PHASE_COUNT; p++) printf("%s\"%s\": %.2f", p ? ", " : "", glm_phase_name(p), r->phase_ms[p]);
                printf("}}\n");
            } else {
                json_t *js = json_string(r->err);
                char *d = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
                printf("\"error\": %s}\n", d ? d : "\"(the message is not UTF-8)\"");
                free(d);
                json_decref(js);
            }
        } else if (r->ok && !strcmp(be->name, "cpu")) { /* no GPU: MFU and device memory do not apply */
            printf("| %lld | %.0f | %.3f | %.3f | n/a | n/a | %s | n/a |\n", (long long)r->T, r->tok_s, r->step_s, r->tflops,
                   planstr);
        } else if (r->ok) {
            printf("| %lld | %.0f | %.3f | %.1f | %.1f%% | %.1f | %s | %.2f%s |\n", (long long)r->T, r->tok_s, r->step_s,
                   r->tflops, 100 * r->mfu, r->peak_gib, planstr, r->proc_peak_gib,
                   o.max_gib > 0 && r->proc_peak_gib > o.max_gib ? " (over the cap)" : "");
        } else {
            printf("| %lld | failed: %s | | | | | | |\n", (long long)r->T, r->err);
        }
        fflush(stdout);
    }
    if (!st && !o.json) {
        printf("\ntime per step by phase (ms):\n\n| seq len |");
        for (int p = 0; p < GLM_PHASE_COUNT; p++) printf(" %s |", glm_phase_name(p));
        printf(" total |\n|---|");
        for (int p = 0; p <= GLM_PHASE_COUNT; p++) printf("---|");
        printf("\n");
        for (int k = 0; k < o.nseq; k++) {
            if (!res[k].ok) continue;
            double tot = 0;
            printf("| %lld |", (long long)res[k].T);
            for (int p = 0; p < GLM_PHASE_COUNT; p++) {
                printf(" %.1f |", res[k].phase_ms[p]);
                tot += res[k].phase_ms[p];
            }
            printf(" %.1f |\n", tot);
        }
        printf("\ntimed steps whose batch was uploaded during the step before:");
        for (int k = 0, first = 1; k < o.nseq; k++)
            if (res[k].ok) {
                printf("%s %lld tokens: %lld of %d", first ? "" : ",", (long long)res[k].T, (long long)res[k].prefetched, o.steps);
                first = 0;
            }
        printf("\n\nplans:\n");
        for (int k = 0; k < o.nseq; k++)
            if (res[k].ok) glm_plan_print(&res[k].plan, &cfg, stdout);
#ifdef GLMTUNE_HAVE_CUDA
        if (!strcmp(be->name, "cuda")) printf("\nattention: %s\n", glm_cuda_attention_impl(be));
#endif
    }
    free(res);
    if (have_opt) glm_optim_free(&opt);
    glm_lora_free(lora);
    glm_model_free(m);
#ifdef GLMTUNE_HAVE_CUDA
    if (!strcmp(be->name, "cuda")) glm_backend_cuda_close(be);
#endif
    if (st) return cli_fail(st);
    return failed ? GLM_EXIT_FAIL : GLM_EXIT_OK;
}
