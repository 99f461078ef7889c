/* tests/lora/gguf_reader.h: an independent GGUF reader for the tests (the format as ggml's
 * gguf.cpp reads it: little-endian header, key/value pairs, tensor infos, the data section at the
 * next multiple of general.alignment, or 32). It checks what a reader must (magic, version,
 * lengths inside the file, value types, offsets aligned and inside the file) and keeps pointers
 * into the file's bytes. */
#ifndef GLM_TESTS_GGUF_READER_H
#define GLM_TESTS_GGUF_READER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *p; /* the string's bytes (not NUL-terminated) */
    uint64_t n;
} gr_str;

typedef struct {
    gr_str key;
    uint32_t type;     /* value type */
    uint32_t elem;     /* array element type */
    uint64_t count;    /* array element count */
    const uint8_t *v;  /* the value (array: the first element) */
} gr_kv;

typedef struct {
    gr_str name;
    uint32_t ndim, type;
    uint64_t ne[4], offset;
    const uint8_t *data;
} gr_tensor;

typedef struct {
    uint8_t *file;
    size_t size;
    uint32_t magic, version;
    uint64_t n_kv, n_t, data_start, alignment;
    gr_kv *kv;
    gr_tensor *t;
    char err[256];
} gr_file;

static uint64_t gr_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* bytes of one scalar of type t; 0 for string / array */
static int gr_scalar_size(uint32_t t) {
    static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? sz[t] : -1;
}

#define GR_NEED(n)                                                                       \
    do {                                                                                 \
        if (*pos + (uint64_t)(n) > g->size) {                                            \
            snprintf(g->err, sizeof g->err, "truncated at byte %llu", (unsigned long long)*pos); \
            return false;                                                                \
        }                                                                                \
    } while (0)

static bool gr_read_str(gr_file *g, uint64_t *pos, gr_str *s) {
    GR_NEED(8);
    s->n = gr_le(g->file + *pos, 8);
    *pos += 8;
    GR_NEED(s->n);
    s->p = g->file + *pos;
    *pos += s->n;
    return true;
}

static bool gr_skip_value(gr_file *g, uint64_t *pos, uint32_t t) {
    if (t == 8) {
        gr_str s;
        return gr_read_str(g, pos, &s);
    }
    int sz = gr_scalar_size(t);
    if (sz <= 0) {
        snprintf(g->err, sizeof g->err, "bad value type %u", t);
        return false;
    }
    GR_NEED(sz);
    *pos += (uint64_t)sz;
    return true;
}

static bool gr_streq(gr_str s, const char *c) { return s.n == strlen(c) && !memcmp(s.p, c, s.n); }

/* Parses path into *g. Returns false with g->err set. */
static bool gr_open(gr_file *g, const char *path) {
    memset(g, 0, sizeof *g);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(g->err, sizeof g->err, "cannot open %s", path);
        return false;
    }
    fseek(f, 0, SEEK_END);
    g->size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    g->file = malloc(g->size ? g->size : 1);
    size_t got = fread(g->file, 1, g->size, f);
    fclose(f);
    if (got != g->size) {
        snprintf(g->err, sizeof g->err, "short read");
        return false;
    }
    uint64_t p = 0, *pos = &p;
    GR_NEED(24);
    g->magic = (uint32_t)gr_le(g->file, 4);
    g->version = (uint32_t)gr_le(g->file + 4, 4);
    g->n_t = gr_le(g->file + 8, 8);
    g->n_kv = gr_le(g->file + 16, 8);
    p = 24;
    if (memcmp(g->file, "GGUF", 4) || g->version != 3) {
        snprintf(g->err, sizeof g->err, "not GGUF v3");
        return false;
    }
    g->kv = calloc(g->n_kv + 1, sizeof *g->kv);
    g->t = calloc(g->n_t + 1, sizeof *g->t);
    g->alignment = 32;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        gr_kv *kv = &g->kv[i];
        if (!gr_read_str(g, pos, &kv->key)) return false;
        GR_NEED(4);
        kv->type = (uint32_t)gr_le(g->file + p, 4);
        p += 4;
        if (kv->type == 9) {
            GR_NEED(12);
            kv->elem = (uint32_t)gr_le(g->file + p, 4);
            kv->count = gr_le(g->file + p + 4, 8);
            p += 12;
            kv->v = g->file + p;
            for (uint64_t k = 0; k < kv->count; k++)
                if (!gr_skip_value(g, pos, kv->elem)) return false;
        } else {
            kv->v = g->file + p;
            if (!gr_skip_value(g, pos, kv->type)) return false;
        }
        if (gr_streq(kv->key, "general.alignment") && kv->type == 4) g->alignment = gr_le(kv->v, 4);
    }
    for (uint64_t i = 0; i < g->n_t; i++) {
        gr_tensor *t = &g->t[i];
        if (!gr_read_str(g, pos, &t->name)) return false;
        GR_NEED(4);
        t->ndim = (uint32_t)gr_le(g->file + p, 4);
        p += 4;
        if (t->ndim < 1 || t->ndim > 4) {
            snprintf(g->err, sizeof g->err, "tensor %llu: %u dims", (unsigned long long)i, t->ndim);
            return false;
        }
        GR_NEED(8 * t->ndim + 12);
        for (uint32_t d = 0; d < t->ndim; d++, p += 8) t->ne[d] = gr_le(g->file + p, 8);
        t->type = (uint32_t)gr_le(g->file + p, 4);
        t->offset = gr_le(g->file + p + 4, 8);
        p += 12;
    }
    g->data_start = (p + g->alignment - 1) / g->alignment * g->alignment;
    for (uint64_t i = 0; i < g->n_t; i++) {
        if (g->t[i].offset % g->alignment || g->data_start + g->t[i].offset > g->size) {
            snprintf(g->err, sizeof g->err, "tensor %llu: offset %llu unaligned or outside the file",
                     (unsigned long long)i, (unsigned long long)g->t[i].offset);
            return false;
        }
        g->t[i].data = g->file + g->data_start + g->t[i].offset;
    }
    return true;
}

static void gr_close(gr_file *g) {
    free(g->file);
    free(g->kv);
    free(g->t);
    memset(g, 0, sizeof *g);
}

static const gr_kv *gr_key(const gr_file *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (gr_streq(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

static const gr_tensor *gr_find(const gr_file *g, const char *name) {
    for (uint64_t i = 0; i < g->n_t; i++)
        if (gr_streq(g->t[i].name, name)) return &g->t[i];
    return NULL;
}

/* The string value of key (type 8), as a malloc'd C string, or NULL. */
static char *gr_str_of(const gr_file *g, const char *key) {
    const gr_kv *kv = gr_key(g, key);
    if (!kv || kv->type != 8) return NULL;
    uint64_t n = gr_le(kv->v, 8);
    char *s = malloc(n + 1);
    memcpy(s, kv->v + 8, n);
    s[n] = 0;
    return s;
}

/* Element i of a string array (walks from the start). */
static gr_str gr_arr_str(const gr_kv *kv, uint64_t i) {
    const uint8_t *p = kv->v;
    for (uint64_t k = 0; k < i; k++) p += 8 + gr_le(p, 8);
    return (gr_str){p + 8, gr_le(p, 8)};
}

#endif
