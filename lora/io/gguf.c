/* lora/io/gguf.c: the GGUF writer and the tensor encodings (see gguf.h). */
#include "lora/io/gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/safetensors.h"

#define GGML_MAX_NAME 64 /* ggml.h: a tensor name holds at most 63 bytes and its NUL */

uint32_t glm_gguf_file_type(glm_ggml_type t) {
    switch (t) {
    case GLM_GGML_F16: return 1;
    case GLM_GGML_Q8_0: return 7;
    case GLM_GGML_BF16: return 32;
    default: return 0;
    }
}

const char *glm_ggml_type_name(glm_ggml_type t) {
    switch (t) {
    case GLM_GGML_F32: return "f32";
    case GLM_GGML_F16: return "f16";
    case GLM_GGML_Q8_0: return "q8_0";
    case GLM_GGML_BF16: return "bf16";
    }
    return "?";
}

uint64_t glm_ggml_nbytes(glm_ggml_type t, int64_t ne0, int64_t rows) {
    if (ne0 < 0 || rows < 0) return 0;
    switch (t) {
    case GLM_GGML_F32: return (uint64_t)ne0 * (uint64_t)rows * 4;
    case GLM_GGML_F16:
    case GLM_GGML_BF16: return (uint64_t)ne0 * (uint64_t)rows * 2;
    case GLM_GGML_Q8_0:
        if (ne0 % GLM_GGUF_Q8_0_BLOCK) return 0;
        return (uint64_t)(ne0 / GLM_GGUF_Q8_0_BLOCK) * GLM_GGUF_Q8_0_BYTES * (uint64_t)rows;
    }
    return 0;
}

void glm_gguf_q8_0_block(const float *x, uint8_t *out) {
    float amax = 0.0f;
    for (int j = 0; j < GLM_GGUF_Q8_0_BLOCK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f; /* ((1 << 7) - 1) */
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    glm_st_from_f32(GLM_ST_F16, &d, 1, out); /* little-endian f16, round to nearest even */
    for (int j = 0; j < GLM_GGUF_Q8_0_BLOCK; j++) {
        const float v = x[j] * id;
        out[2 + j] = (uint8_t)(int8_t)roundf(v);
    }
}

glm_status glm_ggml_encode(glm_ggml_type t, const float *src, int64_t n, void *dst) {
    switch (t) {
    case GLM_GGML_F32: return glm_st_from_f32(GLM_ST_F32, src, (size_t)n, dst);
    case GLM_GGML_F16: return glm_st_from_f32(GLM_ST_F16, src, (size_t)n, dst);
    case GLM_GGML_BF16: return glm_st_from_f32(GLM_ST_BF16, src, (size_t)n, dst);
    case GLM_GGML_Q8_0:
        if (n % GLM_GGUF_Q8_0_BLOCK)
            return glm_err(GLM_ERR_ARG, "q8_0 takes whole blocks of %d values; got %lld values", GLM_GGUF_Q8_0_BLOCK,
                           (long long)n);
        for (int64_t b = 0; b < n / GLM_GGUF_Q8_0_BLOCK; b++)
            glm_gguf_q8_0_block(src + b * GLM_GGUF_Q8_0_BLOCK, (uint8_t *)dst + b * GLM_GGUF_Q8_0_BYTES);
        return GLM_OK;
    }
    return glm_err(GLM_ERR_ARG, "ggml type %d is not one glmtune writes", (int)t);
}

/* ------------------------------------------------------------------ writer */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} bytes;

static void put(bytes *b, const void *data, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

/* little-endian integers, whatever the host */
static void put_le(bytes *b, uint64_t v, int size) {
    uint8_t x[8];
    for (int i = 0; i < size; i++) x[i] = (uint8_t)(v >> (8 * i));
    put(b, x, (size_t)size);
}
static void put_u32(bytes *b, uint32_t v) { put_le(b, v, 4); }
static void put_u64(bytes *b, uint64_t v) { put_le(b, v, 8); }
static void put_str(bytes *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}

typedef struct {
    char *name;
    glm_ggml_type type;
    int ndim;
    int64_t ne[4]; /* GGUF order: ne[0] innermost */
    uint64_t offset, nbytes;
} tensor_info;

struct glm_gguf {
    bytes kv;          /* the encoded key/value pairs */
    uint64_t n_kv;
    char **keys;       /* for duplicates */
    size_t n_keys, cap_keys;
    tensor_info *t;
    size_t n_t, cap_t;
    uint64_t data_size;
    bool begun, committed;
    size_t next;       /* the next tensor to write */
    glm_afile af;
};

glm_status glm_gguf_new(glm_gguf **out) {
    *out = calloc(1, sizeof **out);
    return *out ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
}

void glm_gguf_free(glm_gguf *g) {
    if (!g) return;
    if (g->begun && !g->committed) glm_afile_abort(&g->af);
    for (size_t i = 0; i < g->n_keys; i++) free(g->keys[i]);
    for (size_t i = 0; i < g->n_t; i++) free(g->t[i].name);
    free(g->keys);
    free(g->t);
    free(g->kv.p);
    free(g);
}

static uint64_t pad_to(uint64_t x) { return (x + GLM_GGUF_ALIGNMENT - 1) / GLM_GGUF_ALIGNMENT * GLM_GGUF_ALIGNMENT; }

static bool has_key(const glm_gguf *g, const char *key) {
    for (size_t i = 0; i < g->n_keys; i++)
        if (!strcmp(g->keys[i], key)) return true;
    return false;
}

/* Starts a key: checks it, records it, writes the key and its type. */
static glm_status key_start(glm_gguf *g, const char *key, glm_gguf_vtype type) {
    if (g->begun) return glm_err(GLM_ERR_ARG, "GGUF key %s added after the file was begun", key);
    if (has_key(g, key)) return glm_err(GLM_ERR_ARG, "GGUF key %s added twice", key);
    if (g->n_keys == g->cap_keys) {
        size_t cap = g->cap_keys ? 2 * g->cap_keys : 32;
        char **k = realloc(g->keys, cap * sizeof *k);
        if (!k) return glm_err(GLM_ERR_NOMEM, "out of memory");
        g->keys = k;
        g->cap_keys = cap;
    }
    if (!(g->keys[g->n_keys] = strdup(key))) return glm_err(GLM_ERR_NOMEM, "out of memory");
    g->n_keys++;
    g->n_kv++;
    put_str(&g->kv, key, strlen(key));
    put_u32(&g->kv, (uint32_t)type);
    return GLM_OK;
}

static glm_status key_end(glm_gguf *g) {
    return g->kv.oom ? glm_err(GLM_ERR_NOMEM, "out of memory building the GGUF metadata") : GLM_OK;
}

glm_status glm_gguf_kv_str(glm_gguf *g, const char *key, const char *value) {
    GLM_TRY(key_start(g, key, GLM_GGUF_STRING));
    put_str(&g->kv, value, strlen(value));
    return key_end(g);
}

glm_status glm_gguf_kv_u32(glm_gguf *g, const char *key, uint32_t value) {
    GLM_TRY(key_start(g, key, GLM_GGUF_U32));
    put_u32(&g->kv, value);
    return key_end(g);
}

glm_status glm_gguf_kv_i32(glm_gguf *g, const char *key, int32_t value) {
    GLM_TRY(key_start(g, key, GLM_GGUF_I32));
    put_u32(&g->kv, (uint32_t)value);
    return key_end(g);
}

glm_status glm_gguf_kv_u64(glm_gguf *g, const char *key, uint64_t value) {
    GLM_TRY(key_start(g, key, GLM_GGUF_U64));
    put_u64(&g->kv, value);
    return key_end(g);
}

glm_status glm_gguf_kv_f32(glm_gguf *g, const char *key, float value) {
    GLM_TRY(key_start(g, key, GLM_GGUF_F32));
    uint32_t u;
    memcpy(&u, &value, 4);
    put_u32(&g->kv, u);
    return key_end(g);
}

glm_status glm_gguf_kv_bool(glm_gguf *g, const char *key, bool value) {
    GLM_TRY(key_start(g, key, GLM_GGUF_BOOL));
    uint8_t b = value ? 1 : 0;
    put(&g->kv, &b, 1);
    return key_end(g);
}

glm_status glm_gguf_kv_strs(glm_gguf *g, const char *key, const char *const *strs, const size_t *lens, size_t n) {
    GLM_TRY(key_start(g, key, GLM_GGUF_ARRAY));
    put_u32(&g->kv, GLM_GGUF_STRING);
    put_u64(&g->kv, n);
    for (size_t i = 0; i < n; i++) put_str(&g->kv, strs[i], lens ? lens[i] : strlen(strs[i]));
    return key_end(g);
}

glm_status glm_gguf_kv_i32s(glm_gguf *g, const char *key, const int32_t *v, size_t n) {
    GLM_TRY(key_start(g, key, GLM_GGUF_ARRAY));
    put_u32(&g->kv, GLM_GGUF_I32);
    put_u64(&g->kv, n);
    for (size_t i = 0; i < n; i++) put_u32(&g->kv, (uint32_t)v[i]);
    return key_end(g);
}

glm_status glm_gguf_add_tensor(glm_gguf *g, const char *name, glm_ggml_type type, int ndim, const int64_t *shape) {
    if (g->begun) return glm_err(GLM_ERR_ARG, "GGUF tensor %s added after the file was begun", name);
    if (strlen(name) >= GGML_MAX_NAME)
        return glm_err(GLM_ERR_ARG, "GGUF tensor name %s is longer than ggml's %d bytes", name, GGML_MAX_NAME - 1);
    if (ndim < 1 || ndim > 4) return glm_err(GLM_ERR_ARG, "GGUF tensor %s: %d dimensions (1 to 4)", name, ndim);
    for (size_t i = 0; i < g->n_t; i++)
        if (!strcmp(g->t[i].name, name)) return glm_err(GLM_ERR_ARG, "GGUF tensor %s added twice", name);
    tensor_info ti = {.type = type, .ndim = ndim};
    int64_t rows = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1) return glm_err(GLM_ERR_ARG, "GGUF tensor %s: dimension %d is %lld", name, d, (long long)shape[d]);
        ti.ne[d] = shape[ndim - 1 - d];
        if (d) rows *= ti.ne[d];
    }
    ti.nbytes = glm_ggml_nbytes(type, ti.ne[0], rows);
    if (!ti.nbytes)
        return glm_err(GLM_ERR_ARG, "GGUF tensor %s: rows of %lld values do not fit %s (blocks of %d)", name,
                       (long long)ti.ne[0], glm_ggml_type_name(type), GLM_GGUF_Q8_0_BLOCK);
    if (g->n_t == g->cap_t) {
        size_t cap = g->cap_t ? 2 * g->cap_t : 64;
        tensor_info *t = realloc(g->t, cap * sizeof *t);
        if (!t) return glm_err(GLM_ERR_NOMEM, "out of memory");
        g->t = t;
        g->cap_t = cap;
    }
    if (!(ti.name = strdup(name))) return glm_err(GLM_ERR_NOMEM, "out of memory");
    ti.offset = g->data_size;
    g->data_size += pad_to(ti.nbytes);
    g->t[g->n_t++] = ti;
    return GLM_OK;
}

size_t glm_gguf_n_tensors(const glm_gguf *g) { return g->n_t; }
uint64_t glm_gguf_tensor_nbytes(const glm_gguf *g, size_t i) { return i < g->n_t ? g->t[i].nbytes : 0; }

static glm_status write_padding(glm_gguf *g, uint64_t n) {
    static const uint8_t zeros[GLM_GGUF_ALIGNMENT];
    return n ? glm_afile_write(&g->af, zeros, (size_t)n) : GLM_OK;
}

glm_status glm_gguf_begin(glm_gguf *g, const char *path) {
    if (g->begun) return glm_err(GLM_ERR_ARG, "GGUF file %s begun twice", path);
    if (!has_key(g, "general.alignment")) GLM_TRY(glm_gguf_kv_u32(g, "general.alignment", GLM_GGUF_ALIGNMENT));
    bytes h = {0};
    put_u32(&h, GLM_GGUF_MAGIC);
    put_u32(&h, GLM_GGUF_VERSION);
    put_u64(&h, g->n_t);
    put_u64(&h, g->n_kv);
    put(&h, g->kv.p, g->kv.n);
    for (size_t i = 0; i < g->n_t; i++) {
        const tensor_info *t = &g->t[i];
        put_str(&h, t->name, strlen(t->name));
        put_u32(&h, (uint32_t)t->ndim);
        for (int d = 0; d < t->ndim; d++) put_u64(&h, (uint64_t)t->ne[d]);
        put_u32(&h, (uint32_t)t->type);
        put_u64(&h, t->offset);
    }
    if (h.oom) {
        free(h.p);
        return glm_err(GLM_ERR_NOMEM, "out of memory building the GGUF header of %s", path);
    }
    glm_status st = glm_afile_open(&g->af, path);
    if (st == GLM_OK) {
        g->begun = true;
        st = glm_afile_write(&g->af, h.p, h.n);
        if (st == GLM_OK) st = write_padding(g, pad_to(h.n) - h.n);
    }
    free(h.p);
    /* the key/value bytes are in the file now */
    free(g->kv.p);
    g->kv = (bytes){0};
    return st;
}

glm_status glm_gguf_write_tensor(glm_gguf *g, const void *data, uint64_t nbytes) {
    if (!g->begun || g->committed) return glm_err(GLM_ERR_ARG, "GGUF tensor data written to a file not begun");
    if (g->next >= g->n_t) return glm_err(GLM_ERR_ARG, "GGUF tensor data written after the last tensor");
    const tensor_info *t = &g->t[g->next];
    if (nbytes != t->nbytes)
        return glm_err(GLM_ERR_ARG, "GGUF tensor %s: %llu bytes written, %llu declared", t->name,
                       (unsigned long long)nbytes, (unsigned long long)t->nbytes);
    GLM_TRY(glm_afile_write(&g->af, data, (size_t)nbytes));
    GLM_TRY(write_padding(g, pad_to(nbytes) - nbytes));
    g->next++;
    return GLM_OK;
}

glm_status glm_gguf_commit(glm_gguf *g) {
    if (!g->begun || g->committed) return glm_err(GLM_ERR_ARG, "GGUF file committed before it was begun, or twice");
    if (g->next != g->n_t)
        return glm_err(GLM_ERR_ARG, "GGUF file committed with tensor %s's data not written", g->t[g->next].name);
    g->committed = true; /* commit closes the file, whatever it returns */
    return glm_afile_commit(&g->af);
}
