/* tests/ops/op_table.h: the compute ops of the backend table (kernels/backend.h) as one table of
 * test entries, and the one runner that checks them on any backend (the idea of ggml's
 * tests/test-backend-ops.cpp: an op described once, evaluated on every backend).
 *
 * An entry (op_entry, tests/ops/op_table.c) is one op of struct glm_backend. For one case (a shape
 * of the entry's own case type) its make() declares the op's tensors with their host values
 * (random, never zero, or derived from a forward op), which tensors are compared and with which
 * tolerance (tests/gpu/tol.h), and, for a backward op, which input finite differences perturb;
 * run() calls the op on one backend; ref() (optional) computes the expected outputs in float64 from
 * the host values, independently of every backend; fd_f() (backward ops) evaluates the scalar
 * objective of the forward, f(x) = <forward(x), upstream gradient>, whose gradient the op computes;
 * props() (optional) checks what holds on one backend alone: error returns, bit-for-bit invariants.
 * A new op is one entry: a case type, make, run, and what applies of ref, fd_f, props.
 *
 * The runner (tests/ops/op_runner.c), used twice:
 *   - against a reference backend (tests/gpu/test_cuda_ops.c: CUDA against the CPU op): every
 *     entry's `cmp` cases (GLM-4-9B's shapes and odd ones) run on both backends from the same
 *     inputs (values rounded first to the dtype the tested backend stores, so both read the same
 *     numbers; outputs poisoned with NaN), each check's norm-relative error (or count of differing
 *     elements) against its tolerance, the tested backend's time (median of 3 runs); a `sampled`
 *     case, where the reference op would take minutes, compares the tested op with ref() at a few
 *     rows instead;
 *   - alone (tests/kernels/test_cpu_ops.c: the CPU reference backend): every entry's `cpu` cases
 *     (small shapes) against ref() within TOL_CPU_REF, and every backward against central finite
 *     differences of its forward.
 * props() runs on the tested backend in both. The results go to one table (op_print_table) and
 * one pass/fail count (op_counts). */
#ifndef GLM_TESTS_OPS_OP_TABLE_H
#define GLM_TESTS_OPS_OP_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/backend.h"

#define OP_MAX_TENSORS 12
#define OP_MAX_CHECKS 8

/* What a tensor holds, which decides its dtype on a backend (op_dtype). */
typedef enum {
    OP_T_ACT,   /* be->act_dtype: activations and their gradients */
    OP_T_W,     /* be->weight_dtype: frozen base weights */
    OP_T_ACC,   /* be->acc_dtype: the block attention's accumulators (CPU f64, CUDA f32) */
    OP_T_F32,   /* float32 everywhere (LoRA weights, statistics, optimizer state) */
    OP_T_BF16,  /* an explicitly typed bf16 operand (matmul, cast): bf16 where the backend stores
                   bf16 activations, f32 on a backend that has no bf16 buffers (the CPU) */
    OP_T_I32,   /* int32 (token ids, labels, positions, document ids), raw */
    OP_T_BYTES, /* raw bytes (the 4-bit format's buffers); n counts bytes */
    OP_T_HOST,  /* host doubles: what the op returns to the host (a loss, a count); no backend memory */
} op_kind;

typedef enum {
    OP_IN,      /* read by the op: uploaded with its host values */
    OP_OUT,     /* written by the op: filled with NaN (bytes 0xA5) first, so an unwritten element shows */
    OP_INOUT,   /* uploaded with its host values, then updated by the op (accumulates, in place) */
    OP_SCRATCH, /* allocated only: a forward's output inside fd_f or props */
} op_role;

typedef enum {
    OP_CMP_REL,    /* ||tested - expected|| / ||expected|| <= tol (a NaN anywhere fails) */
    OP_CMP_EXACT,  /* the count of elements that differ from the expected value rounded to the tested
                      buffer's dtype (bytes: differing bytes); tol 0 */
    OP_CMP_ZEROS,  /* the count of elements that are zero in one and not in the other (a mask); tol 0 */
    OP_CMP_FINITE, /* the count of elements of the tested buffer that are not finite; tol 0 */
} op_cmp;

typedef struct op_tensor {
    const char *name;
    op_kind kind;
    op_role role;
    int64_t n;  /* elements (bytes for OP_T_BYTES) */
    float *f;   /* host values of the float kinds (IN, INOUT); NULL for OUT and SCRATCH */
    int32_t *i; /* host values of OP_T_I32 */
    uint8_t *b; /* host values of OP_T_BYTES */
} op_tensor;

/* One comparison: a block of one tensor. rows == 0 means all n elements as one row. */
typedef struct op_check {
    char name[40];             /* the table's op column: "attention_bwd dk" */
    int t;                     /* the tensor */
    int64_t off, rows, cols, ld; /* rows x cols elements from element off, row stride ld */
    const int64_t *sel;        /* only these rows of the block (NULL: every row) */
    int nsel;
    op_cmp how;
    double tol;                /* OP_CMP_REL's bound against the reference backend */
} op_check;

/* Finite differences of a backward op (the CPU run): f = fd_f() as a function of tensor x (an IN
 * tensor, seen as rows of ldx elements); its gradient is what the op wrote into the parts: columns
 * [col, col + cols) of x's rows are tensor t's rows (row stride cols). accumulates: the gradient
 * is each part's change (the op adds into an INOUT tensor); else its final value. */
typedef struct op_fd {
    int on;
    int x;
    int64_t ldx;
    struct {
        int t;
        int64_t col, cols;
    } part[3];
    int nparts;
    int accumulates;
    float h;    /* the step */
    double tol; /* bound on ||analytic - numeric|| / ||numeric|| */
} op_fd;

struct op_entry;

/* One case of one entry: its tensors' host values, its checks, its finite differences. */
typedef struct op_inst {
    const struct op_entry *e;
    const void *c;             /* the case (the entry's own case type) */
    int index;                 /* the case's place in its list (0: the first) */
    const glm_backend *test;   /* the backend under test */
    const glm_backend *ref;    /* the backend it is compared with; NULL in the CPU run (ref() and finite differences) */
    char shape[64];            /* the table's shape column */
    uint64_t rng;              /* the case's random state (seeded from the entry's name and the case index) */
    op_tensor t[OP_MAX_TENSORS];
    int nt;
    op_check chk[OP_MAX_CHECKS];
    int nchk;
    op_fd fd;
    int sampled;               /* the reference op is not run: checks compare with ref() at their sel rows */
} op_inst;

/* One backend's buffers for an instance. */
typedef struct op_bufs {
    const glm_backend *be;
    void *p[OP_MAX_TENSORS];      /* backend memory (NULL for OP_T_HOST) */
    glm_dtype dt[OP_MAX_TENSORS]; /* its dtype (OP_T_I32 and OP_T_BYTES: GLM_DT_F32, unused) */
    size_t esize[OP_MAX_TENSORS]; /* bytes per element */
    double *host[OP_MAX_TENSORS]; /* OP_T_HOST values (run() writes them) */
} op_bufs;

typedef struct op_entry {
    const char *name;    /* the op's field in struct glm_backend (the runner's filter matches it) */
    const void *cmp;     /* cases compared with the reference backend: GLM-4-9B's shapes and odd ones */
    int ncmp;
    const void *cpu;     /* small cases for the CPU run (ref(), finite differences) */
    int ncpu;
    size_t case_size;
    /* declares the tensors (op_add, op_fill_*), the checks (op_check_add) and fd for case c */
    void (*make)(op_inst *in, const void *c);
    /* the op on backend b->be; OP_T_HOST results into b->host */
    glm_status (*run)(const glm_backend *be, const op_inst *in, op_bufs *b);
    /* optional: the expected values in float64, want[t] (n doubles) for every checked tensor t, from
       the host values; want[t] is NULL for a tensor no check reads; only the rows the checks
       select need be filled */
    void (*ref)(const op_inst *in, double *const *want);
    /* backward ops: the forward's objective at the current value of in->fd.x's buffer */
    double (*fd_f)(const glm_backend *be, const op_inst *in, op_bufs *b);
    /* optional: checks on one backend alone (OP_EXPECT), after the comparisons */
    void (*props)(const glm_backend *be, const op_inst *in, op_bufs *b);
} op_entry;

/* The table (tests/ops/op_table.c), in the order of struct glm_backend. */
extern const op_entry op_table[];
extern const int op_table_len;

/* ---- the runner (tests/ops/op_runner.c) ---- */

typedef struct op_run_opts {
    const glm_backend *test; /* the backend under test */
    const glm_backend *ref;  /* the reference backend (the CPU); NULL: the CPU run (ref(), finite differences) */
    const char *filter;      /* only entries whose name contains it; NULL or "": all */
    int time;                /* time each case on `test` (median of 3 runs after the checked one) */
} op_run_opts;

/* Runs every entry the filter selects, on its cmp cases (o->ref set) or cpu cases (o->ref NULL).
 * Returns the number of entries run. */
int op_run(const op_run_opts *o);

/* A result row of the table (op, shape, error, tolerance, ms), and one check: passes when err <= tol. */
void op_record(const char *op, const char *shape, double err, double tol, double ms);
/* One check with a message on failure (FAIL file:line: ...), counted with the rows. */
void op_expect(int ok, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#define OP_EXPECT(cond, ...) op_expect(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* Prints the table: op, shape, error, tolerance, ms (a header line starting "op "). */
void op_print_table(void);
/* The checks passed and failed so far (rows and OP_EXPECTs). */
void op_counts(int *passed, int *failed);

/* ---- for the entries (tests/ops/op_runner.c) ---- */

/* Adds a tensor; returns its index. Host values are allocated (zeros) for IN/INOUT tensors. */
int op_add(op_inst *in, const char *name, op_kind kind, op_role role, int64_t n);
/* Host values: uniform in +-scale [0.05, 1] with random sign; normal(0, scale) with zeros replaced;
 * each rounded to bf16, so that every backend reads the same numbers whatever its dtypes (and a
 * product of two is exact in fp32). op_fill_f32: normal(0, scale) keeping fp32's bits where the
 * tested backend stores fp32 (a cast's source, whose rounding is the op under test). */
void op_fill_u(op_inst *in, int t, float scale);
void op_fill_n(op_inst *in, int t, float scale);
void op_fill_f32(op_inst *in, int t, float scale);
/* Rounds a float tensor's host values to its dtype on the tested backend (after a make() changed them). */
void op_round(op_inst *in, int t);
/* A random 64-bit number from the case's state. */
uint64_t op_rand(op_inst *in);
/* Adds a check of the whole tensor t; set the view fields on the returned check for a block. */
op_check *op_check_add(op_inst *in, const char *name, int t, op_cmp how, double tol);
/* The tolerance of an output of tensor t as the tested backend stores it: TOL_BF16 for bf16, else TOL_F32. */
double op_tol(const op_inst *in, int t);
/* The dtype of a tensor of `kind` on backend be. */
glm_dtype op_dtype(const glm_backend *be, op_kind kind);
/* The backend that computes a backward's inputs from its forward (the forward's output, statistics):
 * the reference backend, or the tested one where there is none or the case is sampled. */
const glm_backend *op_derive_backend(const op_inst *in);
/* The address of element `off` of tensor t's buffer. */
void *op_el(const op_bufs *b, int t, int64_t off);
/* Tensor t's buffer (or host values), n elements from element off, as doubles (malloc'd; NULL and a
 * failed check on error). */
double *op_fetch(const op_bufs *b, const op_inst *in, int t, int64_t off, int64_t n);
/* sum_i buffer_t[i] * w[i] over n elements (a finite-difference objective). */
double op_dot(const op_bufs *b, const op_inst *in, int t, const float *w, int64_t n);
/* f rounded to bf16 (nearest even; NaN kept). */
float op_bf16(float f);

#endif
