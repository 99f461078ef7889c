/* tokenize/tokenizer.c: loading (kind detection by content, tokenizer_config.json, special
 * tokens), dispatch to the tiktoken BPE (bpe.c) or SentencePiece (spm_shim.cc), decoding and
 * fingerprints. See tokenizer.h. */
#include "tokenize/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/hash.h"
#include "common/utf8.h"
#include "tokenize/bpe/bpe.h"
#include "tokenize/bpe/spm_shim.h"

enum { KIND_TIKTOKEN, KIND_SPM };

typedef struct {
    char *s;
    size_t len;
    uint32_t id;
    size_t match_len; /* strlen(s): what special-token matching compares */
} special_tok;
typedef GLM_VEC(special_tok) special_vec;

struct glm_tokenizer {
    int kind;
    glm_bpe *bpe;
    glm_spm *spm;           /* loaded from the proto with user-defined pieces marked unused */
    uint8_t *spm_type;      /* [spm size] piece types from the proto (GLM_SPM_*) */
    uint32_t base_vocab;    /* ids of the model itself: tiktoken max rank + 1, spm piece count */
    int spm_dummy_prefix;   /* NormalizerSpec.add_dummy_prefix */
    uint32_t vocab_size;    /* max id + 1, specials included */
    special_tok *special;   /* sorted by id, unique ids */
    size_t n_special;
    int32_t *special_of;    /* [vocab_size] index into special, -1 = none */
    unsigned char special_start[256]; /* byte b starts some special's string */
    size_t special_maxlen;  /* the longest special string (strlen) */
    char *path;
    char *chat_template;
    char *eos_token;        /* tokenizer_config.json "eos_token", or NULL */
    uint64_t fingerprint;
};

/* ------------------------------------------------------------------------- SentencePiece proto */

/* Reads a protobuf varint at *p (< end); returns -1 when truncated or too long. */
static int pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t r = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        if (*p >= end) return -1;
        uint8_t c = *(*p)++;
        r |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* Skips one field of wire type wt; -1 when malformed. Length-delimited fields give their body in
 * body and blen. */
static int pb_skip(const uint8_t **p, const uint8_t *end, int wt, const uint8_t **body, size_t *blen) {
    uint64_t v;
    switch (wt) {
    case 0: return pb_varint(p, end, &v);
    case 1: if (end - *p < 8) return -1; *p += 8; return 0;
    case 5: if (end - *p < 4) return -1; *p += 4; return 0;
    case 2:
        if (pb_varint(p, end, &v) || v > (uint64_t)(end - *p)) return -1;
        if (body) *body = *p, *blen = (size_t)v;
        *p += v;
        return 0;
    default: return -1;
    }
}

typedef struct {
    GLM_VEC(uint8_t) type;    /* per piece */
    GLM_VEC(size_t) type_at;  /* offset of the type varint in the buffer, or SIZE_MAX if absent */
    int dummy_prefix;
} spm_proto;

/* Walks a serialized sentencepiece ModelProto (pieces = field 1 {piece=1, score=2, type=3},
 * normalizer_spec = field 3, add_dummy_prefix = its field 3). Returns the byte offset of the first malformed
 * field, or SIZE_MAX when the whole buffer parses and holds at least one piece. */
static size_t spm_proto_walk(const uint8_t *buf, size_t len, spm_proto *pr) {
    const uint8_t *p = buf, *end = buf + len;
    pr->dummy_prefix = 1;
    while (p < end) {
        const uint8_t *fs = p;
        uint64_t key;
        if (pb_varint(&p, end, &key)) return (size_t)(fs - buf);
        int field = (int)(key >> 3), wt = (int)(key & 7);
        const uint8_t *body = NULL;
        size_t blen = 0;
        if (field == 0 || pb_skip(&p, end, wt, &body, &blen)) return (size_t)(fs - buf);
        if (field == 1 && wt == 2) {
            const uint8_t *q = body, *qe = body + blen;
            int type = GLM_SPM_NORMAL;
            size_t at = SIZE_MAX;
            while (q < qe) {
                const uint8_t *ks = q;
                uint64_t k2, v;
                if (pb_varint(&q, qe, &k2)) return (size_t)(ks - buf);
                if ((k2 >> 3) == 3 && (k2 & 7) == 0) {
                    at = (size_t)(q - buf);
                    if (pb_varint(&q, qe, &v) || v < 1 || v > 6) return (size_t)(ks - buf);
                    type = (int)v;
                } else if ((k2 >> 3) == 0 || pb_skip(&q, qe, (int)(k2 & 7), NULL, NULL)) {
                    return (size_t)(ks - buf);
                }
            }
            if (glm_vec_push(pr->type, (uint8_t)type) != GLM_OK || glm_vec_push(pr->type_at, at) != GLM_OK)
                return (size_t)(fs - buf);
        } else if (field == 3 && wt == 2) {
            const uint8_t *q = body, *qe = body + blen;
            while (q < qe) {
                const uint8_t *ks = q;
                uint64_t k2, v;
                if (pb_varint(&q, qe, &k2)) return (size_t)(ks - buf);
                if ((k2 >> 3) == 3 && (k2 & 7) == 0) {
                    if (pb_varint(&q, qe, &v)) return (size_t)(ks - buf);
                    pr->dummy_prefix = v != 0;
                } else if ((k2 >> 3) == 0 || pb_skip(&q, qe, (int)(k2 & 7), NULL, NULL)) {
                    return (size_t)(ks - buf);
                }
            }
        }
    }
    return pr->type.n ? SIZE_MAX : 0;
}

/* ------------------------------------------------------------------------- specials */

static glm_status add_special(special_vec *v, const char *s, size_t len, uint32_t id, int replace) {
    for (size_t i = 0; i < v->n; i++)
        if (v->v[i].id == id) {
            if (!replace) return GLM_OK;
            char *c = strndup(s, len);
            if (!c) return glm_err(GLM_ERR_NOMEM, "out of memory");
            free(v->v[i].s);
            v->v[i].s = c;
            v->v[i].len = len;
            return GLM_OK;
        }
    special_tok t = {strndup(s, len), len, id, 0}; /* match_len: set once all are known */
    if (!t.s) return glm_err(GLM_ERR_NOMEM, "out of memory");
    if (glm_vec_push(*v, t) != GLM_OK) {
        free(t.s);
        return GLM_ERR_NOMEM;
    }
    return GLM_OK;
}

static int cmp_special(const void *a, const void *b) {
    uint32_t x = ((const special_tok *)a)->id, y = ((const special_tok *)b)->id;
    return x < y ? -1 : x > y;
}

/* Reads tokenizer_config.json (if present): "added_tokens_decoder" into *sp, "chat_template",
 * "eos_token" (a string or {"content": ...}). */
static glm_status read_config(const char *cfg_path, special_vec *sp, char **chat_template, char **eos) {
    if (!glm_is_file(cfg_path)) return GLM_OK;
    json_error_t je;
    json_t *root = json_load_file(cfg_path, JSON_DECODE_ANY, &je);
    if (!root)
        return glm_err(GLM_ERR_FORMAT, "%s:%d:%d: invalid JSON: %s; hint: fix or remove the file",
                       cfg_path, je.line, je.column, je.text);
    glm_status st = GLM_OK;
    if (!json_is_object(root)) {
        st = glm_err(GLM_ERR_FORMAT, "%s: expected a JSON object at the top level", cfg_path);
        goto done;
    }
    json_t *atd = json_object_get(root, "added_tokens_decoder");
    if (atd && !json_is_object(atd)) {
        st = glm_err(GLM_ERR_FORMAT, "%s: \"added_tokens_decoder\" must be an object {id: {content}}", cfg_path);
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(atd, key, val) {
        char *endp;
        unsigned long long id = strtoull(key, &endp, 10);
        if (!*key || *endp || id >= (1u << 24)) {
            st = glm_err(GLM_ERR_FORMAT, "%s: added_tokens_decoder key \"%s\" is not a token id below 2^24; "
                         "hint: keys are decimal ids such as \"151329\"", cfg_path, key);
            goto done;
        }
        json_t *content = json_is_object(val) ? json_object_get(val, "content") : val;
        if (!json_is_string(content) || json_string_length(content) == 0) {
            st = glm_err(GLM_ERR_FORMAT, "%s: added_tokens_decoder[\"%s\"] has no \"content\" string",
                         cfg_path, key);
            goto done;
        }
        if ((st = add_special(sp, json_string_value(content), json_string_length(content), (uint32_t)id, 1)))
            goto done;
    }
    json_t *ct = json_object_get(root, "chat_template");
    if (json_is_array(ct)) { /* [{"name": ..., "template": ...}]: take "default", else the first */
        json_t *pick = NULL;
        size_t i;
        json_t *e;
        json_array_foreach(ct, i, e) {
            json_t *nm = json_object_get(e, "name");
            if (!pick || (json_is_string(nm) && strcmp(json_string_value(nm), "default") == 0)) pick = e;
        }
        ct = pick ? json_object_get(pick, "template") : NULL;
    }
    if (json_is_string(ct)) {
        *chat_template = strndup(json_string_value(ct), json_string_length(ct));
        if (!*chat_template) st = glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    json_t *eo = json_object_get(root, "eos_token");
    if (json_is_object(eo)) eo = json_object_get(eo, "content");
    if (st == GLM_OK && json_is_string(eo) && json_string_length(eo) > 0) {
        *eos = strndup(json_string_value(eo), json_string_length(eo));
        if (!*eos) st = glm_err(GLM_ERR_NOMEM, "out of memory");
    }
done:
    json_decref(root);
    return st;
}

/* ------------------------------------------------------------------------- load */

static const char *const chatglm3_specials[] = {"[MASK]",    "[gMASK]",  "[sMASK]",       "sop",           "eop",
                                                "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"};

void glm_tokenizer_free(glm_tokenizer *t) {
    if (!t) return;
    glm_bpe_free(t->bpe);
    if (t->spm) glm_spm_free(t->spm);
    free(t->spm_type);
    for (size_t i = 0; i < t->n_special; i++) free(t->special[i].s);
    free(t->special);
    free(t->special_of);
    free(t->path);
    free(t->chat_template);
    free(t->eos_token);
    free(t);
}

static glm_status load_spm(glm_tokenizer *t, const char *path, char *data, size_t len, size_t *bad_off) {
    spm_proto pr = {0};
    size_t bad = spm_proto_walk((const uint8_t *)data, len, &pr);
    if (bad != SIZE_MAX) {
        glm_vec_free(pr.type);
        glm_vec_free(pr.type_at);
        *bad_off = bad;
        return GLM_ERR_FORMAT;
    }
    /* Special-token strings in ordinary text must stay plain text, but sentencepiece matches
     * user-defined pieces anywhere in the input. So the encoder gets a copy of the model with
     * those pieces marked UNUSED (never produced); the special table keeps them. Types 4 and 5
     * are both one-byte varints, so the copy is patched in place. */
    char *patched = malloc(len ? len : 1);
    if (!patched) {
        glm_vec_free(pr.type);
        glm_vec_free(pr.type_at);
        return glm_err(GLM_ERR_NOMEM, "out of memory loading %s", path);
    }
    memcpy(patched, data, len);
    for (size_t i = 0; i < pr.type.n; i++)
        if (pr.type.v[i] == GLM_SPM_USER_DEFINED) patched[pr.type_at.v[i]] = GLM_SPM_UNUSED;
    char err[512] = "";
    t->spm = glm_spm_load(patched, len, err, sizeof err);
    free(patched);
    if (!t->spm) {
        glm_vec_free(pr.type);
        glm_vec_free(pr.type_at);
        return glm_err(GLM_ERR_FORMAT, "%s: not a usable SentencePiece model: %s", path, err);
    }
    if (glm_spm_size(t->spm) != pr.type.n) {
        glm_vec_free(pr.type);
        glm_vec_free(pr.type_at);
        return glm_err(GLM_ERR_LIBRARY, "%s: sentencepiece reports %u pieces, the proto has %zu",
                       path, glm_spm_size(t->spm), pr.type.n);
    }
    t->spm_type = pr.type.v;
    t->base_vocab = (uint32_t)pr.type.n;
    t->spm_dummy_prefix = pr.dummy_prefix;
    glm_vec_free(pr.type_at);
    return GLM_OK;
}

glm_status glm_tokenizer_load(const char *path, glm_tokenizer **out) {
    glm_status st = GLM_OK;
    char *model_path = NULL, *cfg_path = NULL, *data = NULL;
    size_t len = 0;
    special_vec sp = {0};
    glm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return glm_err(GLM_ERR_NOMEM, "out of memory");
    if (glm_is_dir(path)) {
        model_path = glm_path_join(path, "tokenizer.model");
        cfg_path = glm_path_join(path, "tokenizer_config.json");
    } else {
        model_path = strdup(path);
        const char *slash = strrchr(path, '/');
        if (slash) {
            char *dir = strndup(path, (size_t)(slash - path) + (slash == path));
            cfg_path = dir ? glm_path_join(dir, "tokenizer_config.json") : NULL;
            free(dir);
        } else {
            cfg_path = strdup("tokenizer_config.json");
        }
    }
    if (!model_path || !cfg_path) {
        st = glm_err(GLM_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (!glm_is_file(model_path)) {
        st = glm_err(GLM_ERR_IO, "%s: no such tokenizer file; hint: pass a model directory holding "
                     "tokenizer.model, or the tokenizer file itself", model_path);
        goto fail;
    }
    if ((st = glm_read_file(model_path, &data, &len)) != GLM_OK) goto fail;
    t->path = model_path;
    model_path = NULL;
    if (glm_bpe_detect(data, len)) {
        t->kind = KIND_TIKTOKEN;
        if ((st = glm_bpe_load(t->path, data, len, &t->bpe)) != GLM_OK) goto fail;
        t->base_vocab = glm_bpe_n_ranks(t->bpe);
    } else {
        t->kind = KIND_SPM;
        size_t bad = SIZE_MAX;
        st = load_spm(t, t->path, data, len, &bad);
        if (st != GLM_OK && bad != SIZE_MAX)
            st = glm_err(GLM_ERR_FORMAT, "%s: neither a tiktoken BPE file (the first line is not "
                         "\"base64 rank\") nor a SentencePiece model (protobuf breaks at byte offset %zu); "
                         "hint: pass GLM-4's tokenizer.model or a SentencePiece .model file", t->path, bad);
        if (st != GLM_OK) goto fail;
    }
    /* specials: the model's own (spm), then the config's (which win on the same id) */
    if (t->kind == KIND_SPM) {
        for (uint32_t i = 0; i < t->base_vocab; i++) {
            if (t->spm_type[i] != GLM_SPM_CONTROL && t->spm_type[i] != GLM_SPM_USER_DEFINED) continue;
            size_t pl;
            const char *pc = glm_spm_id_to_piece(t->spm, i, &pl);
            if (pc && (st = add_special(&sp, pc, pl, i, 0)) != GLM_OK) goto fail;
        }
    }
    size_t n_model_special = sp.n;
    if ((st = read_config(cfg_path, &sp, &t->chat_template, &t->eos_token)) != GLM_OK) goto fail;
    if (t->kind == KIND_SPM && sp.n == n_model_special && glm_spm_piece_to_id(t->spm, "<|user|>", 8) < 0) {
        /* ChatGLM3 convention: the chat tokens follow the SentencePiece vocabulary */
        for (size_t i = 0; i < sizeof chatglm3_specials / sizeof *chatglm3_specials; i++)
            if ((st = add_special(&sp, chatglm3_specials[i], strlen(chatglm3_specials[i]),
                                  t->base_vocab + (uint32_t)i, 0)) != GLM_OK)
                goto fail;
    }
    if (sp.n) qsort(sp.v, sp.n, sizeof *sp.v, cmp_special); /* sp.v is NULL when there are none */
    t->special = sp.v;
    t->n_special = sp.n;
    sp.v = NULL;
    sp.n = 0;
    t->vocab_size = t->base_vocab;
    for (size_t i = 0; i < t->n_special; i++)
        if (t->special[i].id + 1 > t->vocab_size) t->vocab_size = t->special[i].id + 1;
    t->special_of = malloc((size_t)t->vocab_size * sizeof *t->special_of);
    if (!t->special_of) {
        st = glm_err(GLM_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < t->vocab_size; i++) t->special_of[i] = -1;
    for (size_t i = 0; i < t->n_special; i++) t->special_of[t->special[i].id] = (int32_t)i;
    for (size_t i = 0; i < t->n_special; i++) {
        size_t l = t->special[i].match_len = strlen(t->special[i].s);
        if (l) t->special_start[(unsigned char)t->special[i].s[0]] = 1;
        if (l > t->special_maxlen) t->special_maxlen = l;
    }
    uint64_t h = t->kind == KIND_TIKTOKEN ? glm_bpe_file_hash(t->bpe) /* the same hash, done once */
                                          : glm_fnv1a64(GLM_FNV1A64_INIT, data, len);
    for (size_t i = 0; i < t->n_special; i++) {
        uint8_t idb[4] = {(uint8_t)t->special[i].id, (uint8_t)(t->special[i].id >> 8),
                          (uint8_t)(t->special[i].id >> 16), (uint8_t)(t->special[i].id >> 24)};
        h = glm_fnv1a64(h, idb, 4);
        h = glm_fnv1a64(h, t->special[i].s, t->special[i].len + 1);
    }
    t->fingerprint = h;
    free(data);
    free(cfg_path);
    *out = t;
    return GLM_OK;
fail:
    for (size_t i = 0; i < sp.n; i++) free(sp.v[i].s);
    glm_vec_free(sp);
    free(data);
    free(model_path);
    free(cfg_path);
    glm_tokenizer_free(t);
    return st;
}

/* ------------------------------------------------------------------------- encode / decode */

glm_status glm_tokenizer_encode(const glm_tokenizer *t, const char *text, size_t len, glm_u32vec *out) {
    size_t bad = glm_utf8_check(text, len);
    if (bad != len)
        return glm_err(GLM_ERR_FORMAT, "invalid UTF-8 at byte offset %zu of a %zu-byte text (byte 0x%02x); "
                       "hint: convert the input to UTF-8", bad, len, (unsigned)(unsigned char)text[bad]);
    return glm_tokenizer_encode_valid(t, text, len, out);
}

glm_status glm_tokenizer_encode_valid(const glm_tokenizer *t, const char *text, size_t len, glm_u32vec *out) {
    size_t n0 = out->n;
    glm_status st;
    if (t->kind == KIND_TIKTOKEN) {
        st = glm_bpe_encode(t->bpe, text, len, out);
    } else {
        uint32_t *ids = NULL;
        size_t n = 0;
        char err[512] = "";
        if (glm_spm_encode(t->spm, text, len, &ids, &n, err, sizeof err) != 0) {
            st = glm_err(GLM_ERR_LIBRARY, "sentencepiece failed to encode a %zu-byte text: %s", len, err);
        } else {
            st = glm_vec_reserve(*out, n);
            if (st == GLM_OK) {
                memcpy(out->v + out->n, ids, n * sizeof *ids);
                out->n += n;
            }
            free(ids);
        }
    }
    if (st != GLM_OK) out->n = n0;
    return st;
}

/* Appends the text of SentencePiece piece `id` (not special): byte pieces <0xNN> are the byte,
 * U+2581 is a space, unknown is " \u2047 " (as sentencepiece decodes them). */
static glm_status spm_piece_text(const glm_tokenizer *t, uint32_t id, int first, glm_charvec *out) {
    size_t pl;
    const char *pc = glm_spm_id_to_piece(t->spm, id, &pl);
    if (!pc) return glm_err(GLM_ERR_ARG, "token id %u is out of range", id);
    int type = t->spm_type[id];
    if (type == GLM_SPM_BYTE && pl == 6 && pc[0] == '<' && pc[1] == '0' && pc[2] == 'x') {
        char hex[3] = {pc[3], pc[4], 0};
        return glm_vec_push(*out, (char)strtoul(hex, NULL, 16));
    }
    if (type == GLM_SPM_UNKNOWN) {
        pc = " \xe2\x81\x87 ";
        pl = strlen(pc);
    }
    if (type == GLM_SPM_CONTROL) return GLM_OK;
    size_t start = out->n;
    for (size_t i = 0; i < pl; i++) {
        if (i + 2 < pl && (uint8_t)pc[i] == 0xE2 && (uint8_t)pc[i + 1] == 0x96 && (uint8_t)pc[i + 2] == 0x81) {
            GLM_TRY(glm_vec_push(*out, ' '));
            i += 2;
        } else {
            GLM_TRY(glm_vec_push(*out, pc[i]));
        }
    }
    /* the dummy prefix that encoding added in front of the text */
    if (first && t->spm_dummy_prefix && out->n > start && out->v[start] == ' ' && type != GLM_SPM_UNKNOWN) {
        memmove(out->v + start, out->v + start + 1, out->n - start - 1);
        out->n--;
    }
    return GLM_OK;
}

glm_status glm_tokenizer_decode(const glm_tokenizer *t, const uint32_t *ids, size_t n, glm_charvec *out) {
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->vocab_size || (t->special_of[id] < 0 && id >= t->base_vocab))
            return glm_err(GLM_ERR_ARG, "token id %u (position %zu of %zu) is not in the vocabulary (%u ids)%s",
                           id, i, n, t->vocab_size,
                           id >= t->vocab_size ? "; hint: was this data made with another tokenizer?" : "");
        if (t->kind == KIND_TIKTOKEN && t->special_of[id] < 0) {
            const char *b;
            size_t bl;
            if (!glm_bpe_token(t->bpe, id, &b, &bl))
                return glm_err(GLM_ERR_ARG, "token id %u (position %zu) is unassigned in the vocabulary", id, i);
        }
    }
    size_t n0 = out->n;
    glm_status st = GLM_OK;
    for (size_t i = 0; i < n && st == GLM_OK; i++) {
        uint32_t id = ids[i];
        int32_t si = t->special_of[id];
        if (si >= 0) {
            const special_tok *s = &t->special[si];
            if ((st = glm_vec_reserve(*out, s->len)) == GLM_OK) {
                memcpy(out->v + out->n, s->s, s->len);
                out->n += s->len;
            }
        } else if (t->kind == KIND_TIKTOKEN) {
            const char *b;
            size_t bl;
            glm_bpe_token(t->bpe, id, &b, &bl);
            if ((st = glm_vec_reserve(*out, bl)) == GLM_OK) {
                memcpy(out->v + out->n, b, bl);
                out->n += bl;
            }
        } else {
            st = spm_piece_text(t, id, i == 0, out);
        }
    }
    if (st != GLM_OK) out->n = n0;
    return st;
}

/* ------------------------------------------------------------------------- queries */

int64_t glm_tokenizer_special_id(const glm_tokenizer *t, const char *s, size_t len) {
    for (size_t i = 0; i < t->n_special; i++)
        if (t->special[i].len == len && memcmp(t->special[i].s, s, len) == 0) return t->special[i].id;
    return -1;
}

size_t glm_tokenizer_n_special(const glm_tokenizer *t) { return t->n_special; }

const char *glm_tokenizer_special(const glm_tokenizer *t, size_t i, uint32_t *id) {
    if (i >= t->n_special) return NULL;
    if (id) *id = t->special[i].id;
    return t->special[i].s;
}

size_t glm_tokenizer_special_at(const glm_tokenizer *t, const char *s, size_t n, uint32_t *id) {
    if (!n || !t->special_start[(unsigned char)s[0]]) return 0;
    size_t best = 0;
    for (size_t i = 0; i < t->n_special; i++) { /* id order: the lower id wins a tie */
        const special_tok *x = &t->special[i];
        if (x->s[0] != s[0]) continue;
        size_t l = x->match_len;
        if (l > best && l <= n && !memcmp(s, x->s, l)) {
            best = l;
            *id = x->id;
        }
    }
    return best;
}

const unsigned char *glm_tokenizer_special_starts(const glm_tokenizer *t) { return t->special_start; }

size_t glm_tokenizer_special_maxlen(const glm_tokenizer *t) { return t->special_maxlen; }

uint32_t glm_tokenizer_vocab_size(const glm_tokenizer *t) { return t->vocab_size; }
uint64_t glm_tokenizer_fingerprint(const glm_tokenizer *t) { return t->fingerprint; }
const char *glm_tokenizer_chat_template(const glm_tokenizer *t) { return t->chat_template; }

int64_t glm_tokenizer_eos_id(const glm_tokenizer *t) {
    if (t->eos_token) {
        int64_t id = glm_tokenizer_special_id(t, t->eos_token, strlen(t->eos_token));
        if (id >= 0) return id;
    }
    return glm_tokenizer_special_id(t, "<|endoftext|>", 13);
}
const char *glm_tokenizer_kind(const glm_tokenizer *t) { return t->kind == KIND_TIKTOKEN ? "tiktoken" : "sentencepiece"; }
const char *glm_tokenizer_path(const glm_tokenizer *t) { return t->path; }
