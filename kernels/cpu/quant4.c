/* kernels/cpu/quant4.c: the CPU reference of the 4-bit (QLoRA) weight format (kernels/quant4.h).
 * The arithmetic is bitsandbytes' CUDA kernels' (csrc/kernels.cu kQuantizeBlockwiseSmall,
 * kQuantizeBlockwise, kDequantizeBlockwise) written as plain loops; tests/kernels/test_quant4.c
 * holds it bit for bit to bitsandbytes' own output. */
#include "kernels/quant4.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const float glm_dynamic8_map[256] = {GLM_DYNAMIC8_MAP_VALUES};

glm_q4_sizes glm_q4_size(int64_t n, int double_quant) {
    glm_q4_sizes s = {0};
    if (n < 1) return s;
    s.nblocks = (n + GLM_Q4_BLOCKSIZE - 1) / GLM_Q4_BLOCKSIZE;
    s.codes = (size_t)((n + 1) / 2);
    if (double_quant) {
        s.ngroups = (s.nblocks + GLM_Q4_DQ_BLOCKSIZE - 1) / GLM_Q4_DQ_BLOCKSIZE;
        s.absmax_codes = (size_t)s.nblocks;
        s.absmax2 = (size_t)s.ngroups * sizeof(float);
        s.offset = sizeof(float);
    } else {
        s.absmax = (size_t)s.nblocks * sizeof(float);
    }
    s.total = s.codes + s.absmax + s.absmax_codes + s.absmax2 + s.offset;
    return s;
}

const char *glm_q4_type_name(glm_q4_type type) {
    return type == GLM_Q4_NF4 ? "nf4" : type == GLM_Q4_FP4 ? "fp4" : "?";
}

glm_status glm_q4_type_parse(const char *s, glm_q4_type *out) {
    if (s && !strcmp(s, "nf4")) return *out = GLM_Q4_NF4, GLM_OK;
    if (s && !strcmp(s, "fp4")) return *out = GLM_Q4_FP4, GLM_OK;
    return glm_err(GLM_ERR_ARG, "4-bit quantization type '%s' is not known; hint: use nf4 (QLoRA's) or fp4",
                   s ? s : "(null)");
}

static glm_status check_q(const glm_q4_tensor *q, const char *what) {
    if (!q || (q->type != GLM_Q4_NF4 && q->type != GLM_Q4_FP4) || q->n < 1 || !q->codes ||
        (q->double_quant ? !q->absmax_codes || !q->absmax2 || !q->offset : !q->absmax))
        return glm_err(GLM_ERR_ARG, "%s: the 4-bit tensor is not set up (type %d, n %lld, buffers missing?)", what,
                       q ? (int)q->type : -1, q ? (long long)q->n : -1LL);
    return GLM_OK;
}

glm_status glm_q4_alloc(glm_q4_tensor *q, glm_q4_type type, int64_t n, int double_quant) {
    memset(q, 0, sizeof *q);
    if (type != GLM_Q4_NF4 && type != GLM_Q4_FP4) return glm_err(GLM_ERR_ARG, "4-bit alloc: unknown type %d", (int)type);
    if (n < 1) return glm_err(GLM_ERR_ARG, "4-bit alloc: %lld weights (need at least 1)", (long long)n);
    glm_q4_sizes s = glm_q4_size(n, double_quant);
    q->type = type;
    q->double_quant = double_quant ? 1 : 0;
    q->n = n;
    q->codes = malloc(s.codes);
    int ok = q->codes != NULL;
    if (double_quant) {
        q->absmax_codes = malloc(s.absmax_codes);
        q->absmax2 = malloc(s.absmax2);
        q->offset = malloc(s.offset);
        ok = ok && q->absmax_codes && q->absmax2 && q->offset;
    } else {
        q->absmax = malloc(s.absmax);
        ok = ok && q->absmax;
    }
    if (!ok) {
        glm_q4_free(q);
        return glm_err(GLM_ERR_NOMEM, "4-bit alloc: %zu bytes for %lld weights", s.total, (long long)n);
    }
    return GLM_OK;
}

void glm_q4_free(glm_q4_tensor *q) {
    if (!q) return;
    free(q->codes);
    free(q->absmax);
    free(q->absmax_codes);
    free(q->absmax2);
    free(q->offset);
    memset(q, 0, sizeof *q);
}

float glm_q4_absmax_mean(const float *absmax, int64_t nblocks) {
    double total = 0;
    for (int64_t g = 0; g < nblocks; g += GLM_Q4_DQ_BLOCKSIZE) {
        int64_t end = g + GLM_Q4_DQ_BLOCKSIZE < nblocks ? g + GLM_Q4_DQ_BLOCKSIZE : nblocks;
        double part = 0;
        for (int64_t b = g; b < end; b++) part += absmax[b];
        total += part;
    }
    return nblocks > 0 ? (float)(total / (double)nblocks) : 0.0f;
}

void glm_q4_double_quant(const float *absmax, int64_t nblocks, float offset, uint8_t *codes8, float *absmax2) {
    for (int64_t g = 0; g * GLM_Q4_DQ_BLOCKSIZE < nblocks; g++) {
        int64_t b0 = g * GLM_Q4_DQ_BLOCKSIZE;
        int64_t end = b0 + GLM_Q4_DQ_BLOCKSIZE < nblocks ? b0 + GLM_Q4_DQ_BLOCKSIZE : nblocks;
        float m = -FLT_MAX;
        for (int64_t b = b0; b < end; b++) m = fmaxf(m, fabsf(absmax[b] - offset));
        absmax2[g] = m;
        float inv = 1.0f / m; /* kQuantizeBlockwise: smem_absmax_value = 1.0f / local_abs_max */
        for (int64_t b = b0; b < end; b++) codes8[b] = glm_dynamic8_encode(glm_dynamic8_map, (absmax[b] - offset) * inv);
    }
}

/* The 4-bit codes and absmax of the blocks of x (float32 or bf16 bits): kQuantizeBlockwiseSmall. */
static glm_status quantize(glm_q4_tensor *q, const float *xf, const uint16_t *xh, float *absmax) {
    int64_t n = q->n;
    for (int64_t b0 = 0; b0 < n; b0 += GLM_Q4_BLOCKSIZE) {
        int64_t len = n - b0 < GLM_Q4_BLOCKSIZE ? n - b0 : GLM_Q4_BLOCKSIZE;
        float v[GLM_Q4_BLOCKSIZE + 1];
        float m = -FLT_MAX;
        for (int64_t i = 0; i < len; i++) {
            v[i] = xf ? xf[b0 + i] : glm_bf16_to_f32(xh[b0 + i]);
            if (!isfinite(v[i]))
                return glm_err(GLM_ERR_NUMERIC,
                               "4-bit quantization: weight %lld of %lld is %s; hint: a base weight must be finite "
                               "(is the checkpoint damaged?)",
                               (long long)(b0 + i), (long long)n, isnan(v[i]) ? "NaN" : "infinite");
            m = fmaxf(m, fabsf(v[i]));
        }
        v[len] = 0.0f; /* the pad of an odd n's last byte: the kernel loads 0 there */
        absmax[b0 / GLM_Q4_BLOCKSIZE] = m;
        float inv = 1.0f / m; /* an all-zero block: inf, and 0 * inf = NaN codes as the kernel's */
        for (int64_t i = 0; i < len; i += 2) {
            uint8_t hi = glm_q4_encode(q->type, v[i] * inv), lo = glm_q4_encode(q->type, v[i + 1] * inv);
            q->codes[(b0 + i) / 2] = (uint8_t)(hi << 4 | lo);
        }
    }
    if (q->double_quant) {
        int64_t nblocks = (n + GLM_Q4_BLOCKSIZE - 1) / GLM_Q4_BLOCKSIZE;
        *q->offset = glm_q4_absmax_mean(absmax, nblocks);
        glm_q4_double_quant(absmax, nblocks, *q->offset, q->absmax_codes, q->absmax2);
    }
    return GLM_OK;
}

static glm_status quantize_any(glm_q4_tensor *q, const float *xf, const uint16_t *xh) {
    glm_status st = check_q(q, "4-bit quantization");
    if (st) return st;
    if (!xf && !xh) return glm_err(GLM_ERR_ARG, "4-bit quantization: no input");
    if (!q->double_quant) return quantize(q, xf, xh, q->absmax);
    float *absmax = malloc((size_t)glm_q4_size(q->n, 0).nblocks * sizeof(float));
    if (!absmax) return glm_err(GLM_ERR_NOMEM, "4-bit quantization: absmax of %lld weights", (long long)q->n);
    st = quantize(q, xf, xh, absmax);
    free(absmax);
    return st;
}

glm_status glm_q4_quantize_f32(glm_q4_tensor *q, const float *x) { return quantize_any(q, x, NULL); }
glm_status glm_q4_quantize_bf16(glm_q4_tensor *q, const uint16_t *x) { return quantize_any(q, NULL, x); }

float glm_q4_block_absmax(const glm_q4_tensor *q, int64_t b) {
    if (!q->double_quant) return q->absmax[b];
    return glm_q4_absmax_dq(glm_dynamic8_map[q->absmax_codes[b]], q->absmax2[b / GLM_Q4_DQ_BLOCKSIZE], *q->offset);
}

static glm_status dequantize(const glm_q4_tensor *q, float *of, uint16_t *oh) {
    glm_status st = check_q(q, "4-bit dequantization");
    if (st) return st;
    float table[16];
    for (int c = 0; c < 16; c++) table[c] = glm_q4_code_value(q->type, (uint8_t)c);
    for (int64_t b0 = 0; b0 < q->n; b0 += GLM_Q4_BLOCKSIZE) {
        int64_t end = q->n - b0 < GLM_Q4_BLOCKSIZE ? q->n : b0 + GLM_Q4_BLOCKSIZE;
        float a = glm_q4_block_absmax(q, b0 / GLM_Q4_BLOCKSIZE);
        for (int64_t i = b0; i < end; i++) {
            uint8_t byte = q->codes[i / 2];
            float v = table[i & 1 ? byte & 15 : byte >> 4] * a;
            if (of)
                of[i] = v;
            else
                oh[i] = glm_f32_to_bf16(v);
        }
    }
    return GLM_OK;
}

glm_status glm_q4_dequantize_f32(const glm_q4_tensor *q, float *out) { return dequantize(q, out, NULL); }
glm_status glm_q4_dequantize_bf16(const glm_q4_tensor *q, uint16_t *out) { return dequantize(q, NULL, out); }
