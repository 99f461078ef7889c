/* tests/lora/test_head.c: the general loss head (lora/model/head.h) on the CPU backend with the
 * tiny GLM-4 fixture (tests/fixtures/tiny-glm4/chatglm: its golden batch of 2 rows, several
 * documents a row, and its adapter):
 *   - the SFT-equivalent head (w_i = 1, Loss = -sum logp): glm_model_step's gradients bit for bit
 *     and its loss sum within 1e-6 (the head sums fp32 logp on the host, the step doubles);
 *     glm_model_logp's targets and -sum logp the same;
 *   - a nonlinear per-document head, Loss = sum_d [c_d S_d + (S_d / n_d)^2 / 2] with S_d the sum
 *     of logp over document d's n_d targets and random c_d in [-1, 1] (w_i = -(c_d + S_d / n_d^2),
 *     so phase 2 needs phase 1's values): its LoRA gradients against central finite differences of
 *     Loss computed from glm_model_logp (h = 1e-2; |fd - an| <= 5e-3 |an| + 5e-4: the fp32 forward's
 *     noise over h, measured 1e-4 to 5e-4 relative; a wrong weight sign or document gives O(1)
 *     errors), with full
 *     recomputation giving the same gradients bit for bit, and loss_scale scaling them;
 *   - a head's error stops the step before any gradient moves. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/backend.h"
#include "lora/adapter/lora.h"
#include "lora/model/head.h"
#include "lora/model/model.h"
#include "tests/check.h"
#include "tests/model_opt.h"
#include "tests/golden_batch.h"

/* The per-document head: c[b * T + doc] per document of row b. */
typedef struct doc_head {
    const double *c;
    int T;
    int calls;
} doc_head;

/* Per document (b, doc) of the batch: S = sum of logp over its targets, n = their count. */
static void doc_sums(const glm_batch *b, const int32_t *labels, const float *logp, double *S, double *n) {
    const int64_t N = (int64_t)b->B * b->T;
    memset(S, 0, (size_t)N * sizeof *S);
    memset(n, 0, (size_t)N * sizeof *n);
    for (int64_t i = 0; i < N; i++) {
        if (labels[i] < 0) continue;
        const int64_t d = i / b->T * b->T + b->doc[i];
        S[d] += logp[i];
        n[d] += 1;
    }
}

static double doc_loss(const doc_head *h, const glm_batch *b, const double *S, const double *n) {
    double L = 0;
    for (int64_t d = 0; d < (int64_t)b->B * b->T; d++)
        if (n[d] > 0) L += h->c[d] * S[d] + 0.5 * (S[d] / n[d]) * (S[d] / n[d]);
    return L;
}

static glm_status doc_weights(void *user, const glm_head_tokens *tk, float *w, double *loss) {
    doc_head *h = user;
    const glm_batch *b = tk->batch;
    double *S = malloc((size_t)tk->n * sizeof *S), *n = malloc((size_t)tk->n * sizeof *n);
    if (!S || !n) {
        free(S);
        free(n);
        return glm_err(GLM_ERR_NOMEM, "test head");
    }
    doc_sums(b, tk->labels, tk->logp, S, n);
    *loss = doc_loss(h, b, S, n);
    for (int64_t i = 0; i < tk->n; i++) {
        if (tk->labels[i] < 0) continue;
        const int64_t d = i / b->T * b->T + b->doc[i];
        w[i] = (float)-(h->c[d] + S[d] / (n[d] * n[d])); /* -dLoss/dlogp_i */
    }
    h->calls++;
    free(S);
    free(n);
    return GLM_OK;
}

/* The SFT-equivalent head: w_i = 1, Loss = -sum logp. */
static glm_status ones_weights(void *user, const glm_head_tokens *tk, float *w, double *loss) {
    (void)user;
    double s = 0;
    for (int64_t i = 0; i < tk->n; i++)
        if (tk->labels[i] >= 0) {
            w[i] = 1.0f;
            s -= tk->logp[i];
        }
    *loss = s;
    return GLM_OK;
}

static glm_status failing_weights(void *user, const glm_head_tokens *tk, float *w, double *loss) {
    (void)user, (void)tk, (void)w, (void)loss;
    return glm_err(GLM_ERR_FORMAT, "test head: refused");
}

/* The labels of batch b as the step derives them (label of position t = ids[t+1] when a target). */
static int32_t *labels_of(const glm_batch *b) {
    const int64_t N = (int64_t)b->B * b->T;
    int32_t *lab = malloc((size_t)N * sizeof *lab);
    for (int64_t i = 0; i < N; i++) {
        const int t = (int)(i % b->T);
        lab[i] = t + 1 < b->T && b->targets[i + 1] ? (int32_t)b->ids[i + 1] : -1;
    }
    return lab;
}

static float **grab(const glm_lora *l) {
    float **g = calloc((size_t)l->n_params, sizeof *g);
    for (int i = 0; i < l->n_params; i++) {
        g[i] = malloc((size_t)l->params[i].numel * 4);
        memcpy(g[i], l->params[i].g, (size_t)l->params[i].numel * 4);
    }
    return g;
}

static void drop(const glm_lora *l, float **g) {
    for (int i = 0; i < l->n_params; i++) free(g[i]);
    free(g);
}

static int same(const glm_lora *l, float **a, float **b) {
    for (int i = 0; i < l->n_params; i++)
        if (memcmp(a[i], b[i], (size_t)l->params[i].numel * 4)) return 0;
    return 1;
}

/* max over elements of |a - s b| / max |s b| */
static double scaled_diff(const glm_lora *l, float **a, float **b, double s) {
    double mx = 0, md = 0;
    for (int i = 0; i < l->n_params; i++)
        for (int64_t k = 0; k < l->params[i].numel; k++) {
            md = fmax(md, fabs(a[i][k] - s * b[i][k]));
            mx = fmax(mx, fabs(s * b[i][k]));
        }
    return md / mx;
}

int main(void) {
    char fixtures[1024], dir[1200], adir[1300];
    snprintf(fixtures, sizeof fixtures, "%s/tiny-glm4", test_data_dir());
    snprintf(dir, sizeof dir, "%s/chatglm", fixtures);
    snprintf(adir, sizeof adir, "%s/adapter_init", dir);
    const glm_backend *be = glm_backend_cpu();
    golden g;
    if (!golden_load(fixtures, "chatglm", &g)) return check_summary("test_head");
    glm_model *m = NULL;
    glm_lora *l = NULL;
    CHECK(glm_model_load(dir, be, 0, &m) == GLM_OK, "load: %s", glm_errmsg());
    glm_lora_config lc = {.r = 4, .alpha = 8, .dropout = 0, .use_rslora = false, .targets = "all"};
    if (m) CHECK(glm_lora_create(m, &lc, 1, &l) == GLM_OK && glm_lora_load_peft(l, adir) == GLM_OK, "adapter: %s", glm_errmsg());
    if (!m || !l) goto out;
    MODEL_OPT(m, loss_chunk, 7); /* chunks of the head, some without targets */
    glm_batch b = golden_batch(&g, 0, g.B);
    const int64_t N = (int64_t)g.B * g.T;
    int32_t *lab = labels_of(&b);
    float *logp = malloc((size_t)N * sizeof *logp);
    double *S = malloc((size_t)N * sizeof *S), *n = malloc((size_t)N * sizeof *n), *c = malloc((size_t)N * sizeof *c);
    for (int64_t i = 0; i < N; i++) c[i] = 2.0 * glm_dropout_u01(7, 3, (uint64_t)i) - 1.0;
    int docs = 0, small = 1;
    for (int64_t i = 0; i < N; i++) {
        docs += i % g.T == 0 || g.doc[i] != g.doc[i - 1];
        small &= g.doc[i] >= 0 && g.doc[i] < g.T; /* the head keys a document by b T + doc */
    }
    CHECK(docs >= 3 && small, "the golden batch has %d documents (the per-document head needs several)", docs);

    /* the SFT-equivalent head == glm_model_step */
    const float scale = 1.0f / (float)g.n_target;
    double ls = 0, lh = 0, llp = 0;
    int64_t nt = 0, nh = 0, nlp = 0;
    glm_lora_zero_grads(l);
    CHECK(glm_model_step(m, l, &b, scale, 1, 0, 0, &ls, &nt) == GLM_OK, "step: %s", glm_errmsg());
    float **ref = grab(l);
    glm_lora_zero_grads(l);
    glm_loss_head ones = {"sft-equivalent", ones_weights, NULL};
    CHECK(glm_model_step_head(m, l, &b, &ones, scale, 1, 0, 0, &lh, &nh) == GLM_OK, "head step: %s", glm_errmsg());
    float **gh = grab(l);
    CHECK(nh == nt && nt == g.n_target, "targets: head %lld, step %lld, golden %lld", (long long)nh, (long long)nt,
          (long long)g.n_target);
    CHECK(check_close(lh, ls, 1e-6, 0), "SFT-equivalent head loss %.10g vs step %.10g", lh, ls);
    CHECK(same(l, gh, ref), "SFT-equivalent head gradients differ from glm_model_step's (max rel %.3e)",
          scaled_diff(l, gh, ref, 1.0));
    CHECK(glm_model_logp(m, l, &b, logp, &nlp) == GLM_OK, "logp: %s", glm_errmsg());
    for (int64_t i = 0; i < N; i++) llp -= logp[i];
    int off_target_zero = 1;
    for (int64_t i = 0; i < N; i++) off_target_zero &= lab[i] >= 0 ? logp[i] < 0 : logp[i] == 0;
    CHECK(nlp == nt && check_close(llp, ls, 1e-6, 0) && off_target_zero, "logp: %lld targets, -sum %.10g vs %.10g; "
          "negative on targets and 0 elsewhere: %d", (long long)nlp, llp, ls, off_target_zero);
    drop(l, gh);
    drop(l, ref);

    /* the per-document head: gradients against finite differences of Loss(logp) */
    doc_head dh = {c, g.T, 0};
    glm_loss_head head = {"per-document", doc_weights, &dh};
    double L0 = 0, Lr = 0;
    glm_lora_zero_grads(l);
    CHECK(glm_model_step_head(m, l, &b, &head, 1.0f, 1, 0, 0, &L0, &nh) == GLM_OK && dh.calls == 1, "doc head: %s",
          glm_errmsg());
    float **an = grab(l);
    CHECK(glm_model_logp(m, l, &b, logp, NULL) == GLM_OK, "logp: %s", glm_errmsg());
    doc_sums(&b, lab, logp, S, n);
    Lr = doc_loss(&dh, &b, S, n);
    CHECK(check_close(L0, Lr, 1e-12, 0), "doc head loss %.12g vs from glm_model_logp %.12g", L0, Lr);
    /* elements of lora_A and lora_B of the first and last layers' modules */
    const int np = l->n_params;
    const int picks[6][2] = {{0, 3}, {1, 5}, {2, 17}, {3, 2}, {np - 2, 11}, {np - 1, 1}};
    for (int k = 0; k < 6; k++) {
        glm_param *p = &l->params[picks[k][0]];
        const int64_t e = picks[k][1] % p->numel;
        const float w0 = p->w[e], h = 1e-2f;
        double Lp, Lm;
        p->w[e] = w0 + h;
        glm_model_logp(m, l, &b, logp, NULL);
        doc_sums(&b, lab, logp, S, n);
        Lp = doc_loss(&dh, &b, S, n);
        p->w[e] = w0 - h;
        glm_model_logp(m, l, &b, logp, NULL);
        doc_sums(&b, lab, logp, S, n);
        Lm = doc_loss(&dh, &b, S, n);
        p->w[e] = w0;
        const double fd = (Lp - Lm) / (2.0 * h), a = an[picks[k][0]][e];
        CHECK(fabs(fd - a) <= 5e-3 * fabs(a) + 5e-4, "doc head: grad of %s[%lld]: fd %.6g vs backward %.6g", p->name,
              (long long)e, fd, a);
        if (getenv("GLM_TEST_VERBOSE")) printf("%s[%lld]: fd %.6g, backward %.6g\n", p->name, (long long)e, fd, a);
    }
    /* full recomputation: the same bits; loss_scale scales the gradients */
    glm_lora_zero_grads(l);
    CHECK(glm_model_step_head(m, l, &b, &head, 1.0f, 1, 1, 0, &lh, &nh) == GLM_OK && lh == L0, "doc head, full: %s",
          glm_errmsg());
    float **full = grab(l);
    CHECK(same(l, full, an), "doc head: full recomputation changes the gradients (max rel %.3e)", scaled_diff(l, full, an, 1.0));
    glm_lora_zero_grads(l);
    CHECK(glm_model_step_head(m, l, &b, &head, 0.25f, 1, 0, 0, &lh, &nh) == GLM_OK, "doc head, scaled: %s", glm_errmsg());
    float **sc = grab(l);
    CHECK(scaled_diff(l, sc, an, 0.25) < 1e-6, "doc head: loss_scale 0.25 gives %.3e off a quarter", scaled_diff(l, sc, an, 0.25));
    drop(l, sc);
    drop(l, full);
    drop(l, an);

    /* a head's error stops the step before any gradient moves */
    glm_lora_zero_grads(l);
    glm_loss_head bad = {"failing", failing_weights, NULL};
    CHECK(glm_model_step_head(m, l, &b, &bad, 1.0f, 1, 0, 0, &lh, &nh) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "refused"),
          "a failing head: %s", glm_errmsg());
    CHECK(glm_be_sumsq(be, l->params[1].g, l->params[1].numel) == 0, "a failing head leaves the gradients alone");
    glm_loss_head none = {"no weights", NULL, NULL};
    CHECK(glm_model_step_head(m, l, &b, &none, 1.0f, 1, 0, 0, &lh, &nh) == GLM_ERR_ARG, "a head without weights: refused");

    free(lab);
    free(logp);
    free(S);
    free(n);
    free(c);
out:
    glm_lora_free(l);
    glm_model_free(m);
    golden_free(&g);
    return check_summary("test_head");
}
