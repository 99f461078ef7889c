/* tests/gpu/test_cuda_ops.c: every op of the CUDA backend against the CPU reference op (docs/design.md
 * §5), through the op table (tests/ops/op_table.h): each entry's cases at GLM-4-9B's real shapes
 * (C 4096, H 32, Hkv 4, Dh 128, F 13696, V 151552 for the cross-entropy chunk) and odd ones, on
 * random inputs (never zeros; values rounded to bf16 so both backends read the same numbers),
 * outputs poisoned with NaN first (or random where the op accumulates or leaves columns alone);
 * attention at T = 8192 against float64 at sampled rows. Tolerances: tests/gpu/tol.h. Besides the
 * table: the memory ops, the 4-bit kernels' own entry points (bit for bit against
 * kernels/cpu/quant4.c, with the dequantization's bandwidth), the memory cap and scratch_need.
 * Prints a table: op, shape, error (norm-relative, or a count where the tolerance is 0),
 * tolerance, CUDA time (median of 3, ms).
 * Usage: test_cuda_ops [name]: only what contains `name` (a table entry such as "attention" or
 * "rmsnorm", or "memory", "quant4", "memcap"); tests/gpu/run.sh runs `test_cuda_ops attention` with
 * each attention implementation. Exits 77 (skipped) when no CUDA device is present. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/status.h"
#include "kernels/backend.h"
#include "kernels/comm.h"
#include "kernels/quant4.h"
#include "tests/check.h"
#include "tests/gpu/tol.h"
#include "tests/ops/op_table.h"

static const glm_backend *cpu, *gpu;

/* ---- helpers of the checks outside the table ---- */

static uint64_t rng_state = 0x1234567ULL;
static uint64_t rnd64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static double rnd_u(void) { return (double)(rnd64() >> 11) * (1.0 / 9007199254740992.0); }

/* normal(0, scale), rounded to bf16, zero replaced */
static float *randn(int64_t n, float scale) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        double u1 = rnd_u() + 1e-12, u2 = rnd_u();
        float v = op_bf16((float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2) * scale));
        p[i] = v == 0.0f ? op_bf16(0.01f * scale) : v;
    }
    return p;
}

static void *gbuf(glm_dtype dt, const float *h, int64_t n) {
    void *p;
    glm_status st = glm_be_alloc(gpu, (size_t)n * glm_dtype_size(dt), "test", &p);
    if (st) {
        fprintf(stderr, "gpu alloc: %s\n", glm_errmsg());
        exit(1);
    }
    if (h && glm_be_upload_f32(gpu, p, dt, h, n)) {
        fprintf(stderr, "gpu upload: %s\n", glm_errmsg());
        exit(1);
    }
    return p;
}
/* a device buffer filled with NaN */
static void *gpoison(glm_dtype dt, int64_t n) {
    float *h = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = NAN;
    void *p = gbuf(dt, h, n);
    free(h);
    return p;
}
static void *ibuf(const glm_backend *be, const void *h, int64_t n) {
    void *p;
    if (glm_be_alloc(be, (size_t)n * 4, "test ints", &p) || glm_be_upload(be, p, h, (size_t)n * 4)) {
        fprintf(stderr, "int buffer: %s\n", glm_errmsg());
        exit(1);
    }
    return p;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define OK(expr) CHECK((expr) == GLM_OK, "%s", glm_errmsg())

/* ---- memory ops ---- */

static void test_memory(void) {
    int64_t n = 5000011;
    float *x = malloc(n * 4), *y = malloc(n * 4), *r = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((rnd_u() - 0.5) * 1e3);
    x[0] = 1.00390625f;    /* 1 + 2^-8: a tie, rounds to even (1.0) */
    x[1] = 1.01171875f;    /* 1 + 3 * 2^-8: a tie, rounds up to 1.015625 */
    x[2] = INFINITY;
    /* upload/download raw */
    void *g = gbuf(GLM_DT_F32, NULL, n), *g2 = gbuf(GLM_DT_F32, NULL, n);
    OK(glm_be_upload(gpu, g, x, n * 4));
    OK(glm_be_copy(gpu, g2, g, n * 4));
    OK(glm_be_download(gpu, y, g2, n * 4));
    CHECK(!memcmp(x, y, n * 4), "upload / copy / download are exact");
    OK(glm_be_zero(gpu, g2, n * 4));
    OK(glm_be_download(gpu, y, g2, n * 4));
    int64_t nz = 0;
    for (int64_t i = 0; i < n; i++) nz += y[i] != 0.0f;
    CHECK(nz == 0, "zero: %lld nonzero", (long long)nz);
    /* bf16 conversions: round to nearest even on upload, exact on download */
    void *h = gbuf(GLM_DT_BF16, NULL, n);
    OK(glm_be_upload_f32(gpu, h, GLM_DT_BF16, x, n));
    OK(glm_be_download_f32(gpu, y, GLM_DT_BF16, h, n));
    for (int64_t i = 0; i < n; i++) r[i] = op_bf16(x[i]);
    CHECK(!memcmp(r, y, n * 4), "upload_f32 / download_f32 bf16 round to nearest even");
    CHECK(y[0] == 1.0f && y[1] == 1.015625f && isinf(y[2]), "bf16 ties: %g %g %g", y[0], y[1], y[2]);
    OK(glm_be_upload_f32(gpu, g, GLM_DT_F32, x, n));
    OK(glm_be_download_f32(gpu, y, GLM_DT_F32, g, n));
    CHECK(!memcmp(x, y, n * 4), "upload_f32 / download_f32 f32 are exact");
    /* all_reduce with world 1 leaves the data alone */
    OK(glm_comm_all_reduce(gpu, g, n));
    OK(glm_be_download(gpu, y, g, n * 4));
    CHECK(!memcmp(x, y, n * 4), "all_reduce world 1 is a no-op");
    void *z;
    CHECK(glm_be_alloc(gpu, 0, "empty", &z) == GLM_OK && z, "alloc(0) gives a pointer");
    glm_be_free(gpu, z);
    glm_be_free(gpu, NULL);
    CHECK(glm_be_alloc(gpu, (size_t)1 << 50, "a petabyte", &z) == GLM_ERR_NOMEM && strstr(glm_errmsg(), "a petabyte"),
          "alloc failure names the tensor: %s", glm_errmsg());
    OK(glm_be_sync(gpu));
    op_record("memory (upload/copy/bf16 rne)", "n5000011", 0.0, 0.0, 0);
    free(x), free(y), free(r);
    glm_be_free(gpu, g), glm_be_free(gpu, g2), glm_be_free(gpu, h);
}

/* ---- the 4-bit (QLoRA) format: kernels/cuda/quant4.cu against kernels/cpu/quant4.c ----
 * Not a backend op: its functions are taken from the CUDA module the backend loaded
 * (glm_cuda_module_symbol). GPU quantize vs CPU quantize and GPU dequantize vs
 * CPU dequantize must be bit for bit; the row's error column is the count of differing bytes. */
static struct {
    size_t (*workspace)(int64_t, int);
    glm_status (*quantize)(glm_q4_tensor *, const void *, int, void *, void *);
    glm_status (*dequantize_bf16)(const glm_q4_tensor *, void *, void *);
    glm_status (*sync)(void);
} q4;

/* device buffers for a quantized tensor of n weights */
static glm_q4_tensor q4_gpu_alloc(glm_q4_type type, int64_t n, int dq) {
    glm_q4_sizes s = glm_q4_size(n, dq);
    glm_q4_tensor q = {.type = type, .double_quant = dq, .n = n};
    q.codes = gbuf(GLM_DT_F32, NULL, ((int64_t)s.codes + 3) / 4);
    if (dq) {
        q.absmax_codes = gbuf(GLM_DT_F32, NULL, ((int64_t)s.absmax_codes + 3) / 4);
        q.absmax2 = gbuf(GLM_DT_F32, NULL, s.ngroups);
        q.offset = gbuf(GLM_DT_F32, NULL, 1);
    } else {
        q.absmax = gbuf(GLM_DT_F32, NULL, s.nblocks);
    }
    return q;
}
static void q4_gpu_free(glm_q4_tensor *q) {
    glm_be_free(gpu, q->codes), glm_be_free(gpu, q->absmax), glm_be_free(gpu, q->absmax_codes);
    glm_be_free(gpu, q->absmax2), glm_be_free(gpu, q->offset);
}
/* bytes of `len` at device `d` that differ from host `h` */
static int64_t q4_diff(const void *d, const void *h, size_t len) {
    unsigned char *t = malloc(len ? len : 1);
    OK(glm_be_download(gpu, t, d, len));
    int64_t k = 0;
    for (size_t i = 0; i < len; i++) k += t[i] != ((const unsigned char *)h)[i];
    free(t);
    return k;
}

static void t_quant4(glm_q4_type type, int dq, int64_t rows, int64_t cols, int bf16_in, int timed) {
    int64_t n = rows * cols;
    char shape[64];
    snprintf(shape, sizeof shape, "%lldx%lld %s%s", (long long)rows, (long long)cols, bf16_in ? "bf16" : "f32",
             dq ? " dq" : "");
    float *x = randn(n, 0.02f);
    for (int64_t i = 5; i < n; i += 977) x[i] *= 25.0f; /* outliers, as real weights have */
    uint16_t *xh = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) xh[i] = glm_f32_to_bf16(x[i]);
    /* the CPU reference */
    glm_q4_tensor c;
    OK(glm_q4_alloc(&c, type, n, dq));
    OK(bf16_in ? glm_q4_quantize_bf16(&c, xh) : glm_q4_quantize_f32(&c, x));
    uint16_t *ref = malloc((size_t)n * 2);
    OK(glm_q4_dequantize_bf16(&c, ref));
    /* the GPU: quantize from device input, compare every buffer; dequantize, compare */
    void *gx;
    OK(glm_be_alloc(gpu, (size_t)n * (bf16_in ? 2 : 4), "q4 input", &gx));
    OK(glm_be_upload(gpu, gx, bf16_in ? (const void *)xh : (const void *)x, (size_t)n * (bf16_in ? 2 : 4)));
    OK(glm_be_sync(gpu));
    glm_q4_tensor g = q4_gpu_alloc(type, n, dq);
    size_t wsb = q4.workspace(n, dq);
    void *ws = wsb ? gbuf(GLM_DT_F32, NULL, (int64_t)(wsb + 3) / 4) : NULL;
    OK(q4.quantize(&g, gx, bf16_in, ws, NULL));
    OK(q4.sync());
    glm_q4_sizes s = glm_q4_size(n, dq);
    int64_t bad = q4_diff(g.codes, c.codes, s.codes);
    bad += dq ? q4_diff(g.absmax_codes, c.absmax_codes, s.absmax_codes) + q4_diff(g.absmax2, c.absmax2, s.absmax2) +
                    q4_diff(g.offset, c.offset, 4)
              : q4_diff(g.absmax, c.absmax, s.absmax);
    char op[40];
    snprintf(op, sizeof op, "q4 quantize %s (bytes off)", glm_q4_type_name(type));
    op_record(op, shape, (double)bad, 0.0, 0);
    void *gy = gbuf(GLM_DT_BF16, NULL, n);
    OK(q4.dequantize_bf16(&g, gy, NULL));
    OK(q4.sync());
    int64_t badv = q4_diff(gy, ref, (size_t)n * 2);
    double ms = 0;
    if (timed) {
        double best = 1e30;
        for (int r = 0; r < 5; r++) {
            double a = now();
            for (int k = 0; k < 10; k++) q4.dequantize_bf16(&g, gy, NULL);
            OK(q4.sync());
            best = fmin(best, (now() - a) / 10);
        }
        ms = best * 1e3;
        double bytes = (double)(s.total + (size_t)n * 2);
        printf("q4 dequantize %s %s: %.3f ms, %.0f GB/s (%.3f bytes read + 2 written a weight)\n",
               glm_q4_type_name(type), shape, ms, bytes / best / 1e9, (double)s.total / n);
    }
    snprintf(op, sizeof op, "q4 dequantize %s (bytes off)", glm_q4_type_name(type));
    op_record(op, shape, (double)badv, 0.0, ms);
    /* an unaligned output (the per-weight kernel) gives the same values */
    if (!timed && n < 5000000) {
        void *gz = gbuf(GLM_DT_BF16, NULL, n + 1);
        OK(q4.dequantize_bf16(&g, (char *)gz + 2, NULL));
        OK(q4.sync());
        uint16_t *t = malloc((size_t)(n + 1) * 2);
        OK(glm_be_download(gpu, t, gz, (size_t)(n + 1) * 2));
        CHECK(!memcmp(t + 1, ref, (size_t)n * 2), "q4 dequantize, unaligned output: differs");
        free(t);
        glm_be_free(gpu, gz);
    }
    q4_gpu_free(&g);
    glm_be_free(gpu, gx), glm_be_free(gpu, gy), glm_be_free(gpu, ws);
    glm_q4_free(&c);
    free(x), free(xh), free(ref);
}

static void test_quant4(void) {
    *(void **)&q4.workspace = glm_cuda_module_symbol("glm_q4_cuda_quantize_workspace");
    *(void **)&q4.quantize = glm_cuda_module_symbol("glm_q4_cuda_quantize");
    *(void **)&q4.dequantize_bf16 = glm_cuda_module_symbol("glm_q4_cuda_dequantize_bf16");
    *(void **)&q4.sync = glm_cuda_module_symbol("glm_q4_cuda_sync");
    CHECK(q4.workspace && q4.quantize && q4.dequantize_bf16 && q4.sync,
          "the 4-bit kernels in the loaded CUDA module (libglm_cuda.so): symbols missing");
    if (!q4.sync) return;
    t_quant4(GLM_Q4_NF4, 0, 4096, 13696, 1, 1); /* GLM-4-9B's dense_4h_to_h (and dense_h_to_4h^T) */
    t_quant4(GLM_Q4_NF4, 1, 4096, 13696, 1, 1);
    t_quant4(GLM_Q4_FP4, 1, 5120, 4096, 1, 0);  /* query_key_value */
    t_quant4(GLM_Q4_NF4, 1, 1, 1000003, 0, 0);  /* f32 input, odd n, short last block and group */
    t_quant4(GLM_Q4_FP4, 0, 7, 9, 0, 0);        /* one short block */
    t_quant4(GLM_Q4_NF4, 1, 65, 1, 1, 0);       /* a 1-weight last block */
}

/* The memory truth (kernels/backend.h) on a second backend of its own (fresh scratch slots): the
 * process's bytes and overhead are measured; scratch_reserve grows exactly what scratch_need
 * answers, and attention forward and backward, cross-entropy and sumsq at that shape then grow
 * nothing more; the hard cap refuses an allocation past it, naming it, and lets it through once
 * lifted. */
static void test_memcap(void) {
    glm_status st;
    const glm_backend *g = glm_backend_cuda(0, &st);
    CHECK(g != NULL, "a second CUDA backend: %s", glm_errmsg());
    if (!g) return;
    const double M = 1048576.0;
    size_t proc = glm_be_mem_process(g), over = glm_be_mem_overhead(g), fr, tot, use0, use, peak;
    CHECK(proc > 0 && over >= (32u << 20), "the process holds %.1f MiB, overhead %.1f MiB (at least cuBLASLt's 32)",
          proc / M, over / M);
    glm_be_mem_info(g, &fr, &tot, &use0, &peak);
    const int B = 1, T = 4096, H = 32, Hkv = 4, Dh = 128;
    const int64_t N = (int64_t)B * T, qd = (int64_t)H * Dh, kd = (int64_t)Hkv * Dh, ld = qd + 2 * kd, V = 151552, lrows = 64;
    glm_scratch_shape sh = {.B = B, .T = T, .H = H, .Hkv = Hkv, .Dh = Dh, .ldq = ld, .ldk = ld, .ldv = ld, .ldo = qd,
                            .backward = 1, .loss_rows = lrows};
    size_t need = 0, ws = 0;
    CHECK(glm_be_scratch_need(g, &sh, &need, &ws) == GLM_OK, "scratch_need: %s", glm_errmsg());
    CHECK(need >= (size_t)N * H * 4 + (size_t)N * 8 && ws <= need, "scratch for 4096 tokens: %.1f MiB (cuDNN's workspace "
          "%.1f MiB)", need / M, ws / M);
    CHECK(glm_be_scratch_reserve(g, &sh, 1) == GLM_OK, "scratch_reserve: %s", glm_errmsg());
    glm_be_mem_info(g, &fr, &tot, &use, &peak);
    CHECK(use - use0 == need, "reserve grew %.3f MiB, scratch_need said %.3f", (use - use0) / M, need / M);
    /* the ops at that shape */
    float *qkv = randn(N * ld, 1.0f), *lg = randn(lrows * V, 2.0f);
    int32_t *doc = calloc((size_t)N, 4), lab[64];
    for (int i = 0; i < lrows; i++) lab[i] = (int32_t)(rnd64() % V);
    void *gq = gbuf(GLM_DT_BF16, qkv, N * ld), *go = gpoison(GLM_DT_BF16, N * qd), *glse = gpoison(GLM_DT_F32, N * H),
         *gd = gpoison(GLM_DT_BF16, N * ld), *gl = gbuf(GLM_DT_BF16, lg, lrows * V);
    int32_t *gdoc = ibuf(gpu, doc, N), *glab = ibuf(gpu, lab, lrows);
    glm_be_mem_info(g, &fr, &tot, &use0, &peak); /* gbuf allocates on `gpu`: g's own count is unchanged */
    uint16_t *q16 = gq, *d16 = gd;
    OK(glm_be_attention_fwd(g, go, qd, glse, q16, ld, q16 + qd, ld, q16 + qd + kd, ld, gdoc, B, T, H, Hkv, Dh));
    OK(glm_be_attention_bwd(g, d16, d16 + qd, d16 + qd + kd, go, qd, go, glse, NULL, q16, ld, q16 + qd, ld, q16 + qd + kd, ld, gdoc, B,
                        T, H, Hkv, Dh));
    double ls = 0;
    int64_t nt = 0;
    OK(glm_be_cross_entropy(g, gl, gl, glab, NULL, NULL, lrows, V, 1.0f, &ls, &nt));
    (void)glm_be_sumsq(g, glse, N * H);
    OK(glm_be_sync(g));
    glm_be_mem_info(g, &fr, &tot, &use, &peak);
    CHECK(use == use0, "attention, cross-entropy and sumsq grew no scratch past the reserve (%.3f MiB more)",
          ((double)use - (double)use0) / M);
    /* the cap */
    proc = glm_be_mem_process(g);
    CHECK(glm_be_set_mem_cap(g, proc + (64u << 20)) == GLM_OK, "a cap 64 MiB above what the process holds: %s", glm_errmsg());
    void *a = NULL, *b = NULL;
    CHECK(glm_be_alloc(g, 16u << 20, "16 MiB under the cap", &a) == GLM_OK, "16 MiB under the cap: %s", glm_errmsg());
    st = glm_be_alloc(g, 256u << 20, "the buffer over the cap", &b);
    CHECK(st == GLM_ERR_NOMEM && strstr(glm_errmsg(), "the buffer over the cap") && strstr(glm_errmsg(), "max-gpu-memory"),
          "256 MiB over the cap refused, named: %s", glm_errmsg());
    CHECK(glm_be_mem_process(g) <= proc + (64u << 20), "the process stayed within the cap (%.1f MiB over what it held)",
          ((double)glm_be_mem_process(g) - (double)proc) / M);
    CHECK(glm_be_set_mem_cap(g, 1u << 20) == GLM_ERR_NOMEM, "a cap below what the process holds: an error");
    OK(glm_be_set_mem_cap(g, 0));
    CHECK(glm_be_alloc(g, 256u << 20, "the same buffer, no cap", &b) == GLM_OK, "no cap: %s", glm_errmsg());
    op_record("memory cap and scratch_need", "B1 T4096 H32 Hkv4 Dh128", 0.0, 0.0, 0);
    glm_be_free(g, a), glm_be_free(g, b);
    glm_be_free(gpu, gq), glm_be_free(gpu, go), glm_be_free(gpu, glse), glm_be_free(gpu, gd), glm_be_free(gpu, gl), glm_be_free(gpu, gdoc),
        glm_be_free(gpu, glab);
    free(qkv), free(lg), free(doc);
    glm_backend_cuda_close(g);
}

/* whether the check `name` runs under the command line's filter */
static int selected(const char *filter, const char *name) { return !filter || strstr(name, filter); }

/* test_cuda_ops [name]: everything, or what contains `name` (tests/gpu/run.sh: "attention", the
 * attention entries alone, for kernel variants) */
int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach the log even if the process dies */
    const char *filter = argc > 1 ? argv[1] : NULL;
    glm_status st;
    if (glm_cuda_device_count() == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    gpu = glm_backend_cuda(0, &st);
    if (!gpu) {
        printf("SKIPPED: CUDA backend: %s\n", glm_errmsg());
        return st == GLM_ERR_UNSUPPORTED ? 77 : 1;
    }
    cpu = glm_backend_cpu();
    CHECK(!strcmp(gpu->name, "cuda") && gpu->act_dtype == GLM_DT_BF16 && gpu->weight_dtype == GLM_DT_BF16 && gpu->world == 1,
          "backend table");
    CHECK(gpu->acc_dtype == GLM_DT_F32, "CUDA acc_dtype is f32");
    CHECK(glm_be_supports(gpu, GLM_FEATURE_RING_ATTENTION) && glm_be_supports(gpu, GLM_FEATURE_WEIGHT_4BIT) &&
              !glm_be_supports(gpu, GLM_FEATURE_COUNT),
          "CUDA supports the ring's blocks and the 4-bit format, nothing unknown");
    int ran = 0;
    if (selected(filter, "memory")) test_memory(), ran++;
    op_run_opts o = {.test = gpu, .ref = cpu, .filter = filter, .time = 1};
    ran += op_run(&o);
    if (selected(filter, "quant4")) test_quant4(), ran++;
    if (selected(filter, "memcap")) test_memcap(), ran++;
    CHECK(ran > 0, "nothing matches \"%s\" (a table entry's name, memory, quant4 or memcap)", filter ? filter : "");
    op_print_table();
    printf("attention implementation: %s\n", glm_cuda_attention_impl(gpu));
    glm_backend_cuda_close(gpu);
    int passed, failed;
    op_counts(&passed, &failed);
    check_merge(passed, failed);
    return check_summary("test_cuda_ops");
}
