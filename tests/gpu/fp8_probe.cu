/* tests/gpu/fp8_probe.cu: which FP8 cublasLtMatmul configurations this GPU's cuBLASLt runs (a
 * diagnostic, not a test: on the H200 with CUDA 13.0 every FP8 GEMM of kernels/cuda/fp8.cu came back
 * CUBLAS_STATUS_NOT_SUPPORTED although the heuristic offered an algorithm; docs/fp8.md).
 *
 * One FP8 GEMM in cuBLASLt's TN layout, D [n, m] = alpha s_a s_b (A^T B) (+ beta C), A [m rows of k]
 * E4M3, B [n rows of k] E4M3 or E5M2, in the configurations below, each changing one thing from
 * the configuration of NVIDIA's LtFp8Matmul sample (scale pointers set before the heuristic, 256-byte
 * aligned, C and D bf16, no alignment preferences): the status of the heuristic and of the call, and
 * the result against a float64 product of the same codes on the host (norm-relative error).
 * Prints one line per configuration.
 *
 * --speed: cuBLASLt's own FP8 GEMM speed at GLM-4-9B's frozen-linear shapes (8192 tokens), beside
 * its bf16 GEMM on the same shapes: per-tensor and outer-vector scales, with and without fast
 * accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM), the heuristic's first algorithm and the fastest
 * of its first 8 (each the median of 9 runs timed with CUDA events); a Markdown table in TFLOP/s.
 * This is the ceiling glmtune's fp8_matmul (kernels/cuda/fp8.cu) is compared with.
 * Usage: fp8_probe [--speed] (exit 0; 77 without a GPU). */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct cfg {
    const char *what;
    int m, n, k;
    bool b_e5m2, d_f32, scales_after, scale_off4, null_scales /* A's */, align_pref, outer_vec, no_ws;
    float beta;
};

/* A matmul descriptor in cuBLASLt's FP8 layout ("TN": A transposed, B not; f32 compute and scale),
 * with outer-vector scale modes on A and B when outer is set */
cublasLtMatmulDesc_t tn_desc(bool outer) {
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (outer) {
        int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
    }
    return op;
}

double run(const cfg &c, cublasLtHandle_t lt, void *ws, size_t wsb, int *heur, int *st) {
    const int m = c.m, n = c.n, k = c.k;
    std::vector<uint8_t> ha((size_t)m * k), hb((size_t)n * k);
    std::vector<double> fa(ha.size()), fb(hb.size());
    unsigned s = 12345;
    for (size_t i = 0; i < ha.size(); i++) {
        s = s * 1103515245u + 12345u;
        __nv_fp8_e4m3 v(((int)(s >> 16) % 200 - 100) / 64.0f);
        ha[i] = v.__x, fa[i] = (double)(float)v;
    }
    for (size_t i = 0; i < hb.size(); i++) {
        s = s * 1103515245u + 12345u;
        float x = ((int)(s >> 16) % 200 - 100) / 64.0f;
        if (c.b_e5m2) {
            __nv_fp8_e5m2 v(x);
            hb[i] = v.__x, fb[i] = (double)(float)v;
        } else {
            __nv_fp8_e4m3 v(x);
            hb[i] = v.__x, fb[i] = (double)(float)v;
        }
    }
    const size_t es = c.d_f32 ? 4 : 2;
    uint8_t *da, *db;
    void *dd, *vec;
    cudaMalloc(&da, ha.size()), cudaMalloc(&db, hb.size()), cudaMalloc(&dd, (size_t)m * n * es), cudaMalloc(&vec, 1 << 20);
    cudaMemcpy(da, ha.data(), ha.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb.data(), hb.size(), cudaMemcpyHostToDevice);
    cudaMemset(dd, 0, (size_t)m * n * es);
    /* scales: 1.0 (per tensor) at byte 256 (or 4), or vectors of m and n ones (outer) */
    std::vector<float> ones((size_t)(m > n ? m : n) + 64, 1.0f);
    cudaMemcpy(vec, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice);
    char *base = (char *)vec + (c.scale_off4 ? 4 : 256);
    const void *sa = c.null_scales ? nullptr : (const void *)base, *sb = (const void *)(base + 512 * 1024);
    cudaMemcpy(base + 512 * 1024, ones.data(), (size_t)n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(base, ones.data(), (size_t)m * 4, cudaMemcpyHostToDevice);
    cublasLtMatmulDesc_t op = tn_desc(c.outer_vec);
    cublasLtMatrixLayout_t la, lb, lcd;
    auto set_scales = [&] {
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
    };
    if (!c.scales_after) set_scales();
    cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, m, k);
    cublasLtMatrixLayoutCreate(&lb, c.b_e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3, k, n, k);
    cublasLtMatrixLayoutCreate(&lcd, c.d_f32 ? CUDA_R_32F : CUDA_R_16BF, m, n, m);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t wsl = c.no_ws ? 0 : wsb;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsl, sizeof wsl);
    if (c.align_pref) {
        uint32_t al = 16;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, 4);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, 4);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, 4);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, 4);
    }
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    *heur = (int)cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lcd, lcd, pref, 1, &res, &nres);
    if (!*heur && nres == 0) *heur = -1;
    double err = NAN;
    *st = -1;
    if (!*heur) {
        if (c.scales_after) set_scales();
        const float one = 1.0f;
        *st = (int)cublasLtMatmul(lt, op, &one, da, la, db, lb, &c.beta, dd, lcd, dd, lcd, &res.algo, c.no_ws ? nullptr : ws,
                                  wsl, 0);
        cudaDeviceSynchronize();
        if (!*st) {
            std::vector<uint8_t> hd((size_t)m * n * es);
            cudaMemcpy(hd.data(), dd, hd.size(), cudaMemcpyDeviceToHost);
            double num = 0, den = 0;
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    double ref = 0;
                    for (int t = 0; t < k; t++) ref += fa[(size_t)i * k + t] * fb[(size_t)j * k + t];
                    float got;
                    if (c.d_f32) memcpy(&got, &hd[((size_t)j * m + i) * 4], 4);
                    else {
                        __nv_bfloat16 b;
                        memcpy(&b, &hd[((size_t)j * m + i) * 2], 2);
                        got = __bfloat162float(b);
                    }
                    num += (got - ref) * (got - ref), den += ref * ref;
                }
            err = sqrt(num / (den > 0 ? den : 1));
        }
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lcd);
    cublasLtMatmulDescDestroy(op);
    cudaFree(da), cudaFree(db), cudaFree(dd), cudaFree(vec);
    return err;
}


/* ---------------------------------------------------------------- --speed */

/* D [m, n] (column-major, ld m) = op(A) B: A [k, m] (transposed: m rows of k), B [k, n]; dtype dt
 * for A and B (bf16 or E4M3), D bf16. scale: 0 none (bf16), 1 per tensor, 2 outer vectors.
 * Returns the median ms of algorithm `which` (-1: the fastest of the first 8), or -1 if none ran. */
float time_gemm(cublasLtHandle_t lt, void *ws, size_t wsb, int m, int n, int k, bool fp8, int scale, bool fast, int which,
                int *nalgo) {
    const size_t ea = fp8 ? 1 : 2;
    void *a, *b, *d, *sv;
    cudaMalloc(&a, (size_t)m * k * ea), cudaMalloc(&b, (size_t)n * k * ea), cudaMalloc(&d, (size_t)m * n * 2);
    std::vector<float> ones((size_t)(m + n) + 128, 1.0f); /* both scale vectors, B's 256-byte aligned after A's */
    cudaMalloc(&sv, ones.size() * 4);
    cudaMemcpy(sv, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice);
    cudaMemset(a, 0x22, (size_t)m * k * ea), cudaMemset(b, 0x21, (size_t)n * k * ea); /* finite, nonzero codes */
    const void *sa = sv, *sb = (const char *)sv + (((size_t)m * 4 + 255) / 256) * 256;
    cublasLtMatmulDesc_t op = tn_desc(fp8 && scale == 2);
    cublasLtMatrixLayout_t la, lb, ld;
    if (fp8) {
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
        int8_t f = fast ? 1 : 0;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &f, sizeof f);
    }
    const cudaDataType_t t = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    cublasLtMatrixLayoutCreate(&la, t, k, m, k);
    cublasLtMatrixLayoutCreate(&lb, t, k, n, k);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
    cublasLtMatmulHeuristicResult_t res[8];
    int nres = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 8, res, &nres);
    *nalgo = nres;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    float best = -1;
    for (int i = 0; i < nres; i++) {
        if (which >= 0 && i != which) continue;
        const float one = 1.0f, zero = 0.0f;
        if (cublasLtMatmul(lt, op, &one, a, la, b, lb, &zero, d, ld, d, ld, &res[i].algo, ws, wsb, 0)) continue;
        float t9[9];
        for (int r = 0; r < 9; r++) {
            cudaEventRecord(e0);
            cublasLtMatmul(lt, op, &one, a, la, b, lb, &zero, d, ld, d, ld, &res[i].algo, ws, wsb, 0);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&t9[r], e0, e1);
        }
        std::sort(t9, t9 + 9);
        if (best < 0 || t9[4] < best) best = t9[4];
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    cudaFree(a), cudaFree(b), cudaFree(d), cudaFree(sv);
    return best;
}

void speed(cublasLtHandle_t lt, void *ws, size_t wsb) {
    struct {
        const char *what;
        int m, n, k; /* m: output features, n: tokens, k: input features */
    } sh[] = {
        {"query_key_value fwd", 5120, 8192, 4096},   {"dense fwd", 4096, 8192, 4096},
        {"dense_h_to_4h fwd", 27392, 8192, 4096},    {"dense_4h_to_h fwd", 4096, 8192, 13696},
        {"dense_h_to_4h input grad", 4096, 8192, 27392}, {"dense_4h_to_h input grad", 13696, 8192, 4096},
    };
    printf("\n| shape [out x tokens x in] | bf16 | fp8 tensor | fp8 tensor fast | fp8 outer | fp8 outer fast | "
           "fp8 tensor, best of 8 | fp8 tensor fast, best of 8 | fp8 outer fast, best of 8 |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (auto &s : sh) {
        const double fl = 2.0 * s.m * s.n * s.k;
        struct {
            bool fp8;
            int scale;
            bool fast;
            int which;
        } v[] = {{false, 0, false, 0}, {true, 1, false, 0}, {true, 1, true, 0}, {true, 2, false, 0},
                 {true, 2, true, 0},   {true, 1, false, -1}, {true, 1, true, -1}, {true, 2, true, -1}};
        printf("| %s [%d x %d x %d] |", s.what, s.m, s.n, s.k);
        for (auto &c : v) {
            int na = 0;
            float ms = time_gemm(lt, ws, wsb, s.m, s.n, s.k, c.fp8, c.scale, c.fast, c.which, &na);
            if (ms > 0) printf(" %.0f (%.3f ms) |", fl / (ms * 1e-3) / 1e12, ms);
            else printf(" none (%d algos) |", na);
        }
        printf("\n");
        fflush(stdout);
    }
}

}  // namespace

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp pr;
    cudaGetDeviceProperties(&pr, 0);
    printf("fp8_probe: %s (sm_%d%d), cuBLASLt %zu\n", pr.name, pr.major, pr.minor, cublasLtGetVersion());
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    void *ws;
    const size_t wsb = 32u << 20;
    cudaMalloc(&ws, wsb);
    /* the sample's configuration, then one change each (kernels/cuda/fp8.cu's choices marked "as fp8.cu") */
    const cfg cs[] = {
        {"sample: 64x64x64, C/D bf16, scales before heuristic", 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0.0f},
        {"scale pointers set after the heuristic (as fp8.cu)", 64, 64, 64, 0, 0, 1, 0, 0, 0, 0, 0, 0.0f},
        {"scale pointers 4 bytes into their slot (as fp8.cu's per-tensor scale)", 64, 64, 64, 0, 0, 0, 1, 0, 0, 0, 0, 0.0f},
        {"scale pointers NULL (A's, as fp8.cu's per-tensor paths)", 64, 64, 64, 0, 0, 0, 0, 1, 0, 0, 0, 0.0f},
        {"alignment preferences of 16 bytes (as fp8.cu)", 64, 64, 64, 0, 0, 0, 0, 0, 1, 0, 0, 0.0f},
        {"C/D f32 (as fp8.cu's tile)", 64, 64, 64, 0, 1, 0, 0, 0, 0, 0, 0, 0.0f},
        {"B E5M2 (as fp8.cu's input gradients)", 64, 64, 64, 1, 0, 0, 0, 0, 0, 0, 0, 0.0f},
        {"beta 1", 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0, 1.0f},
        {"n = 33 (rows not a multiple of 16)", 64, 33, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0.0f},
        {"outer-vector scales (as fp8.cu on sm_90)", 64, 64, 64, 0, 0, 0, 0, 0, 0, 1, 0, 0.0f},
        {"no workspace", 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 1, 0.0f},
        {"as fp8.cu's per-tensor call: after, off 4, A NULL, align 16", 64, 64, 64, 0, 0, 1, 1, 1, 1, 0, 0, 0.0f},
        {"9B query_key_value block: m 5120, n 256, k 4096", 5120, 256, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 0.0f},
    };
    for (const cfg &c : cs) {
        int heur = 0, st = 0;
        double e = run(c, lt, ws, wsb, &heur, &st);
        printf("%-64s heuristic %-3d matmul %-3d rel err %.3g\n", c.what, heur, st, e);
    }
    if (argc > 1 && !strcmp(argv[1], "--speed")) speed(lt, ws, wsb);
    cudaFree(ws);
    cublasLtDestroy(lt);
    return 0;
}
