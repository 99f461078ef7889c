/* kernels/cuda/quant4.cu: the 4-bit (QLoRA) format's kernels (kernels/cuda/quant4_cuda.h): the
 * arithmetic of kernels/cpu/quant4.c (bitsandbytes' CUDA kernels' rules) in the same order, so the
 * bytes agree: IEEE reciprocals (__frcp_rn), single rounded multiplies (__fmul_rn), the double
 * quantization's absmax rebuilt as a rounded product then a rounded sum (never an FMA), and the
 * offset's double sums in the CPU's order. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

extern "C" {
#include "kernels/cuda/quant4_cuda.h"
}

namespace {

__constant__ float c_nf4[16] = {GLM_NF4_CODE_VALUES};
__constant__ float c_fp4[16] = {GLM_FP4_CODE_VALUES};
__constant__ float c_dyn8[256] = {GLM_DYNAMIC8_MAP_VALUES};

const int QB = GLM_Q4_BLOCKSIZE, DQB = GLM_Q4_DQ_BLOCKSIZE;

glm_status launched(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return glm_err(GLM_ERR_DEVICE, "4-bit %s: kernel launch: %s", what, cudaGetErrorString(e));
    return GLM_OK;
}

/* ---- quantize ---- */

/* One warp per 64-weight block: lane l holds weights 2l and 2l+1 (a missing one reads 0.0, as
 * bitsandbytes' loads pad), the block absmax by a shuffle max (exact in any order), then the two
 * codes of lane l make byte l of the block. */
template <typename T>
__global__ void k_quantize4(const T *__restrict__ x, int64_t n, int nblocks, glm_q4_type type,
                            uint8_t *__restrict__ codes, float *__restrict__ absmax) {
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= nblocks) return;
    int64_t i = warp * QB + 2 * lane;
    float v0 = 0.0f, v1 = 0.0f;
    if (i < n) v0 = (float)x[i];
    if (i + 1 < n) v1 = (float)x[i + 1];
    float m = fmaxf(fabsf(v0), fabsf(v1));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) absmax[warp] = m;
    float inv = __frcp_rn(m); /* 1.0f / m, IEEE-rounded; an all-zero block: inf */
    if (i < n) {
        uint8_t hi = glm_q4_encode(type, __fmul_rn(v0, inv)), lo = glm_q4_encode(type, __fmul_rn(v1, inv));
        codes[i / 2] = (uint8_t)(hi << 4 | lo);
    }
}

/* The offset's partial sums: thread g adds the absmax of group g's blocks in order, in double. */
__global__ void k_group_sums(const float *__restrict__ absmax, int nblocks, double *__restrict__ part) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int ngroups = (nblocks + DQB - 1) / DQB;
    if (g >= ngroups) return;
    int end = min((g + 1) * DQB, nblocks);
    double s = 0;
    for (int b = g * DQB; b < end; b++) s = __dadd_rn(s, (double)absmax[b]);
    part[g] = s;
}

/* The offset: the partial sums added in order by one thread, divided in double, rounded once. */
__global__ void k_offset(const double *__restrict__ part, int ngroups, int nblocks, float *__restrict__ offset) {
    double t = 0;
    for (int g = 0; g < ngroups; g++) t = __dadd_rn(t, part[g]);
    *offset = __double2float_rn(__ddiv_rn(t, (double)nblocks));
}

/* One 256-thread block per group: v = absmax - offset, the group's max |v|, 8-bit codes. */
__global__ void k_double_quant(const float *__restrict__ absmax, int nblocks, const float *__restrict__ offset,
                               uint8_t *__restrict__ codes8, float *__restrict__ absmax2) {
    __shared__ float map[256];
    __shared__ float red[DQB / 32];
    map[threadIdx.x] = c_dyn8[threadIdx.x];
    int b = blockIdx.x * DQB + threadIdx.x;
    float off = *offset;
    float v = b < nblocks ? __fsub_rn(absmax[b], off) : 0.0f;
    float m = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < DQB / 32; w++) m = fmaxf(m, red[w]);
    if (threadIdx.x == 0) absmax2[blockIdx.x] = m;
    if (b < nblocks) codes8[b] = glm_dynamic8_encode(map, __fmul_rn(v, __frcp_rn(m)));
}

/* ---- dequantize ---- */

/* The absmax of block blk: fp32, or rebuilt from double quantization (product, then sum). */
__device__ __forceinline__ float block_absmax(const glm_q4_tensor &q, const float *map, int64_t blk) {
    if (!q.double_quant) return __ldg(q.absmax + blk);
    return glm_q4_absmax_dq(map[__ldg(q.absmax_codes + blk)], __ldg(q.absmax2 + blk / DQB), __ldg(q.offset));
}

__device__ __forceinline__ uint32_t pack2(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b); /* .x = a (low half: the lower address) */
    return *reinterpret_cast<uint32_t *>(&h);
}

/* Fast path: thread t dequantizes weights 16t .. 16t+15 (8 code bytes, one 8-byte load; two
 * 16-byte stores); 4 threads share a 64-weight block's absmax. */
__global__ void __launch_bounds__(256) k_dequant16(glm_q4_tensor q, int64_t n16, __nv_bfloat16 *__restrict__ out) {
    __shared__ float lut[16];
    __shared__ float map[256];
    if (threadIdx.x < 16) lut[threadIdx.x] = q.type == GLM_Q4_FP4 ? c_fp4[threadIdx.x] : c_nf4[threadIdx.x];
    if (q.double_quant) map[threadIdx.x] = c_dyn8[threadIdx.x]; /* blockDim 256 */
    __syncthreads();
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n16) return;
    uint2 c = __ldg(reinterpret_cast<const uint2 *>(q.codes) + t);
    float a = block_absmax(q, map, t >> 2);
    uint32_t w[8];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t byte0 = (c.x >> (8 * k)) & 0xffu, byte1 = (c.y >> (8 * k)) & 0xffu;
        w[k] = pack2(__fmul_rn(lut[byte0 >> 4], a), __fmul_rn(lut[byte0 & 15], a));
        w[4 + k] = pack2(__fmul_rn(lut[byte1 >> 4], a), __fmul_rn(lut[byte1 & 15], a));
    }
    uint4 *o = reinterpret_cast<uint4 *>(out + t * 16);
    o[0] = make_uint4(w[0], w[1], w[2], w[3]);
    o[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

/* Any alignment, any range: one thread a weight, weights i0 .. n-1. */
__global__ void __launch_bounds__(256) k_dequant1(glm_q4_tensor q, int64_t i0, __nv_bfloat16 *__restrict__ out) {
    __shared__ float lut[16];
    __shared__ float map[256];
    if (threadIdx.x < 16) lut[threadIdx.x] = q.type == GLM_Q4_FP4 ? c_fp4[threadIdx.x] : c_nf4[threadIdx.x];
    if (q.double_quant) map[threadIdx.x] = c_dyn8[threadIdx.x];
    __syncthreads();
    int64_t i = i0 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= q.n) return;
    uint8_t byte = q.codes[i / 2];
    out[i] = __float2bfloat16_rn(__fmul_rn(lut[i & 1 ? byte & 15 : byte >> 4], block_absmax(q, map, i / QB)));
}

/* The module takes only glm_err & co. from the program (kernels/CMakeLists.txt), not the CPU
 * reference's functions: the counts are computed here. */
int64_t nblocks_of(int64_t n) { return (n + QB - 1) / QB; }
int64_t ngroups_of(int64_t n) { return (nblocks_of(n) + DQB - 1) / DQB; }

glm_status check_q(const glm_q4_tensor *q, const char *what) {
    if (!q || (q->type != GLM_Q4_NF4 && q->type != GLM_Q4_FP4) || q->n < 1 || !q->codes ||
        (q->double_quant ? !q->absmax_codes || !q->absmax2 || !q->offset : !q->absmax))
        return glm_err(GLM_ERR_ARG, "%s: the 4-bit tensor is not set up (type %d, n %lld, buffers missing?)", what,
                       q ? (int)q->type : -1, q ? (long long)q->n : -1LL);
    if (nblocks_of(q->n) > INT32_MAX / 32)
        return glm_err(GLM_ERR_ARG, "%s: %lld weights is more than one tensor may hold", what, (long long)q->n);
    return GLM_OK;
}

} // namespace

extern "C" size_t glm_q4_cuda_quantize_workspace(int64_t n, int double_quant) {
    if (!double_quant || n < 1) return 0;
    return ((size_t)nblocks_of(n) * 4 + 15) / 16 * 16 + (size_t)ngroups_of(n) * sizeof(double);
}

extern "C" glm_status glm_q4_cuda_quantize(glm_q4_tensor *q, const void *x, int x_bf16, void *workspace, void *stream) {
    glm_status st = check_q(q, "4-bit quantization (CUDA)");
    if (st) return st;
    if (!x) return glm_err(GLM_ERR_ARG, "4-bit quantization (CUDA): no input");
    if (q->double_quant && !workspace)
        return glm_err(GLM_ERR_ARG, "4-bit quantization (CUDA): double quantization needs a workspace of %zu bytes",
                       glm_q4_cuda_quantize_workspace(q->n, 1));
    cudaStream_t s = (cudaStream_t)stream;
    int nblocks = (int)nblocks_of(q->n), ngroups = (int)ngroups_of(q->n);
    float *absmax = q->double_quant ? (float *)workspace : q->absmax;
    unsigned grid = (unsigned)(((int64_t)nblocks * 32 + 255) / 256);
    if (x_bf16)
        k_quantize4<__nv_bfloat16><<<grid, 256, 0, s>>>((const __nv_bfloat16 *)x, q->n, nblocks, q->type, q->codes, absmax);
    else
        k_quantize4<float><<<grid, 256, 0, s>>>((const float *)x, q->n, nblocks, q->type, q->codes, absmax);
    if ((st = launched("quantization"))) return st;
    if (!q->double_quant) return GLM_OK;
    double *part = (double *)((char *)workspace + ((size_t)nblocks * 4 + 15) / 16 * 16);
    k_group_sums<<<(ngroups + 127) / 128, 128, 0, s>>>(absmax, nblocks, part);
    k_offset<<<1, 1, 0, s>>>(part, ngroups, nblocks, q->offset);
    k_double_quant<<<ngroups, DQB, 0, s>>>(absmax, nblocks, q->offset, q->absmax_codes, q->absmax2);
    return launched("double quantization");
}

extern "C" glm_status glm_q4_cuda_dequantize_bf16(const glm_q4_tensor *q, void *out, void *stream) {
    glm_status st = check_q(q, "4-bit dequantization (CUDA)");
    if (st) return st;
    if (!out) return glm_err(GLM_ERR_ARG, "4-bit dequantization (CUDA): no output");
    cudaStream_t s = (cudaStream_t)stream;
    int aligned = ((uintptr_t)q->codes % 8 == 0) && ((uintptr_t)out % 16 == 0);
    int64_t n16 = aligned ? q->n / 16 : 0, rest = q->n - n16 * 16;
    if (n16 > 0) k_dequant16<<<(unsigned)((n16 + 255) / 256), 256, 0, s>>>(*q, n16, (__nv_bfloat16 *)out);
    if (rest > 0) k_dequant1<<<(unsigned)((rest + 255) / 256), 256, 0, s>>>(*q, n16 * 16, (__nv_bfloat16 *)out);
    return launched("dequantization");
}

extern "C" glm_status glm_q4_cuda_sync(void) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return glm_err(GLM_ERR_DEVICE, "4-bit kernels: %s", cudaGetErrorString(e));
    return GLM_OK;
}
