#include "packer.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void glm_packer_init(glm_packer *p, uint32_t T, uint64_t window_tokens, glm_shard_writer *out) {
    memset(p, 0, sizeof *p);
    p->T = T;
    p->window_tokens = window_tokens < T ? T : window_tokens;
    p->out = out;
}


/* A segment tree over remaining room 0..T counting open rows with that room; `first_at_least`
 * finds the smallest room >= need that some open row has, in O(log T). */
typedef struct { uint32_t size; uint32_t *cnt; } roomtree;

static void rt_add(roomtree *t, uint32_t room, int delta) {
    uint32_t i = room + t->size;
    while (i) {
        t->cnt[i] += (uint32_t)delta;
        i >>= 1;
    }
}

static int64_t rt_first_at_least(const roomtree *t, uint32_t need) {
    /* walk up from leaf `need` looking for a right neighbour subtree with rows, then down */
    uint32_t i = need + t->size;
    if (t->cnt[i]) return need;
    while (i > 1) {
        if ((i & 1) == 0 && t->cnt[i + 1]) {
            i = i + 1;
            while (i < t->size) i = t->cnt[2 * i] ? 2 * i : 2 * i + 1;
            return (int64_t)(i - t->size);
        }
        i >>= 1;
    }
    return -1;
}

static glm_status pack_window(glm_packer *p) {
    size_t n = p->docs.n;
    if (!n) return GLM_OK;
    /* stable sort: qsort is not stable, so sort an index by (len desc, arrival asc) */
    glm_pack_doc *d = p->docs.v;
    size_t *order = malloc(n * sizeof *order);
    uint32_t *row_of = malloc(n * sizeof *row_of);
    if (!order || !row_of) {
        free(order);
        free(row_of);
        return glm_err(GLM_ERR_NOMEM, "packer: out of memory");
    }
    /* counting sort by length keeps arrival order within a length */
    uint32_t T = p->T;
    size_t *start = calloc((size_t)T + 2, sizeof *start);
    if (!start) {
        free(order);
        free(row_of);
        return glm_err(GLM_ERR_NOMEM, "packer: out of memory");
    }
    for (size_t i = 0; i < n; i++) start[T - d[i].len + 1]++;
    for (uint32_t l = 1; l <= T + 1; l++) start[l] += start[l - 1];
    for (size_t i = 0; i < n; i++) order[start[T - d[i].len]++] = i;
    free(start);

    roomtree rt;
    rt.size = 1;
    while (rt.size < T + 1) rt.size <<= 1;
    rt.cnt = calloc(2 * (size_t)rt.size, sizeof *rt.cnt);
    /* per room value, a stack of rows */
    GLM_VEC(uint32_t) *bucket = calloc((size_t)T + 1, sizeof *bucket);
    GLM_VEC(uint32_t) room = {0};
    glm_status s = GLM_OK;
    if (!rt.cnt || !bucket) s = glm_err(GLM_ERR_NOMEM, "packer: out of memory");
    for (size_t k = 0; s == GLM_OK && k < n; k++) {
        size_t i = order[k];
        uint32_t need = d[i].len;
        int64_t r = rt_first_at_least(&rt, need);
        uint32_t row;
        if (r < 0) {
            row = (uint32_t)room.n;
            if ((s = glm_vec_push(room, T)) != GLM_OK) break;
        } else {
            row = bucket[r].v[--bucket[r].n];
            rt_add(&rt, (uint32_t)r, -1);
        }
        room.v[row] -= need;
        row_of[i] = row;
        if ((s = glm_vec_push(bucket[room.v[row]], row)) != GLM_OK) break;
        rt_add(&rt, room.v[row], +1);
    }
    /* emit rows in creation order; documents of a row in placement order */
    size_t nrows = room.n;
    size_t *rstart = calloc(nrows + 1, sizeof *rstart), *members = malloc(n * sizeof *members);
    if (s == GLM_OK && (!rstart || !members)) s = glm_err(GLM_ERR_NOMEM, "packer: out of memory");
    if (s == GLM_OK) {
        for (size_t i = 0; i < n; i++) rstart[row_of[i] + 1]++;
        for (size_t r = 0; r < nrows; r++) rstart[r + 1] += rstart[r];
        size_t *fill = malloc((nrows ? nrows : 1) * sizeof *fill);
        bool filled = fill != NULL;
        if (filled) {
            memcpy(fill, rstart, nrows * sizeof *fill);
            for (size_t k = 0; k < n; k++) members[fill[row_of[order[k]]]++] = order[k];
            free(fill);
        }
        const uint32_t **ids = malloc(n * sizeof *ids);
        const uint8_t **tg = malloc(n * sizeof *tg);
        uint32_t *lens = malloc(n * sizeof *lens);
        const char **srcs = malloc(n * sizeof *srcs);
        uint64_t *recs = malloc(n * sizeof *recs);
        if (!filled || !ids || !tg || !lens || !srcs || !recs) s = glm_err(GLM_ERR_NOMEM, "packer: out of memory");
        for (size_t r = 0; s == GLM_OK && r < nrows; r++) {
            size_t m = 0;
            for (size_t j = rstart[r]; j < rstart[r + 1]; j++, m++) {
                glm_pack_doc *x = &d[members[j]];
                ids[m] = x->ids;
                tg[m] = x->targets;
                lens[m] = x->len;
                srcs[m] = x->source;
                recs[m] = x->record;
                p->tokens += x->len;
                for (uint32_t t = 1; t < x->len; t++) p->targets += x->targets[t] != 0;
            }
            s = glm_shard_writer_add_row(p->out, m, ids, tg, lens, srcs, recs);
            p->rows++;
            p->n_docs += m;
        }
        free(ids);
        free(tg);
        free(lens);
        free(srcs);
        free(recs);
    }
    free(rstart);
    free(members);
    for (uint32_t c = 0; bucket && c <= T; c++) glm_vec_free(bucket[c]);
    free(bucket);
    glm_vec_free(room);
    free(rt.cnt);
    free(order);
    free(row_of);
    for (size_t i = 0; i < n; i++) {
        free(d[i].ids);
        free(d[i].targets);
    }
    p->docs.n = 0;
    p->pending_tokens = 0;
    return s;
}

glm_status glm_packer_add(glm_packer *p, glm_pack_doc doc) {
    if (doc.len == 0 || doc.len > p->T) {
        free(doc.ids);
        free(doc.targets);
        return glm_err(GLM_ERR_ARG, "packer: document of %u tokens does not fit rows of %u", doc.len, p->T);
    }
    if (glm_vec_push(p->docs, doc) != GLM_OK) { /* ownership passed: do not leak it */
        free(doc.ids);
        free(doc.targets);
        return GLM_ERR_NOMEM;
    }
    p->pending_tokens += doc.len;
    if (p->pending_tokens >= p->window_tokens) return pack_window(p);
    return GLM_OK;
}

glm_status glm_packer_finish(glm_packer *p) {
    GLM_TRY(pack_window(p));
    return glm_shard_writer_finish(p->out);
}

void glm_packer_free(glm_packer *p) {
    for (size_t i = 0; i < p->docs.n; i++) {
        free(p->docs.v[i].ids);
        free(p->docs.v[i].targets);
    }
    glm_vec_free(p->docs);
}
