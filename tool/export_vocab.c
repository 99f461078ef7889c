/* tool/export_vocab.c: a model directory's tokenizer for a GGUF model file (see export_vocab.h). */
#include "tool/export_vocab.h"

#include <stdlib.h>
#include <string.h>

#include "tokenize/tokenizer.h"

void export_vocab_free(export_vocab *e) {
    free(e->bytes);
    free(e->rank_bytes);
    free(e->rank_len);
    free(e->special);
    free(e->special_id);
    glm_tokenizer_free(e->tok);
    *e = (export_vocab){0};
}

glm_status export_vocab_load(const char *dir, int64_t V, export_vocab *e) {
    *e = (export_vocab){0};
    GLM_TRY(glm_tokenizer_load(dir, &e->tok));
    glm_tokenizer *t = e->tok;
    glm_status st = GLM_OK;
    if (strcmp(glm_tokenizer_kind(t), "tiktoken"))
        st = glm_err(GLM_ERR_UNSUPPORTED, "%s: a %s tokenizer; a GGUF model is written with GLM-4's tiktoken tokenizer",
                     glm_tokenizer_path(t), glm_tokenizer_kind(t));
    size_t ns = glm_tokenizer_n_special(t);
    uint32_t first_special = glm_tokenizer_vocab_size(t);
    for (size_t i = 0; i < ns; i++) {
        uint32_t id;
        glm_tokenizer_special(t, i, &id);
        if (id < first_special) first_special = id;
    }
    if (st == GLM_OK && glm_tokenizer_vocab_size(t) > V)
        st = glm_err(GLM_ERR_MISMATCH, "%s has %u tokens, more than the model's vocabulary of %lld; hint: --tokenizer "
                     "the model's own tokenizer", glm_tokenizer_path(t), glm_tokenizer_vocab_size(t), (long long)V);
    size_t nr = first_special;
    e->rank_bytes = calloc(nr ? nr : 1, sizeof *e->rank_bytes);
    e->rank_len = calloc(nr ? nr : 1, sizeof *e->rank_len);
    e->special = calloc(ns ? ns : 1, sizeof *e->special);
    e->special_id = calloc(ns ? ns : 1, sizeof *e->special_id);
    if (st == GLM_OK && (!e->rank_bytes || !e->rank_len || !e->special || !e->special_id))
        st = glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_charvec all = {0};
    size_t *off = st == GLM_OK ? calloc(nr ? nr : 1, sizeof *off) : NULL;
    if (st == GLM_OK && !off) st = glm_err(GLM_ERR_NOMEM, "out of memory");
    for (uint32_t id = 0; st == GLM_OK && id < nr; id++) { /* the rank's bytes, appended */
        off[id] = all.n;
        st = glm_tokenizer_decode(t, &id, 1, &all);
        if (st == GLM_OK) e->rank_len[id] = all.n - off[id];
    }
    if (st == GLM_OK) {
        e->bytes = all.v; /* pointers only now: the buffer no longer moves */
        all.v = NULL;
        for (size_t id = 0; id < nr; id++) e->rank_bytes[id] = e->bytes + off[id];
    }
    free(off);
    free(all.v);
    for (size_t i = 0; st == GLM_OK && i < ns; i++) e->special[i] = glm_tokenizer_special(t, i, &e->special_id[i]);
    int64_t bos = st == GLM_OK ? glm_tokenizer_special_id(t, "[gMASK]", 7) : -1; /* GLM-4's prompt prefix */
    if (st != GLM_OK) {
        export_vocab_free(e);
        return st;
    }
    e->v = (glm_gguf_vocab){
        .n_ranks = nr,
        .rank_bytes = e->rank_bytes,
        .rank_len = e->rank_len,
        .n_special = ns,
        .special = e->special,
        .special_id = e->special_id,
        .vocab_size = V,
        .chat_template = glm_tokenizer_chat_template(t),
        .bos = bos,
        .eos = -1, .eot = -1, .eom = -1, .pad = -1, .unk = -1,
    };
    return GLM_OK;
}
