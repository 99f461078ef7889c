/* common/safetensors.c: safetensors reader (mmap + full validation, sharded via index.json) and
 * atomic writer. Format: https://huggingface.co/docs/safetensors (see safetensors.h). */
#include "common/safetensors.h"

#include "common/bf16.h"

#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"

/* The reference implementation refuses headers above 100 MB; so do we (a corrupt length field
 * must not make us allocate gigabytes). */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

struct glm_st_set {
    glm_st_tensor *t;     /* tensors, in file order (shards in index order) */
    size_t n;
    size_t *sorted;       /* indices of t sorted by name, for glm_st_find */
    glm_mmap *maps;       /* one mapping per file */
    char **files;         /* file paths, parallel to maps */
    size_t nfiles;
    json_t *meta;         /* __metadata__ of the first file (object) or NULL */
};

static const struct {
    const char *name;
    glm_st_dtype d;
    size_t size;
} k_dtypes[] = {
    {"F32", GLM_ST_F32, 4},   {"F16", GLM_ST_F16, 2},   {"BF16", GLM_ST_BF16, 2},
    {"F64", GLM_ST_F64, 8},   {"I64", GLM_ST_I64, 8},   {"I32", GLM_ST_I32, 4},
    {"U8", GLM_ST_U8, 1},     {"I8", GLM_ST_I8, 1},     {"BOOL", GLM_ST_BOOL, 1},
    {"U32", GLM_ST_U32, 4},   {"I16", GLM_ST_I16, 2},   {"U16", GLM_ST_U16, 2},
    {"U64", GLM_ST_U64, 8},
};
#define N_DTYPES (sizeof(k_dtypes) / sizeof(k_dtypes[0]))

const char *glm_st_dtype_name(glm_st_dtype d) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (k_dtypes[i].d == d) return k_dtypes[i].name;
    return "?";
}

size_t glm_st_dtype_size(glm_st_dtype d) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (k_dtypes[i].d == d) return k_dtypes[i].size;
    return 0;
}

static bool dtype_from_name(const char *s, glm_st_dtype *d) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(k_dtypes[i].name, s) == 0) {
            *d = k_dtypes[i].d;
            return true;
        }
    return false;
}

/* ---------------------------------------------------------------- conversions */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float half_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) {
        float v = ldexpf((float)m, -24); /* zero or subnormal: m * 2^-24, exact in f32 */
        return sign ? -v : v;
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

/* IEEE binary16, round to nearest even; overflow -> inf; NaN stays NaN (quiet). */
static uint16_t f32_to_half(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00 : 0x7c00);
    if (ax >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                      /* below 2^-14: half subnormal or zero */
        if (ax < 0x33000000u) return sign;       /* <= 2^-25 rounds to zero (tie to even) */
        uint32_t e = ax >> 23, mant = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;                /* value = mant * 2^(e-150); unit 2^-24 */
        uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return sign | (uint16_t)h;
    }
    uint32_t h = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return sign | (uint16_t)h;
}

/* bfloat16 = top 16 bits of f32, round to nearest even; NaN -> quiet NaN (common/bf16.h). */
static uint16_t f32_to_bf16(float f) { return glm_f32_to_bf16(f); }

glm_status glm_st_to_f32(glm_st_dtype src_dtype, const void *src, size_t n, float *dst) {
    const unsigned char *p = src;
    switch (src_dtype) {
    case GLM_ST_F32:
        memcpy(dst, src, n * 4);
        return GLM_OK;
    case GLM_ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = bits_f32((uint32_t)h << 16);
        }
        return GLM_OK;
    case GLM_ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = half_to_f32(h);
        }
        return GLM_OK;
    case GLM_ST_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
        }
        return GLM_OK;
    default:
        return glm_err(GLM_ERR_UNSUPPORTED,
                       "cannot convert safetensors dtype %s to float32 (only F32, F16, BF16, F64)",
                       glm_st_dtype_name(src_dtype));
    }
}

glm_status glm_st_from_f32(glm_st_dtype dst_dtype, const float *src, size_t n, void *dst) {
    unsigned char *p = dst;
    switch (dst_dtype) {
    case GLM_ST_F32:
        memcpy(dst, src, n * 4);
        return GLM_OK;
    case GLM_ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return GLM_OK;
    case GLM_ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = f32_to_half(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return GLM_OK;
    default:
        return glm_err(GLM_ERR_UNSUPPORTED,
                       "cannot convert float32 to safetensors dtype %s (only F32, F16, BF16)",
                       glm_st_dtype_name(dst_dtype));
    }
}

/* ---------------------------------------------------------------- reading */

void glm_st_close(glm_st_set *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->t[i].name);
    free(s->t);
    free(s->sorted);
    for (size_t i = 0; i < s->nfiles; i++) {
        glm_mmap_close(&s->maps[i]);
        free(s->files[i]);
    }
    free(s->maps);
    free(s->files);
    if (s->meta) json_decref(s->meta);
    free(s);
}

size_t glm_st_count(const glm_st_set *s) { return s->n; }

const glm_st_tensor *glm_st_at(const glm_st_set *s, size_t i) {
    return i < s->n ? &s->t[i] : NULL;
}

typedef struct {
    const char *name;
    size_t idx;
} name_idx;

static int cmp_by_name(const void *a, const void *b) {
    return strcmp(((const name_idx *)a)->name, ((const name_idx *)b)->name);
}

const glm_st_tensor *glm_st_find(const glm_st_set *s, const char *name) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(s->t[s->sorted[mid]].name, name);
        if (c == 0) return &s->t[s->sorted[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *glm_st_metadata(const glm_st_set *s, const char *key) {
    if (!s->meta) return NULL;
    return json_string_value(json_object_get(s->meta, key));
}

typedef struct {
    size_t idx;   /* into set->t */
    uint64_t b, e;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    return x->e < y->e ? -1 : x->e > y->e;
}

static glm_status add_file(glm_st_set *s, const char *path) {
    glm_mmap *nm = realloc(s->maps, (s->nfiles + 1) * sizeof(*nm));
    if (!nm) return glm_err(GLM_ERR_NOMEM, "out of memory");
    s->maps = nm;
    char **nf = realloc(s->files, (s->nfiles + 1) * sizeof(*nf));
    if (!nf) return glm_err(GLM_ERR_NOMEM, "out of memory");
    s->files = nf;
    s->files[s->nfiles] = strdup(path);
    if (!s->files[s->nfiles]) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status st = glm_mmap_open(&s->maps[s->nfiles], path);
    if (st != GLM_OK) {
        free(s->files[s->nfiles]);
        return st;
    }
    s->nfiles++;
    return GLM_OK;
}

/* Parses and validates one mapped file (s->maps[fi]) and appends its tensors. */
static glm_status parse_file(glm_st_set *s, size_t fi) {
    const char *path = s->files[fi];
    const unsigned char *base = s->maps[fi].data;
    size_t size = s->maps[fi].size;
    if (size < 8)
        return glm_err(GLM_ERR_FORMAT,
                       "%s: truncated safetensors file (%zu bytes, the 8-byte header length is "
                       "missing); hint: the download or copy was cut short",
                       path, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | base[i];
    if (hlen > size - 8)
        return glm_err(GLM_ERR_FORMAT,
                       "%s: header length %llu goes beyond the file (%zu bytes); hint: the file "
                       "is truncated or not a safetensors file",
                       path, (unsigned long long)hlen, size);
    if (hlen > ST_MAX_HEADER)
        return glm_err(GLM_ERR_FORMAT, "%s: header length %llu is over the 100 MB limit", path,
                       (unsigned long long)hlen);
    if (hlen < 2)
        return glm_err(GLM_ERR_FORMAT, "%s: header of %llu bytes cannot hold a JSON object", path,
                       (unsigned long long)hlen);
    json_error_t je;
    json_t *root = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return glm_err(GLM_ERR_FORMAT, "%s: bad header JSON at byte %d: %s", path,
                       8 + je.position, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return glm_err(GLM_ERR_FORMAT, "%s: header is not a JSON object", path);
    }
    const unsigned char *buf = base + 8 + hlen;
    uint64_t buflen = size - 8 - hlen;
    size_t nt = json_object_size(root);
    glm_st_tensor *nt_arr = realloc(s->t, (s->n + nt + 1) * sizeof(*nt_arr));
    span *spans = malloc((nt ? nt : 1) * sizeof(*spans));
    if (!nt_arr || !spans) {
        if (nt_arr) s->t = nt_arr;
        free(spans);
        json_decref(root);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    s->t = nt_arr;
    size_t nspan = 0;
    glm_status st = GLM_OK;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                st = glm_err(GLM_ERR_FORMAT, "%s: __metadata__ is not an object", path);
                break;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    st = glm_err(GLM_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a string",
                                 path, mk);
                    break;
                }
            }
            if (st != GLM_OK) break;
            if (fi == 0 && !s->meta) s->meta = json_incref(val);
            continue;
        }
        if (!json_is_object(val)) {
            st = glm_err(GLM_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", path, key);
            break;
        }
        json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
               *jo = json_object_get(val, "data_offsets");
        if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) ||
            json_array_size(jo) != 2) {
            st = glm_err(GLM_ERR_FORMAT,
                         "%s: tensor '%s': needs \"dtype\" (string), \"shape\" (array) and "
                         "\"data_offsets\" ([begin, end])",
                         path, key);
            break;
        }
        glm_st_tensor t;
        memset(&t, 0, sizeof(t));
        if (!dtype_from_name(json_string_value(jd), &t.dtype)) {
            st = glm_err(GLM_ERR_FORMAT,
                         "%s: tensor '%s': unknown dtype '%s' (known: F32 F16 BF16 F64 I64 I32 "
                         "I16 I8 U64 U32 U16 U8 BOOL)",
                         path, key, json_string_value(jd));
            break;
        }
        size_t nd = json_array_size(js);
        if (nd > 8) {
            st = glm_err(GLM_ERR_FORMAT, "%s: tensor '%s': %zu dimensions (at most 8 supported)",
                         path, key, nd);
            break;
        }
        t.ndim = (int)nd;
        uint64_t numel = 1;
        bool bad = false;
        for (size_t d = 0; d < nd; d++) {
            json_t *x = json_array_get(js, d);
            if (!json_is_integer(x) || json_integer_value(x) < 0) {
                bad = true;
                break;
            }
            t.shape[d] = json_integer_value(x);
            uint64_t dim = (uint64_t)t.shape[d];
            if (dim && numel > UINT64_MAX / 16 / dim) {
                bad = true;
                break;
            }
            numel *= dim;
        }
        if (bad) {
            st = glm_err(GLM_ERR_FORMAT, "%s: tensor '%s': shape must be non-negative integers "
                                         "(and not overflow)", path, key);
            break;
        }
        json_t *jb = json_array_get(jo, 0), *je2 = json_array_get(jo, 1);
        if (!json_is_integer(jb) || !json_is_integer(je2) || json_integer_value(jb) < 0 ||
            json_integer_value(je2) < json_integer_value(jb)) {
            st = glm_err(GLM_ERR_FORMAT,
                         "%s: tensor '%s': data_offsets must be integers 0 <= begin <= end", path,
                         key);
            break;
        }
        uint64_t b = (uint64_t)json_integer_value(jb), e = (uint64_t)json_integer_value(je2);
        uint64_t need = numel * glm_st_dtype_size(t.dtype);
        if (e - b != need) {
            st = glm_err(GLM_ERR_FORMAT,
                         "%s: tensor '%s': byte span %llu..%llu (%llu bytes) does not match "
                         "shape x %s size (%llu bytes)",
                         path, key, (unsigned long long)b, (unsigned long long)e,
                         (unsigned long long)(e - b), json_string_value(jd),
                         (unsigned long long)need);
            break;
        }
        if (e > buflen) {
            st = glm_err(GLM_ERR_FORMAT,
                         "%s: tensor '%s': data %llu..%llu lies beyond the end of the file "
                         "(data buffer has %llu bytes); hint: the file is truncated",
                         path, key, (unsigned long long)b, (unsigned long long)e,
                         (unsigned long long)buflen);
            break;
        }
        t.numel = (int64_t)numel;
        t.nbytes = (size_t)need;
        t.data = buf + b;
        t.file = path;
        t.name = strdup(key);
        if (!t.name) {
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
            break;
        }
        spans[nspan].idx = s->n;
        spans[nspan].b = b;
        spans[nspan].e = e;
        nspan++;
        s->t[s->n++] = t;
    }
    if (st == GLM_OK) {
        qsort(spans, nspan, sizeof(*spans), cmp_span);
        for (size_t i = 1; i < nspan; i++) {
            if (spans[i].b < spans[i - 1].e) {
                st = glm_err(GLM_ERR_FORMAT,
                             "%s: tensors '%s' (bytes %llu..%llu) and '%s' (bytes %llu..%llu) "
                             "overlap; the file is corrupt",
                             path, s->t[spans[i - 1].idx].name, (unsigned long long)spans[i - 1].b,
                             (unsigned long long)spans[i - 1].e, s->t[spans[i].idx].name,
                             (unsigned long long)spans[i].b, (unsigned long long)spans[i].e);
                break;
            }
        }
    }
    free(spans);
    json_decref(root);
    return st;
}

static char *dir_of(const char *path) {
    const char *sl = strrchr(path, '/');
    if (!sl) return strdup(".");
    if (sl == path) return strdup("/");
    return strndup(path, (size_t)(sl - path));
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static glm_status open_index(glm_st_set *s, const char *index_path) {
    char *text = NULL;
    size_t len = 0;
    GLM_TRY(glm_read_file(index_path, &text, &len));
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    if (!root)
        return glm_err(GLM_ERR_FORMAT, "%s: line %d: bad JSON: %s", index_path, je.line, je.text);
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(root);
        return glm_err(GLM_ERR_FORMAT, "%s: no \"weight_map\" object; hint: is this a "
                                       "model.safetensors.index.json?", index_path);
    }
    char *dir = dir_of(index_path);
    if (!dir) {
        json_decref(root);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    glm_status st = GLM_OK;
    const char *key;
    json_t *val;
    /* open every distinct shard, in order of first mention */
    json_object_foreach(wm, key, val) {
        const char *fn = json_string_value(val);
        if (!fn || !*fn || fn[0] == '/' || strstr(fn, "..")) {
            st = glm_err(GLM_ERR_FORMAT, "%s: weight_map['%s'] must be a file name in the same "
                                         "directory", index_path, key);
            break;
        }
        char *p = glm_path_join(dir, fn);
        if (!p) {
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
            break;
        }
        bool seen = false;
        for (size_t i = 0; i < s->nfiles && !seen; i++) seen = strcmp(s->files[i], p) == 0;
        if (!seen) {
            st = add_file(s, p);
            if (st == GLM_OK) st = parse_file(s, s->nfiles - 1);
            if (st != GLM_OK) glm_err_context(st, "%s: shard listed for '%s'", index_path, key);
        }
        free(p);
        if (st != GLM_OK) break;
    }
    if (st == GLM_OK && s->nfiles == 0)
        st = glm_err(GLM_ERR_FORMAT, "%s: weight_map is empty", index_path);
    /* every mapped name must be in the shard the index names */
    if (st == GLM_OK) {
        json_object_foreach(wm, key, val) {
            const char *fn = json_string_value(val);
            bool ok = false;
            for (size_t i = 0; i < s->n && !ok; i++) {
                if (strcmp(s->t[i].name, key) == 0) {
                    const char *f = s->t[i].file, *sl = strrchr(f, '/');
                    ok = strcmp(sl ? sl + 1 : f, fn) == 0;
                }
            }
            if (!ok) {
                st = glm_err(GLM_ERR_FORMAT, "%s: tensor '%s' is listed in weight_map under %s "
                                             "but that shard does not hold it", index_path, key, fn);
                break;
            }
        }
    }
    free(dir);
    json_decref(root);
    return st;
}

/* Sorts the tensor indices by name (no global comparator state: opens may run on several
 * threads at once) and rejects duplicate names. */
static glm_status finish_index(glm_st_set *s) {
    s->sorted = malloc((s->n ? s->n : 1) * sizeof(size_t));
    name_idx *ni = malloc((s->n ? s->n : 1) * sizeof(*ni));
    if (!s->sorted || !ni) {
        free(ni);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < s->n; i++) ni[i] = (name_idx){s->t[i].name, i};
    qsort(ni, s->n, sizeof(*ni), cmp_by_name);
    for (size_t i = 0; i < s->n; i++) s->sorted[i] = ni[i].idx;
    free(ni);
    for (size_t i = 1; i < s->n; i++) {
        const glm_st_tensor *a = &s->t[s->sorted[i - 1]], *b = &s->t[s->sorted[i]];
        if (strcmp(a->name, b->name) == 0)
            return glm_err(GLM_ERR_FORMAT, "tensor '%s' appears twice (in %s and %s)", a->name,
                           a->file, b->file);
    }
    return GLM_OK;
}

glm_status glm_st_open(const char *path, glm_st_set **out) {
    *out = NULL;
    glm_st_set *s = calloc(1, sizeof(*s));
    if (!s) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status st = GLM_OK;
    if (glm_is_dir(path)) {
        char *idx = glm_path_join(path, "model.safetensors.index.json");
        char *single = glm_path_join(path, "model.safetensors");
        if (!idx || !single) {
            st = glm_err(GLM_ERR_NOMEM, "out of memory");
        } else if (glm_is_file(idx)) {
            st = open_index(s, idx);
        } else if (glm_is_file(single)) {
            st = add_file(s, single);
            if (st == GLM_OK) st = parse_file(s, 0);
        } else {
            DIR *d = opendir(path);
            char *found = NULL;
            int count = 0;
            if (!d) {
                st = glm_err(GLM_ERR_IO, "%s: cannot open directory: %s", path, strerror(errno));
            } else {
                struct dirent *de;
                while ((de = readdir(d))) {
                    if (de->d_name[0] == '.' || !ends_with(de->d_name, ".safetensors")) continue;
                    if (++count == 1) found = strdup(de->d_name);
                }
                closedir(d);
                if (count == 0)
                    st = glm_err(GLM_ERR_IO, "%s: no model.safetensors.index.json and no "
                                             "*.safetensors file in this directory", path);
                else if (count > 1)
                    st = glm_err(GLM_ERR_FORMAT, "%s: %d *.safetensors files but no "
                                                 "model.safetensors.index.json; hint: pass one file",
                                 path, count);
                else {
                    char *p = glm_path_join(path, found);
                    st = p ? add_file(s, p) : glm_err(GLM_ERR_NOMEM, "out of memory");
                    if (st == GLM_OK) st = parse_file(s, 0);
                    free(p);
                }
                free(found);
            }
        }
        free(idx);
        free(single);
    } else if (ends_with(path, ".json")) {
        st = open_index(s, path);
    } else {
        st = add_file(s, path);
        if (st == GLM_OK) st = parse_file(s, 0);
    }
    if (st == GLM_OK) st = finish_index(s);
    if (st != GLM_OK) {
        glm_st_close(s);
        return st;
    }
    *out = s;
    return GLM_OK;
}

glm_status glm_st_read_f32(const glm_st_set *s, const char *name, int ndim, const int64_t *shape,
                           float *dst) {
    const glm_st_tensor *t = glm_st_find(s, name);
    if (!t)
        return glm_err(GLM_ERR_FORMAT, "tensor '%s' not found in %s%s", name,
                       s->nfiles ? s->files[0] : "(empty set)",
                       s->nfiles > 1 ? " (and its other shards)" : "");
    bool same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char want[160] = "", got[160] = "";
        size_t a = 0, b = 0;
        for (int d = 0; d < ndim && a < sizeof(want) - 24; d++)
            a += snprintf(want + a, sizeof(want) - a, "%s%lld", d ? ", " : "", (long long)shape[d]);
        for (int d = 0; d < t->ndim && b < sizeof(got) - 24; d++)
            b += snprintf(got + b, sizeof(got) - b, "%s%lld", d ? ", " : "",
                          (long long)t->shape[d]);
        return glm_err(GLM_ERR_MISMATCH, "%s: tensor '%s' has shape [%s], expected [%s]", t->file,
                       name, got, want);
    }
    glm_status st = glm_st_to_f32(t->dtype, t->data, (size_t)t->numel, dst);
    if (st != GLM_OK) return glm_err_context(st, "%s: tensor '%s'", t->file, name);
    return GLM_OK;
}

/* ---------------------------------------------------------------- writing */

/* The header of a safetensors file (8-byte length + JSON padded to 8 bytes) for `tensors` laid
 * out in order; need_data: every tensor with bytes must have its data. */
static glm_status st_header(const char *path, const glm_st_tensor *tensors, size_t n, const char *const *meta_kv,
                            size_t n_meta, int need_data, char **hdr_out, size_t *padded_out) {
    json_t *root = json_object();
    if (!root) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status st = GLM_OK;
    if (n_meta) {
        json_t *m = json_object();
        for (size_t i = 0; m && i < n_meta; i++) {
            if (!meta_kv[2 * i] || !meta_kv[2 * i + 1]) {
                st = glm_err(GLM_ERR_ARG, "%s: metadata pair %zu has a NULL key or value", path, i);
                break;
            }
            json_object_set_new(m, meta_kv[2 * i], json_string(meta_kv[2 * i + 1]));
        }
        if (!m && st == GLM_OK) st = glm_err(GLM_ERR_NOMEM, "out of memory");
        if (m) json_object_set_new(root, "__metadata__", m);
    }
    uint64_t off = 0;
    for (size_t i = 0; st == GLM_OK && i < n; i++) {
        const glm_st_tensor *t = &tensors[i];
        if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0) {
            st = glm_err(GLM_ERR_ARG, "%s: tensor %zu has no usable name", path, i);
            break;
        }
        if (json_object_get(root, t->name)) {
            st = glm_err(GLM_ERR_ARG, "%s: tensor '%s' given twice", path, t->name);
            break;
        }
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        size_t es = glm_st_dtype_size(t->dtype);
        if (t->ndim < 0 || t->ndim > 8 || es == 0 || numel != t->numel ||
            (uint64_t)numel * es != t->nbytes || (need_data && t->nbytes && !t->data)) {
            st = glm_err(GLM_ERR_ARG,
                         "%s: tensor '%s': shape, numel (%lld), dtype %s and nbytes (%zu) "
                         "disagree or data is missing",
                         path, t->name, (long long)t->numel, glm_st_dtype_name(t->dtype),
                         t->nbytes);
            break;
        }
        json_t *e = json_object(), *sh = json_array(), *of = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(sh, json_integer(t->shape[d]));
        json_array_append_new(of, json_integer((json_int_t)off));
        json_array_append_new(of, json_integer((json_int_t)(off + t->nbytes)));
        json_object_set_new(e, "dtype", json_string(glm_st_dtype_name(t->dtype)));
        json_object_set_new(e, "shape", sh);
        json_object_set_new(e, "data_offsets", of);
        json_object_set_new(root, t->name, e);
        off += t->nbytes;
    }
    char *hdr = NULL;
    if (st == GLM_OK) {
        hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!hdr) st = glm_err(GLM_ERR_NOMEM, "out of memory (safetensors header)");
    }
    json_decref(root);
    if (st != GLM_OK) return st;
    /* header padded with spaces so the data buffer starts 8-byte aligned (like the reference) */
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    char *h2 = realloc(hdr, padded + 1);
    if (!h2) {
        free(hdr);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    hdr = h2;
    memset(hdr + hl, ' ', padded - hl);
    *hdr_out = hdr;
    *padded_out = padded;
    return GLM_OK;
}

glm_status glm_st_write(const char *path, const glm_st_tensor *tensors, size_t n,
                        const char *const *meta_kv, size_t n_meta) {
    char *hdr = NULL;
    size_t padded = 0;
    GLM_TRY(st_header(path, tensors, n, meta_kv, n_meta, 1, &hdr, &padded));
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    glm_status st;
    glm_afile af;
    st = glm_afile_open(&af, path);
    if (st != GLM_OK) {
        free(hdr);
        return st;
    }
    st = glm_afile_write(&af, lenb, 8);
    if (st == GLM_OK) st = glm_afile_write(&af, hdr, padded);
    for (size_t i = 0; st == GLM_OK && i < n; i++)
        if (tensors[i].nbytes) st = glm_afile_write(&af, tensors[i].data, tensors[i].nbytes);
    free(hdr);
    if (st != GLM_OK) {
        glm_afile_abort(&af);
        return st;
    }
    return glm_afile_commit(&af);
}

/* ---- parallel writer ---- */

typedef struct par_job {
    const glm_st_tensor *t;
    size_t n;
    uint64_t *offs;         /* byte offset of each tensor's data in the file */
    glm_st_fill_fn fill;
    void *ctx;
    int fd;
    const char *tmp;
    int64_t chunk;          /* elements per work item */
    /* work items: (tensor, first element), handed out in order */
    size_t next_t;
    int64_t next_e;
    pthread_mutex_t mu;
    glm_status st;
} par_job;

static void *par_worker(void *arg) {
    par_job *j = arg;
    void *buf = NULL;
    size_t cap = 0;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        while (j->next_t < j->n && j->next_e >= j->t[j->next_t].numel) {
            j->next_t++;
            j->next_e = 0;
        }
        if (j->st || j->next_t >= j->n) {
            pthread_mutex_unlock(&j->mu);
            break;
        }
        size_t ti = j->next_t;
        int64_t e0 = j->next_e, cnt = j->t[ti].numel - e0 < j->chunk ? j->t[ti].numel - e0 : j->chunk;
        j->next_e += cnt;
        pthread_mutex_unlock(&j->mu);
        size_t es = glm_st_dtype_size(j->t[ti].dtype), nb = (size_t)cnt * es;
        if (nb > cap) {
            free(buf);
            buf = malloc(nb);
            cap = buf ? nb : 0;
        }
        glm_status st = buf ? j->fill(j->ctx, ti, e0, cnt, buf)
                            : glm_err(GLM_ERR_NOMEM, "out of memory (%zu bytes for %s)", nb, j->t[ti].name);
        for (size_t done = 0; st == GLM_OK && done < nb;) {
            ssize_t w = pwrite(j->fd, (char *)buf + done, nb - done, (off_t)(j->offs[ti] + (uint64_t)e0 * es + done));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) st = glm_err(GLM_ERR_IO, "%s: write failed: %s", j->tmp, w < 0 ? strerror(errno) : "no progress");
            else done += (size_t)w;
        }
        if (st) {
            pthread_mutex_lock(&j->mu);
            if (!j->st) j->st = st;
            pthread_mutex_unlock(&j->mu);
            break;
        }
    }
    free(buf);
    return NULL;
}

glm_status glm_st_write_parallel(const char *path, const glm_st_tensor *tensors, size_t n, const char *const *meta_kv,
                                 size_t n_meta, glm_st_fill_fn fill, void *ctx, int threads) {
    char *hdr = NULL;
    size_t padded = 0;
    GLM_TRY(st_header(path, tensors, n, meta_kv, n_meta, 0, &hdr, &padded));
    uint64_t *offs = malloc((n ? n : 1) * sizeof *offs);
    if (!offs) {
        free(hdr);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    uint64_t off = 8 + padded;
    for (size_t i = 0; i < n; i++) {
        offs[i] = off;
        off += tensors[i].nbytes;
    }
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    glm_afile af;
    glm_status st = glm_afile_open(&af, path);
    if (st) {
        free(hdr);
        free(offs);
        return st;
    }
    st = glm_afile_write(&af, lenb, 8);
    if (!st) st = glm_afile_write(&af, hdr, padded);
    if (!st && fflush(af.f) != 0) st = glm_err(GLM_ERR_IO, "%s: write failed: %s", af.tmp, strerror(errno));
    free(hdr);
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    par_job j = {tensors, n, offs, fill, ctx, fileno(af.f), af.tmp, 1 << 25, 0, 0, PTHREAD_MUTEX_INITIALIZER, st};
    pthread_t tid[64];
    int started = 0;
    for (int i = 1; !j.st && i < threads; i++) {
        if (pthread_create(&tid[started], NULL, par_worker, &j) != 0) break; /* fewer threads: the others do the work */
        started++;
    }
    if (!j.st) par_worker(&j);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&j.mu);
    free(offs);
    st = j.st;
    if (st) {
        glm_afile_abort(&af);
        return st;
    }
    return glm_afile_commit(&af);
}
