/* tests/dist/test_qlora_mpi.c: --shard-base with a 4-bit base whose query_key_value is made of
 * segments (the hf layout's q_proj, k_proj and v_proj, each quantized alone: kernels/weight.h
 * "Segments"), at the model level on the CPU backend over MPI, run by test_qlora_mpi.sh under
 * mpirun with 3 ranks. On the tiny GLM-4 fixture in the hf layout (query_key_value: q 4096, k and
 * v 2048 weights each, stored as 16384 + 16384 + 2048 elements, so that the 3 shards of 16384 cut
 * it at segment starts and the last one is mostly padding), nf4 with and without double
 * quantization, every rank loads the model sharded (glm_model_load_fmt with shard_base) on the MPI
 * backend and whole on the single-process CPU backend, and checks:
 *   - each shard holds glm_weight_shard_elems of the stored array, its codes, absmax and absmax2
 *     are its slice of the whole weight's (zero past the end), and every segment's offset;
 *   - a training step (the sharded model all-gathers each layer and dequantizes it segment by
 *     segment) gives the whole model's loss and LoRA gradients bit for bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/comm.h"
#include "lora/adapter/lora.h"
#include "lora/model/model.h"
#include "tests/check.h"
#include "tests/qlora_util.h"

enum { T = QLORA_T };

static void make_batch(int V, uint32_t *ids, uint8_t *tg, int32_t *pos, int32_t *doc, glm_batch *b) {
    qlora_batch(777, V, ids, tg, pos, doc, b);
}

static glm_lora *adapter(glm_model *m) { return qlora_adapter(m); }

/* The shard's buffer (want bytes) is the whole's from byte `at` (have bytes in all), zero past its end. */
static int slice_ok(const void *shard, const void *whole, size_t at, size_t want, size_t have) {
    if (!want) return 1;
    size_t k = at < have ? have - at : 0;
    if (k > want) k = want;
    if (k && memcmp(shard, (const char *)whole + at, k)) return 0;
    for (size_t i = k; i < want; i++)
        if (((const unsigned char *)shard)[i]) return 0;
    return 1;
}

static void one(const glm_backend *be, const char *dir, int dq) {
    const int r = be->rank, W = be->world;
    glm_base_format f = {4, GLM_WF_NF4, dq, 0};
    glm_model *ms = NULL, *mw = NULL;
    CHECK(glm_model_load_fmt(dir, be, 0, 1, &f, &ms) == GLM_OK, "rank %d: load sharded: %s", r, glm_errmsg());
    CHECK(glm_model_load_fmt(dir, glm_backend_cpu(), 0, 0, &f, &mw) == GLM_OK, "load whole: %s", glm_errmsg());
    if (!ms || !mw) goto out;
    CHECK(ms->shard_world == W, "the sharded model's world %d", ms->shard_world);
    for (int l = 0; l < ms->cfg.L; l++) {
        const glm_weight *s = &ms->layers[l].wqkv, *w = &mw->layers[l].wqkv;
        const int64_t stored = glm_weight_whole_elems(w), sn = glm_weight_shard_elems(w->fmt, stored, W), first = r * sn;
        CHECK(w->segs.n == 3 && s->segs.n == 3 && stored == 2 * 16384 + 2048 && s->n == sn && sn == 16384,
              "rank %d layer %d: a shard of %lld of the %lld stored elements (3 segments)", r, l, (long long)s->n,
              (long long)stored);
        glm_weight_bytes_t hb = glm_weight_bytes(w->fmt, stored, dq), sb = glm_weight_bytes(w->fmt, sn, dq),
                           fb = glm_weight_bytes(w->fmt, first, dq);
        CHECK(slice_ok(s->data, w->data, fb.data, sb.data, hb.data) &&
                  slice_ok(s->absmax, w->absmax, fb.absmax, sb.absmax, hb.absmax) &&
                  slice_ok(s->absmax2, w->absmax2, fb.absmax2, sb.absmax2, hb.absmax2),
              "rank %d layer %d: the shard's codes, absmax%s are its slice of the whole weight's", r, l,
              dq ? ", absmax2" : "");
        CHECK(!dq || (s->offset && !memcmp(s->offset, w->offset, 3 * sizeof(float))),
              "rank %d layer %d: the shard holds the 3 segments' offsets", r, l);
    }
    glm_lora *ls = adapter(ms), *lw = adapter(mw);
    if (!ls || !lw) goto out2;
    uint32_t ids[T];
    uint8_t tg[T];
    int32_t pos[T], doc[T];
    glm_batch b;
    make_batch(ms->cfg.V, ids, tg, pos, doc, &b);
    double a = 0, z = 0;
    int64_t na = 0, nz = 0;
    CHECK(glm_model_step(ms, ls, &b, 1.0f / 38, 1, GLM_CKPT_FULL, 0, &a, &na) == GLM_OK, "step sharded: %s", glm_errmsg());
    CHECK(glm_model_step(mw, lw, &b, 1.0f / 38, 1, GLM_CKPT_FULL, 0, &z, &nz) == GLM_OK, "step whole: %s", glm_errmsg());
    CHECK(a == z && na == nz && na == 38, "rank %d nf4%s: sharded loss sum %.17g == whole %.17g", r, dq ? " dq" : "", a, z);
    int same = ls->n_params == lw->n_params;
    for (int i = 0; same && i < ls->n_params; i++)
        same = !memcmp(ls->params[i].g, lw->params[i].g, (size_t)ls->params[i].numel * 4);
    CHECK(same, "rank %d nf4%s: every LoRA gradient of the sharded model is the whole model's", r, dq ? " dq" : "");
out2:
    glm_lora_free(ls);
    glm_lora_free(lw);
out:
    glm_model_free(ms);
    glm_model_free(mw);
}

int main(void) {
    glm_status st;
    const glm_backend *be = glm_backend_cpu_dist(&st);
    if (!be) {
        printf("FAIL: glm_backend_cpu_dist: %s\n", glm_errmsg());
        return 1;
    }
    CHECK(be->world == 3, "world %d (run with mpirun -np 3)", be->world);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tiny-glm4/hf", test_data_dir());
    one(be, dir, 1);
    one(be, dir, 0);
    int rc = check_summary("test_qlora_mpi");
    glm_backend_cpu_close(be);
    return rc;
}
