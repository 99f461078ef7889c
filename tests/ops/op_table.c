/* tests/ops/op_table.c: the table of backend ops (tests/ops/op_table.h), one entry per compute op
 * of struct glm_backend, in its order. Each entry: its case type and two case lists (`cmp`:
 * GLM-4-9B-Chat-1M's shapes, C 4096, H 32, Hkv 4, Dh 128, F 13696, V 151552, and odd ones, run on a
 * backend against the CPU op; `cpu`: small shapes for the CPU run against float64 and finite
 * differences), make, run, and where they apply ref (float64), fd_f (backward ops), props.
 *
 * Not entries: the memory ops (alloc ... copy_wait), the communication ops, memory accounting,
 * profiling and supports; tests/gpu/test_cuda_ops.c (test_memory, test_memcap) and
 * tests/kernels/test_cpu_ops.c check those on their backend. tests/ops/op_coverage.sh (ctest
 * op_coverage) fails when an op of the struct has no entry here and is not on its allow-list. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/formats.h"
#include "kernels/quant4.h"
#include "tests/gpu/tol.h"
#include "tests/ops/op_table.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* an entry's case lists (`cpu` may be NULL for an op without a CPU-run case) */
#define CASES(cmp_, cpu_) .cmp = cmp_, .ncmp = COUNT(cmp_), .cpu = cpu_, .ncpu = COUNT(cpu_), .case_size = sizeof(cmp_[0])
#define CASES_CMP(cmp_) .cmp = cmp_, .ncmp = COUNT(cmp_), .cpu = NULL, .ncpu = 0, .case_size = sizeof(cmp_[0])

static float *HV(const op_inst *in, int t) { return in->t[t].f; }
static op_kind kind_of(glm_dtype dt) { return dt == GLM_DT_BF16 ? OP_T_BF16 : OP_T_F32; }
static const char *kind_name(op_kind k) {
    return k == OP_T_BF16 ? "bf16" : k == OP_T_F32 ? "f32" : k == OP_T_ACC ? "acc" : k == OP_T_ACT ? "act" : "w";
}
static void fd_whole(op_inst *in, int x, int grad, int accumulates, double tol) {
    in->fd = (op_fd){.on = 1, .x = x, .ldx = in->t[x].n, .nparts = 1, .accumulates = accumulates, .h = 1e-2f, .tol = tol};
    in->fd.part[0].t = grad, in->fd.part[0].col = 0, in->fd.part[0].cols = in->t[x].n;
}
/* a block view of a check */
static void view(op_check *c, int64_t off, int64_t rows, int64_t cols, int64_t ld) {
    c->off = off, c->rows = rows, c->cols = cols, c->ld = ld;
}

/* ==== matmul ==================================================================================
 * C = alpha op(A) op(B) + beta C with each operand's dtype; beta == 0 puts NaN where the product
 * lands (the op must not read it), the padding columns of C keep their values. With c0 the
 * accumulated matrix is a separate C0 (C's dtype and stride) and C's product region holds NaN
 * (the op must read C0, never C). */
typedef struct {
    int ta, tb;
    int64_t M, N, K;
    glm_dtype da, db, dc;
    float alpha, beta;
    int64_t pad_a, pad_b, pad_c; /* row strides past the stored matrices' widths */
    int c0;                      /* beta times a separate C0 (glm_be_matmul_from) */
} mm_case;

enum { MM_A, MM_B, MM_C, MM_C0 };

static void mm_dims(const mm_case *c, int64_t *ar, int64_t *lda, int64_t *br, int64_t *ldb, int64_t *ldc) {
    *ar = c->ta ? c->K : c->M, *lda = (c->ta ? c->M : c->K) + c->pad_a;
    *br = c->tb ? c->N : c->K, *ldb = (c->tb ? c->K : c->N) + c->pad_b;
    *ldc = c->N + c->pad_c;
}

static void mm_make(op_inst *in, const void *cv) {
    const mm_case *c = cv;
    int64_t ar, lda, br, ldb, ldc;
    mm_dims(c, &ar, &lda, &br, &ldb, &ldc);
    op_add(in, "A", kind_of(c->da), OP_IN, ar * lda);
    op_add(in, "B", kind_of(c->db), OP_IN, br * ldb);
    op_add(in, "C", kind_of(c->dc), OP_INOUT, c->M * ldc);
    op_fill_u(in, MM_A, 1.0f), op_fill_u(in, MM_B, 1.0f), op_fill_u(in, MM_C, 1.0f);
    if (c->c0) {
        op_add(in, "C0", kind_of(c->dc), OP_IN, c->M * ldc);
        op_fill_u(in, MM_C0, 1.0f);
    }
    if (c->beta == 0.0f || c->c0)
        for (int64_t i = 0; i < c->M; i++)
            for (int64_t j = 0; j < c->N; j++) HV(in, MM_C)[i * ldc + j] = NAN;
    const char *dn[2] = {"f32", "bf16"};
    char name[40];
    snprintf(name, sizeof name, "matmul %s%s %s.%s>%s", c->ta ? "T" : "N", c->tb ? "T" : "N", dn[c->da], dn[c->db],
             dn[c->dc]);
    op_check_add(in, name, MM_C, OP_CMP_REL, op_tol(in, MM_C));
    int k = snprintf(in->shape, sizeof in->shape, "%lldx%lldx%lld b%g%s ldc+%lld", (long long)c->M, (long long)c->N,
                     (long long)c->K, c->beta, c->c0 ? " C0" : "", (long long)c->pad_c);
    if (c->pad_a || c->pad_b)
        snprintf(in->shape + k, sizeof in->shape - (size_t)k, " lda+%lld ldb+%lld", (long long)c->pad_a, (long long)c->pad_b);
}

static glm_status mm_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const mm_case *c = in->c;
    int64_t ar, lda, br, ldb, ldc;
    mm_dims(c, &ar, &lda, &br, &ldb, &ldc);
    return glm_be_matmul_from(be, c->ta, c->tb, c->M, c->N, c->K, c->alpha, b->p[MM_A], b->dt[MM_A], lda, b->p[MM_B],
                              b->dt[MM_B], ldb, c->beta, c->c0 ? b->p[MM_C0] : NULL, b->p[MM_C], b->dt[MM_C], ldc);
}

static void mm_ref(const op_inst *in, double *const *want) {
    const mm_case *c = in->c;
    int64_t ar, lda, br, ldb, ldc;
    mm_dims(c, &ar, &lda, &br, &ldb, &ldc);
    const float *A = HV(in, MM_A), *B = HV(in, MM_B), *C = HV(in, MM_C), *C0 = c->c0 ? HV(in, MM_C0) : C;
    for (int64_t i = 0; i < c->M; i++)
        for (int64_t j = 0; j < ldc; j++) {
            double v = j < c->N ? C0[i * ldc + j] : C[i * ldc + j];
            if (j < c->N) {
                double s = 0;
                for (int64_t k = 0; k < c->K; k++)
                    s += (double)(c->ta ? A[k * lda + i] : A[i * lda + k]) * (c->tb ? B[j * ldb + k] : B[k * ldb + j]);
                v = c->alpha * s + (c->beta == 0.0f ? 0.0 : c->beta * v);
            }
            want[MM_C][i * ldc + j] = v;
        }
}

static const mm_case mm_cmp[] = {
    /* the model's base linears: y = x W^T (bf16), dx = dy W, logits chunk */
    {0, 1, 256, 5120, 4096, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 1.0f, 0.0f, 0, 0, 0, 0},  /* query_key_value */
    {0, 1, 256, 4096, 4096, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 1.0f, 1.0f, 0, 0, 0, 0},  /* dense, into the residual */
    {0, 0, 256, 13696, 4096, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 1.0f, 0.0f, 0, 0, 0, 0}, /* dx of dense_4h_to_h */
    {0, 1, 64, 151552, 4096, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 1.0f, 0.0f, 0, 0, 0, 0}, /* logits chunk */
    {0, 1, 77, 333, 129, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_F32, 0.5f, 0.0f, 0, 0, 0, 0},      /* bf16 x bf16 -> f32 */
    {1, 0, 37, 53, 29, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 1.0f, 0.0f, 0, 0, 0, 0},       /* odd, transposed A */
    {1, 1, 37, 53, 29, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 2.0f, 1.0f, 0, 0, 3, 0},          /* odd, both transposed, strided C */
    /* the LoRA branch (r = 8): mixed f32 LoRA weights and bf16 activations */
    {0, 1, 256, 8, 4096, GLM_DT_BF16, GLM_DT_F32, GLM_DT_F32, 1.0f, 0.0f, 0, 0, 0, 0},       /* u = x A^T */
    {0, 1, 256, 4096, 8, GLM_DT_F32, GLM_DT_F32, GLM_DT_BF16, 2.0f, 1.0f, 0, 0, 1024, 0},    /* y[:, cols] += s u B^T */
    {1, 0, 5120, 8, 256, GLM_DT_BF16, GLM_DT_F32, GLM_DT_F32, 2.0f, 1.0f, 0, 0, 0, 0},       /* dB += s dy^T u */
    {0, 0, 256, 8, 13696, GLM_DT_BF16, GLM_DT_F32, GLM_DT_F32, 2.0f, 0.0f, 0, 0, 0, 0},      /* du = s dy B */
    {1, 0, 8, 4096, 256, GLM_DT_F32, GLM_DT_BF16, GLM_DT_F32, 1.0f, 1.0f, 0, 0, 0, 0},       /* dA += du^T x */
    {0, 0, 256, 4096, 8, GLM_DT_F32, GLM_DT_F32, GLM_DT_BF16, 1.0f, 0.0f, 0, 0, 0, 0},       /* dropout scratch = du A */
    {0, 0, 256, 13696, 8, GLM_DT_F32, GLM_DT_F32, GLM_DT_BF16, 1.0f, 1.0f, 0, 0, 0, 0},      /* dx += du A */
    {0, 0, 31, 17, 5, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 1.0f, 0.0f, 0, 0, 0, 0},           /* odd fp32 */
    /* the LoRA branch as the model runs it: bf16 copies of the LoRA weights, bf16 activations */
    {0, 1, 256, 8, 4096, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 1.0f, 0.0f, 0, 0, 0, 0},     /* u = x A^T */
    {0, 1, 256, 24, 4096, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 1.0f, 0.0f, 0, 0, 0, 0},    /* u of q/k/v adapters at once */
    {0, 1, 256, 4096, 8, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 2.0f, 1.0f, 0, 0, 1024, 0},  /* y[:, cols] += s u B^T */
    {1, 0, 5120, 8, 256, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_F32, 2.0f, 1.0f, 0, 0, 0, 0},      /* dB += s dy^T u (fp32 grads) */
    {0, 0, 256, 8, 13696, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 2.0f, 0.0f, 0, 0, 0, 0},    /* du = s dy B */
    {1, 0, 8, 4096, 256, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_F32, 1.0f, 1.0f, 0, 0, 0, 0},      /* dA += du^T x (fp32 grads) */
    {0, 0, 256, 13696, 8, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 1.0f, 1.0f, 0, 0, 0, 0},    /* dx += du A */
    {0, 0, 13, 7, 0, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 1.0f, 0.5f, 0, 0, 0, 0},         /* K == 0: C = beta C */
    /* a residual sum into a new buffer: x_mid = x_in + s u B^T (C0 = x_in), and the other paths with C0 */
    {0, 1, 256, 4096, 8, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 2.0f, 1.0f, 0, 0, 0, 1},  /* cuBLASLt's C beside D */
    {0, 1, 77, 333, 129, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 0.5f, 1.0f, 0, 0, 3, 1},     /* fp32, strided */
    {0, 1, 256, 4096, 8, GLM_DT_F32, GLM_DT_F32, GLM_DT_BF16, 2.0f, 1.0f, 0, 0, 5, 1},    /* mixed: the bf16 epilogue */
    {0, 0, 13, 7, 0, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 1.0f, 0.5f, 0, 0, 2, 1},      /* K == 0: C = beta C0 */
    {0, 1, 256, 4096, 8, GLM_DT_BF16, GLM_DT_BF16, GLM_DT_BF16, 2.0f, 0.0f, 0, 0, 0, 1},  /* beta 0: C0 unread */
};
static const mm_case mm_cpu[] = {
    /* every transpose, accumulating, with row strides wider than the matrices */
    {0, 0, 5, 6, 7, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 0.5f, 1.0f, 2, 1, 3, 0},
    {0, 1, 5, 6, 7, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 0.5f, 1.0f, 2, 1, 3, 0},
    {1, 0, 5, 6, 7, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 0.5f, 1.0f, 2, 1, 3, 0},
    {1, 1, 5, 6, 7, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 0.5f, 1.0f, 2, 1, 3, 0},
    /* beta = 0 over NaN */
    {0, 0, 5, 6, 7, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 1.0f, 0.0f, 2, 1, 3, 0},
    {1, 1, 5, 6, 7, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 1.0f, 0.0f, 2, 1, 3, 0},
    {0, 0, 13, 7, 0, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 1.0f, 0.5f, 0, 0, 0, 0},
    /* beta times a separate C0 (C's product region NaN) */
    {0, 1, 5, 6, 7, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 0.5f, 1.0f, 2, 1, 3, 1},
    {0, 0, 13, 7, 0, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 1.0f, 0.5f, 0, 0, 2, 1},
    {1, 0, 5, 6, 7, GLM_DT_F32, GLM_DT_F32, GLM_DT_F32, 1.0f, 0.0f, 2, 1, 3, 1},
};

/* ==== weight_quantize / weight_dequantize: the 4-bit format through the backend ops ===========
 * bit for bit against the CPU op (which tests/kernels/test_quant4.c checks against bitsandbytes). */
typedef struct {
    glm_wformat fmt;
    int dq;
    int64_t rows, cols;
    int act_src; /* quantize: 1, the source in the act dtype (bf16 on CUDA); 0, f32 */
} q4_case;

/* normal(0, 0.02) weights with outliers every 977th, as real weights have */
static void q4_weights(op_inst *in, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double u1 = (double)(op_rand(in) >> 11) * (1.0 / 9007199254740992.0) + 1e-12;
        double u2 = (double)(op_rand(in) >> 11) * (1.0 / 9007199254740992.0);
        x[i] = op_bf16((float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2) * 0.02));
        if (x[i] == 0.0f) x[i] = 1e-3f;
    }
    for (int64_t i = 5; i < n; i += 977) x[i] *= 25.0f;
}

static const char *q4_name(const q4_case *c) { return c->fmt == GLM_WF_FP4 ? "fp4" : "nf4"; }

/* the buffers' tensors: codes, absmax (fp32, or 8-bit codes with dq), absmax2, offset (dq) from `first` */
static void q4_tensors(op_inst *in, const q4_case *c, op_role role, const char *op) {
    glm_q4_sizes s = glm_q4_size(c->rows * c->cols, c->dq);
    char name[40];
    const char *names[4] = {"codes", "absmax", "absmax2", "offset"};
    size_t bytes[4] = {s.codes, c->dq ? s.absmax_codes : s.absmax, s.absmax2, s.offset};
    for (int k = 0; k < (c->dq ? 4 : 2); k++) {
        int t = op_add(in, names[k], OP_T_BYTES, role, (int64_t)bytes[k]);
        if (role == OP_OUT) {
            snprintf(name, sizeof name, "%s %s %s", op, q4_name(c), names[k]);
            op_check_add(in, name, t, OP_CMP_EXACT, 0.0);
        }
    }
}

static glm_weight q4_weight(const q4_case *c, const op_bufs *b, int first) {
    glm_weight w = {.fmt = c->fmt, .rows = c->rows, .cols = c->cols, .n = c->rows * c->cols, .data = b->p[first],
                    .absmax = b->p[first + 1], .double_quant = c->dq};
    if (c->dq) w.absmax2 = b->p[first + 2], w.offset = b->p[first + 3];
    return w;
}

static void q4_shape(op_inst *in, const q4_case *c, const char *src) {
    snprintf(in->shape, sizeof in->shape, "%lldx%lld%s%s", (long long)c->rows, (long long)c->cols, src, c->dq ? " dq" : "");
}

/* quantize: tensor 0 the source, then the buffers */
static void wq_make(op_inst *in, const void *cv) {
    const q4_case *c = cv;
    int64_t n = c->rows * c->cols;
    int x = op_add(in, "source", c->act_src ? OP_T_ACT : OP_T_F32, OP_IN, n);
    q4_weights(in, HV(in, x), n);
    op_round(in, x);
    q4_tensors(in, c, OP_OUT, "weight_quantize");
    q4_shape(in, c, c->act_src ? " act" : " f32");
}

static glm_status wq_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    glm_weight w = q4_weight(in->c, b, 1);
    return glm_be_weight_quantize(be, &w, b->p[0], b->dt[0]);
}

static void wq_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    if (in->index) return;
    glm_weight d = {.fmt = GLM_WF_BF16, .rows = 1, .cols = 1, .n = 1, .data = b->p[1]};
    OP_EXPECT(glm_be_weight_quantize(be, &d, b->p[0], b->dt[0]) == GLM_ERR_ARG, "weight_quantize into a dense weight is an "
              "error on the %s backend", be->name);
}

/* dequantize: the buffers (from the CPU reference's quantization on the host), then the output */
static void wd_make(op_inst *in, const void *cv) {
    const q4_case *c = cv;
    int64_t n = c->rows * c->cols;
    float *x = malloc(sizeof(float) * (size_t)n);
    glm_q4_tensor q;
    if (!x || glm_q4_alloc(&q, c->fmt == GLM_WF_FP4 ? GLM_Q4_FP4 : GLM_Q4_NF4, n, c->dq)) abort();
    q4_weights(in, x, n);
    if (glm_q4_quantize_f32(&q, x)) {
        fprintf(stderr, "op table: weight_dequantize: the host quantization failed: %s\n", glm_errmsg());
        abort();
    }
    q4_tensors(in, c, OP_IN, "weight_dequantize");
    const void *src[4] = {q.codes, c->dq ? (void *)q.absmax_codes : (void *)q.absmax, q.absmax2, q.offset};
    for (int k = 0; k < (c->dq ? 4 : 2); k++) memcpy(in->t[k].b, src[k], (size_t)in->t[k].n);
    int out = op_add(in, "out", OP_T_ACT, OP_OUT, n);
    char name[40];
    snprintf(name, sizeof name, "weight_dequantize %s", q4_name(c));
    op_check_add(in, name, out, OP_CMP_EXACT, 0.0);
    q4_shape(in, c, "");
    glm_q4_free(&q);
    free(x);
}

static glm_status wd_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const q4_case *c = in->c;
    glm_weight w = q4_weight(c, b, 0);
    int out = c->dq ? 4 : 2;
    return glm_be_weight_dequantize(be, b->p[out], b->dt[out], &w);
}

static void wd_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    if (in->index) return;
    int out = ((const q4_case *)in->c)->dq ? 4 : 2;
    glm_weight d = {.fmt = GLM_WF_BF16, .rows = 1, .cols = 1, .n = 1, .data = b->p[0]};
    OP_EXPECT(glm_be_weight_dequantize(be, b->p[out], b->dt[out], &d) == GLM_ERR_ARG,
              "weight_dequantize of a dense weight is an error on the %s backend", be->name);
}

static const q4_case wq_cmp[] = {
    {GLM_WF_NF4, 1, 4096, 1000, 1}, /* 4096 columns as GLM-4's layers have, double quantization */
    {GLM_WF_NF4, 0, 4096, 1000, 1},
    {GLM_WF_FP4, 0, 333, 77, 0},    /* f32 source, odd shape */
    {GLM_WF_NF4, 1, 1, 1000003, 0}, /* short last block and group */
    {GLM_WF_FP4, 1, 65, 1, 1},      /* a 1-weight last block */
};

/* ==== add_bias, axpy ========================================================================== */
typedef struct {
    int64_t N, D, ldy;
} bias_case;

static void bias_make(op_inst *in, const void *cv) {
    const bias_case *c = cv;
    int y = op_add(in, "y", OP_T_ACT, OP_INOUT, c->N * c->ldy), bb = op_add(in, "b", OP_T_W, OP_IN, c->D);
    op_fill_u(in, y, 1.0f), op_fill_u(in, bb, 1.0f);
    op_check_add(in, "add_bias", y, OP_CMP_REL, op_tol(in, y));
    snprintf(in->shape, sizeof in->shape, "N%lld D%lld ld%lld", (long long)c->N, (long long)c->D, (long long)c->ldy);
}
static glm_status bias_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const bias_case *c = in->c;
    return glm_be_add_bias(be, b->p[0], c->ldy, b->p[1], c->N, c->D);
}
static void bias_ref(const op_inst *in, double *const *want) {
    const bias_case *c = in->c;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t d = 0; d < c->ldy; d++)
            want[0][n * c->ldy + d] = (double)HV(in, 0)[n * c->ldy + d] + (d < c->D ? HV(in, 1)[d] : 0.0);
}
static const bias_case bias_cmp[] = {{256, 5120, 5120}, {33, 77, 100}}; /* qkv; odd, ldy > D */
static const bias_case bias_cpu[] = {{3, 5, 7}, {2, 3, 3}};

typedef struct {
    int64_t n;
    float alpha;
} axpy_case;

static void axpy_make(op_inst *in, const void *cv) {
    const axpy_case *c = cv;
    int y = op_add(in, "y", OP_T_ACT, OP_INOUT, c->n), x = op_add(in, "x", OP_T_ACT, OP_IN, c->n);
    op_fill_u(in, y, 1.0f), op_fill_u(in, x, 1.0f);
    op_check_add(in, "axpy", y, OP_CMP_REL, op_tol(in, y));
    snprintf(in->shape, sizeof in->shape, "n%lld", (long long)c->n);
}
static glm_status axpy_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const axpy_case *c = in->c;
    return glm_be_axpy(be, b->p[0], b->p[1], c->alpha, c->n);
}
static void axpy_ref(const op_inst *in, double *const *want) {
    const axpy_case *c = in->c;
    for (int64_t i = 0; i < c->n; i++) want[0][i] = (double)HV(in, 0)[i] + (double)c->alpha * HV(in, 1)[i];
}
static const axpy_case axpy_cmp[] = {{1000003, -0.75f}};
static const axpy_case axpy_cpu[] = {{1001, -0.75f}};

/* ==== dropout ================================================================================
 * The masks must agree exactly on every backend (a ZEROS check); out of place from a strided
 * input, or in place inside a larger buffer (whose untouched rows are compared too). */
typedef struct {
    int64_t N, D, ldx, ldy, rows; /* rows: the input buffer's rows (>= N) */
    float p;
    uint64_t seed, stream;
    int64_t row0;
    int inplace;
} drop_case;

enum { DR_X, DR_Y, DR_XF, DR_S }; /* in place: DR_X only; the CPU run's finite differences: DR_XF, DR_S */

static void drop_make(op_inst *in, const void *cv) {
    const drop_case *c = cv;
    int x = op_add(in, "x", OP_T_ACT, c->inplace ? OP_INOUT : OP_IN, c->rows * c->ldx), y = x;
    op_fill_u(in, x, 1.0f);
    if (!c->inplace) y = op_add(in, "y", OP_T_ACT, OP_OUT, c->N * c->ldy);
    char name[40];
    snprintf(name, sizeof name, "dropout p%g%s", c->p, c->inplace ? " in place" : "");
    if (c->p == 0.0f) {
        op_check_add(in, name, y, OP_CMP_EXACT, 0.0);
    } else {
        op_check_add(in, name, y, OP_CMP_REL, op_tol(in, y));
        snprintf(name, sizeof name, "dropout p%g mask", c->p);
        op_check_add(in, name, y, OP_CMP_ZEROS, 0.0);
    }
    int k = snprintf(in->shape, sizeof in->shape, "N%lld D%lld ldx%lld", (long long)c->N, (long long)c->D, (long long)c->ldx);
    if (c->row0) snprintf(in->shape + k, sizeof in->shape - (size_t)k, " row0 %lld", (long long)c->row0);
    /* the backward is the same op on the gradient: f(xf) = <dropout(xf), x> has the gradient dropout(x) = y */
    if (!in->ref && !c->inplace && c->p > 0 && c->ldx == c->D && c->ldy == c->D && c->rows == c->N) {
        int xf = op_add(in, "x (finite differences)", OP_T_ACT, OP_IN, c->N * c->D);
        op_fill_u(in, xf, 1.0f);
        op_add(in, "dropout(x)", OP_T_ACT, OP_SCRATCH, c->N * c->D);
        fd_whole(in, xf, y, 0, TOL_FD);
    }
}

static glm_status drop_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const drop_case *c = in->c;
    int y = c->inplace ? DR_X : DR_Y;
    return glm_be_dropout(be, b->p[y], c->inplace ? c->ldx : c->ldy, b->p[DR_X], c->ldx, c->N, c->D, c->row0, c->p, c->seed,
                       c->stream);
}

static void drop_ref(const op_inst *in, double *const *want) {
    const drop_case *c = in->c;
    int y = c->inplace ? DR_X : DR_Y;
    int64_t ldy = c->inplace ? c->ldx : c->ldy;
    if (c->inplace)
        for (int64_t i = 0; i < in->t[DR_X].n; i++) want[y][i] = HV(in, DR_X)[i];
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t d = 0; d < c->D; d++) {
            double v = HV(in, DR_X)[n * c->ldx + d];
            if (c->p > 0)
                v = glm_dropout_u01(c->seed, c->stream, (uint64_t)((c->row0 + n) * c->D + d)) >= c->p ? v / (1.0 - c->p) : 0.0;
            want[y][n * ldy + d] = v;
        }
}

static double drop_fd(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const drop_case *c = in->c;
    glm_be_dropout(be, b->p[DR_S], c->D, b->p[DR_XF], c->D, c->N, c->D, c->row0, c->p, c->seed, c->stream);
    return op_dot(b, in, DR_S, HV(in, DR_X), c->N * c->D);
}

/* the mask is a function of (seed, stream, element) alone: reproducible, another stream differs,
 * rows on their own (row0) get the whole matrix's mask, its rate is p; p = 1 is an error */
static void drop_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const drop_case *c = in->c;
    if (c->inplace || c->p == 0.0f) return;
    const int64_t n = c->N * c->ldy, k = c->N / 2;
    void *s = NULL;
    glm_status st = glm_be_alloc(be, (size_t)n * b->esize[DR_Y], "dropout props", &s);
    OP_EXPECT(st == GLM_OK, "dropout: %s", glm_errmsg());
    if (st) return;
    double *y = op_fetch(b, in, DR_Y, 0, n), *z;
    int64_t diff = 0, zeros = 0;
    glm_be_dropout(be, s, c->ldy, b->p[DR_X], c->ldx, c->N, c->D, c->row0, c->p, c->seed, c->stream);
    op_bufs sb = *b; /* the same tensor in the scratch buffer */
    sb.p[DR_Y] = s;
    z = op_fetch(&sb, in, DR_Y, 0, n);
    for (int64_t i = 0; y && z && i < n; i++) diff += y[i] != z[i];
    OP_EXPECT(y && z && diff == 0, "dropout on %s: the same call twice differs in %lld elements", be->name, (long long)diff);
    free(z);
    glm_be_dropout(be, s, c->ldy, b->p[DR_X], c->ldx, c->N, c->D, c->row0, c->p, c->seed, c->stream + 1);
    z = op_fetch(&sb, in, DR_Y, 0, n);
    diff = 0;
    for (int64_t i = 0; y && z && i < n; i++) diff += y[i] != z[i];
    OP_EXPECT(diff > 0, "dropout on %s: another stream gives another mask", be->name);
    free(z);
    glm_be_dropout(be, s, c->ldy, op_el(b, DR_X, k * c->ldx), c->ldx, c->N - k, c->D, c->row0 + k, c->p, c->seed, c->stream);
    z = op_fetch(&sb, in, DR_Y, 0, (c->N - k) * c->ldy);
    diff = 0;
    for (int64_t i = 0; y && z && i < (c->N - k) * c->ldy; i++) diff += y[k * c->ldy + i] != z[i];
    OP_EXPECT(y && z && diff == 0, "dropout on %s: rows %lld.. on their own (row0 + %lld) differ from the whole's in %lld "
              "elements", be->name, (long long)k, (long long)k, (long long)diff);
    free(z);
    for (int64_t r = 0; y && r < c->N; r++)
        for (int64_t d = 0; d < c->D; d++) zeros += y[r * c->ldy + d] == 0.0;
    double rate = (double)zeros / (double)(c->N * c->D);
    OP_EXPECT(fabs(rate - c->p) < 0.07, "dropout on %s: rate %.3f for p = %g", be->name, rate, c->p);
    OP_EXPECT(glm_be_dropout(be, s, c->ldy, b->p[DR_X], c->ldx, c->N, c->D, 0, 1.0f, 1, 1) == GLM_ERR_ARG,
              "dropout on %s: p = 1 is an error", be->name);
    free(y);
    glm_be_free(be, s);
}

static const drop_case drop_cmp[] = {
    {256, 4096, 5120, 4096, 256, 0.1f, 42, 17, 0, 0}, /* strided input (a qkv row) -> packed */
    {7, 333, 5120, 5120, 256, 0.5f, 7, 3, 0, 1},     /* in place, odd, inside a larger buffer */
    {256, 4096, 5120, 4096, 256, 0.0f, 42, 17, 0, 0}, /* p = 0 copies */
    {100, 333, 333, 333, 100, 0.3f, 5, 9, 1000, 0},  /* a chunk of rows keyed from row 1000 */
};
static const drop_case drop_cpu[] = {
    {50, 40, 40, 40, 50, 0.25f, 99, 3, 0, 0},
    {5, 7, 9, 9, 6, 0.5f, 1, 2, 0, 1},
    {4, 6, 6, 6, 4, 0.0f, 3, 3, 0, 0},
    {30, 5, 5, 5, 30, 0.4f, 2, 2, 17, 0},
};

/* ==== cast, cast_2d ========================================================================== */
typedef struct {
    glm_dtype dd, ds;
    int64_t n;
} cast_case;

static void cast_make(op_inst *in, const void *cv) {
    const cast_case *c = cv;
    int s = op_add(in, "src", kind_of(c->ds), OP_IN, c->n), d = op_add(in, "dst", kind_of(c->dd), OP_OUT, c->n);
    op_fill_f32(in, s, 3.0f); /* an f32 source keeps all its bits: the cast rounds them */
    char name[40];
    snprintf(name, sizeof name, "cast %s>%s", kind_name(kind_of(c->ds)), kind_name(kind_of(c->dd)));
    op_check_add(in, name, d, OP_CMP_EXACT, 0.0);
    snprintf(in->shape, sizeof in->shape, "n%lld", (long long)c->n);
}
static glm_status cast_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const cast_case *c = in->c;
    return glm_be_cast(be, b->p[1], b->dt[1], b->p[0], b->dt[0], c->n);
}
static void cast_ref(const op_inst *in, double *const *want) {
    for (int64_t i = 0; i < in->t[0].n; i++) want[1][i] = HV(in, 0)[i];
}
static const cast_case cast_cmp[] = {
    {GLM_DT_BF16, GLM_DT_F32, 1000003}, /* rounds to nearest even */
    {GLM_DT_F32, GLM_DT_BF16, 1000003},
    {GLM_DT_F32, GLM_DT_F32, 1001},
    {GLM_DT_BF16, GLM_DT_BF16, 1001},
};
static const cast_case cast_cpu[] = {{GLM_DT_F32, GLM_DT_F32, 1001}};

typedef struct {
    op_kind dk, sk;
    int64_t rows, cols, lds, ldd;
} cast2_case;

static void cast2_make(op_inst *in, const void *cv) {
    const cast2_case *c = cv;
    int s = op_add(in, "src", c->sk, OP_IN, c->rows * c->lds), d = op_add(in, "dst", c->dk, OP_INOUT, c->rows * c->ldd);
    op_fill_f32(in, s, 1.0f), op_fill_u(in, d, 1.0f);
    char name[40];
    snprintf(name, sizeof name, "cast_2d %s>%s", kind_name(c->sk), kind_name(c->dk));
    op_check_add(in, name, d, OP_CMP_EXACT, 0.0);
    snprintf(in->shape, sizeof in->shape, "%lldx%lld ld %lld>%lld", (long long)c->rows, (long long)c->cols,
             (long long)c->lds, (long long)c->ldd);
}
static glm_status cast2_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const cast2_case *c = in->c;
    return glm_be_cast_2d(be, b->p[1], b->dt[1], c->ldd, b->p[0], b->dt[0], c->lds, c->rows, c->cols);
}
static void cast2_ref(const op_inst *in, double *const *want) {
    const cast2_case *c = in->c;
    for (int64_t i = 0; i < in->t[1].n; i++) want[1][i] = HV(in, 1)[i];
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t j = 0; j < c->cols; j++) want[1][r * c->ldd + j] = HV(in, 0)[r * c->lds + j];
}
/* the context-parallel ring's K|V packing (act > act) and its accumulator stores (acc > act, f32) */
static const cast2_case cast2_cmp[] = {
    {OP_T_BF16, OP_T_F32, 300, 700, 1001, 704}, {OP_T_F32, OP_T_BF16, 300, 700, 704, 704},
    {OP_T_ACT, OP_T_ACT, 300, 700, 1001, 704},  {OP_T_ACT, OP_T_ACC, 300, 700, 1001, 704},
    {OP_T_F32, OP_T_ACC, 300, 700, 704, 704},   {OP_T_ACC, OP_T_F32, 300, 700, 1001, 704},
};
static const cast2_case cast2_cpu[] = {
    {OP_T_F32, OP_T_F32, 4, 3, 6, 3}, {OP_T_F32, OP_T_ACC, 4, 3, 5, 4}, {OP_T_ACC, OP_T_F32, 3, 5, 7, 6}};

/* ==== fill_normal ============================================================================= */
typedef struct {
    op_kind k;
    int64_t n;
    float mean, std;
    uint64_t seed, stream;
} fill_case;

static void fill_make(op_inst *in, const void *cv) {
    const fill_case *c = cv;
    int d = op_add(in, "dst", c->k, OP_OUT, c->n);
    char name[40];
    snprintf(name, sizeof name, "fill_normal %s", kind_name(c->k));
    op_check_add(in, name, d, OP_CMP_REL, op_tol(in, d));
    snprintf(in->shape, sizeof in->shape, "n%lld", (long long)c->n);
}
static glm_status fill_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const fill_case *c = in->c;
    return glm_be_fill_normal(be, b->p[0], b->dt[0], c->n, c->mean, c->std, c->seed, c->stream);
}
/* N(mean, std) moments; reproducible; another stream gives other numbers */
static void fill_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const fill_case *c = in->c;
    if (c->k != OP_T_F32 || c->n < 100000) return;
    double *z = op_fetch(b, in, 0, 0, c->n), m1 = 0, m2 = 0, m4 = 0;
    if (!z) return;
    for (int64_t i = 0; i < c->n; i++) m1 += z[i];
    m1 /= c->n;
    for (int64_t i = 0; i < c->n; i++) {
        double d = (z[i] - m1) / c->std;
        m2 += d * d, m4 += d * d * d * d;
    }
    m2 /= c->n, m4 /= c->n;
    OP_EXPECT(fabs(m1 - c->mean) < 0.01 * c->std && fabs(m2 - 1) < 0.02 && fabs(m4 - 3) < 0.1,
              "fill_normal on %s: mean %g (want %g), variance %g std^2, kurtosis %g", be->name, m1, c->mean, m2, m4);
    int64_t same = 0, diff = 0;
    glm_be_fill_normal(be, b->p[0], b->dt[0], c->n, c->mean, c->std, c->seed, c->stream);
    double *z2 = op_fetch(b, in, 0, 0, c->n);
    for (int64_t i = 0; z2 && i < c->n; i++) same += z2[i] == z[i];
    free(z2);
    glm_be_fill_normal(be, b->p[0], b->dt[0], c->n, c->mean, c->std, c->seed, c->stream + 1);
    z2 = op_fetch(b, in, 0, 0, c->n);
    for (int64_t i = 0; z2 && i < c->n; i++) diff += z2[i] != z[i];
    free(z2);
    OP_EXPECT(same == c->n, "fill_normal on %s is reproducible (%lld of %lld the same)", be->name, (long long)same,
              (long long)c->n);
    OP_EXPECT(diff > c->n / 2, "fill_normal on %s: another stream gives other numbers", be->name);
    free(z);
}
static const fill_case fill_cmp[] = {{OP_T_F32, 1000003, 0.25f, 0.5f, 11, 5}, {OP_T_BF16, 1000003, 0.25f, 0.5f, 11, 5}};
static const fill_case fill_cpu[] = {{OP_T_F32, 200000, 0.5f, 2.0f, 7, 1}};

/* ==== fp8_quantize / fp8_matmul / fp8_transpose: the FP8 base (GLM_FEATURE_FP8) ===============
 * Quantize and transpose bit for bit against kernels/formats.h's conversions, the GEMM against the
 * float64 product of the decoded codes (tests/gpu/test_fp8_ops.c holds them elementwise too, and
 * tests/kernels/test_fp8.c the conversions to ml_dtypes). Quantize and transpose run on every
 * backend; the GEMM needs FP8 tensor cores on CUDA (sm_89 and later): a backend without
 * GLM_FEATURE_FP8 declares no checks for fp8_matmul's cases and must refuse it with
 * GLM_ERR_UNSUPPORTED (props). */
static int fp8_on(const op_inst *in) {
    return glm_be_supports(in->test, GLM_FEATURE_FP8) && (!in->ref || glm_be_supports(in->ref, GLM_FEATURE_FP8));
}
static const char *fp8_kind_name(int k) { return k == GLM_FP8_E5M2 ? "e5m2" : "e4m3"; }
/* row m of x (K values, times mul when not NULL) quantized as fp8_quantize does: codes q[K], the scale */
static float fp8_ref_row(const float *x, const float *mul, int64_t K, int kind, uint8_t *q) {
    float amax = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        float v = mul ? glm_fmul_rn(x[k], mul[k]) : x[k];
        amax = fabsf(v) > amax ? fabsf(v) : amax;
    }
    const float inv = glm_fp8_inv_scale(amax, (glm_fp8_kind)kind);
    for (int64_t k = 0; k < K; k++) q[k] = glm_fp8_encode(mul ? glm_fmul_rn(x[k], mul[k]) : x[k], inv, (glm_fp8_kind)kind);
    return glm_fp8_scale(amax, (glm_fp8_kind)kind);
}

typedef struct {
    int64_t M, K, pad; /* x [M, K], row stride K + pad */
    int kind, mul;     /* glm_fp8_kind; 1: a column multiplier */
} f8q_case;
enum { F8Q_X, F8Q_Q, F8Q_S, F8Q_MUL };

static void f8q_make(op_inst *in, const void *cv) {
    const f8q_case *c = cv;
    op_add(in, "x", OP_T_ACT, OP_IN, c->M * (c->K + c->pad)), op_add(in, "q", OP_T_BYTES, OP_OUT, c->M * c->K);
    op_add(in, "scale", OP_T_F32, OP_OUT, c->M);
    op_fill_n(in, F8Q_X, 2.0f);
    if (c->mul) op_add(in, "col_mul", OP_T_F32, OP_IN, c->K), op_fill_u(in, F8Q_MUL, 1.5f);
    op_check_add(in, "fp8_quantize q", F8Q_Q, OP_CMP_EXACT, 0.0);
    op_check_add(in, "fp8_quantize scale", F8Q_S, OP_CMP_EXACT, 0.0);
    snprintf(in->shape, sizeof in->shape, "%lldx%lld ld+%lld %s%s", (long long)c->M, (long long)c->K, (long long)c->pad,
             fp8_kind_name(c->kind), c->mul ? " mul" : "");
}
static glm_status f8q_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const f8q_case *c = in->c;
    return glm_be_fp8_quantize(be, b->p[F8Q_Q], b->p[F8Q_S], b->p[F8Q_X], c->K + c->pad, c->M, c->K,
                               c->mul ? b->p[F8Q_MUL] : NULL, c->kind);
}
static void f8q_ref(const op_inst *in, double *const *want) {
    const f8q_case *c = in->c;
    uint8_t *q = malloc((size_t)c->K);
    for (int64_t m = 0; q && m < c->M; m++) {
        want[F8Q_S][m] = fp8_ref_row(HV(in, F8Q_X) + m * (c->K + c->pad), c->mul ? HV(in, F8Q_MUL) : NULL, c->K, c->kind, q);
        for (int64_t k = 0; k < c->K; k++) want[F8Q_Q][m * c->K + k] = q[k];
    }
    free(q);
}
static void f8q_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const f8q_case *c = in->c;
    OP_EXPECT(glm_be_fp8_quantize(be, b->p[F8Q_Q], b->p[F8Q_S], b->p[F8Q_X], c->K + c->pad, c->M, c->K, NULL, 7) ==
                  GLM_ERR_ARG,
              "fp8_quantize on %s: an unknown kind is an error", be->name);
}
static const f8q_case f8q_cmp[] = {
    {256, 4096, 0, GLM_FP8_E4M3, 0},  /* the forward's activations (C) */
    {256, 13696, 0, GLM_FP8_E5M2, 1}, /* an input gradient: dy times the weight's row scales (F) */
    {37, 1000, 24, GLM_FP8_E4M3, 1},  /* odd, strided */
};
static const f8q_case f8q_cpu[] = {{5, 32, 3, GLM_FP8_E4M3, 0}, {4, 48, 0, GLM_FP8_E5M2, 1}};

typedef struct {
    int64_t M, N, K, pad_x, pad_y;
    int kind, mul, wscale; /* x's glm_fp8_kind; a column multiplier; per-row weight scales (else NULL: 1) */
    float beta;
} f8m_case;
enum { F8M_X, F8M_W, F8M_Y, F8M_WS, F8M_MUL };

static int f8m_t(const f8m_case *c, int t) { return t == F8M_MUL && !c->wscale ? F8M_WS : t; }
static void f8m_make(op_inst *in, const void *cv) {
    const f8m_case *c = cv;
    const int64_t ldx = c->K + c->pad_x, ldy = c->N + c->pad_y;
    op_add(in, "x", OP_T_ACT, OP_IN, c->M * ldx), op_add(in, "w", OP_T_BYTES, OP_IN, c->N * c->K);
    op_add(in, "y", OP_T_ACT, OP_INOUT, c->M * ldy);
    op_fill_n(in, F8M_X, 1.0f), op_fill_n(in, F8M_Y, 1.0f);
    /* E4M3 codes of magnitude below 16 (no NaN code 0x7f / 0xff) */
    for (int64_t i = 0; i < c->N * c->K; i++) {
        uint64_t r = op_rand(in);
        in->t[F8M_W].b[i] = (uint8_t)((r & 0x80) | ((r >> 8) % 0x58));
    }
    if (c->beta == 0.0f)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t n = 0; n < c->N; n++) HV(in, F8M_Y)[m * ldy + n] = NAN; /* beta 0 must not read y */
    if (c->wscale) {
        int t = op_add(in, "w_scale", OP_T_F32, OP_IN, c->N);
        op_fill_u(in, t, 0.01f);
        for (int64_t n = 0; n < c->N; n++) HV(in, t)[n] = fabsf(HV(in, t)[n]);
    }
    if (c->mul) op_fill_u(in, op_add(in, "col_mul", OP_T_F32, OP_IN, c->K), 0.5f);
    if (fp8_on(in)) op_check_add(in, "fp8_matmul y", F8M_Y, OP_CMP_REL, in->ref ? TOL_FP8_GEMM : TOL_CPU_REF);
    snprintf(in->shape, sizeof in->shape, "%lldx%lldx%lld %s%s%s b%g", (long long)c->M, (long long)c->N, (long long)c->K,
             fp8_kind_name(c->kind), c->mul ? " mul" : "", c->wscale ? " ws" : "", c->beta);
}
static glm_status f8m_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const f8m_case *c = in->c;
    if (!fp8_on(in)) return GLM_OK;
    return glm_be_fp8_matmul(be, c->M, c->N, c->K, b->p[F8M_X], c->K + c->pad_x, c->mul ? b->p[f8m_t(c, F8M_MUL)] : NULL,
                             c->kind, b->p[F8M_W], c->wscale ? b->p[F8M_WS] : NULL, c->beta, b->p[F8M_Y], c->N + c->pad_y);
}
static void f8m_ref(const op_inst *in, double *const *want) {
    const f8m_case *c = in->c;
    const int64_t ldx = c->K + c->pad_x, ldy = c->N + c->pad_y;
    uint8_t *q = malloc((size_t)c->K);
    for (int64_t m = 0; q && m < c->M; m++) {
        const float sx = fp8_ref_row(HV(in, F8M_X) + m * ldx, c->mul ? HV(in, f8m_t(c, F8M_MUL)) : NULL, c->K, c->kind, q);
        for (int64_t n = 0; n < ldy; n++) {
            const double y = HV(in, F8M_Y)[m * ldy + n];
            if (n >= c->N) {
                want[F8M_Y][m * ldy + n] = y; /* the padding keeps its value */
                continue;
            }
            double s = 0;
            for (int64_t k = 0; k < c->K; k++)
                s += (double)glm_fp8_to_f32(q[k], (glm_fp8_kind)c->kind) *
                     glm_fp8_to_f32(in->t[F8M_W].b[n * c->K + k], GLM_FP8_E4M3);
            s *= (double)sx * (c->wscale ? HV(in, F8M_WS)[n] : 1.0);
            want[F8M_Y][m * ldy + n] = s + (c->beta == 0.0f ? 0.0 : c->beta * y);
        }
    }
    free(q);
}
static void f8m_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const f8m_case *c = in->c;
    const int fp8 = glm_be_supports(be, GLM_FEATURE_FP8);
    /* K not a multiple of 16 is refused on every backend (CUDA's layout rule); without FP8, every call */
    OP_EXPECT(glm_be_fp8_matmul(be, c->M, c->N, fp8 ? c->K - 8 : c->K, b->p[F8M_X], c->K + c->pad_x, NULL, c->kind,
                                b->p[F8M_W], NULL, 0.0f, b->p[F8M_Y], c->N + c->pad_y) == GLM_ERR_UNSUPPORTED,
              "fp8_matmul on %s: %s is GLM_ERR_UNSUPPORTED", be->name, fp8 ? "K not a multiple of 16" : "a backend without FP8");
}
static const f8m_case f8m_cmp[] = {
    {64, 5120, 4096, 0, 0, GLM_FP8_E4M3, 0, 1, 0.0f},  /* query_key_value's forward (per-row weight scales) */
    {64, 4096, 1024, 0, 0, GLM_FP8_E4M3, 0, 1, 1.0f},  /* into the residual (beta 1) */
    {64, 1024, 2048, 0, 0, GLM_FP8_E5M2, 1, 0, 1.0f},  /* an input gradient: E5M2 dy times the row scales, beta 1 */
    {33, 48, 64, 16, 5, GLM_FP8_E4M3, 1, 1, 0.0f},     /* odd M, strided x and y */
};
static const f8m_case f8m_cpu[] = {
    {5, 16, 32, 3, 2, GLM_FP8_E4M3, 0, 1, 0.0f},
    {3, 32, 48, 0, 1, GLM_FP8_E5M2, 1, 0, 1.0f},
};

typedef struct {
    int64_t rows, cols;
} f8t_case;
static void f8t_make(op_inst *in, const void *cv) {
    const f8t_case *c = cv;
    op_add(in, "src", OP_T_BYTES, OP_IN, c->rows * c->cols), op_add(in, "dst", OP_T_BYTES, OP_OUT, c->rows * c->cols);
    for (int64_t i = 0; i < c->rows * c->cols; i++) in->t[0].b[i] = (uint8_t)op_rand(in);
    op_check_add(in, "fp8_transpose", 1, OP_CMP_EXACT, 0.0);
    snprintf(in->shape, sizeof in->shape, "%lldx%lld", (long long)c->rows, (long long)c->cols);
}
static glm_status f8t_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const f8t_case *c = in->c;
    return glm_be_fp8_transpose(be, b->p[1], b->p[0], c->rows, c->cols);
}
static void f8t_ref(const op_inst *in, double *const *want) {
    const f8t_case *c = in->c;
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t k = 0; k < c->cols; k++) want[1][k * c->rows + r] = in->t[0].b[r * c->cols + k];
}
static const f8t_case f8t_cmp[] = {{4096, 13696}, {5120, 4096}, {37, 53}, {1, 77}};
static const f8t_case f8t_cpu[] = {{7, 13}, {16, 32}};

/* ==== embedding =============================================================================== */
typedef struct {
    int64_t V, C, N;
} emb_case;

static void emb_make(op_inst *in, const void *cv) {
    const emb_case *c = cv;
    int t = op_add(in, "table", OP_T_W, OP_IN, c->V * c->C), ids = op_add(in, "ids", OP_T_I32, OP_IN, c->N);
    int o = op_add(in, "out", OP_T_ACT, OP_OUT, c->N * c->C);
    op_fill_u(in, t, 1.0f);
    for (int64_t i = 0; i < c->N; i++) in->t[ids].i[i] = (int32_t)(op_rand(in) % (uint64_t)c->V);
    op_check_add(in, "embedding", o, OP_CMP_EXACT, 0.0);
    snprintf(in->shape, sizeof in->shape, "V%lld C%lld N%lld", (long long)c->V, (long long)c->C, (long long)c->N);
}
static glm_status emb_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const emb_case *c = in->c;
    return glm_be_embedding(be, b->p[2], b->p[0], b->p[1], c->N, c->C, c->V);
}
static void emb_ref(const op_inst *in, double *const *want) {
    const emb_case *c = in->c;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t j = 0; j < c->C; j++) want[2][n * c->C + j] = HV(in, 0)[(int64_t)in->t[1].i[n] * c->C + j];
}
/* an id >= V is an error naming its position */
static void emb_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const emb_case *c = in->c;
    if (in->index) return;
    const int64_t pos = c->N > 123 ? 123 : c->N / 2;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)c->N);
    void *g = NULL;
    memcpy(ids, in->t[1].i, sizeof(int32_t) * (size_t)c->N);
    ids[pos] = (int32_t)c->V;
    char want[32];
    snprintf(want, sizeof want, "position %lld", (long long)pos);
    glm_status st = glm_be_alloc(be, sizeof(int32_t) * (size_t)c->N, "bad ids", &g);
    if (!st) st = glm_be_upload(be, g, ids, sizeof(int32_t) * (size_t)c->N);
    if (!st) st = glm_be_embedding(be, b->p[2], b->p[0], g, c->N, c->C, c->V);
    OP_EXPECT(st == GLM_ERR_ARG && strstr(glm_errmsg(), want), "embedding on %s: an id >= V is an error naming %s: %s",
              be->name, want, glm_errmsg());
    glm_be_free(be, g);
    free(ids);
}
static const emb_case emb_cmp[] = {{1000, 4096, 300}};
static const emb_case emb_cpu[] = {{4, 3, 3}, {50, 7, 20}};

/* ==== rmsnorm_fwd / rmsnorm_bwd =============================================================== */
typedef struct {
    int64_t N, C;
    float eps;
} rms_case;

enum { RMS_X, RMS_W, RMS_Y, RMS_RSTD };                   /* forward */
enum { RB_X, RB_W, RB_DY, RB_RSTD, RB_DX, RB_YS, RB_RS }; /* backward; RB_YS, RB_RS: the CPU run's forward */

static void rms_shape(op_inst *in, const rms_case *c) {
    snprintf(in->shape, sizeof in->shape, "N%lld C%lld", (long long)c->N, (long long)c->C);
}

static void rmsf_make(op_inst *in, const void *cv) {
    const rms_case *c = cv;
    op_add(in, "x", OP_T_ACT, OP_IN, c->N * c->C), op_add(in, "w", OP_T_W, OP_IN, c->C);
    op_add(in, "y", OP_T_ACT, OP_OUT, c->N * c->C), op_add(in, "rstd", OP_T_F32, OP_OUT, c->N);
    op_fill_n(in, RMS_X, 2.0f), op_fill_u(in, RMS_W, 1.0f);
    op_check_add(in, "rmsnorm_fwd y", RMS_Y, OP_CMP_REL, op_tol(in, RMS_Y));
    op_check_add(in, "rmsnorm_fwd rstd", RMS_RSTD, OP_CMP_REL, TOL_F32);
    rms_shape(in, c);
}
static glm_status rmsf_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const rms_case *c = in->c;
    return glm_be_rmsnorm_fwd(be, b->p[RMS_Y], b->p[RMS_RSTD], b->p[RMS_X], b->p[RMS_W], c->N, c->C, c->eps);
}
static void rmsf_ref(const op_inst *in, double *const *want) {
    const rms_case *c = in->c;
    for (int64_t n = 0; n < c->N; n++) {
        const float *x = HV(in, RMS_X) + n * c->C;
        double ss = 0;
        for (int64_t j = 0; j < c->C; j++) ss += (double)x[j] * x[j];
        double r = 1.0 / sqrt(ss / (double)c->C + (double)c->eps);
        want[RMS_RSTD][n] = r;
        for (int64_t j = 0; j < c->C; j++) want[RMS_Y][n * c->C + j] = x[j] * r * HV(in, RMS_W)[j];
    }
}

static void rmsb_make(op_inst *in, const void *cv) {
    const rms_case *c = cv;
    op_add(in, "x", OP_T_ACT, OP_IN, c->N * c->C), op_add(in, "w", OP_T_W, OP_IN, c->C);
    op_add(in, "dy", OP_T_ACT, OP_IN, c->N * c->C), op_add(in, "rstd", OP_T_F32, OP_IN, c->N);
    op_add(in, "dx", OP_T_ACT, OP_INOUT, c->N * c->C);
    op_fill_n(in, RB_X, 2.0f), op_fill_u(in, RB_W, 1.0f), op_fill_n(in, RB_DY, 1.0f), op_fill_n(in, RB_DX, 1.0f);
    /* the forward's rstd as the CPU op computes it (sum in double, rounded once to f32): every backend gets it */
    for (int64_t n = 0; n < c->N; n++) {
        const float *x = HV(in, RB_X) + n * c->C;
        double ss = 0;
        for (int64_t j = 0; j < c->C; j++) ss += (double)x[j] * x[j];
        HV(in, RB_RSTD)[n] = (float)(1.0 / sqrt(ss / (double)c->C + (double)c->eps));
    }
    op_check_add(in, "rmsnorm_bwd (accumulates)", RB_DX, OP_CMP_REL, op_tol(in, RB_DX));
    if (!in->ref) {
        op_add(in, "y", OP_T_ACT, OP_SCRATCH, c->N * c->C), op_add(in, "rstd'", OP_T_F32, OP_SCRATCH, c->N);
        fd_whole(in, RB_X, RB_DX, 1, TOL_FD);
    }
    rms_shape(in, c);
}
static glm_status rmsb_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const rms_case *c = in->c;
    return glm_be_rmsnorm_bwd(be, b->p[RB_DX], b->p[RB_DY], b->p[RB_X], b->p[RB_W], b->p[RB_RSTD], c->N, c->C);
}
static void rmsb_ref(const op_inst *in, double *const *want) {
    const rms_case *c = in->c;
    for (int64_t n = 0; n < c->N; n++) {
        const float *x = HV(in, RB_X) + n * c->C, *dy = HV(in, RB_DY) + n * c->C, *w = HV(in, RB_W);
        double r = HV(in, RB_RSTD)[n], dot = 0;
        for (int64_t j = 0; j < c->C; j++) dot += (double)dy[j] * w[j] * x[j];
        for (int64_t j = 0; j < c->C; j++)
            want[RB_DX][n * c->C + j] = HV(in, RB_DX)[n * c->C + j] + r * w[j] * dy[j] - x[j] * r * r * r / c->C * dot;
    }
}
static double rmsb_fd(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const rms_case *c = in->c;
    glm_be_rmsnorm_fwd(be, b->p[RB_YS], b->p[RB_RS], b->p[RB_X], b->p[RB_W], c->N, c->C, c->eps);
    return op_dot(b, in, RB_YS, HV(in, RB_DY), c->N * c->C);
}
static const rms_case rms_cmp[] = {{256, 4096, 1.5625e-07f}, {7, 67, 1.5625e-07f}};
static const rms_case rms_cpu[] = {{3, 17, 1e-5f}};

/* ==== rope ==================================================================================== */
typedef struct {
    int64_t N;
    int nheads, Dh, rot;
    int64_t ldx;
    double base;
    int inverse;
    const int32_t *pos; /* NULL: random positions below 8192, the first 0 */
} rope_case;

enum { RO_X, RO_POS, RO_INV, RO_XF, RO_S }; /* RO_XF, RO_S: the CPU run's finite differences (inverse) */

static void rope_make(op_inst *in, const void *cv) {
    const rope_case *c = cv;
    op_add(in, "x", OP_T_ACT, OP_INOUT, c->N * c->ldx), op_add(in, "pos", OP_T_I32, OP_IN, c->N);
    op_add(in, "inv_freq", OP_T_F32, OP_IN, c->rot / 2);
    op_fill_n(in, RO_X, 1.0f);
    for (int64_t i = 0; i < c->N; i++) in->t[RO_POS].i[i] = c->pos ? c->pos[i] : i ? (int32_t)(op_rand(in) % 8192) : 0;
    glm_rope_inv_freq(c->base, c->rot, HV(in, RO_INV));
    op_check_add(in, c->inverse ? "rope inverse" : "rope", RO_X, OP_CMP_REL, op_tol(in, RO_X));
    snprintf(in->shape, sizeof in->shape, "N%lld heads%d Dh%d rot%d", (long long)c->N, c->nheads, c->Dh, c->rot);
    /* the inverse is the backward: f(xf) = <rope(xf), x> has the gradient rope^T(x), the op's result */
    if (!in->ref && c->inverse) {
        op_add(in, "x (finite differences)", OP_T_ACT, OP_IN, c->N * c->ldx);
        op_fill_n(in, RO_XF, 1.0f);
        op_add(in, "rope(x)", OP_T_ACT, OP_SCRATCH, c->N * c->ldx);
        fd_whole(in, RO_XF, RO_X, 0, TOL_FD);
    }
}
static glm_status rope_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const rope_case *c = in->c;
    return glm_be_rope(be, b->p[RO_X], c->ldx, b->p[RO_POS], c->N, c->nheads, c->Dh, c->rot, b->p[RO_INV], c->inverse);
}
static void rope_ref(const op_inst *in, double *const *want) {
    const rope_case *c = in->c;
    const float *x = HV(in, RO_X), *inv = HV(in, RO_INV);
    for (int64_t i = 0; i < in->t[RO_X].n; i++) want[RO_X][i] = x[i];
    for (int64_t n = 0; n < c->N; n++)
        for (int i = 0; i < c->rot / 2; i++) {
            float ang = (float)in->t[RO_POS].i[n] * inv[i];
            double cs = (float)cos((double)ang), sn = (float)sin((double)ang);
            if (c->inverse) sn = -sn;
            for (int h = 0; h < c->nheads; h++) {
                int64_t e = n * c->ldx + (int64_t)h * c->Dh + 2 * i;
                want[RO_X][e] = x[e] * cs - x[e + 1] * sn;
                want[RO_X][e + 1] = x[e + 1] * cs + x[e] * sn;
            }
        }
}
static double rope_fd(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const rope_case *c = in->c;
    glm_be_copy(be, b->p[RO_S], b->p[RO_XF], (size_t)in->t[RO_S].n * b->esize[RO_S]);
    glm_be_rope(be, b->p[RO_S], c->ldx, b->p[RO_POS], c->N, c->nheads, c->Dh, c->rot, b->p[RO_INV], 0);
    return op_dot(b, in, RO_S, HV(in, RO_X), in->t[RO_S].n);
}
static void rope_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const rope_case *c = in->c;
    OP_EXPECT(glm_be_rope(be, b->p[RO_X], c->ldx, b->p[RO_POS], c->N, c->nheads, c->Dh, 3, b->p[RO_INV], 0) == GLM_ERR_ARG,
              "rope on %s: an odd rotary width is an error", be->name);
}
static const int32_t rope_pos5[] = {0, 1, 7, 1000, 123456};
static const rope_case rope_cmp[] = {
    /* GLM-4-9B-1M: H + Hkv = 36 heads rotate in the qkv row */
    {256, 36, 128, 64, 5120, 1e8, 0, NULL}, {256, 36, 128, 64, 5120, 1e8, 1, NULL},
    /* tiny: Dh 16, rot 8 */
    {37, 6, 16, 8, 128, 10000, 0, NULL}, {37, 6, 16, 8, 128, 10000, 1, NULL},
};
static const rope_case rope_cpu[] = {
    {5, 3, 8, 4, 3 * 8 + 3, 10000, 0, rope_pos5}, /* rows padded past the heads */
    {5, 3, 8, 4, 3 * 8 + 3, 10000, 1, rope_pos5},
};

/* ==== swiglu_fwd / swiglu_bwd ================================================================= */
typedef struct {
    int64_t N, F;
    float scale; /* of the gate and up values */
    int r;       /* swiglu_bwd: the rank of a term du A added to dout inside the op (0: none) */
} sw_case;

enum { SW_H, SW_OUT };                  /* forward */
enum { SB_DOUT, SB_H, SB_DH, SB_OUT, SB_DU = 3, SB_A = 4 }; /* backward; SB_OUT: the CPU run's forward (no term);
                                                             SB_DU, SB_A: the term's du [N, r] and A [r, F] */

static void sw_shape(op_inst *in, const sw_case *c) {
    snprintf(in->shape, sizeof in->shape, "N%lld F%lld", (long long)c->N, (long long)c->F);
}
static void swf_make(op_inst *in, const void *cv) {
    const sw_case *c = cv;
    op_add(in, "h", OP_T_ACT, OP_IN, c->N * 2 * c->F), op_add(in, "out", OP_T_ACT, OP_OUT, c->N * c->F);
    op_fill_n(in, SW_H, c->scale);
    op_check_add(in, "swiglu_fwd", SW_OUT, OP_CMP_REL, op_tol(in, SW_OUT));
    sw_shape(in, c);
}
static glm_status swf_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const sw_case *c = in->c;
    return glm_be_swiglu_fwd(be, b->p[SW_OUT], b->p[SW_H], c->N, c->F);
}
static void swf_ref(const op_inst *in, double *const *want) {
    const sw_case *c = in->c;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t f = 0; f < c->F; f++) {
            double g = HV(in, SW_H)[n * 2 * c->F + f], u = HV(in, SW_H)[n * 2 * c->F + c->F + f];
            want[SW_OUT][n * c->F + f] = g / (1.0 + exp(-g)) * u;
        }
}
static void swb_make(op_inst *in, const void *cv) {
    const sw_case *c = cv;
    op_add(in, "dout", OP_T_ACT, OP_IN, c->N * c->F), op_add(in, "h", OP_T_ACT, OP_IN, c->N * 2 * c->F);
    op_add(in, "dh", OP_T_ACT, OP_OUT, c->N * 2 * c->F);
    op_fill_n(in, SB_DOUT, 1.0f), op_fill_n(in, SB_H, c->scale);
    if (c->r) {
        op_add(in, "du", OP_T_ACT, OP_IN, c->N * c->r), op_add(in, "A", OP_T_ACT, OP_IN, (int64_t)c->r * c->F);
        op_fill_n(in, SB_DU, 1.0f), op_fill_n(in, SB_A, 0.5f);
    }
    op_check_add(in, "swiglu_bwd", SB_DH, OP_CMP_REL, op_tol(in, SB_DH));
    if (!in->ref && !c->r) {
        op_add(in, "out", OP_T_ACT, OP_SCRATCH, c->N * c->F);
        fd_whole(in, SB_H, SB_DH, 0, TOL_FD);
    }
    snprintf(in->shape, sizeof in->shape, "N%lld F%lld%s", (long long)c->N, (long long)c->F, c->r ? " + du A" : "");
    if (c->r) snprintf(in->shape + strlen(in->shape), sizeof in->shape - strlen(in->shape), " r%d", c->r);
}
static glm_status swb_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const sw_case *c = in->c;
    glm_rank_term t = {c->r ? b->p[SB_DU] : NULL, c->r, c->r ? b->p[SB_A] : NULL, c->r, 0.75f};
    return glm_be_swiglu_bwd(be, b->p[SB_DH], b->p[SB_DOUT], b->p[SB_H], c->N, c->F, c->r ? &t : NULL);
}
static void swb_ref(const op_inst *in, double *const *want) {
    const sw_case *c = in->c;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t f = 0; f < c->F; f++) {
            double g = HV(in, SB_H)[n * 2 * c->F + f], u = HV(in, SB_H)[n * 2 * c->F + c->F + f];
            double d = HV(in, SB_DOUT)[n * c->F + f], sg = 1.0 / (1.0 + exp(-g));
            for (int j = 0; j < c->r; j++) d += 0.75 * HV(in, SB_DU)[n * c->r + j] * HV(in, SB_A)[(int64_t)j * c->F + f];
            want[SB_DH][n * 2 * c->F + f] = d * u * sg * (1.0 + g * (1.0 - sg));
            want[SB_DH][n * 2 * c->F + c->F + f] = d * g * sg;
        }
}
static double swb_fd(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const sw_case *c = in->c;
    glm_be_swiglu_fwd(be, b->p[SB_OUT], b->p[SB_H], c->N, c->F);
    return op_dot(b, in, SB_OUT, HV(in, SB_DOUT), c->N * c->F);
}
static const sw_case sw_cmp[] = {{256, 13696, 2.0f, 0}, {5, 77, 2.0f, 0}};
static const sw_case sw_cpu[] = {{4, 7, 1.5f, 0}};
/* the backward also with the rank term: r 8 (the model's), 16 and 4 (the kernel's other compiled
 * ranks), 3 and an F not a multiple of 8 (the element-wise kernel) */
static const sw_case swb_cmp[] = {{256, 13696, 2.0f, 0}, {5, 77, 2.0f, 0},   {256, 13696, 2.0f, 8},
                                  {37, 13696, 2.0f, 16}, {9, 136, 2.0f, 4}, {5, 77, 2.0f, 3}};
static const sw_case swb_cpu[] = {{4, 7, 1.5f, 0}, {4, 7, 1.5f, 2}};

/* ==== attention: shared ======================================================================
 * q, k, v are column blocks of one [B*T, (H + 2 Hkv) Dh] buffer, as the model holds them; the
 * documents are random runs (some of one token) unless a case lists them. */
typedef struct {
    int B, T, H, Hkv, Dh;
    int mean_doc;
    const int32_t *doc;   /* [B*T] explicit document ids, or NULL: random lengths around mean_doc */
    int sampled;          /* the CPU op would take minutes: compare with float64 at `rows` */
    const int64_t *rows;
    int nrows;
} att_case;

/* The attention problem on the host, for the float64 references. */
typedef struct {
    int B, T, H, Hkv, Dh;
    int64_t qd, kd, ld;
    const float *qkv, *dout, *out, *lse; /* qkv [B*T, ld]; dout, out [B*T, qd]; lse [B, H, T] */
    const int32_t *doc;
} att_host;

static void att_docs(op_inst *in, int32_t *d, int B, int T, int mean_len) {
    for (int b = 0; b < B; b++) {
        int doc = 0, left = 1 + (int)(op_rand(in) % (uint64_t)(2 * mean_len));
        for (int t = 0; t < T; t++) {
            if (left-- == 0) {
                doc++;
                left = (int)(op_rand(in) % (uint64_t)(2 * mean_len));
            }
            d[(int64_t)b * T + t] = doc;
        }
    }
}

/* out and lse of token n (row n / T), in double: o [qd], l [H] */
static void att_fwd_row(const att_host *a, int64_t n, double *o, double *l) {
    const int64_t b = n / a->T, i = n % a->T;
    const double scale = 1.0 / sqrt((double)a->Dh);
    double *s = malloc(sizeof(double) * (size_t)(i + 1));
    for (int h = 0; h < a->H; h++) {
        const int g = h / (a->H / a->Hkv);
        const float *q = a->qkv + n * a->ld + (int64_t)h * a->Dh;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; j++) {
            const int64_t m = b * a->T + j;
            s[j] = -INFINITY;
            if (a->doc[m] != a->doc[n]) continue;
            const float *k = a->qkv + m * a->ld + a->qd + (int64_t)g * a->Dh;
            double d = 0;
            for (int c = 0; c < a->Dh; c++) d += (double)q[c] * k[c];
            s[j] = d * scale;
            if (s[j] > mx) mx = s[j];
        }
        for (int c = 0; c < a->Dh; c++) o[(int64_t)h * a->Dh + c] = 0;
        for (int64_t j = 0; j <= i; j++)
            if (s[j] > -INFINITY) sum += exp(s[j] - mx);
        for (int64_t j = 0; j <= i; j++) {
            if (s[j] == -INFINITY) continue;
            const double p = exp(s[j] - mx) / sum;
            const float *v = a->qkv + (b * a->T + j) * a->ld + a->qd + a->kd + (int64_t)g * a->Dh;
            for (int c = 0; c < a->Dh; c++) o[(int64_t)h * a->Dh + c] += p * v[c];
        }
        l[h] = mx + log(sum);
    }
    free(s);
}

/* The gradient row of token r in double, g [ld] = dq_r | dk_r | dv_r, from dout, out and lse:
 * P_ij = exp(s_ij - lse_i), dS_ij = P_ij (dout_i . v_j - dout_i . out_i); dq_r sums over its keys
 * j <= r, dk_r and dv_r over the queries i >= r of its document and the heads of its group. */
static void att_bwd_row(const att_host *a, int64_t r, double *gr) {
    const int64_t b = r / a->T, ir = r % a->T;
    const double scale = 1.0 / sqrt((double)a->Dh);
    for (int64_t c = 0; c < a->ld; c++) gr[c] = 0;
    for (int h = 0; h < a->H; h++) {
        const int g = h / (a->H / a->Hkv);
        /* as a query */
        const float *qi = a->qkv + r * a->ld + (int64_t)h * a->Dh, *doi = a->dout + r * a->qd + (int64_t)h * a->Dh,
                    *oi = a->out + r * a->qd + (int64_t)h * a->Dh;
        double Di = 0;
        for (int c = 0; c < a->Dh; c++) Di += (double)doi[c] * oi[c];
        for (int64_t j = 0; j <= ir; j++) {
            const int64_t m = b * a->T + j;
            if (a->doc[m] != a->doc[r]) continue;
            const float *kj = a->qkv + m * a->ld + a->qd + (int64_t)g * a->Dh, *vj = kj + a->kd;
            double sd = 0, dp = 0;
            for (int c = 0; c < a->Dh; c++) sd += (double)qi[c] * kj[c], dp += (double)doi[c] * vj[c];
            const double p = exp(sd * scale - a->lse[(b * a->H + h) * a->T + ir]), ds = p * (dp - Di);
            for (int c = 0; c < a->Dh; c++) gr[(int64_t)h * a->Dh + c] += ds * scale * kj[c];
        }
        /* as a key */
        const float *kr = a->qkv + r * a->ld + a->qd + (int64_t)g * a->Dh, *vr = kr + a->kd;
        for (int64_t i = ir; i < a->T; i++) {
            const int64_t m = b * a->T + i;
            if (a->doc[m] != a->doc[r]) continue;
            const float *qq = a->qkv + m * a->ld + (int64_t)h * a->Dh, *dd = a->dout + m * a->qd + (int64_t)h * a->Dh,
                        *oo = a->out + m * a->qd + (int64_t)h * a->Dh;
            double sd = 0, dp = 0, Dq = 0;
            for (int c = 0; c < a->Dh; c++)
                sd += (double)qq[c] * kr[c], dp += (double)dd[c] * vr[c], Dq += (double)dd[c] * oo[c];
            const double p = exp(sd * scale - a->lse[(b * a->H + h) * a->T + i]), ds = p * (dp - Dq);
            for (int c = 0; c < a->Dh; c++) {
                gr[a->qd + (int64_t)g * a->Dh + c] += ds * scale * qq[c];
                gr[a->qd + a->kd + (int64_t)g * a->Dh + c] += p * dd[c];
            }
        }
    }
}

/* tensors common to the attention entries: qkv (0) and doc (1) */
enum { AT_QKV, AT_DOC };

static void att_inputs(op_inst *in, int B, int T, int H, int Hkv, int Dh, int mean_doc, const int32_t *doc) {
    const int64_t N = (int64_t)B * T, ld = (int64_t)(H + 2 * Hkv) * Dh;
    op_add(in, "qkv", OP_T_ACT, OP_IN, N * ld), op_add(in, "doc", OP_T_I32, OP_IN, N);
    op_fill_n(in, AT_QKV, 1.0f);
    if (doc) memcpy(in->t[AT_DOC].i, doc, sizeof(int32_t) * (size_t)N);
    else att_docs(in, in->t[AT_DOC].i, B, T, mean_doc);
}

/* the forward's out (rounded as the tested backend stores it) and lse into tensors `out` and `lse`,
 * computed by op_derive_backend (the CPU op, or the tested backend for a sampled case) */
static void att_derive(op_inst *in, int out, int lse, int B, int T, int H, int Hkv, int Dh) {
    const glm_backend *be = op_derive_backend(in);
    const int64_t N = (int64_t)B * T, qd = (int64_t)H * Dh, kd = (int64_t)Hkv * Dh, ld = qd + 2 * kd;
    const glm_dtype at = be->act_dtype;
    const size_t es = glm_dtype_size(at);
    void *q = NULL, *d = NULL, *o = NULL, *l = NULL;
    glm_status st = glm_be_alloc(be, (size_t)(N * ld) * es, "qkv", &q);
    if (!st) st = glm_be_alloc(be, sizeof(int32_t) * (size_t)N, "doc", &d);
    if (!st) st = glm_be_alloc(be, (size_t)(N * qd) * es, "out", &o);
    if (!st) st = glm_be_alloc(be, sizeof(float) * (size_t)(B * H * T), "lse", &l);
    if (!st) st = glm_be_upload_f32(be, q, at, HV(in, AT_QKV), N * ld);
    if (!st) st = glm_be_upload(be, d, in->t[AT_DOC].i, sizeof(int32_t) * (size_t)N);
    if (!st)
        st = glm_be_attention_fwd(be, o, qd, l, q, ld, (char *)q + (size_t)qd * es, ld, (char *)q + (size_t)(qd + kd) * es, ld,
                               d, B, T, H, Hkv, Dh);
    if (!st) st = glm_be_download_f32(be, HV(in, out), at, o, N * qd);
    if (!st) st = glm_be_download(be, HV(in, lse), l, sizeof(float) * (size_t)(B * H * T));
    OP_EXPECT(st == GLM_OK, "%s %s: the forward on the %s backend for the backward's inputs: %s", in->e->name, in->shape,
              be->name, glm_errmsg());
    glm_be_free(be, q), glm_be_free(be, d), glm_be_free(be, o), glm_be_free(be, l);
    op_round(in, out);
}

static att_host att_of(const op_inst *in, int B, int T, int H, int Hkv, int Dh) {
    att_host a = {.B = B, .T = T, .H = H, .Hkv = Hkv, .Dh = Dh, .qd = (int64_t)H * Dh, .kd = (int64_t)Hkv * Dh};
    a.ld = a.qd + 2 * a.kd;
    a.qkv = HV(in, AT_QKV), a.doc = in->t[AT_DOC].i;
    return a;
}

static void att_shape(op_inst *in, const char *pre, int B, int T, int H, int Hkv, int Dh, const char *post) {
    snprintf(in->shape, sizeof in->shape, "%sB%d T%d H%d Hkv%d Dh%d%s", pre, B, T, H, Hkv, Dh, post);
}

/* ==== attention_fwd / attention_bwd =========================================================== */
enum { AF_OUT = 2, AF_LSE };                                  /* forward */
enum { AB_DOUT = 2, AB_OUT, AB_LSE, AB_D, AB_OS, AB_LS };     /* backward; AB_OS, AB_LS: the CPU run's forward */

static void attf_make(op_inst *in, const void *cv) {
    const att_case *c = cv;
    const int64_t N = (int64_t)c->B * c->T, qd = (int64_t)c->H * c->Dh;
    att_inputs(in, c->B, c->T, c->H, c->Hkv, c->Dh, c->mean_doc, c->doc);
    op_add(in, "out", OP_T_ACT, OP_OUT, N * qd), op_add(in, "lse", OP_T_F32, OP_OUT, (int64_t)c->B * c->H * c->T);
    in->sampled = c->sampled;
    if (c->sampled) {
        op_check *k = op_check_add(in, "attention_fwd long", AF_OUT, OP_CMP_REL, TOL_BF16);
        view(k, 0, N, qd, qd), k->sel = c->rows, k->nsel = c->nrows;
    } else {
        op_check_add(in, "attention_fwd out", AF_OUT, OP_CMP_REL, op_tol(in, AF_OUT));
        op_check_add(in, "attention_fwd lse", AF_LSE, OP_CMP_REL, TOL_F32);
    }
    att_shape(in, "", c->B, c->T, c->H, c->Hkv, c->Dh, c->sampled ? " (rows)" : "");
}
static glm_status attf_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const att_case *c = in->c;
    const int64_t qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, ld = qd + 2 * kd;
    return glm_be_attention_fwd(be, b->p[AF_OUT], qd, b->p[AF_LSE], b->p[AT_QKV], ld, op_el(b, AT_QKV, qd), ld,
                             op_el(b, AT_QKV, qd + kd), ld, b->p[AT_DOC], c->B, c->T, c->H, c->Hkv, c->Dh);
}
static void attf_ref(const op_inst *in, double *const *want) {
    const att_case *c = in->c;
    att_host a = att_of(in, c->B, c->T, c->H, c->Hkv, c->Dh);
    double *l = malloc(sizeof(double) * (size_t)c->H);
    const int64_t nr = c->sampled ? c->nrows : (int64_t)c->B * c->T;
    for (int64_t k = 0; k < nr; k++) {
        const int64_t n = c->sampled ? c->rows[k] : k, b = n / c->T, i = n % c->T;
        att_fwd_row(&a, n, want[AF_OUT] + n * a.qd, l);
        for (int h = 0; want[AF_LSE] && h < c->H; h++) want[AF_LSE][((int64_t)b * c->H + h) * c->T + i] = l[h];
    }
    free(l);
}
/* H not a multiple of Hkv is an error */
static void attf_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const att_case *c = in->c;
    if (in->index) return;
    const int64_t ld = (int64_t)(c->H + 2 * c->Hkv) * c->Dh;
    OP_EXPECT(glm_be_attention_fwd(be, b->p[AF_OUT], 3 * c->Dh, b->p[AF_LSE], b->p[AT_QKV], ld, b->p[AT_QKV], ld, b->p[AT_QKV],
                                ld, b->p[AT_DOC], 1, 2, 3, 2, c->Dh) == GLM_ERR_ARG,
              "attention_fwd on %s: H = 3 over Hkv = 2 is an error", be->name);
}

static void attb_make(op_inst *in, const void *cv) {
    const att_case *c = cv;
    const int64_t N = (int64_t)c->B * c->T, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, ld = qd + 2 * kd;
    att_inputs(in, c->B, c->T, c->H, c->Hkv, c->Dh, c->mean_doc, c->doc);
    op_add(in, "dout", OP_T_ACT, OP_IN, N * qd), op_add(in, "out", OP_T_ACT, OP_IN, N * qd);
    op_add(in, "lse", OP_T_F32, OP_IN, (int64_t)c->B * c->H * c->T), op_add(in, "dq|dk|dv", OP_T_ACT, OP_OUT, N * ld);
    op_fill_n(in, AB_DOUT, 1.0f);
    in->sampled = c->sampled;
    att_shape(in, "", c->B, c->T, c->H, c->Hkv, c->Dh, c->sampled ? " (rows)" : "");
    att_derive(in, AB_OUT, AB_LSE, c->B, c->T, c->H, c->Hkv, c->Dh);
    if (c->sampled) {
        op_check_add(in, "attention_bwd long (finite)", AB_D, OP_CMP_FINITE, 0.0);
        op_check *k = op_check_add(in, "attention_bwd long (rows)", AB_D, OP_CMP_REL, TOL_BF16);
        view(k, 0, N, ld, ld), k->sel = c->rows, k->nsel = c->nrows;
    } else {
        op_check_add(in, "attention_bwd dq|dk|dv", AB_D, OP_CMP_REL, op_tol(in, AB_D));
        /* dk and dv alone: smaller than dq, a wrong one would hide in the whole buffer's norm */
        view(op_check_add(in, "attention_bwd dk", AB_D, OP_CMP_REL, op_tol(in, AB_D)), qd, N, kd, ld);
        view(op_check_add(in, "attention_bwd dv", AB_D, OP_CMP_REL, op_tol(in, AB_D)), qd + kd, N, kd, ld);
    }
    if (!in->ref) {
        op_add(in, "out'", OP_T_ACT, OP_SCRATCH, N * qd), op_add(in, "lse'", OP_T_F32, OP_SCRATCH, (int64_t)c->B * c->H * c->T);
        fd_whole(in, AT_QKV, AB_D, 0, TOL_FD);
    }
}
static glm_status attb_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const att_case *c = in->c;
    const int64_t qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, ld = qd + 2 * kd;
    return glm_be_attention_bwd(be, b->p[AB_D], op_el(b, AB_D, qd), op_el(b, AB_D, qd + kd), b->p[AB_DOUT], qd, b->p[AB_OUT],
                             b->p[AB_LSE], NULL, b->p[AT_QKV], ld, op_el(b, AT_QKV, qd), ld, op_el(b, AT_QKV, qd + kd), ld,
                             b->p[AT_DOC], c->B, c->T, c->H, c->Hkv, c->Dh);
}
/* attention_delta over the B*T tokens in three chunks, the middle one across a row's end where B > 1
 * (as the model calls it, chunk by chunk) */
static glm_status att_delta_chunks(const glm_backend *be, const op_inst *in, op_bufs *b, int tD, int tdout, int tout) {
    const att_case *c = in->c;
    const int64_t N = (int64_t)c->B * c->T, qd = (int64_t)c->H * c->Dh;
    const int64_t cut[4] = {0, N / 3, c->B > 1 ? c->T + 1 + (N - c->T - 1) / 2 : 2 * N / 3, N};
    for (int k = 0; k < 3; k++)
        GLM_TRY(glm_be_attention_delta(be, b->p[tD], op_el(b, tdout, cut[k] * qd), qd, op_el(b, tout, cut[k] * qd), qd, cut[k],
                                       cut[k + 1] - cut[k], c->T, c->H, c->Dh));
    return GLM_OK;
}

/* ==== attention_bwd with D given (attention_delta's): out not read ============================
 * The model's lean backward (lora/model/plan.h): D from attention_delta, then attention_bwd with
 * out NULL; the same checks as attention_bwd's. */
static void attbd_make(op_inst *in, const void *cv) {
    const att_case *c = cv;
    attb_make(in, cv);
    op_add(in, "D", OP_T_ACC, OP_SCRATCH, (int64_t)c->B * c->H * c->T); /* the last tensor */
    for (int k = 0; k < in->nchk; k++) {
        char nm[40];
        snprintf(nm, sizeof nm, "attention_bwd+D%s", in->chk[k].name + strlen("attention_bwd"));
        memcpy(in->chk[k].name, nm, sizeof nm);
    }
}
static glm_status attbd_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const att_case *c = in->c;
    const int64_t qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, ld = qd + 2 * kd;
    const int tD = in->nt - 1;
    GLM_TRY(att_delta_chunks(be, in, b, tD, AB_DOUT, AB_OUT));
    return glm_be_attention_bwd(be, b->p[AB_D], op_el(b, AB_D, qd), op_el(b, AB_D, qd + kd), b->p[AB_DOUT], qd, NULL,
                             b->p[AB_LSE], b->p[tD], b->p[AT_QKV], ld, op_el(b, AT_QKV, qd), ld, op_el(b, AT_QKV, qd + kd), ld,
                             b->p[AT_DOC], c->B, c->T, c->H, c->Hkv, c->Dh);
}
/* with D given, the result is the same bits as attention_bwd computing D itself (one summation
 * order on each backend); neither out nor D is an error */
static void attbd_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const att_case *c = in->c;
    const int64_t N = (int64_t)c->B * c->T, qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, ld = qd + 2 * kd;
    if (c->sampled || in->index > 2) return;
    double *with = op_fetch(b, in, AB_D, 0, N * ld);
    void *g = NULL;
    glm_status st = glm_be_alloc(be, b->esize[AB_D] * (size_t)(N * ld), "dq|dk|dv'", &g);
    char *gc = g;
    const size_t es = b->esize[AB_D];
    if (!st)
        st = glm_be_attention_bwd(be, g, gc + qd * es, gc + (qd + kd) * es, b->p[AB_DOUT], qd, b->p[AB_OUT], b->p[AB_LSE], NULL,
                                  b->p[AT_QKV], ld, op_el(b, AT_QKV, qd), ld, op_el(b, AT_QKV, qd + kd), ld, b->p[AT_DOC], c->B,
                                  c->T, c->H, c->Hkv, c->Dh);
    double *ref = NULL;
    if (!st) {
        op_bufs tmp = *b;
        tmp.p[AB_D] = g;
        ref = op_fetch(&tmp, in, AB_D, 0, N * ld);
    }
    /* bit for bit where the op's own D is glmtune's: the CPU, and CUDA's own kernels (cuDNN's backward,
       where it runs without D, sums in another order) */
    const int exact = !strcmp(be->name, "cpu") || glm_attention_env(NULL) == GLM_ATTN_OWN;
    int64_t differ = 0;
    for (int64_t i = 0; exact && with && ref && i < N * ld; i++) differ += with[i] != ref[i] && !(isnan(with[i]) && isnan(ref[i]));
    OP_EXPECT(st == GLM_OK && with && ref && differ == 0,
              "attention_bwd on %s %s: with D from attention_delta, %lld of %lld elements differ from the op's own D (%s)",
              be->name, in->shape, (long long)differ, (long long)(N * ld), st ? glm_errmsg() : "");
    OP_EXPECT(glm_be_attention_bwd(be, g, gc, gc, b->p[AB_DOUT], qd, NULL, b->p[AB_LSE], NULL, b->p[AT_QKV], ld, b->p[AT_QKV],
                                   ld, b->p[AT_QKV], ld, b->p[AT_DOC], c->B, c->T, c->H, c->Hkv, c->Dh) == GLM_ERR_ARG,
              "attention_bwd on %s: neither out nor D is an error", be->name);
    free(with), free(ref);
    glm_be_free(be, g);
}

/* ==== attention_delta ========================================================================
 * D[(b H + h) T + i] = dout_n . out_n per head, chunk by chunk (a chunk across a row's end) */
enum { AD_DOUT = 2, AD_OUT, AD_D };
static void attd_make(op_inst *in, const void *cv) {
    const att_case *c = cv;
    const int64_t N = (int64_t)c->B * c->T, qd = (int64_t)c->H * c->Dh;
    att_inputs(in, c->B, c->T, c->H, c->Hkv, c->Dh, c->mean_doc, c->doc);
    op_add(in, "dout", OP_T_ACT, OP_IN, N * qd), op_add(in, "out", OP_T_ACT, OP_IN, N * qd);
    op_add(in, "D", OP_T_ACC, OP_OUT, (int64_t)c->B * c->H * c->T);
    op_fill_n(in, AD_DOUT, 1.0f), op_fill_n(in, AD_OUT, 1.0f);
    op_check_add(in, "attention_delta", AD_D, OP_CMP_REL, TOL_F32);
    att_shape(in, "", c->B, c->T, c->H, c->Hkv, c->Dh, "");
}
static glm_status attd_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    return att_delta_chunks(be, in, b, AD_D, AD_DOUT, AD_OUT);
}
static void attd_ref(const op_inst *in, double *const *want) {
    const att_case *c = in->c;
    const int64_t N = (int64_t)c->B * c->T, qd = (int64_t)c->H * c->Dh;
    for (int64_t n = 0; n < N; n++)
        for (int h = 0; h < c->H; h++) {
            double s = 0;
            for (int k = 0; k < c->Dh; k++)
                s += (double)HV(in, AD_DOUT)[n * qd + (int64_t)h * c->Dh + k] * HV(in, AD_OUT)[n * qd + (int64_t)h * c->Dh + k];
            want[AD_D][((n / c->T) * c->H + h) * c->T + n % c->T] = s;
        }
}
static void attb_ref(const op_inst *in, double *const *want) {
    const att_case *c = in->c;
    att_host a = att_of(in, c->B, c->T, c->H, c->Hkv, c->Dh);
    a.dout = HV(in, AB_DOUT), a.out = HV(in, AB_OUT), a.lse = HV(in, AB_LSE);
    const int64_t nr = c->sampled ? c->nrows : (int64_t)c->B * c->T;
    for (int64_t k = 0; k < nr; k++) {
        const int64_t r = c->sampled ? c->rows[k] : k;
        att_bwd_row(&a, r, want[AB_D] + r * a.ld);
    }
}
static double attb_fd(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const att_case *c = in->c;
    const int64_t qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, ld = qd + 2 * kd;
    glm_be_attention_fwd(be, b->p[AB_OS], qd, b->p[AB_LS], b->p[AT_QKV], ld, op_el(b, AT_QKV, qd), ld, op_el(b, AT_QKV, qd + kd),
                      ld, b->p[AT_DOC], c->B, c->T, c->H, c->Hkv, c->Dh);
    return op_dot(b, in, AB_OS, HV(in, AB_DOUT), (int64_t)c->B * c->T * qd);
}

/* query rows of the T = 8192 case: tile edges, the row's ends */
static const int64_t att_long_rows[] = {0, 1, 31, 32, 33, 1000, 2047, 4095, 4096, 6000, 8192 - 33, 8192 - 2, 8192 - 1};
/* row 0: one document; row 1: documents of 3, 2 and 2 tokens */
static const int32_t att_doc_2x7[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 2};
static const att_case att_cmp[] = {
    {1, 512, 32, 4, 128, 150, NULL, 0, NULL, 0},    /* GLM-4-9B-1M heads, packed documents */
    {2, 77, 4, 2, 16, 20, NULL, 0, NULL, 0},        /* tiny fixture heads, odd T */
    {1, 100, 6, 3, 72, 1000, NULL, 0, NULL, 0},     /* one document (plain causal), Dh not a power of 2 */
    {8192, 32, 64, 2, 16, 10, NULL, 0, NULL, 0},    /* B*H*T = 16.8M rows: more warps than a capped grid */
    {1, 1000, 32, 4, 128, 400, NULL, 0, NULL, 0},   /* real heads, several 64-row tiles, boundaries inside tiles */
    {3, 200, 8, 2, 64, 50, NULL, 0, NULL, 0},       /* head dim 64 (the other tile width), several rows */
    {1, 333, 8, 2, 128, 100000, NULL, 0, NULL, 0},  /* one document, T not a multiple of any tile */
    {2, 130, 4, 4, 40, 3, NULL, 0, NULL, 0},        /* Hkv = H, Dh 40 (padded to 64), many tiny documents */
    /* T = 8192: against float64 at sampled rows (the CPU op would take minutes); the backward from
       the tested backend's own forward */
    {1, 8192, 4, 1, 128, 3000, NULL, 1, att_long_rows, COUNT(att_long_rows)},
};
/* attention_bwd with D given: att_cmp but its two cases whose CPU op takes the longest (B 8192 x T 32
   and T 1000 x H 32: the op's code path does not depend on those shapes, and they cost a GPU run
   about 40 s of CPU reference) */
static const att_case att_bwdd_cmp[] = {
    {1, 512, 32, 4, 128, 150, NULL, 0, NULL, 0},
    {2, 77, 4, 2, 16, 20, NULL, 0, NULL, 0},
    {1, 100, 6, 3, 72, 1000, NULL, 0, NULL, 0},
    {3, 200, 8, 2, 64, 50, NULL, 0, NULL, 0},
    {1, 333, 8, 2, 128, 100000, NULL, 0, NULL, 0},
    {2, 130, 4, 4, 40, 3, NULL, 0, NULL, 0},
    {1, 8192, 4, 1, 128, 3000, NULL, 1, att_long_rows, COUNT(att_long_rows)},
};
/* attention_delta: the whole-row cases (it is token-local: no sampled case) */
static const att_case att_delta_cmp[] = {
    {1, 512, 32, 4, 128, 150, NULL, 0, NULL, 0},
    {2, 77, 4, 2, 16, 20, NULL, 0, NULL, 0},
    {3, 200, 8, 2, 64, 50, NULL, 0, NULL, 0},
    {1, 8192, 32, 4, 128, 3000, NULL, 0, NULL, 0}, /* a 9B row of 8k */
};
static const att_case att_cpu[] = {
    {2, 7, 4, 2, 4, 0, att_doc_2x7, 0, NULL, 0},
    {1, 9, 6, 2, 3, 3, NULL, 0, NULL, 0}, /* three heads a group, odd head dim */
};

/* ==== attention_block_fwd / attention_block_bwd: the context-parallel ring ====================
 * A row of T tokens in 2 N chunks of S, "rank" r holding chunks r and 2N-1-r (the zigzag layout);
 * every rank's query chunks against every rank's key chunks in ring order (step s: the keys of
 * rank (r - s) mod N), through attention_block_fwd (merged into acc-typed o and lse, init on each
 * query chunk's first block) and attention_block_bwd (added into acc-typed dq, dk, dv). Pairs with
 * no visible key (keys after the queries, other documents) are called too: the ops must leave the
 * accumulators alone there. */
typedef struct {
    int N, S, H, Hkv, Dh;
    int mean_doc;
    const int32_t *doc; /* [2 N S] or NULL */
} ring_case;

/* The ring's block calls in order: (query chunk, key chunk, init); returns their number (8 N^2). */
static int ring_pairs(int N, int (*pairs)[3]) {
    int n = 0;
    for (int r = 0; r < N; r++)
        for (int c = 0; c < 2; c++)
            for (int st = 0; st < N; st++) {
                const int src = ((r - st) % N + N) % N;
                for (int kc2 = 0; kc2 < 2; kc2++) {
                    pairs[n][0] = c ? 2 * N - 1 - r : r;
                    pairs[n][1] = kc2 ? 2 * N - 1 - src : src;
                    pairs[n][2] = st == 0 && kc2 == 0;
                    n++;
                }
            }
    return n;
}

enum { RGF_O = 2, RGF_LSE };                                            /* forward */
enum { RG_DOUT = 2, RG_OUT, RG_LSEIN, RG_DQ, RG_DK, RG_DV, RG_OS, RG_LSS }; /* backward; RG_OS, RG_LSS: the CPU run */

static void ringf_make(op_inst *in, const void *cv) {
    const ring_case *c = cv;
    const int T = 2 * c->N * c->S;
    att_inputs(in, 1, T, c->H, c->Hkv, c->Dh, c->mean_doc, c->doc);
    op_add(in, "o", OP_T_ACC, OP_OUT, (int64_t)T * c->H * c->Dh), op_add(in, "lse", OP_T_ACC, OP_OUT, (int64_t)c->H * T);
    op_check_add(in, "attention_block_fwd o (ring)", RGF_O, OP_CMP_REL, TOL_BF16);
    op_check_add(in, "attention_block_fwd lse (ring)", RGF_LSE, OP_CMP_REL, TOL_F32);
    snprintf(in->shape, sizeof in->shape, "ring N%d S%d H%d Hkv%d Dh%d", c->N, c->S, c->H, c->Hkv, c->Dh);
}
static glm_status ringf_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const ring_case *c = in->c;
    const int T = 2 * c->N * c->S;
    const int64_t qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, ld = qd + 2 * kd;
    int(*pairs)[3] = malloc(sizeof *pairs * (size_t)(8 * c->N * c->N)), np = ring_pairs(c->N, pairs);
    glm_status st = GLM_OK;
    const int32_t *doc = b->p[AT_DOC];
    for (int p = 0; p < np && !st; p++) {
        const int q0 = pairs[p][0] * c->S, k0 = pairs[p][1] * c->S;
        st = glm_be_attention_block_fwd(be, op_el(b, RGF_O, (int64_t)q0 * qd), qd, op_el(b, RGF_LSE, q0), T,
                                     op_el(b, AT_QKV, (int64_t)q0 * ld), ld, op_el(b, AT_QKV, (int64_t)k0 * ld + qd), ld,
                                     op_el(b, AT_QKV, (int64_t)k0 * ld + qd + kd), ld, doc + q0, doc + k0, q0, k0, c->S,
                                     c->S, c->H, c->Hkv, c->Dh, pairs[p][2]);
    }
    free(pairs);
    return st;
}
static void ringf_ref(const op_inst *in, double *const *want) {
    const ring_case *c = in->c;
    const int T = 2 * c->N * c->S;
    att_host a = att_of(in, 1, T, c->H, c->Hkv, c->Dh);
    double *l = malloc(sizeof(double) * (size_t)c->H);
    for (int64_t n = 0; n < T; n++) {
        att_fwd_row(&a, n, want[RGF_O] + n * a.qd, l);
        for (int h = 0; h < c->H; h++) want[RGF_LSE][(int64_t)h * T + n] = l[h];
    }
    free(l);
}
/* zero-sized blocks do nothing and succeed (the trainer's probe); H not a multiple of Hkv is an error */
static void ringf_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const ring_case *c = in->c;
    if (in->index) return;
    double z = 0;
    int32_t d = 0;
    OP_EXPECT(glm_be_attention_block_fwd(be, &z, 1, &z, 1, &z, 1, &z, 1, &z, 1, &d, &d, 0, 0, 0, 0, 1, 1, 1, 1) == GLM_OK,
              "attention_block_fwd on %s: a zero-sized block succeeds: %s", be->name, glm_errmsg());
    const int T = 2 * c->N * c->S;
    const int64_t ld = (int64_t)(c->H + 2 * c->Hkv) * c->Dh;
    OP_EXPECT(glm_be_attention_block_fwd(be, b->p[RGF_O], 3 * c->Dh, b->p[RGF_LSE], T, b->p[AT_QKV], ld, b->p[AT_QKV], ld,
                                      b->p[AT_QKV], ld, b->p[AT_DOC], b->p[AT_DOC], 0, 0, c->S, c->S, 3, 2, c->Dh,
                                      1) == GLM_ERR_ARG,
              "attention_block_fwd on %s: H = 3 over Hkv = 2 is an error", be->name);
}

static void ringb_make(op_inst *in, const void *cv) {
    const ring_case *c = cv;
    const int T = 2 * c->N * c->S;
    const int64_t qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh;
    att_inputs(in, 1, T, c->H, c->Hkv, c->Dh, c->mean_doc, c->doc);
    op_add(in, "dout", OP_T_ACT, OP_IN, T * qd), op_add(in, "out", OP_T_ACT, OP_IN, T * qd);
    op_add(in, "lse", OP_T_F32, OP_IN, (int64_t)c->H * T);
    op_add(in, "dq", OP_T_ACC, OP_INOUT, T * qd), op_add(in, "dk", OP_T_ACC, OP_INOUT, T * kd);
    op_add(in, "dv", OP_T_ACC, OP_INOUT, T * kd); /* zeros: the ring's accumulators start at 0 */
    op_fill_n(in, RG_DOUT, 1.0f);
    snprintf(in->shape, sizeof in->shape, "ring N%d S%d H%d Hkv%d Dh%d", c->N, c->S, c->H, c->Hkv, c->Dh);
    att_derive(in, RG_OUT, RG_LSEIN, 1, T, c->H, c->Hkv, c->Dh); /* the whole row's forward */
    op_check_add(in, "attention_block_bwd dq (ring)", RG_DQ, OP_CMP_REL, TOL_BF16);
    op_check_add(in, "attention_block_bwd dk (ring)", RG_DK, OP_CMP_REL, TOL_BF16);
    op_check_add(in, "attention_block_bwd dv (ring)", RG_DV, OP_CMP_REL, TOL_BF16);
    if (!in->ref) {
        op_add(in, "out'", OP_T_ACT, OP_SCRATCH, T * qd), op_add(in, "lse'", OP_T_F32, OP_SCRATCH, (int64_t)c->H * T);
        in->fd = (op_fd){.on = 1, .x = AT_QKV, .ldx = qd + 2 * kd, .nparts = 3, .accumulates = 1, .h = 1e-2f, .tol = TOL_FD};
        in->fd.part[0].t = RG_DQ, in->fd.part[0].col = 0, in->fd.part[0].cols = qd;
        in->fd.part[1].t = RG_DK, in->fd.part[1].col = qd, in->fd.part[1].cols = kd;
        in->fd.part[2].t = RG_DV, in->fd.part[2].col = qd + kd, in->fd.part[2].cols = kd;
    }
}
static glm_status ringb_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const ring_case *c = in->c;
    const int T = 2 * c->N * c->S;
    const int64_t qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, ld = qd + 2 * kd;
    int(*pairs)[3] = malloc(sizeof *pairs * (size_t)(8 * c->N * c->N)), np = ring_pairs(c->N, pairs);
    glm_status st = GLM_OK;
    const int32_t *doc = b->p[AT_DOC];
    const float *lse = b->p[RG_LSEIN];
    for (int p = 0; p < np && !st; p++) {
        const int q0 = pairs[p][0] * c->S, k0 = pairs[p][1] * c->S;
        st = glm_be_attention_block_bwd(be, op_el(b, RG_DQ, (int64_t)q0 * qd), qd, op_el(b, RG_DK, (int64_t)k0 * kd), kd,
                                     op_el(b, RG_DV, (int64_t)k0 * kd), kd, op_el(b, RG_DOUT, (int64_t)q0 * qd), qd,
                                     op_el(b, RG_OUT, (int64_t)q0 * qd), lse + q0, T, op_el(b, AT_QKV, (int64_t)q0 * ld), ld,
                                     op_el(b, AT_QKV, (int64_t)k0 * ld + qd), ld, op_el(b, AT_QKV, (int64_t)k0 * ld + qd + kd),
                                     ld, doc + q0, doc + k0, q0, k0, c->S, c->S, c->H, c->Hkv, c->Dh);
    }
    free(pairs);
    return st;
}
static void ringb_ref(const op_inst *in, double *const *want) {
    const ring_case *c = in->c;
    const int T = 2 * c->N * c->S;
    att_host a = att_of(in, 1, T, c->H, c->Hkv, c->Dh);
    a.dout = HV(in, RG_DOUT), a.out = HV(in, RG_OUT), a.lse = HV(in, RG_LSEIN);
    double *g = malloc(sizeof(double) * (size_t)a.ld);
    for (int64_t r = 0; r < T; r++) {
        att_bwd_row(&a, r, g);
        for (int64_t j = 0; j < a.qd; j++) want[RG_DQ][r * a.qd + j] = HV(in, RG_DQ)[r * a.qd + j] + g[j];
        for (int64_t j = 0; j < a.kd; j++) {
            want[RG_DK][r * a.kd + j] = HV(in, RG_DK)[r * a.kd + j] + g[a.qd + j];
            want[RG_DV][r * a.kd + j] = HV(in, RG_DV)[r * a.kd + j] + g[a.qd + a.kd + j];
        }
    }
    free(g);
}
static double ringb_fd(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const ring_case *c = in->c;
    const int T = 2 * c->N * c->S;
    const int64_t qd = (int64_t)c->H * c->Dh, kd = (int64_t)c->Hkv * c->Dh, ld = qd + 2 * kd;
    glm_be_attention_fwd(be, b->p[RG_OS], qd, b->p[RG_LSS], b->p[AT_QKV], ld, op_el(b, AT_QKV, qd), ld,
                      op_el(b, AT_QKV, qd + kd), ld, b->p[AT_DOC], 1, T, c->H, c->Hkv, c->Dh);
    return op_dot(b, in, RG_OS, HV(in, RG_DOUT), T * qd);
}
static void ringb_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    (void)b;
    if (in->index) return;
    double z = 0;
    int32_t d = 0;
    OP_EXPECT(glm_be_attention_block_bwd(be, &z, 1, &z, 1, &z, 1, &z, 1, &z, (float *)&z, 1, &z, 1, &z, 1, &z, 1, &d, &d, 0, 0, 0,
                                      0, 1, 1, 1) == GLM_OK,
              "attention_block_bwd on %s: a zero-sized block succeeds: %s", be->name, glm_errmsg());
}

/* four documents of 5, 13, 1 and 17 tokens; one of 10; three of 12, 1 and 11 */
static const int32_t ring_doc_36[] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                      2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3};
static const int32_t ring_doc_24[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
static const ring_case ring_cmp[] = {
    {2, 256, 32, 4, 128, 150, NULL},    /* GLM-4-9B-1M heads, 2 ranks, documents across chunks */
    {3, 128, 8, 2, 64, 100000, NULL},   /* one document, 3 ranks, head dim 64 */
    {4, 120, 4, 1, 128, 30, NULL},      /* chunks not a multiple of any tile, many documents */
    {3, 25, 4, 2, 16, 20, NULL},        /* tiny heads and chunks */
};
static const ring_case ring_cpu[] = {
    {3, 6, 8, 2, 4, 0, ring_doc_36}, /* GQA 8 heads over 2 groups, a one-token document */
    {2, 6, 3, 1, 6, 0, ring_doc_24}, /* multi-query */
    {2, 5, 4, 2, 8, 100000, NULL},   /* one document */
};

/* ==== cross_entropy ===========================================================================
 * The loss (sum of w_i loss_i), the target count, dlogits (out of place, in place or none) and
 * logp (optional) against float64; weights (optional) positive, zero and negative on target rows,
 * NaN on the others (the op must not read them). */
typedef struct {
    int64_t n, V;
    float scale;
    int inplace;           /* dlogits = logits */
    const int32_t *labels; /* NULL: every fifth row (from the third) no target, the rest random */
    int weights;           /* per-row weights: rows i % 4 == 0, 1 positive, 2 zero, 3 negative; NaN where label < 0 */
    int logp;              /* the log-probabilities out */
    int nograd;            /* dlogits = NULL (the loss and logp alone) */
} ce_case;

enum { CE_L, CE_LAB, CE_LOSS, CE_NT, CE_D };

/* the tensors after the fixed ones: dlogits (out of place only), weights, logp; -1 where absent */
static int ce_t_w(const ce_case *c) { return c->weights ? (c->inplace || c->nograd ? CE_D : CE_D + 1) : -1; }
static int ce_t_lp(const ce_case *c) {
    return c->logp ? (c->inplace || c->nograd ? CE_D : CE_D + 1) + !!c->weights : -1;
}
static void *ce_ptr(const op_bufs *b, int t) { return t < 0 ? NULL : b->p[t]; }

static void ce_make(op_inst *in, const void *cv) {
    const ce_case *c = cv;
    op_add(in, "logits", OP_T_ACT, c->inplace ? OP_INOUT : OP_IN, c->n * c->V), op_add(in, "labels", OP_T_I32, OP_IN, c->n);
    op_add(in, "loss", OP_T_HOST, OP_OUT, 1), op_add(in, "targets", OP_T_HOST, OP_OUT, 1);
    if (!c->inplace && !c->nograd) op_add(in, "dlogits", OP_T_ACT, OP_OUT, c->n * c->V);
    op_fill_n(in, CE_L, 3.0f);
    for (int64_t i = 0; i < c->n; i++)
        in->t[CE_LAB].i[i] = c->labels ? c->labels[i] : i % 5 == 2 ? -1 : (int32_t)(op_rand(in) % (uint64_t)c->V);
    if (c->weights) {
        int t = op_add(in, "weights", OP_T_F32, OP_IN, c->n);
        op_fill_u(in, t, 2.0f);
        for (int64_t i = 0; i < c->n; i++) {
            float *w = &HV(in, t)[i];
            *w = in->t[CE_LAB].i[i] < 0 ? NAN : i % 4 == 2 ? 0.0f : i % 4 == 3 ? -fabsf(*w) : fabsf(*w);
        }
    }
    if (c->logp) op_add(in, "logp", OP_T_F32, OP_OUT, c->n);
    op_check_add(in, "cross_entropy loss", CE_LOSS, OP_CMP_REL, TOL_F32);
    op_check_add(in, "cross_entropy targets", CE_NT, OP_CMP_EXACT, 0.0);
    if (c->inplace) op_check_add(in, "cross_entropy in place", CE_L, OP_CMP_REL, op_tol(in, CE_L));
    else if (!c->nograd) op_check_add(in, "cross_entropy dlogits", CE_D, OP_CMP_REL, op_tol(in, CE_D));
    if (c->logp) op_check_add(in, "cross_entropy logp", ce_t_lp(c), OP_CMP_REL, TOL_F32);
    if (!in->ref && !c->inplace && !c->nograd) fd_whole(in, CE_L, CE_D, 0, TOL_FD_CE);
    snprintf(in->shape, sizeof in->shape, "n%lld V%lld%s%s%s", (long long)c->n, (long long)c->V, c->weights ? " w" : "",
             c->logp ? " logp" : "", c->nograd ? " no dlogits" : "");
}
static glm_status ce_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const ce_case *c = in->c;
    int64_t nt = -1;
    void *dl = c->nograd ? NULL : b->p[c->inplace ? CE_L : CE_D];
    glm_status st = glm_be_cross_entropy(be, dl, b->p[CE_L], b->p[CE_LAB], ce_ptr(b, ce_t_w(c)), ce_ptr(b, ce_t_lp(c)),
                                         c->n, c->V, c->scale, &b->host[CE_LOSS][0], &nt);
    b->host[CE_NT][0] = (double)nt;
    return st;
}
static void ce_ref(const op_inst *in, double *const *want) {
    const ce_case *c = in->c;
    const int d = c->nograd ? -1 : c->inplace ? CE_L : CE_D, tw = ce_t_w(c), tlp = ce_t_lp(c);
    double tot = 0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < c->n; i++) {
        const float *l = HV(in, CE_L) + i * c->V;
        const int32_t y = in->t[CE_LAB].i[i];
        double mx = -INFINITY, s = 0;
        for (int64_t v = 0; v < c->V; v++) mx = l[v] > mx ? l[v] : mx;
        for (int64_t v = 0; v < c->V; v++) s += exp(l[v] - mx);
        const double lse = mx + log(s), w = y >= 0 && tw >= 0 ? HV(in, tw)[i] : 1.0;
        if (y >= 0) tot += w * (lse - l[y]), cnt++;
        if (tlp >= 0) want[tlp][i] = y < 0 ? 0.0 : l[y] - lse;
        for (int64_t v = 0; d >= 0 && v < c->V; v++)
            want[d][i * c->V + v] = y < 0 ? 0.0 : c->scale * w * (exp(l[v] - lse) - (v == y ? 1.0 : 0.0));
    }
    want[CE_LOSS][0] = tot, want[CE_NT][0] = (double)cnt;
}
static double ce_fd(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const ce_case *c = in->c;
    double loss = NAN;
    glm_be_cross_entropy(be, NULL, b->p[CE_L], b->p[CE_LAB], ce_ptr(b, ce_t_w(c)), NULL, c->n, c->V, 1.0f, &loss, NULL);
    return loss * c->scale;
}
/* the number of elements of tensor t's buffers a and b (n elements each) that differ (bit for bit,
   as doubles; NaN differs); -1 when one could not be fetched */
static int64_t ce_diff(const op_inst *in, const op_bufs *a, const op_bufs *b, int t, int64_t n) {
    double *x = op_fetch(a, in, t, 0, n), *y = op_fetch(b, in, t, 0, n);
    int64_t diff = x && y ? 0 : -1;
    for (int64_t i = 0; x && y && i < n; i++) diff += !(x[i] == y[i]);
    free(x), free(y);
    return diff;
}
/* out of place, dlogits: the loss without a gradient is the loss with one, bit for bit, and so is
 * logp with and without a gradient, and in place; in place gives the out-of-place gradient bit for
 * bit; with weights, weights of 1 give what no weights give, bit for bit; a label >= V is an error */
static void ce_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const ce_case *c = in->c;
    if (c->inplace || c->nograd) return;
    const int64_t n = c->n * c->V;
    const int tw = ce_t_w(c), tlp = ce_t_lp(c);
    void *s = NULL, *lab = NULL, *lp2 = NULL, *lp3 = NULL;
    glm_status st = glm_be_alloc(be, (size_t)n * b->esize[CE_L], "cross_entropy props", &s);
    if (!st) st = glm_be_alloc(be, sizeof(int32_t) * (size_t)c->n, "labels", &lab);
    if (!st && c->logp) st = glm_be_alloc(be, sizeof(float) * (size_t)c->n, "logp", &lp2);
    if (!st && c->logp) st = glm_be_alloc(be, sizeof(float) * (size_t)c->n, "logp", &lp3);
    OP_EXPECT(st == GLM_OK, "cross_entropy: %s", glm_errmsg());
    const float *W = ce_ptr(b, tw);
    double l1 = NAN, l2 = NAN, l3 = NAN;
    if (!st) st = glm_be_cross_entropy(be, NULL, b->p[CE_L], b->p[CE_LAB], W, ce_ptr(b, tlp), c->n, c->V, c->scale, &l1, NULL);
    if (!st) st = glm_be_cross_entropy(be, b->p[CE_D], b->p[CE_L], b->p[CE_LAB], W, lp2, c->n, c->V, c->scale, &l2, NULL);
    if (!st) st = glm_be_copy(be, s, b->p[CE_L], (size_t)n * b->esize[CE_L]);
    if (!st) st = glm_be_cross_entropy(be, s, s, b->p[CE_LAB], W, lp3, c->n, c->V, c->scale, &l3, NULL);
    OP_EXPECT(st == GLM_OK && l1 == l2 && l2 == l3, "cross_entropy on %s: the loss without a gradient %.17g, with one "
              "%.17g, in place %.17g: %s", be->name, l1, l2, l3, st ? glm_errmsg() : "must be equal");
    op_bufs sb = *b;
    sb.p[CE_D] = s;
    int64_t diff = st ? -1 : ce_diff(in, b, &sb, CE_D, n);
    OP_EXPECT(diff == 0, "cross_entropy on %s: in place differs from out of place in %lld elements", be->name,
              (long long)diff);
    if (c->logp) {
        op_bufs b2 = *b, b3 = *b;
        b2.p[tlp] = lp2, b3.p[tlp] = lp3;
        int64_t d2 = st ? -1 : ce_diff(in, b, &b2, tlp, c->n), d3 = st ? -1 : ce_diff(in, b, &b3, tlp, c->n);
        OP_EXPECT(d2 == 0 && d3 == 0, "cross_entropy on %s: logp without a gradient differs from logp with one in %lld "
                  "rows, from logp in place in %lld", be->name, (long long)d2, (long long)d3);
    }
    if (c->weights) {
        /* weights of 1 (every row, NaN nowhere) against no weights: the loss and dlogits bit for bit */
        float *ones = malloc(sizeof(float) * (size_t)c->n);
        for (int64_t i = 0; i < c->n; i++) ones[i] = 1.0f;
        void *w1 = NULL;
        if (!st) st = glm_be_alloc(be, sizeof(float) * (size_t)c->n, "ones", &w1);
        if (!st) st = glm_be_upload(be, w1, ones, sizeof(float) * (size_t)c->n);
        if (!st) st = glm_be_cross_entropy(be, b->p[CE_D], b->p[CE_L], b->p[CE_LAB], NULL, NULL, c->n, c->V, c->scale, &l1, NULL);
        if (!st) st = glm_be_cross_entropy(be, s, b->p[CE_L], b->p[CE_LAB], w1, NULL, c->n, c->V, c->scale, &l2, NULL);
        diff = st ? -1 : ce_diff(in, b, &sb, CE_D, n);
        OP_EXPECT(!st && l1 == l2 && diff == 0, "cross_entropy on %s: weights of 1 against none: loss %.17g against "
                  "%.17g, dlogits differ in %lld elements%s%s", be->name, l2, l1, (long long)diff, st ? ": " : "",
                  st ? glm_errmsg() : "");
        free(ones);
        glm_be_free(be, w1);
    }
    int32_t *bad = malloc(sizeof(int32_t) * (size_t)c->n);
    memcpy(bad, in->t[CE_LAB].i, sizeof(int32_t) * (size_t)c->n);
    bad[c->n - 1] = (int32_t)c->V;
    if (!st) st = glm_be_upload(be, lab, bad, sizeof(int32_t) * (size_t)c->n);
    OP_EXPECT(!st && glm_be_cross_entropy(be, NULL, b->p[CE_L], lab, W, ce_ptr(b, tlp), c->n, c->V, c->scale, &l1, NULL) ==
                         GLM_ERR_ARG,
              "cross_entropy on %s: a label >= V is an error", be->name);
    free(bad);
    glm_be_free(be, s), glm_be_free(be, lab), glm_be_free(be, lp2), glm_be_free(be, lp3);
}
static const int32_t ce_labels5[] = {3, -1, 10, 0, -1};
/* 9 rows: targets with positive (0, 1, 4), zero (2, 6) and negative (3, 7) weights, two without */
static const int32_t ce_labels9[] = {3, 1, 10, 0, 7, -1, 2, 9, -1};
static const ce_case ce_cmp[] = {
    {17, 151552, 1.0f / 50, 0, NULL, 0, 0, 0}, /* GLM-4's vocabulary */
    {17, 151552, 1.0f / 50, 1, NULL, 0, 0, 0}, /* in place, as the model calls it */
    {9, 1001, 1.0f / 50, 0, NULL, 0, 0, 0},
    {9, 1001, 1.0f / 50, 1, NULL, 0, 0, 0},
    /* weights and log-probabilities */
    {17, 151552, 1.0f / 50, 1, NULL, 1, 1, 0}, /* in place, weighted, logp: a weighted objective's step */
    {17, 151552, 1.0f / 50, 0, NULL, 1, 1, 0},
    {17, 151552, 1.0f / 50, 0, NULL, 0, 1, 1}, /* logp alone (scoring) */
    {9, 1001, 1.0f / 50, 0, NULL, 1, 0, 0},
    {9, 1001, 1.0f / 50, 0, NULL, 0, 1, 0},
    {9, 1001, 1.0f / 50, 1, NULL, 1, 1, 0},
    {9, 1001, 1.0f / 50, 0, NULL, 1, 1, 1},
};
static const ce_case ce_cpu[] = {
    {5, 11, 0.25f, 0, ce_labels5, 0, 0, 0},
    {5, 11, 0.25f, 1, ce_labels5, 0, 0, 0},
    {9, 11, 0.25f, 0, ce_labels9, 1, 0, 0}, /* weighted */
    {9, 11, 0.25f, 0, ce_labels9, 1, 1, 0}, /* weighted, logp */
    {9, 11, 0.25f, 1, ce_labels9, 1, 1, 0}, /* in place */
    {9, 11, 0.25f, 0, ce_labels9, 0, 1, 0}, /* logp, no weights */
    {9, 11, 0.25f, 0, ce_labels9, 1, 1, 1}, /* logp and the loss alone */
};

/* ==== adamw ================================================================================== */
typedef struct {
    int64_t n;
    int steps;
    float lr, beta1, beta2, eps, wd, grad_scale;
    float w_scale, g_scale;
    int moments; /* 1: random m and v to start from; 0: zeros (the first step) */
} adamw_case;

enum { AW_W, AW_G, AW_M, AW_V };

static void adamw_make(op_inst *in, const void *cv) {
    const adamw_case *c = cv;
    op_add(in, "w", OP_T_F32, OP_INOUT, c->n), op_add(in, "g", OP_T_F32, OP_IN, c->n);
    op_add(in, "m", OP_T_F32, OP_INOUT, c->n), op_add(in, "v", OP_T_F32, OP_INOUT, c->n);
    op_fill_u(in, AW_W, c->w_scale), op_fill_u(in, AW_G, c->g_scale);
    if (c->moments) {
        op_fill_u(in, AW_M, 0.001f), op_fill_u(in, AW_V, 1e-4f);
        for (int64_t i = 0; i < c->n; i++) HV(in, AW_V)[i] = fabsf(HV(in, AW_V)[i]);
    }
    char name[40];
    snprintf(name, sizeof name, "adamw w (%d steps)", c->steps);
    op_check_add(in, name, AW_W, OP_CMP_REL, TOL_F32);
    op_check_add(in, "adamw m", AW_M, OP_CMP_REL, TOL_F32);
    op_check_add(in, "adamw v", AW_V, OP_CMP_REL, TOL_F32);
    snprintf(in->shape, sizeof in->shape, "n%lld", (long long)c->n);
}
static glm_status adamw_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const adamw_case *c = in->c;
    glm_status st = GLM_OK;
    for (int step = 1; step <= c->steps && !st; step++)
        st = glm_be_adamw(be, b->p[AW_W], b->p[AW_G], b->p[AW_M], b->p[AW_V], c->n, c->lr, c->beta1, c->beta2, c->eps, c->wd,
                       c->grad_scale, step);
    return st;
}
/* torch.optim.AdamW's update in double */
static void adamw_ref(const op_inst *in, double *const *want) {
    const adamw_case *c = in->c;
    for (int64_t i = 0; i < c->n; i++) {
        double w = HV(in, AW_W)[i], m = HV(in, AW_M)[i], v = HV(in, AW_V)[i], g = (double)HV(in, AW_G)[i] * c->grad_scale;
        for (int step = 1; step <= c->steps; step++) {
            w *= 1 - (double)c->lr * c->wd;
            m = c->beta1 * m + (1 - (double)c->beta1) * g;
            v = c->beta2 * v + (1 - (double)c->beta2) * g * g;
            w -= c->lr / (1 - pow(c->beta1, step)) * m / (sqrt(v) / sqrt(1 - pow(c->beta2, step)) + c->eps);
        }
        want[AW_W][i] = w, want[AW_M][i] = m, want[AW_V][i] = v;
    }
}
static void adamw_props(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const adamw_case *c = in->c;
    OP_EXPECT(glm_be_adamw(be, b->p[AW_W], b->p[AW_G], b->p[AW_M], b->p[AW_V], c->n, c->lr, c->beta1, c->beta2, c->eps, c->wd,
                        c->grad_scale, 0) == GLM_ERR_ARG,
              "adamw on %s: step 0 is an error", be->name);
}
static const adamw_case adamw_cmp[] = {{100003, 3, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, 0.1f, 0.01f, 1}};
static const adamw_case adamw_cpu[] = {{9, 2, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, 1.0f, 1.0f, 0},
                                       {50, 3, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, 0.1f, 0.01f, 1}};

/* ==== sumsq (many tensors in one call) =========================================================
 * `bufs` buffers (buffer k: n + 37 k elements) summed as `count` tensors: tensor j is buffer
 * j % bufs, whole, except every 7th (j % 7 == 6), which is empty. On CUDA the tensors' partials
 * share the scratch of 1024 and are downloaded whenever it fills. */
typedef struct {
    int bufs, count;
    int64_t n;
} sumsq_case;

static int64_t sumsq_len(const sumsq_case *c, int j) { return j % 7 == 6 ? 0 : c->n + 37 * (j % c->bufs); }
static void sumsq_make(op_inst *in, const void *cv) {
    const sumsq_case *c = cv;
    char nm[16];
    for (int k = 0; k < c->bufs; k++) {
        snprintf(nm, sizeof nm, "x%d", k);
        op_add(in, nm, OP_T_F32, OP_IN, c->n + 37 * k);
        op_fill_u(in, k, 1.0f + (float)k);
    }
    op_add(in, "sum", OP_T_HOST, OP_OUT, c->count);
    op_check_add(in, "sumsq", c->bufs, OP_CMP_REL, TOL_SUMSQ);
    snprintf(in->shape, sizeof in->shape, "%d tensors of %d buffers n%lld", c->count, c->bufs, (long long)c->n);
}
static glm_status sumsq_run(const glm_backend *be, const op_inst *in, op_bufs *b) {
    const sumsq_case *c = in->c;
    const float *x[200];
    int64_t n[200];
    for (int j = 0; j < c->count; j++) x[j] = b->p[j % c->bufs], n[j] = sumsq_len(c, j);
    return glm_be_sumsq_many(be, c->count, x, n, b->host[c->bufs]);
}
static void sumsq_ref(const op_inst *in, double *const *want) {
    const sumsq_case *c = in->c;
    for (int j = 0; j < c->count; j++) {
        double s = 0;
        const float *x = HV(in, j % c->bufs);
        for (int64_t i = 0; i < sumsq_len(c, j); i++) s += (double)x[i] * x[i];
        want[c->bufs][j] = s;
    }
}
/* {1, 1, 4000037}: a tensor alone gets every block; {3, 200, 300000}: 16 blocks each, the scratch
   full and downloaded three times in the call */
static const sumsq_case sumsq_cmp[] = {{1, 1, 1}, {1, 1, 1000}, {1, 1, 4000037}, {4, 9, 5000}, {3, 200, 300000}};
static const sumsq_case sumsq_cpu[] = {{1, 1, 2000}, {3, 8, 500}};

/* ==== the table ============================================================================== */
const op_entry op_table[] = {
    {.name = "matmul", CASES(mm_cmp, mm_cpu), .make = mm_make, .run = mm_run, .ref = mm_ref},
    {.name = "weight_quantize", CASES_CMP(wq_cmp), .make = wq_make, .run = wq_run, .props = wq_props},
    {.name = "weight_dequantize", CASES_CMP(wq_cmp), .make = wd_make, .run = wd_run, .props = wd_props},
    {.name = "add_bias", CASES(bias_cmp, bias_cpu), .make = bias_make, .run = bias_run, .ref = bias_ref},
    {.name = "axpy", CASES(axpy_cmp, axpy_cpu), .make = axpy_make, .run = axpy_run, .ref = axpy_ref},
    {.name = "dropout", CASES(drop_cmp, drop_cpu), .make = drop_make, .run = drop_run, .ref = drop_ref, .fd_f = drop_fd,
     .props = drop_props},
    {.name = "cast", CASES(cast_cmp, cast_cpu), .make = cast_make, .run = cast_run, .ref = cast_ref},
    {.name = "cast_2d", CASES(cast2_cmp, cast2_cpu), .make = cast2_make, .run = cast2_run, .ref = cast2_ref},
    {.name = "fill_normal", CASES(fill_cmp, fill_cpu), .make = fill_make, .run = fill_run, .props = fill_props},
    {.name = "fp8_quantize", CASES(f8q_cmp, f8q_cpu), .make = f8q_make, .run = f8q_run, .ref = f8q_ref,
     .props = f8q_props},
    {.name = "fp8_matmul", CASES(f8m_cmp, f8m_cpu), .make = f8m_make, .run = f8m_run, .ref = f8m_ref, .props = f8m_props},
    {.name = "fp8_transpose", CASES(f8t_cmp, f8t_cpu), .make = f8t_make, .run = f8t_run, .ref = f8t_ref},
    {.name = "embedding", CASES(emb_cmp, emb_cpu), .make = emb_make, .run = emb_run, .ref = emb_ref, .props = emb_props},
    {.name = "rmsnorm_fwd", CASES(rms_cmp, rms_cpu), .make = rmsf_make, .run = rmsf_run, .ref = rmsf_ref},
    {.name = "rmsnorm_bwd", CASES(rms_cmp, rms_cpu), .make = rmsb_make, .run = rmsb_run, .ref = rmsb_ref, .fd_f = rmsb_fd},
    {.name = "rope", CASES(rope_cmp, rope_cpu), .make = rope_make, .run = rope_run, .ref = rope_ref, .fd_f = rope_fd,
     .props = rope_props},
    {.name = "swiglu_fwd", CASES(sw_cmp, sw_cpu), .make = swf_make, .run = swf_run, .ref = swf_ref},
    {.name = "swiglu_bwd", CASES(swb_cmp, swb_cpu), .make = swb_make, .run = swb_run, .ref = swb_ref, .fd_f = swb_fd},
    {.name = "attention_fwd", CASES(att_cmp, att_cpu), .make = attf_make, .run = attf_run, .ref = attf_ref,
     .props = attf_props},
    {.name = "attention_bwd", CASES(att_cmp, att_cpu), .make = attb_make, .run = attb_run, .ref = attb_ref, .fd_f = attb_fd},
    {.name = "attention_bwd+D", CASES(att_bwdd_cmp, att_cpu), .make = attbd_make, .run = attbd_run, .ref = attb_ref,
     .fd_f = attb_fd, .props = attbd_props},
    {.name = "attention_delta", CASES(att_delta_cmp, att_cpu), .make = attd_make, .run = attd_run, .ref = attd_ref},
    {.name = "attention_block_fwd", CASES(ring_cmp, ring_cpu), .make = ringf_make, .run = ringf_run, .ref = ringf_ref,
     .props = ringf_props},
    {.name = "attention_block_bwd", CASES(ring_cmp, ring_cpu), .make = ringb_make, .run = ringb_run, .ref = ringb_ref,
     .fd_f = ringb_fd, .props = ringb_props},
    {.name = "cross_entropy", CASES(ce_cmp, ce_cpu), .make = ce_make, .run = ce_run, .ref = ce_ref, .fd_f = ce_fd,
     .props = ce_props},
    {.name = "adamw", CASES(adamw_cmp, adamw_cpu), .make = adamw_make, .run = adamw_run, .ref = adamw_ref,
     .props = adamw_props},
    {.name = "sumsq", CASES(sumsq_cmp, sumsq_cpu), .make = sumsq_make, .run = sumsq_run, .ref = sumsq_ref},
};
const int op_table_len = COUNT(op_table);
