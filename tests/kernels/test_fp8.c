/* tests/kernels/test_fp8.c: the FP8 base format on the CPU backend.
 *
 * 1. The conversions of kernels/formats.h against ml_dtypes (tests/fixtures/fp8, made by
 *    make_fp8.py beside the data): every code's value; the inputs where rounding decides (every
 *    midpoint, one and two ulp either side, the saturation and underflow edges, NaN, infinities);
 *    then every one of the 2^32 float32 inputs, through per-chunk checksums of their codes.
 * 2. The per-row weight quantization (be->weight_quantize / weight_dequantize of GLM_WF_FP8_E4M3)
 *    and the per-row activation quantization (be->fp8_quantize): the scale rule, the largest
 *    magnitude on 448 / 57344, the relative error bound of a 3-bit (2-bit) mantissa, zero rows,
 *    non-finite weights, a column multiplier.
 * 3. The emulated FP8 GEMM (be->fp8_matmul, glm_base_matmul of an fp8 weight, forward and input
 *    gradient) against a double-precision product of the dequantized operands computed here, and
 *    against the unquantized product within the quantization error; be->fp8_transpose. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/formats.h"
#include "tests/check.h"

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static const char *kind_name(glm_fp8_kind k) { return k == GLM_FP8_E5M2 ? "e5m2" : "e4m3"; }

static FILE *fixture(const char *name, glm_fp8_kind k) {
    char p[4096];
    snprintf(p, sizeof p, "%s/fp8/%s_%s.txt", test_data_dir(), name, kind_name(k));
    FILE *f = fopen(p, "r");
    if (!f) {
        fprintf(stderr, "FAIL: cannot read %s\n", p);
        exit(1);
    }
    return f;
}

static void test_decode(glm_fp8_kind k) {
    FILE *f = fixture("decode", k);
    unsigned c, v;
    int n = 0, bad = 0;
    while (fscanf(f, "%x %x", &c, &v) == 2) {
        float want;
        memcpy(&want, &v, 4);
        float got = glm_fp8_to_f32((uint8_t)c, k);
        int ok = isnan(want) ? isnan(got) : fbits(got) == v;
        if (!ok && bad++ < 5) fprintf(stderr, "  %s code %02x: %g (%08x), ml_dtypes %g\n", kind_name(k), c, got, fbits(got), want);
        n++;
    }
    fclose(f);
    CHECK(n == 256 && bad == 0, "%s: %d of %d codes decode as ml_dtypes does", kind_name(k), n - bad, n);
}

static void test_boundaries(glm_fp8_kind k) {
    FILE *f = fixture("boundary", k);
    unsigned u, c;
    int n = 0, bad = 0;
    while (fscanf(f, "%x %x", &u, &c) == 2) {
        float x;
        memcpy(&x, &u, 4);
        uint8_t got = glm_f32_to_fp8(x, k);
        if (got != c && bad++ < 8) fprintf(stderr, "  %s: %.9g (%08x) -> %02x, ml_dtypes (satfinite) %02x\n", kind_name(k), x, u, got, c);
        n++;
    }
    fclose(f);
    CHECK(n > 1000 && bad == 0, "%s: %d of %d boundary inputs encode as ml_dtypes does", kind_name(k), n - bad, n);
    /* hand-checked values of the OCP spec */
    if (k == GLM_FP8_E4M3) {
        CHECK(glm_f32_to_fp8(448.0f, k) == 0x7e && glm_f32_to_fp8(-448.0f, k) == 0xfe, "E4M3 max");
        CHECK(glm_f32_to_fp8(1e9f, k) == 0x7e && glm_f32_to_fp8(-INFINITY, k) == 0xfe, "E4M3 saturates");
        CHECK(glm_f32_to_fp8(1.0f, k) == 0x38 && glm_f32_to_fp8(0x1p-9f, k) == 0x01 && glm_f32_to_fp8(0x1p-10f, k) == 0x00,
              "E4M3 one, the smallest subnormal, its half (a tie to even: zero)");
        CHECK(glm_f32_to_fp8(1.0625f, k) == 0x38 && glm_f32_to_fp8(1.1875f, k) == 0x3a, "E4M3 ties to even");
        CHECK(glm_f32_to_fp8(NAN, k) == 0x7f && glm_f32_to_fp8(-0.0f, k) == 0x80, "E4M3 NaN, -0");
    } else {
        CHECK(glm_f32_to_fp8(57344.0f, k) == 0x7b && glm_f32_to_fp8(INFINITY, k) == 0x7b, "E5M2 max, saturation");
        CHECK(glm_f32_to_fp8(1.0f, k) == 0x3c && glm_f32_to_fp8(0x1p-16f, k) == 0x01, "E5M2 one, smallest subnormal");
        CHECK(glm_f32_to_fp8(NAN, k) == 0x7f, "E5M2 NaN");
    }
}

/* every float32 input of chunks [c0, c1): the checksums of make_fp8.py */
typedef struct sums_job {
    glm_fp8_kind k;
    int c0, c1;
    uint64_t s1[256], s2[256];
} sums_job;

static void *sums_run(void *arg) {
    sums_job *j = arg;
    for (int c = j->c0; c < j->c1; c++) {
        uint64_t s1 = 0, s2 = 0;
        for (uint32_t i = 0; i < (1u << 24); i++) {
            uint32_t u = ((uint32_t)c << 24) | i;
            float x;
            memcpy(&x, &u, 4);
            uint64_t code = glm_f32_to_fp8(x, j->k);
            s1 += code;
            s2 += code * (2 * (uint64_t)i + 1);
        }
        j->s1[c] = s1;
        j->s2[c] = s2;
    }
    return NULL;
}

static void test_every_float(glm_fp8_kind k) {
    sums_job jobs[2];
    pthread_t t;
    for (int i = 0; i < 2; i++) jobs[i] = (sums_job){k, i * 128, i * 128 + 128, {0}, {0}};
    int threaded = pthread_create(&t, NULL, sums_run, &jobs[1]) == 0;
    sums_run(&jobs[0]);
    if (threaded) pthread_join(t, NULL);
    else sums_run(&jobs[1]);
    FILE *f = fixture("sums", k);
    int c, n = 0, bad = 0;
    unsigned long long s1, s2;
    while (fscanf(f, "%d %llu %llu", &c, &s1, &s2) == 3 && c >= 0 && c < 256) {
        const sums_job *j = &jobs[c / 128];
        if ((j->s1[c] != s1 || j->s2[c] != s2) && bad++ < 5)
            fprintf(stderr, "  %s: the inputs %08x..%08x encode otherwise than ml_dtypes (sums %llu %llu, expected %llu %llu)\n",
                    kind_name(k), (unsigned)c << 24, ((unsigned)c << 24) | 0xffffff, (unsigned long long)j->s1[c],
                    (unsigned long long)j->s2[c], s1, s2);
        n++;
    }
    fclose(f);
    CHECK(n == 256 && bad == 0, "%s: every float32 input encodes as ml_dtypes does (%d of %d chunks)", kind_name(k), n - bad, n);
}

/* ------------------------------------------------------------------------- quantization */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static double urand(void) { /* [0, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}
static float nrand(void) { return (float)(sqrt(-2 * log(1 - urand())) * cos(6.283185307179586 * urand())); }

static void test_weight_quantize(const glm_backend *be) {
    const int64_t R = 37, C = 80;
    float *w = malloc(sizeof(float) * R * C), *deq = malloc(sizeof(float) * R * C);
    uint8_t *codes = malloc(R * C);
    float *scale = malloc(sizeof(float) * R);
    for (int64_t i = 0; i < R * C; i++) w[i] = glm_bf16_to_f32(glm_f32_to_bf16(nrand() * (float)(1 + (i / C) % 7)));
    for (int64_t c = 0; c < C; c++) w[5 * C + c] = 0; /* an all-zero row */
    w[3 * C + 11] = -40.0f;                           /* an outlier row */
    glm_weight W = {GLM_WF_FP8_E4M3, R, C, R * C, codes, scale, NULL, NULL, 0, NULL, {0}};
    CHECK(glm_be_weight_quantize(be, &W, w, GLM_DT_F32) == GLM_OK, "%s", glm_errmsg());
    CHECK(glm_be_weight_dequantize(be, deq, GLM_DT_F32, &W) == GLM_OK, "%s", glm_errmsg());
    int bad_scale = 0, bad_max = 0, bad_err = 0, bad_deq = 0;
    for (int64_t r = 0; r < R; r++) {
        float amax = 0;
        for (int64_t c = 0; c < C; c++) amax = fmaxf(amax, fabsf(w[r * C + c]));
        bad_scale += fbits(scale[r]) != fbits(amax / 448.0f);
        int hit = 0;
        for (int64_t c = 0; c < C; c++) {
            const int64_t i = r * C + c;
            float v = glm_fp8_to_f32(codes[i], GLM_FP8_E4M3) * scale[r];
            hit |= amax > 0 && fabsf(w[i]) == amax && (codes[i] & 0x7f) == 0x7e;
            /* E4M3: relative error <= 2^-4 of a normal value; absolute <= half the smallest subnormal step below */
            bad_err += !(fabs(v - w[i]) <= fabs(w[i]) * 0x1p-4 + scale[r] * 0x1p-10 * 1.0001);
            bad_deq += fbits(deq[i]) != fbits(glm_bf16_to_f32(glm_f32_to_bf16(v)));
        }
        bad_max += amax > 0 && !hit;
    }
    CHECK(bad_scale == 0, "%d rows: scale != amax / 448", bad_scale);
    CHECK(bad_max == 0, "%d rows: the largest magnitude is not coded as +-448", bad_max);
    CHECK(bad_err == 0, "%d elements beyond E4M3's rounding error", bad_err);
    CHECK(bad_deq == 0, "%d dequantized values differ from code x scale rounded to bf16", bad_deq);
    CHECK(scale[5] == 0 && codes[5 * C] == 0 && codes[5 * C + C - 1] == 0, "an all-zero row: scale 0, codes 0");
    /* bf16 source: the same bytes as its f32 values */
    uint16_t *wh = malloc(2 * R * C);
    uint8_t *codes2 = malloc(R * C);
    float *scale2 = malloc(sizeof(float) * R);
    for (int64_t i = 0; i < R * C; i++) wh[i] = glm_f32_to_bf16(w[i]);
    glm_weight W2 = {GLM_WF_FP8_E4M3, R, C, R * C, codes2, scale2, NULL, NULL, 0, NULL, {0}};
    CHECK(glm_be_weight_quantize(be, &W2, wh, GLM_DT_BF16) == GLM_OK, "%s", glm_errmsg());
    CHECK(!memcmp(codes, codes2, R * C) && !memcmp(scale, scale2, 4 * R), "bf16 and f32 sources give the same bytes");
    w[7] = NAN;
    glm_status st = glm_be_weight_quantize(be, &W2, w, GLM_DT_F32);
    CHECK(st == GLM_ERR_NUMERIC && strstr(glm_errmsg(), "[0, 7]"), "a NaN weight is named: %s", glm_errmsg());
    CHECK(glm_weight_matrix_bytes(GLM_WF_FP8_E4M3, 4096, 13696, 0).data == 4096u * 13696 &&
              glm_weight_matrix_bytes(GLM_WF_FP8_E4M3, 4096, 13696, 0).absmax == 4096u * 4,
          "sizes: a byte per weight, an f32 per row");
    glm_wformat f;
    CHECK(glm_wformat_parse("fp8", &f) == GLM_OK && f == GLM_WF_FP8_E4M3 && !glm_wformat_packed(f) && glm_wformat_quantized(f),
          "fp8 parses, is quantized, is not packed");
    free(w), free(deq), free(codes), free(scale), free(wh), free(codes2), free(scale2);
}

static void test_act_quantize(const glm_backend *be, glm_fp8_kind k, int with_mul) {
    const int64_t M = 9, K = 48, ld = 53;
    float *x = malloc(sizeof(float) * M * ld), mul[48];
    uint8_t *q = malloc(M * K);
    for (int64_t i = 0; i < M * ld; i++) x[i] = nrand() * 3;
    x[4 * ld + 7] = -100; /* the absmax, at a place read */
    x[2 * ld + 50] = 1e6; /* outside the K columns: not read */
    for (int k2 = 0; k2 < K; k2++) mul[k2] = with_mul ? (float)(0.01 + urand()) : 1;
    float scale[9];
    for (int64_t m = 0; m < M; m++) scale[m] = -1;
    CHECK(glm_be_fp8_quantize(be, q, scale, x, ld, M, K, with_mul ? mul : NULL, k) == GLM_OK, "%s", glm_errmsg());
    const float fmax = glm_fp8_max(k);
    int bad = 0, bad_err = 0, bad_scale = 0;
    const double rel = k == GLM_FP8_E5M2 ? 0x1p-3 : 0x1p-4, sub = k == GLM_FP8_E5M2 ? 0x1p-17 : 0x1p-10;
    for (int64_t m = 0; m < M; m++) { /* a scale per row, from the row's own absolute maximum */
        float amax = 0;
        for (int64_t c = 0; c < K; c++) amax = fmaxf(amax, fabsf(with_mul ? x[m * ld + c] * mul[c] : x[m * ld + c]));
        bad_scale += fbits(scale[m]) != fbits(amax / fmax);
        for (int64_t c = 0; c < K; c++) {
            float v = with_mul ? x[m * ld + c] * mul[c] : x[m * ld + c];
            bad += q[m * K + c] != glm_f32_to_fp8(v * (fmax / amax), k);
            double back = glm_fp8_to_f32(q[m * K + c], k) * (double)scale[m];
            bad_err += !(fabs(back - v) <= fabs(v) * rel * 1.0001 + scale[m] * sub * 1.0001);
        }
    }
    CHECK(bad_scale == 0, "%s: %d rows whose scale is not the row's amax / %g", kind_name(k), bad_scale, fmax);
    CHECK(bad == 0, "%s%s: %d codes differ from the rule", kind_name(k), with_mul ? " with a column multiplier" : "", bad);
    CHECK(bad_err == 0, "%s: %d values beyond the format's rounding error", kind_name(k), bad_err);
    CHECK((q[4 * K + 7] & 0x7f) == (k == GLM_FP8_E5M2 ? 0x7b : 0x7e) || with_mul, "the absmax element codes the largest value");
    /* every row's largest |v| codes the format's largest value: each row has its own scale */
    int rows_max = 0;
    for (int64_t m = 0; m < M; m++) {
        int hit = 0;
        for (int64_t c = 0; c < K; c++) hit |= (q[m * K + c] & 0x7f) == (k == GLM_FP8_E5M2 ? 0x7b : 0x7e);
        rows_max += hit;
    }
    CHECK(rows_max == M, "%s: %d of %lld rows reach the format's largest code", kind_name(k), rows_max, (long long)M);
    /* a row of zeros: scale 0, codes 0, the other rows unaffected */
    memset(x + 3 * ld, 0, sizeof(float) * ld);
    CHECK(glm_be_fp8_quantize(be, q, scale, x, ld, M, K, NULL, k) == GLM_OK && scale[3] == 0 && q[3 * K] == 0 &&
              q[3 * K + K - 1] == 0 && scale[2] > 0 && scale[4] > 0,
          "an all-zero row: scale 0, codes 0, its neighbours scaled");
    CHECK(glm_be_fp8_quantize(be, q, scale, x, ld, M, K, NULL, 7) == GLM_ERR_ARG, "an unknown kind is refused");
    free(x), free(q);
}

/* ------------------------------------------------------------------------- GEMM */

/* y_ref [M, N] = s_x[m] sum_k dec(xq) dec(w) w_scale[n] in double, xq quantized here with the rule (per row) */
static void ref_gemm(int64_t M, int64_t N, int64_t K, const float *x, int64_t ldx, const float *col_mul, glm_fp8_kind k,
                     const uint8_t *w, const float *w_scale, double *y, double *yabs) {
    for (int64_t m = 0; m < M; m++) { /* each row of x its own scale */
        uint32_t am = 0;
        for (int64_t c = 0; c < K; c++) {
            float v = col_mul ? x[m * ldx + c] * col_mul[c] : x[m * ldx + c];
            if (fbits(fabsf(v)) > am) am = fbits(fabsf(v));
        }
        float amax = glm_bits_f32(am), inv = glm_fp8_max(k) / amax, sx = amax / glm_fp8_max(k);
        for (int64_t n = 0; n < N; n++) {
            double acc = 0, aabs = 0;
            for (int64_t c = 0; c < K; c++) {
                float v = col_mul ? x[m * ldx + c] * col_mul[c] : x[m * ldx + c];
                double p = (double)glm_fp8_to_f32(glm_f32_to_fp8(v * inv, k), k) * glm_fp8_to_f32(w[n * K + c], GLM_FP8_E4M3);
                acc += p;
                aabs += fabs(p);
            }
            double s = (double)sx * (w_scale ? w_scale[n] : 1.0);
            y[m * N + n] = acc * s;
            yabs[m * N + n] = aabs * s;
        }
    }
}

static void test_gemm(const glm_backend *be) {
    const int64_t M = 13, N = 32, K = 48, ldx = 50, ldy = 35;
    float *x = malloc(sizeof(float) * M * ldx), *wf = malloc(sizeof(float) * N * K), *y = malloc(sizeof(float) * M * ldy),
          *y0 = malloc(sizeof(float) * M * ldy), ws[32];
    uint8_t *wq = malloc(N * K);
    double *yr = malloc(sizeof(double) * M * N), *ya = malloc(sizeof(double) * M * N);
    for (int64_t i = 0; i < M * ldx; i++) x[i] = nrand();
    for (int64_t i = 0; i < N * K; i++) wf[i] = nrand() * 0.05f * (float)(1 + i % 3);
    for (int64_t i = 0; i < M * ldy; i++) y0[i] = nrand();
    glm_weight W = {GLM_WF_FP8_E4M3, N, K, N * K, wq, ws, NULL, NULL, 0, NULL, {0}};
    CHECK(glm_be_weight_quantize(be, &W, wf, GLM_DT_F32) == GLM_OK, "%s", glm_errmsg());
    /* forward, beta 0 and beta 1 */
    for (int beta = 0; beta <= 1; beta++) {
        memcpy(y, y0, sizeof(float) * M * ldy);
        CHECK(glm_base_matmul(be, 0, M, x, ldx, &W, (float)beta, y, ldy) == GLM_OK, "%s", glm_errmsg());
        ref_gemm(M, N, K, x, ldx, NULL, GLM_FP8_E4M3, wq, ws, yr, ya);
        int bad = 0, bad_q = 0;
        double worst = 0;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double want = yr[m * N + n] + beta * (double)y0[m * ldy + n];
                double d = fabs(y[m * ldy + n] - want);
                bad += d > 1e-6 * (ya[m * N + n] + fabs(want)) + 1e-30;
                /* against the unquantized product: FP8's error, a few % of the terms' magnitudes */
                double exact = 0, eabs = 0;
                for (int64_t c = 0; c < K; c++) {
                    exact += (double)x[m * ldx + c] * wf[n * K + c];
                    eabs += fabs((double)x[m * ldx + c] * wf[n * K + c]);
                }
                double e = fabs(yr[m * N + n] - exact) / eabs;
                if (e > worst) worst = e;
                bad_q += e > 0.0625;
            }
        CHECK(bad == 0, "forward (beta %d): %d outputs differ from the double product of the dequantized operands", beta, bad);
        CHECK(bad_q == 0 && worst > 0, "forward: FP8's error against the unquantized product (worst %.4f of the terms' sum)",
              worst);
    }
    /* the untouched columns past N in y's rows */
    CHECK(y[ldy - 1] == y0[ldy - 1], "columns past N are not written");
    /* input gradient: dx [M, K] = g [M, N] W, through data_t */
    float *g = malloc(sizeof(float) * M * N), *dx = malloc(sizeof(float) * M * K);
    uint8_t *wt = malloc(N * K), *wq_t = malloc(N * K);
    double *dr = malloc(sizeof(double) * M * K), *da = malloc(sizeof(double) * M * K);
    for (int64_t i = 0; i < M * N; i++) g[i] = nrand() * 1e-3f;
    CHECK(glm_base_matmul(be, 1, M, g, N, &W, 0.0f, dx, K) == GLM_ERR_ARG, "the input gradient needs data_t");
    CHECK(glm_be_fp8_transpose(be, wt, wq, N, K) == GLM_OK, "%s", glm_errmsg());
    int bad_t = 0;
    for (int64_t r = 0; r < N; r++)
        for (int64_t c = 0; c < K; c++) bad_t += wt[c * N + r] != wq[r * K + c];
    CHECK(bad_t == 0, "fp8_transpose: %d bytes misplaced", bad_t);
    W.data_t = wt;
    CHECK(glm_base_matmul(be, 1, M, g, N, &W, 0.0f, dx, K) == GLM_OK, "%s", glm_errmsg());
    /* reference: (g * scale_r) quantized per row in the gradient's kind, times the codes */
    memcpy(wq_t, wt, N * K);
    ref_gemm(M, K, N, g, N, ws, GLM_FP8_GRAD_KIND, wq_t, NULL, dr, da);
    int bad = 0;
    double worst = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t c = 0; c < K; c++) {
            bad += fabs(dx[m * K + c] - dr[m * K + c]) > 1e-6 * da[m * K + c] + 1e-30;
            double exact = 0, eabs = 0;
            for (int64_t n = 0; n < N; n++) {
                exact += (double)g[m * N + n] * wf[n * K + c];
                eabs += fabs((double)g[m * N + n] * wf[n * K + c]);
            }
            double e = fabs(dr[m * K + c] - exact) / eabs;
            if (e > worst) worst = e;
        }
    CHECK(bad == 0, "input gradient: %d outputs differ from the double product of the dequantized operands", bad);
    CHECK(worst < (GLM_FP8_GRAD_KIND == GLM_FP8_E5M2 ? 0.125 : 0.0625) && worst > 0,
          "input gradient: FP8's error against the unquantized product (worst %.4f of the terms' sum)", worst);
    /* shapes the FP8 tensor cores do not take */
    CHECK(glm_be_fp8_matmul(be, M, 24, K, x, ldx, NULL, GLM_FP8_E4M3, wq, ws, 0.0f, y, ldy) == GLM_ERR_UNSUPPORTED,
          "N not a multiple of 16 is refused");
    CHECK(glm_be_supports(be, GLM_FEATURE_FP8) == 1, "the CPU backend emulates FP8");
    free(x), free(wf), free(y), free(y0), free(wq), free(yr), free(ya), free(g), free(dx), free(wt), free(wq_t), free(dr),
        free(da);
}

int main(void) {
    const glm_backend *be = glm_backend_cpu();
    for (int k = 0; k < 2; k++) {
        test_decode((glm_fp8_kind)k);
        test_boundaries((glm_fp8_kind)k);
    }
    test_weight_quantize(be);
    for (int k = 0; k < 2; k++)
        for (int mul = 0; mul < 2; mul++) test_act_quantize(be, (glm_fp8_kind)k, mul);
    test_gemm(be);
    if (!getenv("GLM_FP8_QUICK")) /* every float32 input (about 20 s on one core) */
        for (int k = 0; k < 2; k++) test_every_float((glm_fp8_kind)k);
    return check_summary("test_fp8");
}
