/* tests/kernels/test_attention_block.c: the CPU block-attention ops of the context-parallel ring
 * (attention_block_fwd / attention_block_bwd, kernels/backend.h) against the whole-row attention
 * (attention_fwd / attention_bwd), without MPI: a packed row of several documents is cut into
 * query blocks and key blocks at offsets that fall inside documents and on document boundaries;
 * every query block merges all key blocks (in shuffled order, the first call with init) and must
 * reproduce attention_fwd's out and lse; the block backwards summed over the blocks must
 * reproduce attention_bwd's dq, dk, dv. Also: a block with no allowed pair leaves the
 * accumulators bit-identical, zero-sized calls succeed (the trainer's probe), bad heads are
 * errors, and cast_2d copies strided rows.
 *
 * The CPU accumulators are double (its acc_dtype): merged and summed in double and rounded to f32
 * once, the blocks' results equal the whole-row ops' up to the order of the double sums, i.e.
 * bit-identical in almost every element. Tolerance 1e-7 (norm-relative; f32 carries 6e-8 per
 * rounding): a masking, offset or merge bug gives O(1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/backend.h"
#include "lora/model/ring_attention.h"
#include "tests/check.h"

static const double TOL = 1e-7;
static glm_rng rng;

static float *randv(int64_t n) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = (float)(glm_rng_normal(&rng) * 0.8 + 0.01);
    return x;
}

/* a double accumulator rounded to f32, as the ring's cast_2d does */
static float *to_f32(const double *a, int64_t n) {
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = (float)a[i];
    return f;
}

static double rel(const float *a, const float *b, int64_t n, int64_t ld, int64_t cols) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < cols; c++) {
            double d = (double)a[i * ld + c] - b[i * ld + c];
            num += d * d;
            den += (double)b[i * ld + c] * b[i * ld + c];
        }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

/* One row of T tokens in documents of the given lengths; query blocks cut at qcut[], key blocks
 * at kcut[] (both start with 0 and end with T). */
static void check_row(const char *what, int T, const int *doclens, int ndocs, const int *qcut, int nq, const int *kcut,
                      int nk, int H, int Hkv, int Dh) {
    const glm_backend *be = glm_backend_cpu();
    int64_t qd = (int64_t)H * Dh, kd = (int64_t)Hkv * Dh, ld = qd + 2 * kd;
    float *qkv = randv((int64_t)T * ld), *dout = randv((int64_t)T * qd);
    int32_t *doc = malloc(sizeof(int32_t) * (size_t)T);
    for (int d = 0, t = 0; d < ndocs; d++)
        for (int k = 0; k < doclens[d]; k++) doc[t++] = d;
    float *out = malloc(sizeof(float) * (size_t)(T * qd)), *lse = malloc(sizeof(float) * (size_t)(H * T));
    float *dq = malloc(sizeof(float) * (size_t)(T * ld)), *dk = dq + qd, *dv = dq + qd + kd;
    const float *q = qkv, *k = qkv + qd, *v = qkv + qd + kd;
    CHECK(glm_be_attention_fwd(be, out, qd, lse, q, ld, k, ld, v, ld, doc, 1, T, H, Hkv, Dh) == GLM_OK, "%s: attention_fwd", what);
    CHECK(glm_be_attention_bwd(be, dq, dk, dv, dout, qd, out, lse, NULL, q, ld, k, ld, v, ld, doc, 1, T, H, Hkv, Dh) == GLM_OK,
          "%s: attention_bwd", what);

    /* forward: every query block merges every key block, in a shuffled order */
    double *o = malloc(sizeof(double) * (size_t)(T * qd)), *l = malloc(sizeof(double) * (size_t)(H * T));
    int order[64];
    glm_status st = GLM_OK;
    for (int a = 0; a + 1 < nq; a++) {
        for (int b = 0; b + 1 < nk; b++) order[b] = b;
        for (int b = nk - 2; b > 0; b--) {
            int j = (int)glm_rng_below(&rng, (uint64_t)b + 1), t = order[b];
            order[b] = order[j];
            order[j] = t;
        }
        int q0 = qcut[a], Tq = qcut[a + 1] - q0;
        for (int bi = 0; bi + 1 < nk && !st; bi++) {
            int b = order[bi], k0 = kcut[b], Tk = kcut[b + 1] - k0;
            st = glm_be_attention_block_fwd(be, o + (int64_t)q0 * qd, qd, l + q0, T, q + (int64_t)q0 * ld, ld,
                                         k + (int64_t)k0 * ld, ld, v + (int64_t)k0 * ld, ld, doc + q0, doc + k0, q0, k0,
                                         Tq, Tk, H, Hkv, Dh, bi == 0);
        }
    }
    CHECK(st == GLM_OK, "%s: attention_block_fwd: %s", what, glm_errmsg());
    float *of = to_f32(o, T * qd), *lf = to_f32(l, H * T);
    double eo = rel(of, out, T, qd, qd), el = rel(lf, lse, H, T, T);
    CHECK(eo < TOL, "%s: merged blocks vs attention_fwd out: rel err %.3g", what, eo);
    CHECK(el < TOL, "%s: merged blocks vs attention_fwd lse: rel err %.3g", what, el);

    /* backward: f32 accumulators, every (query block, key block) pair */
    double *bq = calloc((size_t)(T * qd), sizeof(double)), *bk = calloc((size_t)(T * kd), sizeof(double)),
           *bv = calloc((size_t)(T * kd), sizeof(double));
    for (int a = 0; a + 1 < nq && !st; a++)
        for (int b = 0; b + 1 < nk && !st; b++) {
            int q0 = qcut[a], Tq = qcut[a + 1] - q0, k0 = kcut[b], Tk = kcut[b + 1] - k0;
            st = glm_be_attention_block_bwd(be, bq + (int64_t)q0 * qd, qd, bk + (int64_t)k0 * kd, kd, bv + (int64_t)k0 * kd, kd,
                                         dout + (int64_t)q0 * qd, qd, out + (int64_t)q0 * qd, lse + q0, T,
                                         q + (int64_t)q0 * ld, ld, k + (int64_t)k0 * ld, ld, v + (int64_t)k0 * ld, ld,
                                         doc + q0, doc + k0, q0, k0, Tq, Tk, H, Hkv, Dh);
        }
    CHECK(st == GLM_OK, "%s: attention_block_bwd: %s", what, glm_errmsg());
    /* the reference's dq/dk/dv are column blocks of one [T, ld] buffer */
    float *rq = malloc(sizeof(float) * (size_t)(T * qd)), *rk = malloc(sizeof(float) * (size_t)(T * kd)),
          *rv = malloc(sizeof(float) * (size_t)(T * kd));
    glm_be_cast_2d(be, rq, GLM_DT_F32, qd, dq, GLM_DT_F32, ld, T, qd);
    glm_be_cast_2d(be, rk, GLM_DT_F32, kd, dk, GLM_DT_F32, ld, T, kd);
    glm_be_cast_2d(be, rv, GLM_DT_F32, kd, dv, GLM_DT_F32, ld, T, kd);
    float *bqf = to_f32(bq, T * qd), *bkf = to_f32(bk, T * kd), *bvf = to_f32(bv, T * kd);
    double e1 = rel(bqf, rq, T, qd, qd), e2 = rel(bkf, rk, T, kd, kd), e3 = rel(bvf, rv, T, kd, kd);
    if (getenv("GLM_TEST_VERBOSE")) printf("%s: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", what, eo, el, e1, e2, e3);
    CHECK(e1 < TOL && e2 < TOL && e3 < TOL, "%s: summed block backwards vs attention_bwd: dq %.3g, dk %.3g, dv %.3g", what,
          e1, e2, e3);
    free(qkv), free(dout), free(doc), free(out), free(lse), free(dq), free(o), free(l), free(bq), free(bk), free(bv);
    free(rq), free(rk), free(rv), free(of), free(lf), free(bqf), free(bkf), free(bvf);
}

/* A block whose keys all lie after its queries, or in other documents, changes nothing. */
static void check_masked(void) {
    const glm_backend *be = glm_backend_cpu();
    int H = 2, Hkv = 1, Dh = 4, T = 8;
    int64_t qd = H * Dh, kd = Hkv * Dh;
    float *q = randv(T * qd), *k = randv(T * kd), *v = randv(T * kd), *dout = randv(T * qd);
    float *of = randv(T * qd), *lf = randv(H * T);
    double *o = malloc(sizeof(double) * (size_t)(T * qd)), *l = malloc(sizeof(double) * (size_t)(H * T)),
           *o0 = malloc(sizeof(double) * (size_t)(T * qd)), *l0 = malloc(sizeof(double) * (size_t)(H * T));
    for (int i = 0; i < T * qd; i++) o[i] = o0[i] = of[i];
    for (int i = 0; i < H * T; i++) l[i] = l0[i] = lf[i];
    int32_t da[8] = {0, 0, 0, 0, 0, 0, 0, 0}, db[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    /* keys [8, 16) after queries [0, 8); then keys of another document */
    CHECK(glm_be_attention_block_fwd(be, o, qd, l, T, q, qd, k, kd, v, kd, da, da, 0, 8, T, T, H, Hkv, Dh, 0) == GLM_OK &&
              glm_be_attention_block_fwd(be, o, qd, l, T, q, qd, k, kd, v, kd, db, da, 8, 0, T, T, H, Hkv, Dh, 0) == GLM_OK,
          "masked blocks");
    CHECK(!memcmp(o, o0, sizeof(double) * (size_t)(T * qd)) && !memcmp(l, l0, sizeof(double) * (size_t)(H * T)),
          "a block without allowed pairs leaves o and lse bit-identical");
    /* init with a masked block: o = 0, lse = -inf; then a real block gives its own result */
    CHECK(glm_be_attention_block_fwd(be, o, qd, l, T, q, qd, k, kd, v, kd, da, da, 0, 8, T, T, H, Hkv, Dh, 1) == GLM_OK &&
              o[3] == 0.0 && l[5] == -INFINITY,
          "init with a masked block: o = 0, lse = -inf");
    double *dq = calloc((size_t)(T * qd), sizeof(double)), *dk = calloc((size_t)(T * kd), sizeof(double)),
           *dv = calloc((size_t)(T * kd), sizeof(double));
    CHECK(glm_be_attention_block_bwd(be, dq, qd, dk, kd, dv, kd, dout, qd, of, lf, T, q, qd, k, kd, v, kd, da, da, 0, 8, T, T,
                                  H, Hkv, Dh) == GLM_OK,
          "masked backward");
    int zero = 1;
    for (int i = 0; i < T * qd; i++) zero &= dq[i] == 0.0;
    for (int i = 0; i < T * kd; i++) zero &= dk[i] == 0.0 && dv[i] == 0.0;
    CHECK(zero, "a masked block adds nothing to dq, dk, dv");
    /* the trainer's probe, and argument errors */
    CHECK(glm_be_attention_block_fwd(be, o, qd, l, T, q, qd, k, kd, v, kd, da, da, 0, 0, 0, 0, H, Hkv, Dh, 1) == GLM_OK,
          "zero-sized forward succeeds");
    CHECK(glm_be_attention_block_fwd(be, o, qd, l, T, q, qd, k, kd, v, kd, da, da, 0, 0, T, T, 3, 2, Dh, 1) == GLM_ERR_ARG,
          "H not a multiple of Hkv: GLM_ERR_ARG");
    free(q), free(k), free(v), free(dout), free(o), free(l), free(o0), free(l0), free(of), free(lf), free(dq), free(dk), free(dv);
}

static void check_cast_2d(void) {
    const glm_backend *be = glm_backend_cpu();
    float src[4 * 6], dst[4 * 3];
    for (int i = 0; i < 24; i++) src[i] = (float)i;
    CHECK(glm_be_cast_2d(be, dst, GLM_DT_F32, 3, src + 2, GLM_DT_F32, 6, 4, 3) == GLM_OK, "cast_2d");
    int ok = 1;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++) ok &= dst[r * 3 + c] == src[r * 6 + 2 + c];
    CHECK(ok, "cast_2d copies the strided column block");
    CHECK(glm_be_cast_2d(be, dst, GLM_DT_BF16, 3, src, GLM_DT_F32, 6, 4, 3) == GLM_ERR_UNSUPPORTED, "cast_2d to bf16 on the CPU");
    double acc[4] = {1.0 + 1e-12, -2.5, 1e-40, 3.0};
    float f[4];
    CHECK(be->acc_dtype == GLM_DT_F64 && glm_dtype_size(GLM_DT_F64) == 8, "the CPU accumulates in double");
    CHECK(glm_be_cast_2d(be, f, GLM_DT_F32, 2, acc, GLM_DT_F64, 2, 2, 2) == GLM_OK && f[0] == 1.0f && f[1] == -2.5f &&
              f[3] == 3.0f,
          "cast_2d f64 -> f32 rounds once");
}

static int supports_nothing(const glm_backend *be, glm_feature f) {
    (void)be, (void)f;
    return 0;
}

/* be->supports on the CPU backend, and glm_ring_supported's answer for a backend without the ring */
static void check_supports(void) {
    const glm_backend *cpu = glm_backend_cpu();
    CHECK(glm_be_supports(cpu, GLM_FEATURE_RING_ATTENTION) == 1, "the CPU backend computes the ring's blocks");
    CHECK(glm_be_supports(cpu, GLM_FEATURE_WEIGHT_4BIT) == 1, "the CPU backend has the 4-bit format");
#ifdef GLMTUNE_HAVE_MPI
    CHECK(glm_be_supports(cpu, GLM_FEATURE_COMM) == 1, "a build with MPI communicates");
#else
    CHECK(glm_be_supports(cpu, GLM_FEATURE_COMM) == 0, "a build without MPI does not communicate");
#endif
    CHECK(glm_be_supports(cpu, GLM_FEATURE_COUNT) == 0 && glm_be_supports(cpu, (glm_feature)-1) == 0, "unknown features: 0");
    CHECK(glm_ring_supported(cpu) == GLM_OK, "glm_ring_supported(cpu): %s", glm_errmsg());
    glm_backend other = *cpu;
    other.name = "other";
    other.supports = supports_nothing;
    CHECK(glm_ring_supported(&other) == GLM_ERR_UNSUPPORTED && strstr(glm_errmsg(), "the other backend") &&
              strstr(glm_errmsg(), "hint: --context-parallel 1"),
          "a backend without the ring says so: %s", glm_errmsg());
}

int main(void) {
    glm_rng_seed(&rng, 8, 1);
    check_supports();
    /* one document; T = 37 cut at odd places */
    {
        int dl[] = {37}, qc[] = {0, 7, 19, 37}, kc[] = {0, 5, 13, 25, 30, 37};
        check_row("one document", 37, dl, 1, qc, 4, kc, 6, 4, 2, 8);
    }
    /* several documents: boundaries (10, 25) inside blocks and exactly on block edges */
    {
        int dl[] = {10, 15, 12}, qc[] = {0, 10, 19, 25, 37}, kc[] = {0, 6, 10, 22, 25, 31, 37};
        check_row("three documents", 37, dl, 3, qc, 5, kc, 7, 4, 2, 8);
    }
    /* the ring's layout: 2N equal chunks (N = 3, T = 36), GQA 8 heads over 2 groups */
    {
        int dl[] = {5, 13, 1, 17}, c[] = {0, 6, 12, 18, 24, 30, 36};
        check_row("ring chunks, four documents", 36, dl, 4, c, 7, c, 7, 8, 2, 4);
    }
    /* multi-query (Hkv = 1) and a one-token document at a chunk edge */
    {
        int dl[] = {12, 1, 11}, qc[] = {0, 12, 13, 24}, kc[] = {0, 8, 12, 13, 24};
        check_row("one KV group", 24, dl, 3, qc, 4, kc, 5, 3, 1, 6);
    }
    check_masked();
    check_cast_2d();
    return check_summary("test_attention_block");
}
