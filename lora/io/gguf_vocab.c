/* lora/io/gguf_vocab.c: a GLM-4 tokenizer as GGUF tokenizer keys (see gguf_vocab.h). */
#define _GNU_SOURCE
#include "lora/io/gguf_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "lora/model/family.h"

/* llama.cpp's tokenizer.ggml.model and tokenizer.ggml.pre for a tokenizer kind of the family
 * table (convert_hf_to_gguf.py ChatGLMModel.set_vocab: model "gpt2"; the pre-tokenizer named
 * "glm4" in src/llama-vocab.cpp splits with GLM-4's regex: docs/design.md §9). */
static const struct {
    int kind; /* glm_family_tokenizer */
    const char *model, *pre;
} k_forms[] = {
    {GLM_TOKENIZER_TIKTOKEN_GLM4, "gpt2", "glm4"},
};

/* gguf-py constants.py TokenType */
enum { TOKEN_NORMAL = 1, TOKEN_CONTROL = 3, TOKEN_UNUSED = 5 };

void glm_gguf_vocab_use_family(glm_gguf_vocab *v, const glm_family *f) {
    v->kind = (int)f->tokenizer;
    v->eos = f->n_stop_ids > 0 ? f->stop_ids[0] : -1;
    v->eot = f->n_stop_ids > 1 ? f->stop_ids[1] : -1;
    v->eom = f->n_stop_ids > 2 ? f->stop_ids[2] : -1;
    v->pad = v->unk = f->pad_token_id;
}

/* The code point of byte b in GPT-2's bytes_to_unicode: the printable bytes are themselves, the
 * 68 others (0..32, 127..160, 173) U+0100 onwards in increasing order. */
static unsigned byte_cp(unsigned b) {
    if (b <= 32) return 256 + b;
    if (b >= 127 && b <= 160) return 256 + 33 + (b - 127);
    if (b == 173) return 256 + 67;
    return b;
}

size_t glm_gguf_bytes_to_unicode(const char *b, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned cp = byte_cp((unsigned char)b[i]);
        if (cp < 0x80) {
            out[k++] = (char)cp;
        } else { /* every code point here is below U+0800: two bytes */
            out[k++] = (char)(0xC0 | (cp >> 6));
            out[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[k] = 0;
    return k;
}

/* ------------------------------------------------------------------ merges */

/* bytes -> rank, open addressing */
typedef struct {
    const glm_gguf_vocab *v;
    int64_t *slot; /* rank, or -1 */
    size_t mask;
} rank_map;

static uint64_t hash_bytes(const char *s, size_t n) { return glm_fnv1a64(GLM_FNV1A64_INIT, s, n); }

static int64_t map_get(const rank_map *m, const char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
        int64_t r = m->slot[i];
        if (r < 0) return -1;
        if (m->v->rank_len[r] == n && !memcmp(m->v->rank_bytes[r], s, n)) return r;
    }
}

static glm_status map_build(rank_map *m, const glm_gguf_vocab *v) {
    size_t cap = 1024;
    while (cap < 2 * v->n_ranks) cap *= 2;
    m->v = v;
    m->mask = cap - 1;
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot) return glm_err(GLM_ERR_NOMEM, "out of memory");
    memset(m->slot, 0xff, cap * sizeof *m->slot); /* -1 */
    for (size_t r = 0; r < v->n_ranks; r++) {
        size_t i = hash_bytes(v->rank_bytes[r], v->rank_len[r]) & m->mask;
        for (; m->slot[i] >= 0; i = (i + 1) & m->mask) {
            int64_t o = m->slot[i];
            if (v->rank_len[o] == v->rank_len[r] && !memcmp(v->rank_bytes[o], v->rank_bytes[r], v->rank_len[r])) {
                free(m->slot);
                return glm_err(GLM_ERR_FORMAT, "tokenizer ranks %lld and %zu have the same bytes", (long long)o, r);
            }
        }
        m->slot[i] = (int64_t)r;
    }
    return GLM_OK;
}

typedef struct {
    int64_t left, right;
} split;

static int cmp_split(const void *a, const void *b) {
    const split *x = a, *y = b;
    if (x->left != y->left) return x->left < y->left ? -1 : 1;
    return (x->right > y->right) - (x->right < y->right);
}

void glm_gguf_merges_free(char **merges, size_t n) {
    if (merges && n) free(merges[0]); /* one block holds every string, the first at its start */
    free(merges);
}

glm_status glm_gguf_vocab_merges(const glm_gguf_vocab *v, char ***merges_out, size_t *n_out) {
    *merges_out = NULL;
    *n_out = 0;
    rank_map m;
    GLM_TRY(map_build(&m, v));
    /* pass 1: the splits, in order; pass 2: their strings */
    size_t n = 0, cap = 1024, maxlen = 1, text = 0;
    split *all = malloc(cap * sizeof *all), *local = NULL;
    glm_status st = all ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    for (size_t r = 0; r < v->n_ranks; r++)
        if (v->rank_len[r] > maxlen) maxlen = v->rank_len[r];
    if (st == GLM_OK && !(local = malloc(maxlen * sizeof *local))) st = glm_err(GLM_ERR_NOMEM, "out of memory");
    for (size_t r = 0; st == GLM_OK && r < v->n_ranks; r++) {
        const char *t = v->rank_bytes[r];
        size_t len = v->rank_len[r], nl = 0;
        for (size_t i = 1; i < len; i++) {
            int64_t a = map_get(&m, t, i), b = a >= 0 ? map_get(&m, t + i, len - i) : -1;
            if (b >= 0) local[nl++] = (split){a, b};
        }
        qsort(local, nl, sizeof *local, cmp_split);
        if (n + nl > cap) {
            while (n + nl > cap) cap *= 2;
            split *p = realloc(all, cap * sizeof *all);
            if (!p) {
                st = glm_err(GLM_ERR_NOMEM, "out of memory");
                break;
            }
            all = p;
        }
        memcpy(all + n, local, nl * sizeof *local);
        n += nl;
        text += nl * (2 * len + 2); /* both pieces in byte-to-unicode form (<= 2 bytes a byte), ' ', NUL */
    }
    char **merges = NULL, *block = NULL;
    if (st == GLM_OK && n) {
        merges = malloc(n * sizeof *merges);
        block = malloc(text);
        if (!merges || !block) st = glm_err(GLM_ERR_NOMEM, "out of memory for %zu merges", n);
    }
    for (size_t i = 0, k = 0; st == GLM_OK && i < n; i++) {
        merges[i] = block + k;
        k += glm_gguf_bytes_to_unicode(v->rank_bytes[all[i].left], v->rank_len[all[i].left], block + k);
        block[k++] = ' ';
        k += glm_gguf_bytes_to_unicode(v->rank_bytes[all[i].right], v->rank_len[all[i].right], block + k) + 1;
    }
    free(m.slot);
    free(all);
    free(local);
    if (st != GLM_OK) {
        free(merges);
        free(block);
        return st;
    }
    *merges_out = merges;
    *n_out = n;
    return GLM_OK;
}

/* ------------------------------------------------------------------ the keys */

glm_status glm_gguf_add_vocab(glm_gguf *g, const glm_gguf_vocab *v) {
    const char *model = NULL, *pre = NULL;
    for (size_t i = 0; i < sizeof k_forms / sizeof *k_forms; i++)
        if (k_forms[i].kind == v->kind) model = k_forms[i].model, pre = k_forms[i].pre;
    if (!model) return glm_err(GLM_ERR_ARG, "tokenizer kind %d has no GGUF form in glmtune", (int)v->kind);
    if (v->vocab_size < 1 || (int64_t)v->n_ranks > v->vocab_size)
        return glm_err(GLM_ERR_ARG, "the tokenizer's %zu ordinary tokens do not fit the model's vocabulary of %lld",
                       v->n_ranks, (long long)v->vocab_size);
    size_t V = (size_t)v->vocab_size;
    const char **tok = calloc(V, sizeof *tok);
    size_t *len = calloc(V, sizeof *len);
    int32_t *type = calloc(V, sizeof *type);
    char *text = NULL;
    size_t text_n = 0;
    for (size_t i = 0; i < v->n_ranks; i++) text_n += 2 * v->rank_len[i] + 1;
    text_n += (V - v->n_ranks) * 24; /* "[PAD<id>]" */
    text = malloc(text_n ? text_n : 1);
    glm_status st = tok && len && type && text ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; st == GLM_OK && i < v->n_ranks; i++) {
        tok[i] = text + k;
        len[i] = glm_gguf_bytes_to_unicode(v->rank_bytes[i], v->rank_len[i], text + k);
        k += len[i] + 1;
        type[i] = TOKEN_NORMAL;
    }
    for (size_t i = 0; st == GLM_OK && i < v->n_special; i++) {
        uint32_t id = v->special_id[i];
        if (id < v->n_ranks || id >= V || tok[id])
            st = glm_err(GLM_ERR_ARG, "special token %s has id %u, %s", v->special[i], id,
                         id >= V ? "outside the model's vocabulary" : id < v->n_ranks ? "an ordinary token's id" : "taken twice");
        else
            tok[id] = v->special[i], len[id] = strlen(v->special[i]), type[id] = TOKEN_CONTROL;
    }
    for (size_t i = 0; st == GLM_OK && i < V; i++)
        if (!tok[i]) { /* gguf-py TextModel.get_vocab_base: f"[PAD{i}]", UNUSED */
            tok[i] = text + k;
            len[i] = (size_t)snprintf(text + k, 24, "[PAD%zu]", i);
            k += len[i] + 1;
            type[i] = TOKEN_UNUSED;
        }
    const struct {
        const char *key;
        int64_t id;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", v->bos},     {"tokenizer.ggml.eos_token_id", v->eos},
        {"tokenizer.ggml.eot_token_id", v->eot},     {"tokenizer.ggml.eom_token_id", v->eom},
        {"tokenizer.ggml.padding_token_id", v->pad}, {"tokenizer.ggml.unknown_token_id", v->unk},
    };
    for (size_t i = 0; st == GLM_OK && i < sizeof ids / sizeof *ids; i++)
        if (ids[i].id >= 0 && (ids[i].id >= (int64_t)V || type[ids[i].id] != TOKEN_CONTROL))
            st = glm_err(GLM_ERR_ARG, "%s %lld is not a special token of the tokenizer", ids[i].key, (long long)ids[i].id);
    char **merges = NULL;
    size_t n_merges = 0;
    if (st == GLM_OK) st = glm_gguf_vocab_merges(v, &merges, &n_merges);
    if (st == GLM_OK) st = glm_gguf_kv_str(g, "tokenizer.ggml.model", model);
    if (st == GLM_OK) st = glm_gguf_kv_str(g, "tokenizer.ggml.pre", pre);
    if (st == GLM_OK) st = glm_gguf_kv_strs(g, "tokenizer.ggml.tokens", tok, len, V);
    if (st == GLM_OK) st = glm_gguf_kv_i32s(g, "tokenizer.ggml.token_type", type, V);
    if (st == GLM_OK) st = glm_gguf_kv_strs(g, "tokenizer.ggml.merges", (const char *const *)merges, NULL, n_merges);
    for (size_t i = 0; st == GLM_OK && i < sizeof ids / sizeof *ids; i++)
        if (ids[i].id >= 0) st = glm_gguf_kv_u32(g, ids[i].key, (uint32_t)ids[i].id);
    if (st == GLM_OK) st = glm_gguf_kv_bool(g, "tokenizer.ggml.add_bos_token", false);
    if (st == GLM_OK && v->chat_template) st = glm_gguf_kv_str(g, "tokenizer.chat_template", v->chat_template);
    glm_gguf_merges_free(merges, n_merges);
    free(tok);
    free(len);
    free(type);
    free(text);
    return st;
}
