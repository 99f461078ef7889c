/* tests/ops/op_runner.c: the runner of the op table (tests/ops/op_table.h): buffers on each
 * backend, the comparisons, finite differences, timing, the result table and the counts. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/gpu/tol.h"
#include "tests/ops/op_table.h"

/* ---- results ---- */

typedef struct op_row {
    char op[48], shape[64];
    double err, tol, ms;
} op_row;

static op_row *rows_;
static int nrows_, caprows_, passed_, failed_;

void op_record(const char *op, const char *shape, double err, double tol, double ms) {
    int ok = err <= tol; /* a NaN error fails */
    if (ok) {
        passed_++;
    } else {
        failed_++;
        fprintf(stderr, "FAIL %s %s: error %.3e > %.1e\n", op, shape, err, tol);
    }
    if (nrows_ == caprows_) {
        int cap = caprows_ ? 2 * caprows_ : 256;
        op_row *r = realloc(rows_, sizeof *r * (size_t)cap);
        if (!r) return;
        rows_ = r, caprows_ = cap;
    }
    op_row *r = &rows_[nrows_++];
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    r->err = err, r->tol = tol, r->ms = ms;
}

void op_expect(int ok, const char *file, int line, const char *fmt, ...) {
    if (ok) {
        passed_++;
        return;
    }
    failed_++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void op_print_table(void) {
    printf("\n%-34s %-32s %10s %8s %9s\n", "op", "shape", "error", "tol", "ms");
    for (int i = 0; i < nrows_; i++)
        printf("%-34s %-32s %10.2e %8.0e %9.3f%s\n", rows_[i].op, rows_[i].shape, rows_[i].err, rows_[i].tol, rows_[i].ms,
               rows_[i].err <= rows_[i].tol ? "" : "  FAIL");
    printf("(error: norm-relative for a tolerance above 0, else a count of differing or non-finite elements)\n");
}

void op_counts(int *passed, int *failed) {
    *passed = passed_;
    *failed = failed_;
}

/* ---- helpers for the entries ---- */

float op_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

uint64_t op_rand(op_inst *in) {
    uint64_t z = (in->rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double rand_u(op_inst *in) { return (double)(op_rand(in) >> 11) * (1.0 / 9007199254740992.0); }

static int float_kind(op_kind k) { return k != OP_T_I32 && k != OP_T_BYTES && k != OP_T_HOST; }

glm_dtype op_dtype(const glm_backend *be, op_kind kind) {
    switch (kind) {
    case OP_T_ACT: return be->act_dtype;
    case OP_T_W: return be->weight_dtype;
    case OP_T_ACC: return be->acc_dtype;
    case OP_T_BF16: return be->act_dtype == GLM_DT_BF16 ? GLM_DT_BF16 : GLM_DT_F32;
    default: return GLM_DT_F32;
    }
}

static size_t elem_size(op_kind kind, glm_dtype dt) {
    return kind == OP_T_I32 ? 4 : kind == OP_T_BYTES ? 1 : kind == OP_T_HOST ? 8 : glm_dtype_size(dt);
}

/* rounding to the tested backend's dtype of the tensor (bf16 or nothing) */
static int rounds(const op_inst *in, int t) {
    return float_kind(in->t[t].kind) && op_dtype(in->test, in->t[t].kind) == GLM_DT_BF16;
}

void op_round(op_inst *in, int t) {
    op_tensor *x = &in->t[t];
    if (!x->f || !rounds(in, t)) return;
    for (int64_t i = 0; i < x->n; i++) x->f[i] = op_bf16(x->f[i]);
}

int op_add(op_inst *in, const char *name, op_kind kind, op_role role, int64_t n) {
    if (in->nt == OP_MAX_TENSORS) {
        fprintf(stderr, "op table: %s: more than %d tensors\n", in->e->name, OP_MAX_TENSORS);
        abort();
    }
    op_tensor *x = &in->t[in->nt];
    memset(x, 0, sizeof *x);
    x->name = name, x->kind = kind, x->role = role, x->n = n;
    size_t m = (size_t)(n > 0 ? n : 1);
    if (role == OP_IN || role == OP_INOUT) {
        if (kind == OP_T_I32) x->i = calloc(m, 4);
        else if (kind == OP_T_BYTES) x->b = calloc(m, 1);
        else if (kind != OP_T_HOST) x->f = calloc(m, 4);
        if (!x->i && !x->b && !x->f && kind != OP_T_HOST) {
            fprintf(stderr, "op table: %s: no host memory for %s (%lld elements)\n", in->e->name, name, (long long)n);
            abort();
        }
    }
    return in->nt++;
}

void op_fill_u(op_inst *in, int t, float scale) {
    op_tensor *x = &in->t[t];
    for (int64_t i = 0; i < x->n; i++) {
        double u = 0.05 + 0.95 * rand_u(in);
        x->f[i] = op_bf16((float)((op_rand(in) & 1 ? -u : u) * scale));
    }
}

static void fill_normal(op_inst *in, int t, float scale, int bf16) {
    op_tensor *x = &in->t[t];
    for (int64_t i = 0; i < x->n; i++) {
        double u1 = rand_u(in) + 1e-12, u2 = rand_u(in);
        float v = (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2) * scale);
        if (bf16) v = op_bf16(v);
        x->f[i] = v != 0.0f ? v : bf16 ? op_bf16(0.01f * scale) : 0.01f * scale;
    }
    op_round(in, t);
}

void op_fill_n(op_inst *in, int t, float scale) { fill_normal(in, t, scale, 1); }
void op_fill_f32(op_inst *in, int t, float scale) { fill_normal(in, t, scale, 0); }

op_check *op_check_add(op_inst *in, const char *name, int t, op_cmp how, double tol) {
    if (in->nchk == OP_MAX_CHECKS) {
        fprintf(stderr, "op table: %s: more than %d checks\n", in->e->name, OP_MAX_CHECKS);
        abort();
    }
    op_check *c = &in->chk[in->nchk++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->t = t, c->how = how, c->tol = tol;
    return c;
}

double op_tol(const op_inst *in, int t) { return rounds(in, t) ? TOL_BF16 : TOL_F32; }

const glm_backend *op_derive_backend(const op_inst *in) { return in->ref && !in->sampled ? in->ref : in->test; }

void *op_el(const op_bufs *b, int t, int64_t off) { return (char *)b->p[t] + off * (int64_t)b->esize[t]; }

double *op_fetch(const op_bufs *b, const op_inst *in, int t, int64_t off, int64_t n) {
    const op_tensor *x = &in->t[t];
    double *d = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!d) {
        OP_EXPECT(0, "%s: no host memory to read %s", in->e->name, x->name);
        return NULL;
    }
    if (n <= 0) return d;
    if (x->kind == OP_T_HOST) {
        memcpy(d, b->host[t] + off, sizeof(double) * (size_t)n);
        return d;
    }
    glm_status st;
    const void *src = op_el(b, t, off);
    if (x->kind == OP_T_I32 || x->kind == OP_T_BYTES || b->dt[t] == GLM_DT_F64) {
        /* raw: int32, bytes or doubles, converted here */
        void *raw = malloc(b->esize[t] * (size_t)n);
        st = raw ? glm_be_download(b->be, raw, src, b->esize[t] * (size_t)n) : GLM_ERR_NOMEM;
        for (int64_t i = 0; raw && !st && i < n; i++)
            d[i] = x->kind == OP_T_I32 ? ((int32_t *)raw)[i] : x->kind == OP_T_BYTES ? ((uint8_t *)raw)[i] : ((double *)raw)[i];
        free(raw);
    } else {
        float *f = malloc(sizeof(float) * (size_t)n);
        st = f ? glm_be_download_f32(b->be, f, b->dt[t], src, n) : GLM_ERR_NOMEM;
        for (int64_t i = 0; f && !st && i < n; i++) d[i] = f[i];
        free(f);
    }
    if (st) {
        OP_EXPECT(0, "%s: reading %s from the %s backend: %s", in->e->name, x->name, b->be->name, glm_errmsg());
        free(d);
        return NULL;
    }
    return d;
}

double op_dot(const op_bufs *b, const op_inst *in, int t, const float *w, int64_t n) {
    double *d = op_fetch(b, in, t, 0, n), s = 0;
    if (!d) return NAN;
    for (int64_t i = 0; i < n; i++) s += d[i] * w[i];
    free(d);
    return s;
}

/* ---- buffers on a backend ---- */

static void bufs_free(op_bufs *b, const op_inst *in) {
    for (int t = 0; t < in->nt; t++) {
        if (b->p[t]) glm_be_free(b->be, b->p[t]);
        free(b->host[t]);
    }
    memset(b, 0, sizeof *b);
}

/* Allocates every tensor on be and gives it its host values (IN, INOUT) or poison (OUT, SCRATCH). */
static int bufs_make(op_bufs *b, const glm_backend *be, const op_inst *in) {
    memset(b, 0, sizeof *b);
    b->be = be;
    for (int t = 0; t < in->nt; t++) {
        const op_tensor *x = &in->t[t];
        size_t m = (size_t)(x->n > 0 ? x->n : 1);
        if (x->kind == OP_T_HOST) {
            b->host[t] = malloc(sizeof(double) * m);
            for (size_t i = 0; b->host[t] && i < m; i++) b->host[t][i] = NAN;
            continue;
        }
        glm_dtype dt = op_dtype(be, x->kind);
        size_t es = elem_size(x->kind, dt), bytes = es * (size_t)(x->n > 0 ? x->n : 0);
        b->dt[t] = dt, b->esize[t] = es;
        glm_status st = glm_be_alloc(be, bytes, x->name, &b->p[t]);
        int given = x->role == OP_IN || x->role == OP_INOUT;
        if (!st && x->n > 0) {
            if (x->kind == OP_T_I32 || x->kind == OP_T_BYTES) {
                void *h = given ? (void *)(x->kind == OP_T_I32 ? (void *)x->i : (void *)x->b) : malloc(bytes);
                if (h && !given) memset(h, 0xA5, bytes);
                st = h ? glm_be_upload(be, b->p[t], h, bytes) : GLM_ERR_NOMEM;
                if (!given) free(h);
            } else if (dt == GLM_DT_F64) {
                double *h = malloc(bytes);
                for (int64_t i = 0; h && i < x->n; i++) h[i] = given ? (double)x->f[i] : NAN;
                st = h ? glm_be_upload(be, b->p[t], h, bytes) : GLM_ERR_NOMEM;
                free(h);
            } else if (given) {
                st = glm_be_upload_f32(be, b->p[t], dt, x->f, x->n);
            } else {
                float *h = malloc(sizeof(float) * m);
                for (int64_t i = 0; h && i < x->n; i++) h[i] = NAN;
                st = h ? glm_be_upload_f32(be, b->p[t], dt, h, x->n) : GLM_ERR_NOMEM;
                free(h);
            }
        }
        if (!st) st = glm_be_sync(be);
        if (st) {
            OP_EXPECT(0, "%s %s: %s on the %s backend: %s", in->e->name, in->shape, x->name, be->name, glm_errmsg());
            bufs_free(b, in);
            return 0;
        }
    }
    return 1;
}

/* ---- comparisons ---- */

/* the expected value as the tested buffer holds it */
static double as_stored(const op_bufs *b, const op_inst *in, int t, double v) {
    if (!float_kind(in->t[t].kind)) return v;
    if (b->dt[t] == GLM_DT_BF16) return op_bf16((float)v);
    if (b->dt[t] == GLM_DT_F32) return (float)v;
    return v;
}

static double compare(const op_check *c, const op_bufs *bt, const op_inst *in, const double *a, const double *e) {
    const op_tensor *x = &in->t[c->t];
    int64_t rows = c->rows ? c->rows : 1, cols = c->rows ? c->cols : x->n, ld = c->rows ? c->ld : 0;
    int64_t nr = c->sel ? c->nsel : rows;
    double num = 0, den = 0, count = 0;
    for (int64_t k = 0; k < nr; k++) {
        int64_t r = c->sel ? c->sel[k] : k;
        for (int64_t j = 0; j < cols; j++) {
            int64_t i = c->off + r * ld + j;
            switch (c->how) {
            case OP_CMP_REL: {
                double d = a[i] - e[i];
                num += d * d;
                den += e[i] * e[i];
                break;
            }
            case OP_CMP_EXACT: count += !(a[i] == as_stored(bt, in, c->t, e[i])); break;
            case OP_CMP_ZEROS: count += (a[i] == 0.0) != (e[i] == 0.0); break;
            case OP_CMP_FINITE: count += !isfinite(a[i]); break;
            }
        }
    }
    if (c->how != OP_CMP_REL) return count;
    double err = den > 0 ? sqrt(num / den) : sqrt(num);
    return isfinite(err) ? err : INFINITY;
}

/* ---- finite differences ---- */

static void fd_check(const op_inst *in, op_bufs *b) {
    const op_fd *fd = &in->fd;
    const op_tensor *X = &in->t[fd->x];
    const int64_t n = X->n, rows = n / fd->ldx;
    double *ga = malloc(sizeof(double) * (size_t)n), *gn = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) ga[i] = NAN;
    for (int p = 0; p < fd->nparts; p++) {
        const op_tensor *G = &in->t[fd->part[p].t];
        double *v = op_fetch(b, in, fd->part[p].t, 0, G->n);
        for (int64_t r = 0; v && r < rows; r++)
            for (int64_t j = 0; j < fd->part[p].cols; j++) {
                int64_t gi = r * fd->part[p].cols + j;
                ga[r * fd->ldx + fd->part[p].col + j] = v[gi] - (fd->accumulates && G->f ? G->f[gi] : 0.0);
            }
        free(v);
    }
    for (int64_t i = 0; i < n; i++) {
        float x0 = X->f[i], xp = x0 + fd->h, xm = x0 - fd->h;
        glm_be_upload_f32(b->be, op_el(b, fd->x, i), b->dt[fd->x], &xp, 1);
        double fp = in->e->fd_f(b->be, in, b);
        glm_be_upload_f32(b->be, op_el(b, fd->x, i), b->dt[fd->x], &xm, 1);
        double fm = in->e->fd_f(b->be, in, b);
        glm_be_upload_f32(b->be, op_el(b, fd->x, i), b->dt[fd->x], &x0, 1);
        gn[i] = (fp - fm) / ((double)xp - (double)xm);
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (ga[i] - gn[i]) * (ga[i] - gn[i]);
        den += gn[i] * gn[i];
    }
    double err = sqrt(num) / (sqrt(den) + 1e-30);
    char name[48];
    snprintf(name, sizeof name, "%s (finite diff.)", in->e->name);
    op_record(name, in->shape, isfinite(err) ? err : INFINITY, fd->tol, 0);
    free(ga), free(gn);
}

/* ---- the runner ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static glm_status run_sync(const op_entry *e, const glm_backend *be, const op_inst *in, op_bufs *b) {
    glm_status st = e->run(be, in, b);
    glm_status s2 = glm_be_sync(be);
    return st ? st : s2;
}

static uint64_t case_seed(const char *name, int index, int cmp) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a of the entry's name */
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return h ^ ((uint64_t)(index + 1) * 0xD1B54A32D192ED03ULL) ^ (cmp ? 0x5bd1e995ULL : 0);
}

/* The checks of one case whose tensors make() declared: buffers, runs, comparisons, finite
 * differences, timing, props. */
static void check_case(const op_run_opts *o, const op_entry *e, op_inst *in) {
    const int cmp = o->ref != NULL, on_ref = cmp && !in->sampled, use_want = !on_ref && e->ref;
    OP_EXPECT(!in->sampled || e->ref, "%s %s: a sampled case needs the entry's float64 reference", e->name, in->shape);
    op_bufs bt, br;
    if (!bufs_make(&bt, o->test, in)) return;
    if (on_ref && !bufs_make(&br, o->ref, in)) {
        bufs_free(&bt, in);
        return;
    }
    glm_status st = run_sync(e, o->test, in, &bt), sr = GLM_OK;
    OP_EXPECT(st == GLM_OK, "%s %s on the %s backend: %s", e->name, in->shape, o->test->name, glm_errmsg());
    if (on_ref) {
        sr = run_sync(e, o->ref, in, &br);
        OP_EXPECT(sr == GLM_OK, "%s %s on the %s backend: %s", e->name, in->shape, o->ref->name, glm_errmsg());
    }
    double *want[OP_MAX_TENSORS] = {0};
    if (use_want && st == GLM_OK) {
        for (int k = 0; k < in->nchk; k++) {
            int t = in->chk[k].t;
            if (want[t]) continue;
            want[t] = malloc(sizeof(double) * (size_t)(in->t[t].n > 0 ? in->t[t].n : 1));
            for (int64_t i = 0; want[t] && i < in->t[t].n; i++) want[t][i] = NAN;
        }
        e->ref(in, want);
    }
    const int first_row = nrows_;
    for (int k = 0; k < in->nchk; k++) {
        const op_check *ch = &in->chk[k];
        const int t = ch->t;
        /* the CPU run compares with float64 within TOL_CPU_REF */
        const double tol = ch->how != OP_CMP_REL ? 0.0 : cmp ? ch->tol : TOL_CPU_REF;
        if (ch->how != OP_CMP_FINITE && !on_ref && !use_want) continue; /* nothing to compare with */
        double err = INFINITY;
        if (st == GLM_OK && sr == GLM_OK) {
            double *a = op_fetch(&bt, in, t, 0, in->t[t].n), *r = NULL;
            const double *x = ch->how == OP_CMP_FINITE ? a : on_ref ? (r = op_fetch(&br, in, t, 0, in->t[t].n)) : want[t];
            if (a && x) err = compare(ch, &bt, in, a, x);
            free(a), free(r);
        }
        op_record(ch->name, in->shape, err, tol, 0);
    }
    for (int t = 0; t < OP_MAX_TENSORS; t++) free(want[t]);
    if (!cmp && in->fd.on && e->fd_f && st == GLM_OK) fd_check(in, &bt);
    if (o->time && st == GLM_OK && nrows_ > first_row) {
        double tm[3];
        for (int r = 0; r < 3; r++) {
            double a = now_s();
            (void)e->run(o->test, in, &bt);
            (void)glm_be_sync(o->test);
            tm[r] = now_s() - a;
        }
        double lo = fmin(tm[0], fmin(tm[1], tm[2])), hi = fmax(tm[0], fmax(tm[1], tm[2]));
        rows_[first_row].ms = (tm[0] + tm[1] + tm[2] - lo - hi) * 1e3;
    }
    if (e->props && st == GLM_OK) e->props(o->test, in, &bt);
    bufs_free(&bt, in);
    if (on_ref) bufs_free(&br, in);
}

static void run_case(const op_run_opts *o, const op_entry *e, const void *c, int index) {
    op_inst *in = calloc(1, sizeof *in);
    if (!in) abort();
    in->e = e, in->c = c, in->index = index, in->test = o->test, in->ref = o->ref;
    in->rng = case_seed(e->name, index, o->ref != NULL);
    e->make(in, c);
    for (int t = 0; t < in->nt; t++) op_round(in, t); /* (op_fill_* did it already) */
    check_case(o, e, in);
    for (int t = 0; t < in->nt; t++) free(in->t[t].f), free(in->t[t].i), free(in->t[t].b);
    free(in);
}

int op_run(const op_run_opts *o) {
    int ran = 0;
    for (int k = 0; k < op_table_len; k++) {
        const op_entry *e = &op_table[k];
        if (o->filter && *o->filter && !strstr(e->name, o->filter)) continue;
        const void *cases = o->ref ? e->cmp : e->cpu;
        const int n = o->ref ? e->ncmp : e->ncpu;
        const double t0 = now_s();
        int f0, f1, p;
        op_counts(&p, &f0);
        for (int i = 0; i < n; i++) run_case(o, e, (const char *)cases + (size_t)i * e->case_size, i);
        op_counts(&p, &f1);
        /* progress on stderr as each entry ends: the table prints only at the end, and a run cut by a
           time limit still shows how far it came (failures print at once, on stderr too) */
        fprintf(stderr, "op table: %s, %d cases, %.1f s%s\n", e->name, n, now_s() - t0, f1 > f0 ? ", FAILED" : "");
        ran++;
    }
    return ran;
}
