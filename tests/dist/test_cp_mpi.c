/* tests/dist/test_cp_mpi.c: context parallel (lora/model/ring_attention.h, --context-parallel) at the
 * model level on the CPU backend over MPI, run by test_cp_mpi.sh as
 *     mpirun -np W test_cp_mpi CP
 * (W ranks, groups of CP ranks per row, W / CP data-parallel groups). Every rank builds the same
 * random GLM-4-shaped model and LoRA (non-zero lora_B, so every gradient is non-zero) twice: on
 * the MPI backend with context parallel over its group, and on the single-process CPU backend
 * as the reference. For each case, the CP step's loss sum, target count and LoRA gradients,
 * summed over all ranks (all-reduce, as the trainer does), must equal the reference step on the
 * unsplit rows of every group within TOL:
 *   - rows of one document and of several, with document boundaries inside chunks and exactly on
 *     chunk boundaries, a one-token document, the loader's trailing padding document;
 *   - T not a multiple of 2 CP (the padding rule of lora/model/ring_attention.h);
 *   - gradient checkpointing none, full (the ring runs again in the recomputation), selective;
 *   - micro-batches of 2 rows, a short last micro-batch (1 row in a workspace of 2);
 *   - LoRA dropout (the masks follow the tokens' global places, or their keys, glm_batch.drop_key) when
 *     one group covers the batch; the keys end at a page boundary before an inaccessible page, so a
 *     step that reads a key past the row (the padding tokens' place, issue 34) crashes the test.
 * Numbers. The CPU ring accumulates in double (the backend's acc_dtype) and rounds once, so its
 * attention is the whole-row attention's to the last bit in almost every element; the loss
 * sums agree to ~1e-16. The gradients still differ where the sums over tokens are split (each
 * rank's partial LoRA gradients, then the all-reduce): ~5e-8 relative. One more source would
 * hide everything else: cblas_sgemm's result for a row depends on how the call's rows fall into
 * the kernel's tiles (a row in an odd tail is summed in another order), so any change of row
 * counts (context parallel, other chunk sizes) moves every LoRA gradient by up to ~1e-6 through
 * the cancellation in the sums over tokens; the reference differs from ITSELF that much when only
 * its MLP / loss chunk sizes change. Both sides of this test therefore use a GEMM that
 * accumulates in double and rounds once (matmul_f64 below; every other op is the CPU backend's),
 * and each case also checks that the reference with other chunk sizes stays within TOL_FLOOR =
 * 2e-7 of itself, so that the comparison can see an error of the size of TOL.
 * TOL = 1e-6 (context parallel's bar) on the loss sum and the gradients (norm-relative over all
 * tensors; 2 TOL for the worst tensor); measured: loss ~1e-16, gradients 4-6e-8. A wrong mask,
 * position, chunk order, label or dropout mask gives 1e-3 or more.
 * GLM_TEST_SGEMM=1 runs the same cases with the backend's cblas_sgemm (tolerance TOL_SGEMM =
 * 3e-6; measured up to 1.1e-6, the reference against itself up to 6.8e-7); GLM_TEST_VERBOSE=1
 * prints every case's numbers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/comm.h"
#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "tests/check.h"
#include "tests/model_opt.h"

static const double TOL = 1e-6, TOL_FLOOR = 2e-7, TOL_SGEMM = 3e-6;
static int g_sgemm; /* GLM_TEST_SGEMM: the backend's cblas_sgemm instead of the double-accumulating GEMM */

static const glm_config CFG = {.layout = GLM_LAYOUT_CHATGLM, .C = 32, .L = 2, .H = 4, .Hkv = 2, .Dh = 8, .F = 48, .V = 96,
                               .eps = 1e-6f, .rope_base = 10000.0, .rope_dim = 4, .qkv_bias = true};

/* C = alpha op(A) op(B) + beta C with double accumulation, rounded to f32 once (f32 operands): the
 * same bits whatever the row count or the blocking, unlike cblas_sgemm, whose results depend on
 * how a call's rows fall into its kernel's tiles (see the header comment). */
static glm_status matmul_f64(const glm_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                             glm_dtype dta, int64_t lda, const void *B, glm_dtype dtb, int64_t ldb, float beta,
                             const void *C0, void *C, glm_dtype dtc, int64_t ldc) {
    (void)be, (void)dta, (void)dtb, (void)dtc;
    const float *a = A, *b = B, *c0 = C0 ? C0 : C;
    float *c = C;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)(ta ? a[k * lda + i] : a[i * lda + k]) * (tb ? b[j * ldb + k] : b[k * ldb + j]);
            double v = (double)alpha * s;
            if (beta != 0.0f) v += (double)beta * c0[i * ldc + j];
            c[i * ldc + j] = (float)v;
        }
    return GLM_OK;
}

static glm_backend with_f64_gemm(const glm_backend *be) {
    glm_backend b = *be;
    b.matmul = matmul_f64;
    return b;
}

typedef struct {
    glm_model *m;
    glm_lora *lora;
    glm_param *p;
    int np;
} net;

static void make_net(const glm_backend *be, net *n) {
    CHECK(glm_model_create_random(&CFG, be, 17, &n->m) == GLM_OK, "model: %s", glm_errmsg());
    glm_lora_config lc = {4, 8.0f, 0.0f, false, "all"};
    CHECK(glm_lora_create(n->m, &lc, 5, &n->lora) == GLM_OK, "lora: %s", glm_errmsg());
    n->p = glm_lora_params(n->lora, &n->np);
    for (int i = 0; i < n->np; i++) /* the same non-zero weights in both nets (lora_B too) */
        for (int64_t k = 0; k < n->p[i].numel; k++) n->p[i].w[k] = 0.2f * glm_normal_hash(99, (uint64_t)i, (uint64_t)k);
    MODEL_OPT(n->m, max_bytes, 1e9);
}

/* A batch of rows of T tokens with documents of the given lengths (a row's lengths end at 0;
 * what is left of T is the loader's padding document: no targets). Targets: every token but a
 * document's first, except a pseudo-random fifth. */
typedef struct {
    int B, T;
    uint32_t *ids;
    uint8_t *tg;
    int32_t *pos, *doc;
} rows;

static rows make_rows(int B, int T, const int (*lens)[8], uint64_t seed) {
    rows r = {B, T, malloc(4 * (size_t)(B * T)), malloc((size_t)(B * T)), malloc(4 * (size_t)(B * T)), malloc(4 * (size_t)(B * T))};
    for (int b = 0; b < B; b++) {
        int t = 0, d = 0;
        for (int k = 0; k < 8 && lens[b][k] > 0; k++, d++)
            for (int j = 0; j < lens[b][k]; j++, t++) {
                int64_t i = (int64_t)b * T + t;
                r.ids[i] = (uint32_t)(glm_dropout_u01(seed, 1, (uint64_t)i) * CFG.V);
                r.tg[i] = j > 0 && glm_dropout_u01(seed, 2, (uint64_t)i) > 0.2f;
                r.pos[i] = j;
                r.doc[i] = d;
            }
        for (int j = 0; t < T; t++, j++) { /* padding */
            int64_t i = (int64_t)b * T + t;
            r.ids[i] = 0, r.tg[i] = 0, r.pos[i] = j, r.doc[i] = d;
        }
    }
    return r;
}

static void free_rows(rows *r) { free(r->ids), free(r->tg), free(r->pos), free(r->doc); }

/* Norm-relative difference of two nets' gradients: over all tensors, and the worst tensor. */
static double grad_diff(const net *a, const net *b, double *worst, int *zero) {
    double num = 0, den = 0;
    *worst = 0;
    if (zero) *zero = 0;
    for (int i = 0; i < a->np; i++) {
        double x = 0, y = 0;
        for (int64_t k = 0; k < a->p[i].numel; k++) {
            double d = (double)a->p[i].g[k] - b->p[i].g[k];
            x += d * d;
            y += (double)b->p[i].g[k] * b->p[i].g[k];
        }
        num += x, den += y;
        if (zero) *zero += y == 0;
        double e = y > 0 ? sqrt(x / y) : sqrt(x);
        if (e > *worst) *worst = e;
    }
    return sqrt(num / den);
}

/* n keys that end exactly at a page boundary followed by an inaccessible page (reading one past
 * them faults, with or without a sanitizer); *base and *len for munmap. NULL when mmap fails. */
static uint64_t *guarded_keys(size_t n, void **base, size_t *len) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), bytes = n * sizeof(uint64_t), data = (bytes + pg - 1) / pg * pg;
    *len = data + pg;
    char *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (mprotect(p + data, pg, PROT_NONE)) {
        munmap(p, *len);
        return NULL;
    }
    *base = p;
    return (uint64_t *)(p + data - bytes);
}

/* One case: the global batch `all` (dp groups x B rows); group g takes rows g*B.. . */
static void run_case(const char *what, const glm_backend *be, net *cp, net *ref, net *ref2, const rows *all, int B, int dp_rank,
                     int ckpt, float p_drop, const uint64_t *keys) {
    cp->lora->dropout = ref->lora->dropout = ref2->lora->dropout = p_drop;
    glm_lora_zero_grads(cp->lora);
    glm_lora_zero_grads(ref->lora);
    glm_lora_zero_grads(ref2->lora);
    int T = all->T;
    glm_batch mine = {B, T, all->ids + (size_t)dp_rank * B * T, all->tg + (size_t)dp_rank * B * T,
                      all->pos + (size_t)dp_rank * B * T, all->doc + (size_t)dp_rank * B * T,
                      keys ? keys + (size_t)dp_rank * B * T : NULL};
    glm_batch whole = {all->B, T, all->ids, all->tg, all->pos, all->doc, keys};
    double ls = 0, lr = 0;
    int64_t nt = 0, nr = 0;
    glm_status s = glm_model_step(cp->m, cp->lora, &mine, 1.0f, 1, ckpt, 77, &ls, &nt);
    CHECK(s == GLM_OK, "%s: context-parallel step: %s", what, glm_errmsg());
    s = glm_model_step(ref->m, ref->lora, &whole, 1.0f, 1, ckpt, 77, &lr, &nr);
    CHECK(s == GLM_OK, "%s: reference step: %s", what, glm_errmsg());
    double l2;
    int64_t n2;
    s = glm_model_step(ref2->m, ref2->lora, &whole, 1.0f, 1, ckpt, 77, &l2, &n2);
    CHECK(s == GLM_OK, "%s: reference step (other chunks): %s", what, glm_errmsg());
    double sums[2] = {ls, (double)nt};
    CHECK(glm_comm_all_reduce_host(be, sums, 2) == GLM_OK, "all_reduce_host");
    CHECK(check_close(sums[0], lr, TOL, 0) && sums[1] == (double)nr, "%s: loss sum %.12g over %g targets vs %.12g over %lld",
          what, sums[0], sums[1], lr, (long long)nr);
    for (int i = 0; i < cp->np; i++) CHECK(glm_comm_all_reduce(be, cp->p[i].g, cp->p[i].numel) == GLM_OK, "all_reduce grads");
    double worst, wfloor;
    int zero;
    double err = grad_diff(cp, ref, &worst, &zero), floor_ = grad_diff(ref2, ref, &wfloor, NULL);
    CHECK(zero == 0, "%s: %d gradient tensors are zero in the reference (the test would not see them)", what, zero);
    CHECK(g_sgemm || floor_ < TOL_FLOOR, "%s: the reference differs from itself by %.3g with other chunk sizes: the "
          "comparison would not see an error of that size", what, floor_);
    double tol = g_sgemm ? TOL_SGEMM : TOL;
    CHECK(err < tol && worst < 2 * tol, "%s: LoRA gradients rel err %.3g overall, %.3g worst tensor (tolerance %.1g)", what,
          err, worst, tol);
    if (be->rank == 0 && getenv("GLM_TEST_VERBOSE"))
        printf("%s: loss rel %.2e, grads rel %.2e (worst tensor %.2e); reference vs itself with other chunks %.2e (%.2e)\n",
               what, fabs(sums[0] - lr) / fabs(lr), err, worst, floor_, wfloor);
}

int main(int argc, char **argv) {
    glm_status st;
    const glm_backend *be = glm_backend_cpu_dist(&st);
    if (!be) {
        printf("FAIL: glm_backend_cpu_dist: %s\n", glm_errmsg());
        return 1;
    }
    int W = be->world, cpn = argc > 1 ? atoi(argv[1]) : W;
    if (cpn < 2 || W % cpn) {
        printf("FAIL: usage: mpirun -np W test_cp_mpi CP (CP >= 2 dividing W; W = %d, CP = %d)\n", W, cpn);
        return 1;
    }
    int dp = W / cpn, dp_rank = be->rank / cpn, cp_rank = be->rank % cpn;
    const glm_backend *grp = NULL;
    CHECK(glm_comm_split(be, dp_rank, cp_rank, &grp) == GLM_OK && grp->world == cpn && grp->rank == cp_rank,
          "comm_split: %s", glm_errmsg());
    static glm_backend be64, one64;
    be64 = with_f64_gemm(be);
    one64 = with_f64_gemm(glm_backend_cpu());
    g_sgemm = getenv("GLM_TEST_SGEMM") != NULL;
    net cp, ref, ref2;
    make_net(g_sgemm ? be : &be64, &cp);
    make_net(g_sgemm ? glm_backend_cpu() : &one64, &ref);
    make_net(g_sgemm ? glm_backend_cpu() : &one64, &ref2);
    MODEL_OPT(ref2.m, mlp_chunk, 7);
    MODEL_OPT(ref2.m, loss_chunk, 5);
    {
        glm_model_options mo = glm_model_get_options(cp.m);
        mo.cp = cpn;
        mo.cp_comm = grp;
        CHECK(glm_model_set_options(cp.m, &mo) == GLM_OK, "context parallel options: %s", glm_errmsg());
    }

    /* T = 14 CP - 2: never a multiple of 2 CP (2 padding tokens); S = Tp / 2 CP = 7 */
    const int T = 14 * cpn - 2, Tp = (T + 2 * cpn - 1) / (2 * cpn) * (2 * cpn), S = Tp / (2 * cpn);
    char what[160];
    /* rows: (a) one document over the whole row; (b) documents ending exactly on chunk edges (S,
     * 2S), then a one-token document; (c) documents ending inside chunks and 3 tokens of the
     * loader's padding; (d) one short document and padding */
    const int one[1][8] = {{T}};
    const int edges[1][8] = {{S, S, 1, T - 2 * S - 1}};
    const int inside[1][8] = {{S + 3, S / 2 + 1, T - S - S / 2 - 7}};
    const int shortd[1][8] = {{S + 2}};
    const struct {
        const char *name;
        const int (*lens)[8];
    } L1[] = {{"one document", one}, {"documents ending on chunk edges", edges}, {"documents ending inside chunks, padding", inside},
              {"a short document, padding", shortd}};
    for (int ck = 0; ck < 3; ck++) {
        static const char *ckn[] = {"no recomputation", "full recomputation", "selective"};
        int mode = ck == 0 ? 0 : ck == 1 ? 1 : 2;
        for (size_t c = 0; c < sizeof L1 / sizeof *L1; c++) {
            if (ck > 0 && c != 1) continue; /* the checkpointing modes on the richest row */
            int lens[8][8];
            for (int g = 0; g < dp; g++) memcpy(lens[g], L1[(c + (size_t)g) % 4].lens[0], sizeof lens[g]);
            rows r = make_rows(dp, T, (const int(*)[8])lens, 3 + c);
            snprintf(what, sizeof what, "CP %d x DP %d, T %d (S %d): %s, %s", cpn, dp, T, S, L1[c].name, ckn[ck]);
            run_case(what, be, &cp, &ref, &ref2, &r, 1, dp_rank, mode, 0.0f, NULL);
            free_rows(&r);
        }
    }
    /* micro-batches of 2 rows per group, then a short last one (1 row in the workspace of 2) */
    {
        int lens[16][8];
        for (int i = 0; i < 2 * dp; i++) memcpy(lens[i], L1[(size_t)(i + 1) % 4].lens[0], sizeof lens[i]);
        rows r = make_rows(2 * dp, T, (const int(*)[8])lens, 11);
        snprintf(what, sizeof what, "CP %d x DP %d: micro-batch of 2 rows", cpn, dp);
        run_case(what, be, &cp, &ref, &ref2, &r, 2, dp_rank, 0, 0.0f, NULL);
        free_rows(&r);
        rows r1 = make_rows(dp, T, (const int(*)[8])lens, 12);
        snprintf(what, sizeof what, "CP %d x DP %d: a 1-row micro-batch after 2-row ones", cpn, dp);
        run_case(what, be, &cp, &ref, &ref2, &r1, 1, dp_rank, 0, 0.0f, NULL);
        free_rows(&r1);
    }
    /* the most padding: T = 10 CP + 1 (2 CP - 1 padding tokens), one document */
    {
        int T3 = 10 * cpn + 1, lens[8][8] = {{0}};
        for (int g = 0; g < dp; g++) lens[g][0] = T3 - g; /* group 1: the loader's padding too */
        rows r = make_rows(dp, T3, (const int(*)[8])lens, 41);
        snprintf(what, sizeof what, "CP %d x DP %d, T %d (%d padding tokens): one document", cpn, dp, T3, 2 * cpn - 1);
        run_case(what, be, &cp, &ref, &ref2, &r, 1, dp_rank, 0, 0.0f, NULL);
        free_rows(&r);
    }
    /* a longer row with many documents (T = 40 CP + 3, odd) in every group */
    {
        int T2 = 40 * cpn + 3, lens[8][8];
        for (int g = 0; g < dp; g++) {
            int rest = T2, k = 0;
            for (int len = 7 + 3 * g; k < 7 && rest > len; k++, len += 5) lens[g][k] = len, rest -= len;
            lens[g][k] = rest;
            if (k < 7) lens[g][k + 1] = 0;
        }
        rows r = make_rows(dp, T2, (const int(*)[8])lens, 21);
        snprintf(what, sizeof what, "CP %d x DP %d, T %d: many documents", cpn, dp, T2);
        run_case(what, be, &cp, &ref, &ref2, &r, 1, dp_rank, 0, 0.0f, NULL);
        free_rows(&r);
    }
    /* LoRA dropout: the masks follow the global token places (one group: the reference batch is
     * the group's batch) */
    if (dp == 1) {
        rows r = make_rows(1, T, edges, 31);
        snprintf(what, sizeof what, "CP %d, T %d: LoRA dropout 0.1, full recomputation", cpn, T);
        run_case(what, be, &cp, &ref, &ref2, &r, 1, 0, 1, 0.1f, NULL);
        /* with dropout keys (glm_batch.drop_key) as the trainer gives them: runs of consecutive keys
         * that break where a sample of the data ends (here a third into the row) */
        void *kbase = NULL;
        size_t klen = 0;
        uint64_t *keys = guarded_keys((size_t)T, &kbase, &klen);
        CHECK(keys != NULL, "mmap of the guarded keys");
        if (keys) {
            for (int t = 0; t < T; t++) keys[t] = t < T / 3 ? 5000 + (uint64_t)t : 90000 + (uint64_t)t;
            snprintf(what, sizeof what, "CP %d, T %d: LoRA dropout 0.1 keyed by the data, full recomputation", cpn, T);
            run_case(what, be, &cp, &ref, &ref2, &r, 1, 0, 1, 0.1f, keys);
            munmap(kbase, klen);
        }
        free_rows(&r);
    }
    /* errors: a group of the wrong size (refused by the options, which stay as they were) */
    {
        glm_model_options mo = glm_model_get_options(cp.m);
        mo.cp = cpn + 1;
        CHECK(glm_model_set_options(cp.m, &mo) == GLM_ERR_ARG && strstr(glm_errmsg(), "group") && cp.m->opt.cp == cpn,
              "a group communicator of the wrong size is refused: %s", glm_errmsg());
    }
    {
        rows r = make_rows(1, T, one, 1);
        glm_batch b = {1, T, r.ids, r.tg, r.pos, r.doc, NULL};
        float lg[1];
        CHECK(glm_model_logits(cp.m, cp.lora, &b, lg) == GLM_ERR_UNSUPPORTED, "logits with context parallel: %s", glm_errmsg());
        free_rows(&r);
    }
    glm_lora_free(cp.lora), glm_lora_free(ref.lora), glm_lora_free(ref2.lora);
    glm_model_free(cp.m), glm_model_free(ref.m), glm_model_free(ref2.m);
    be->comm_free(grp);
    int fails = check_failed_;
    double tot = fails;
    glm_comm_all_reduce_host(be, &tot, 1);
    char name[48];
    snprintf(name, sizeof name, "test_cp_mpi rank %d of %d (CP %d)", be->rank, W, cpn);
    int rc = check_summary(name);
    glm_backend_cpu_close(be);
    return rc || tot > 0;
}
