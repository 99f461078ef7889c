/* tests/kernels/test_quant4.c: the 4-bit (QLoRA) format of kernels/quant4.h against bitsandbytes.
 *
 * Expected values: tests/fixtures/bnb4/bnb4.safetensors, made by bitsandbytes 0.50.2 itself
 * (make_bnb4.py; README.md beside it): for each case, glmtune's 4-bit codes, block absmax, double
 * quantization pieces and dequantized values (f32 and bf16) must equal bitsandbytes' bit for bit.
 * The one piece bitsandbytes leaves to torch's float32 mean (the double-quantization offset) is
 * compared within a few ulp, and everything after it is compared given bitsandbytes' offset.
 * Then properties that need no oracle: the code book tables, nearest-code choice, round-trip error
 * bounds, short and odd last blocks, all-zero blocks (bitsandbytes' kernel semantics), non-finite
 * input, sizes, bf16 vs f32 input. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "kernels/quant4.h"
#include "common/safetensors.h"
#include "tests/check.h"

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* the first index where a and b (n elements of `size` bytes) differ, or -1 */
static int64_t first_diff(const void *a, const void *b, int64_t n, size_t size) {
    const unsigned char *x = a, *y = b;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(x + i * size, y + i * size, size)) return i;
    return -1;
}

/* bitsandbytes' CPU build and its CUDA kernels (glmtune follows the kernels) part on FP4 in
 * three narrow places, all from the CPU build's torch.bucketize over the code book sorted by
 * torch.argsort, against the kernels' dQuantizeFP4 tree on |x| with a separate sign bit:
 * - zero codes: for |x| < absmax/384 the kernels give code 8 (-0.0) iff x < 0; the CPU build's
 *   sort ties codes 0 and 8 (both +0 in get_4bit_type) and sends x < 0 to 0, x > 0 to 8;
 * - negative ties: x exactly on a threshold goes to the lower code in bucketize (the larger
 *   magnitude when x < 0), to the smaller magnitude in the tree;
 * - slivers: the tree's literal thresholds are 1 to 14 ulp off the fp32 midpoints (formats.h).
 * codes_diff compares codes bit for bit except where one of these explains the difference (and
 * our code is the tree's); it marks those weights in `explained`, where the dequantized values
 * may then differ too. */
static int64_t n_explained;
static uint8_t *explained;

static int fp4_explained(uint8_t a, uint8_t b, float x, float xn) {
    if ((a | b) == 8) return (a == 8) == (x < 0); /* the zero codes */
    if ((a ^ b) & 8) return 0;                    /* signs differ */
    /* magnitudes in order, the tree's literal threshold above each, the fp32 midpoints */
    static const uint8_t mag[8] = {0, 1, 6, 7, 4, 5, 2, 3};
    static const float lit[7] = {0.00260417f, 0.0859375f, 0.20833333f, 0.29166667f, 0.4166667f, 0.583333f, 0.8333333f};
    float ax = fabsf(xn);
    for (int k = 0; k < 7; k++) {
        if (!(((a & 7) == mag[k] && (b & 7) == mag[k + 1]) || ((a & 7) == mag[k + 1] && (b & 7) == mag[k]))) continue;
        float mid = (glm_q4_code_value(GLM_Q4_FP4, mag[k]) + glm_q4_code_value(GLM_Q4_FP4, mag[k + 1])) / 2;
        return ax >= fminf(lit[k], mid) && ax <= fmaxf(lit[k], mid);
    }
    return 0;
}

/* the first weight whose code differs unexplained, or -1 (n: the pad nibble of an odd n) */
static int64_t codes_diff(glm_q4_type type, const uint8_t *ours, const uint8_t *bnb, const float *x,
                          const float *absmax, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint8_t a = i & 1 ? ours[i / 2] & 15 : ours[i / 2] >> 4, b = i & 1 ? bnb[i / 2] & 15 : bnb[i / 2] >> 4;
        if (a == b) continue;
        if (type == GLM_Q4_FP4 && fp4_explained(a, b, x[i], x[i] * (1.0f / absmax[i / 64]))) {
            explained[i] = 1;
            n_explained++;
            continue;
        }
        return i;
    }
    return ((n & 1) && (ours[n / 2] & 15) != (bnb[n / 2] & 15)) ? n : -1;
}

static int64_t bf16_diff(const uint16_t *ours, const uint16_t *bnb, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (ours[i] != bnb[i] && !explained[i]) return i;
    return -1;
}

static int64_t f32_diff(const float *ours, const float *bnb, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (fbits(ours[i]) != fbits(bnb[i]) && !explained[i]) return i;
    return -1;
}

static const glm_st_tensor *need(const glm_st_set *s, const char *c, const char *what, glm_st_dtype dt, int64_t n) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s", c, what);
    const glm_st_tensor *t = glm_st_find(s, name);
    CHECK(t && t->dtype == dt && (n < 0 || t->numel == n), "fixture tensor %s missing or of the wrong dtype/size", name);
    return t && t->dtype == dt && (n < 0 || t->numel == n) ? t : NULL;
}

static int cases_run;

static void check_case(const glm_st_set *s, const char *c) {
    const glm_st_tensor *in = need(s, c, "input", strstr(c, "_bf16") ? GLM_ST_BF16 : GLM_ST_F32, -1);
    if (!in) return;
    int64_t n = in->numel;
    int bf16_in = in->dtype == GLM_ST_BF16, dq = strstr(c, "_dq") != NULL;
    glm_q4_type type = strstr(c, "_fp4") ? GLM_Q4_FP4 : GLM_Q4_NF4;
    glm_q4_sizes sz = glm_q4_size(n, dq);
    const glm_st_tensor *codes = need(s, c, "codes", GLM_ST_U8, (int64_t)sz.codes);
    const glm_st_tensor *absmax = need(s, c, "absmax", GLM_ST_F32, sz.nblocks);
    const glm_st_tensor *deq = need(s, c, "dequant", in->dtype, n);
    const glm_st_tensor *deq_bf16 = bf16_in ? deq : need(s, c, "dequant_bf16", GLM_ST_BF16, n);
    if (!codes || !absmax || !deq || !deq_bf16) return;
    cases_run++;
    int failed0 = check_failed_;
    n_explained = 0;
    explained = calloc((size_t)n, 1);
    float *xf = malloc((size_t)n * 4); /* the input as f32, for the sign test */
    for (int64_t i = 0; i < n; i++)
        xf[i] = bf16_in ? glm_bf16_to_f32(((const uint16_t *)in->data)[i]) : ((const float *)in->data)[i];

    /* the first level: codes and absmax, from f32 or bf16 input */
    glm_q4_tensor q;
    CHECK(glm_q4_alloc(&q, type, n, 0) == GLM_OK, "alloc");
    glm_status st = bf16_in ? glm_q4_quantize_bf16(&q, in->data) : glm_q4_quantize_f32(&q, in->data);
    CHECK(st == GLM_OK, "%s: quantize: %s", c, glm_errmsg());
    int64_t d = codes_diff(type, q.codes, codes->data, xf, absmax->data, n);
    CHECK(d < 0, "%s: code of weight %lld (%a): glmtune byte 0x%02x, bitsandbytes 0x%02x", c, (long long)d,
          d < 0 ? 0 : xf[d < n ? d : 0], d < 0 ? 0 : q.codes[d / 2], d < 0 ? 0 : ((const uint8_t *)codes->data)[d / 2]);
    d = first_diff(q.absmax, absmax->data, sz.nblocks, 4);
    CHECK(d < 0, "%s: absmax of block %lld: %a vs %a", c, (long long)d, d < 0 ? 0 : q.absmax[d],
          d < 0 ? 0 : ((const float *)absmax->data)[d]);

    /* dequantization, without double quantization: from our own quantization */
    float *of = malloc((size_t)n * 4);
    uint16_t *oh = malloc((size_t)n * 2);
    if (!dq) {
        CHECK(glm_q4_dequantize_bf16(&q, oh) == GLM_OK, "dequantize bf16");
        d = bf16_diff(oh, deq_bf16->data, n);
        CHECK(d < 0, "%s: bf16 dequant %lld: 0x%04x vs 0x%04x", c, (long long)d, d < 0 ? 0 : oh[d],
              d < 0 ? 0 : ((const uint16_t *)deq_bf16->data)[d]);
        if (!bf16_in) {
            CHECK(glm_q4_dequantize_f32(&q, of) == GLM_OK, "dequantize f32");
            d = f32_diff(of, deq->data, n);
            CHECK(d < 0, "%s: f32 dequant %lld: %a vs %a", c, (long long)d, d < 0 ? 0 : of[d],
                  d < 0 ? 0 : ((const float *)deq->data)[d]);
        }
        printf("%-24s n %6lld  %s  codes, absmax, dequant %s: %s", c, (long long)n, glm_q4_type_name(type),
               bf16_in ? "bf16" : "f32 + bf16", check_failed_ == failed0 ? "bit-exact to bitsandbytes" : "DIFFER");
        printf(n_explained ? " (FP4: %lld codes differ as explained above codes_diff)\n" : "\n", (long long)n_explained);
    }
    glm_q4_free(&q);

    if (dq) {
        const glm_st_tensor *off = need(s, c, "offset", GLM_ST_F32, 1);
        const glm_st_tensor *c8 = need(s, c, "absmax_codes", GLM_ST_U8, sz.nblocks);
        const glm_st_tensor *a2 = need(s, c, "absmax2", GLM_ST_F32, sz.ngroups);
        if (off && c8 && a2) {
            float bnb_off = *(const float *)off->data;
            /* the whole pipeline, offset included */
            CHECK(glm_q4_alloc(&q, type, n, 1) == GLM_OK, "alloc dq");
            st = bf16_in ? glm_q4_quantize_bf16(&q, in->data) : glm_q4_quantize_f32(&q, in->data);
            CHECK(st == GLM_OK, "%s: quantize dq: %s", c, glm_errmsg());
            int64_t ne = n_explained; /* the same weights as the first level's: counted once */
            CHECK(codes_diff(type, q.codes, codes->data, xf, absmax->data, n) < 0, "%s: dq codes differ", c);
            n_explained = ne;
            int ulps = (int)((int64_t)fbits(*q.offset) - (int64_t)fbits(bnb_off));
            CHECK(abs(ulps) <= 4, "%s: offset %a vs torch's %a (%d ulp)", c, *q.offset, bnb_off, ulps);
            CHECK(*q.offset == glm_q4_absmax_mean(absmax->data, sz.nblocks), "offset = glm_q4_absmax_mean");
            int same_offset = ulps == 0;
            if (same_offset) {
                CHECK(!memcmp(q.absmax_codes, c8->data, sz.nblocks), "%s: absmax codes differ (same offset)", c);
                CHECK(!memcmp(q.absmax2, a2->data, sz.absmax2), "%s: absmax2 differ (same offset)", c);
            }
            /* given bitsandbytes' offset, the 8-bit step is bit-exact */
            uint8_t *my8 = malloc((size_t)sz.nblocks);
            float *my2 = malloc(sz.absmax2);
            glm_q4_double_quant(absmax->data, sz.nblocks, bnb_off, my8, my2);
            d = first_diff(my8, c8->data, sz.nblocks, 1);
            CHECK(d < 0, "%s: absmax code %lld: %u vs %u", c, (long long)d, d < 0 ? 0 : my8[d],
                  d < 0 ? 0 : ((const uint8_t *)c8->data)[d]);
            CHECK(!memcmp(my2, a2->data, sz.absmax2), "%s: absmax2 differ", c);
            /* dequantization from bitsandbytes' pieces (its offset) is bit-exact */
            glm_q4_tensor b = {.type = type, .double_quant = 1, .n = n, .codes = (uint8_t *)codes->data,
                               .absmax_codes = (uint8_t *)c8->data, .absmax2 = (float *)a2->data,
                               .offset = &bnb_off};
            CHECK(glm_q4_dequantize_bf16(&b, oh) == GLM_OK, "dequantize dq bf16");
            d = bf16_diff(oh, deq_bf16->data, n);
            CHECK(d < 0, "%s: dq bf16 dequant %lld: 0x%04x vs 0x%04x", c, (long long)d, d < 0 ? 0 : oh[d],
                  d < 0 ? 0 : ((const uint16_t *)deq_bf16->data)[d]);
            if (!bf16_in) {
                CHECK(glm_q4_dequantize_f32(&b, of) == GLM_OK, "dequantize dq f32");
                d = f32_diff(of, deq->data, n);
                CHECK(d < 0, "%s: dq f32 dequant %lld: %a vs %a", c, (long long)d, d < 0 ? 0 : of[d],
                      d < 0 ? 0 : ((const float *)deq->data)[d]);
            }
            /* our own pipeline's dequantization: identical where the offsets agree; otherwise
             * count the weights whose bf16 value moved */
            CHECK(glm_q4_dequantize_bf16(&q, oh) == GLM_OK, "dequantize own dq");
            int64_t moved = 0;
            for (int64_t i = 0; i < n; i++) {
                uint16_t a = oh[i], b16 = ((const uint16_t *)deq_bf16->data)[i];
                moved += a != b16 && !explained[i];
            }
            CHECK(!same_offset || moved == 0, "%s: %lld dequantized weights differ with the same offset", c,
                  (long long)moved);
            printf("%-24s n %6lld  %s  codes, 8-bit absmax codes, absmax2, dequant %s: %s; offset %d ulp from "
                   "torch's float mean (%lld of %lld bf16 weights move)",
                   c, (long long)n, glm_q4_type_name(type), bf16_in ? "bf16" : "f32 + bf16",
                   check_failed_ == failed0 ? "bit-exact to bitsandbytes" : "DIFFER", ulps, (long long)moved,
                   (long long)n);
            printf(n_explained ? " (FP4: %lld codes differ as explained above codes_diff)\n" : "\n",
                   (long long)n_explained);
            free(my8), free(my2);
            glm_q4_free(&q);
        }
    }
    free(of), free(oh), free(xf), free(explained);
}

static void check_fixtures(void) {
    const char *src = getenv("GLM_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/bnb4/bnb4.safetensors", src ? src : ".");
    glm_st_set *s = NULL;
    glm_status st = glm_st_open(path, &s);
    CHECK(st == GLM_OK, "open %s: %s", path, glm_errmsg());
    if (st) return;
    /* the code books and the dynamic map, as bitsandbytes computes them */
    const glm_st_tensor *nf4 = glm_st_find(s, "nf4_code"), *fp4 = glm_st_find(s, "fp4_code"),
                        *dm = glm_st_find(s, "dynamic_map");
    CHECK(nf4 && fp4 && dm && nf4->numel == 16 && fp4->numel == 16 && dm->numel == 256, "fixture tables");
    if (nf4 && fp4 && dm) {
        const float *a = nf4->data, *b = fp4->data;
        for (int c = 0; c < 16; c++) {
            CHECK(fbits(a[c]) == fbits(glm_q4_code_value(GLM_Q4_NF4, (uint8_t)c)), "nf4 code %d", c);
            /* bitsandbytes' get_4bit_type("fp4") has +0 at code 8; its kernels -0.0 (formats.h) */
            CHECK(c == 8 ? glm_q4_code_value(GLM_Q4_FP4, 8) == 0.0f && signbit(glm_q4_code_value(GLM_Q4_FP4, 8))
                         : fbits(b[c]) == fbits(glm_q4_code_value(GLM_Q4_FP4, (uint8_t)c)),
                  "fp4 code %d: %a vs %a", c, glm_q4_code_value(GLM_Q4_FP4, (uint8_t)c), b[c]);
        }
        int64_t dd = first_diff(glm_dynamic8_map, dm->data, 256, 4);
        CHECK(dd < 0, "dynamic map entry %lld: %a vs bitsandbytes %a", (long long)dd, dd < 0 ? 0 : glm_dynamic8_map[dd],
              dd < 0 ? 0 : ((const float *)dm->data)[dd]);
    }
    for (size_t i = 0; i < glm_st_count(s); i++) {
        const char *name = glm_st_at(s, i)->name;
        size_t len = strlen(name);
        if (len > 6 && !strcmp(name + len - 6, ".input")) {
            char c[200];
            snprintf(c, sizeof c, "%.*s", (int)(len - 6), name);
            check_case(s, c);
        }
    }
    CHECK(cases_run == 9, "fixture cases run: %d (expected 9)", cases_run);
    glm_st_close(s);
}

/* ---- properties ---- */

static uint64_t rs = 0x5eedULL;
static double urand(void) {
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rs >> 11) * (1.0 / 9007199254740992.0);
}
static float gauss(void) { return (float)(sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand())); }

/* the largest half-gap between neighbouring code values of `type` (sorted) */
static float half_gap(glm_q4_type type) {
    float v[16], g = 0;
    for (int c = 0; c < 16; c++) v[c] = glm_q4_code_value(type, (uint8_t)c);
    for (int i = 0; i < 16; i++)
        for (int j = i + 1; j < 16; j++)
            if (v[j] < v[i]) {
                float t = v[i];
                v[i] = v[j], v[j] = t;
            }
    for (int i = 0; i + 1 < 16; i++) g = fmaxf(g, (v[i + 1] - v[i]) / 2);
    return g;
}

static void check_roundtrip(glm_q4_type type, int64_t n, int dq) {
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = gauss() * (i % 977 == 5 ? 0.5f : 0.02f); /* outliers */
    glm_q4_tensor q;
    CHECK(glm_q4_alloc(&q, type, n, dq) == GLM_OK, "alloc");
    CHECK(glm_q4_quantize_f32(&q, x) == GLM_OK, "quantize: %s", glm_errmsg());
    CHECK(glm_q4_dequantize_f32(&q, y) == GLM_OK, "dequantize");
    float hg = half_gap(type);
    int64_t bad = 0, not_nearest = 0, nblocks = glm_q4_size(n, 0).nblocks;
    double err2 = 0, sig2 = 0, worst_am = 0;
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t e = (b + 1) * 64 < n ? (b + 1) * 64 : n;
        float am = 0;
        for (int64_t i = b * 64; i < e; i++) am = fmaxf(am, fabsf(x[i]));
        float amq = glm_q4_block_absmax(&q, b);
        if (!dq) {
            CHECK(amq == am, "block %lld absmax", (long long)b);
        } else {
            /* the dynamic map's largest gap in [0.1, 1] is 0.9 / 64: half of it times absmax2 */
            float a2 = q.absmax2[b / 256];
            worst_am = fmax(worst_am, fabs(amq - am) / a2);
        }
        for (int64_t i = b * 64; i < e; i++) {
            /* |x - y| <= half the widest code gap x the block's absmax (+ the rescaling's ulps) */
            if (!dq && fabsf(x[i] - y[i]) > hg * am * 1.000001f) bad++;
            /* nearest code: no other code value is closer by more than the fp32 noise */
            if (!dq) {
                uint8_t byte = q.codes[i / 2], code = i & 1 ? byte & 15 : byte >> 4;
                float xn = x[i] * (1.0f / am), dc = fabsf(xn - glm_q4_code_value(type, code));
                for (int k = 0; k < 16; k++)
                    if (fabsf(xn - glm_q4_code_value(type, (uint8_t)k)) < dc - 1e-6f) not_nearest++;
            }
            err2 += (double)(x[i] - y[i]) * (x[i] - y[i]);
            sig2 += (double)x[i] * x[i];
        }
    }
    CHECK(bad == 0, "%s n %lld: %lld weights beyond the half-gap bound", glm_q4_type_name(type), (long long)n,
          (long long)bad);
    /* FP4's 0.583333f threshold is a few ulp off the midpoint: allow those slivers only */
    CHECK(not_nearest <= (type == GLM_Q4_FP4 ? n / 100000 + 2 : 0), "%s: %lld codes not the nearest",
          glm_q4_type_name(type), (long long)not_nearest);
    if (dq) CHECK(worst_am <= 0.9 / 64 / 2 * 1.0001, "dq absmax error %.4g x absmax2", worst_am);
    double rel = sqrt(err2 / sig2);
    /* measured 0.127 (NF4) and 0.159 (FP4) on these Gaussian weights with 1-in-977 outliers of 25
     * std (an outlier's block is coarser); a scaling or code-book slip would be far above */
    CHECK(rel < (type == GLM_Q4_NF4 ? 0.135 : 0.17), "%s round trip rel RMS %.4f", glm_q4_type_name(type), rel);
    printf("round trip %s%s n %lld: relative RMS error %.4f, %lld codes not nearest, dq absmax error <= %.4g x absmax2\n",
           glm_q4_type_name(type), dq ? " dq" : "", (long long)n, rel, (long long)not_nearest, worst_am);
    /* bf16 input of the same values gives the same bytes */
    uint16_t *h = malloc((size_t)n * 2);
    float *xr = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = glm_f32_to_bf16(x[i]), xr[i] = glm_bf16_to_f32(h[i]);
    glm_q4_tensor a, b;
    CHECK(glm_q4_alloc(&a, type, n, dq) == GLM_OK && glm_q4_alloc(&b, type, n, dq) == GLM_OK, "alloc");
    CHECK(glm_q4_quantize_bf16(&a, h) == GLM_OK && glm_q4_quantize_f32(&b, xr) == GLM_OK, "quantize");
    glm_q4_sizes sz = glm_q4_size(n, dq);
    CHECK(!memcmp(a.codes, b.codes, sz.codes) &&
              (dq ? !memcmp(a.absmax_codes, b.absmax_codes, sz.absmax_codes) && !memcmp(a.absmax2, b.absmax2, sz.absmax2) &&
                        *a.offset == *b.offset
                  : !memcmp(a.absmax, b.absmax, sz.absmax)),
          "bf16 input == its f32 values");
    /* bf16 dequantization is the f32 one rounded once */
    uint16_t *yh = malloc((size_t)n * 2);
    CHECK(glm_q4_dequantize_bf16(&q, yh) == GLM_OK, "dequantize bf16");
    int64_t off = 0;
    for (int64_t i = 0; i < n; i++) off += yh[i] != glm_f32_to_bf16(y[i]);
    CHECK(off == 0, "bf16 dequant != round(f32 dequant) in %lld", (long long)off);
    glm_q4_free(&a), glm_q4_free(&b), glm_q4_free(&q);
    free(x), free(y), free(h), free(xr), free(yh);
}

static void check_edges(void) {
    /* the short, odd last block: n = 65, the 65th weight alone in block 1 */
    float x[66];
    for (int i = 0; i < 65; i++) x[i] = gauss() * 0.02f;
    x[64] = -0.0371f;
    for (int t = 1; t <= 2; t++) {
        glm_q4_type type = (glm_q4_type)t;
        glm_q4_tensor q;
        CHECK(glm_q4_alloc(&q, type, 65, 0) == GLM_OK, "alloc 65");
        CHECK(glm_q4_quantize_f32(&q, x) == GLM_OK, "quantize 65");
        CHECK(glm_q4_size(65, 0).codes == 33 && glm_q4_size(65, 0).nblocks == 2, "sizes of 65");
        CHECK(q.absmax[1] == 0.0371f, "last block absmax %a", q.absmax[1]);
        /* -absmax codes to -1.0 exactly (NF4 0, FP4 11); the pad nibble codes 0.0 (NF4 7, FP4 0) */
        CHECK(q.codes[32] == (type == GLM_Q4_NF4 ? 0x07 : 0xB0), "%s last byte 0x%02x", glm_q4_type_name(type),
              q.codes[32]);
        float y[65];
        CHECK(glm_q4_dequantize_f32(&q, y) == GLM_OK, "dequantize 65");
        CHECK(y[64] == x[64], "a block's absmax weight dequantizes exactly: %a vs %a", y[64], x[64]);
        glm_q4_free(&q);
    }
    /* an all-zero block: absmax 0, and the kernel's 0 * (1/0) = NaN codes as NF4 0 / FP4 0, so the
     * block dequantizes to -0.0 (NF4: -1.0 x 0) and +0.0 (FP4) */
    float z[128];
    for (int i = 0; i < 128; i++) z[i] = i < 64 ? 0.0f : gauss();
    glm_q4_tensor q;
    for (int t = 1; t <= 2; t++) {
        CHECK(glm_q4_alloc(&q, (glm_q4_type)t, 128, 0) == GLM_OK, "alloc");
        CHECK(glm_q4_quantize_f32(&q, z) == GLM_OK, "quantize zeros");
        CHECK(q.absmax[0] == 0.0f && q.codes[0] == 0 && q.codes[31] == 0, "zero block: absmax %g codes %02x",
              q.absmax[0], q.codes[0]);
        uint16_t h[128];
        CHECK(glm_q4_dequantize_bf16(&q, h) == GLM_OK, "dequantize zeros");
        CHECK(h[0] == (t == GLM_Q4_NF4 ? 0x8000 : 0x0000) && h[63] == h[0], "zero block dequant 0x%04x", h[0]);
        glm_q4_free(&q);
    }
    /* non-finite input is an error naming the weight */
    z[70] = NAN;
    CHECK(glm_q4_alloc(&q, GLM_Q4_NF4, 128, 1) == GLM_OK, "alloc");
    CHECK(glm_q4_quantize_f32(&q, z) == GLM_ERR_NUMERIC && strstr(glm_errmsg(), "weight 70 of 128 is NaN"),
          "NaN: %s", glm_errmsg());
    z[70] = 1.0f, z[3] = -INFINITY;
    CHECK(glm_q4_quantize_f32(&q, z) == GLM_ERR_NUMERIC && strstr(glm_errmsg(), "weight 3 of 128 is infinite"),
          "inf: %s", glm_errmsg());
    glm_q4_free(&q);
    glm_q4_tensor bad = {0};
    CHECK(glm_q4_quantize_f32(&bad, z) == GLM_ERR_ARG, "unset tensor");
    CHECK(glm_q4_alloc(&q, GLM_Q4_NF4, 0, 0) == GLM_ERR_ARG, "n 0");
    glm_q4_type ty;
    CHECK(glm_q4_type_parse("nf4", &ty) == GLM_OK && ty == GLM_Q4_NF4, "parse nf4");
    CHECK(glm_q4_type_parse("fp4", &ty) == GLM_OK && ty == GLM_Q4_FP4, "parse fp4");
    CHECK(glm_q4_type_parse("int4", &ty) == GLM_ERR_ARG && strstr(glm_errmsg(), "'int4'"), "parse int4");
    /* sizes: GLM-4-9B's dense_4h_to_h, 4096 x 13696 */
    glm_q4_sizes s = glm_q4_size(4096LL * 13696, 0), t = glm_q4_size(4096LL * 13696, 1);
    CHECK(s.codes == 28049408 && s.absmax == 3506176 && s.total == 31555584, "sizes %zu %zu", s.codes, s.absmax);
    CHECK(t.absmax_codes == 876544 && t.absmax2 == 13696 && t.offset == 4 && t.total == 28049408 + 876544 + 13696 + 4,
          "dq sizes %zu %zu", t.absmax_codes, t.absmax2);
    /* the encoders at their thresholds: equal goes down, just above goes up */
    CHECK(glm_nf4_encode(0.03979014977812767f) == 7 && glm_nf4_encode(nextafterf(0.03979014977812767f, 1)) == 8,
          "nf4 tie");
    CHECK(glm_fp4_encode(0.583333f) == 5 && glm_fp4_encode(nextafterf(0.583333f, 1)) == 2, "fp4 sliver");
    CHECK(glm_fp4_encode(-0.0f) == 0 && glm_fp4_encode(-1e-30f) == 8 && glm_nf4_encode(NAN) == 0, "signs");
    /* the dynamic map's search is the nearest entry away from midpoints */
    int wrong = 0;
    for (int i = 0; i < 20000; i++) {
        float v = (float)(urand() * 2 - 1) * (urand() < 0.5 ? 1e-3f : 1.0f);
        uint8_t c = glm_dynamic8_encode(glm_dynamic8_map, v);
        float dc = fabsf(v - glm_dynamic8_map[c]);
        for (int k = 0; k < 256; k++)
            if (fabsf(v - glm_dynamic8_map[k]) < dc * (1 - 1e-6f)) wrong++;
    }
    CHECK(wrong == 0, "dynamic map search: %d not nearest", wrong);
    CHECK(glm_dynamic8_encode(glm_dynamic8_map, 1.0f) == 255 && glm_dynamic8_encode(glm_dynamic8_map, 0.0f) == 127 &&
              glm_dynamic8_encode(glm_dynamic8_map, -1.0f) == 0,
          "dynamic map ends");
    /* bf16 helpers: ties to even, NaN quiet */
    CHECK(glm_f32_to_bf16(1.00390625f) == 0x3f80 && glm_f32_to_bf16(1.01171875f) == 0x3f82 &&
              glm_f32_to_bf16(INFINITY) == 0x7f80 && (glm_f32_to_bf16(NAN) & 0x7fc0) == 0x7fc0 &&
              glm_bf16_to_f32(0xbf80) == -1.0f,
          "bf16 rounding");
}

int main(void) {
    check_fixtures();
    check_edges();
    check_roundtrip(GLM_Q4_NF4, (1 << 20) + 37, 0);
    check_roundtrip(GLM_Q4_FP4, (1 << 20) + 37, 0);
    check_roundtrip(GLM_Q4_NF4, 300 * 256 * 64 + 1, 1);
    check_roundtrip(GLM_Q4_FP4, 100000, 1);
    return check_summary("test_quant4");
}
