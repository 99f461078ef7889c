/* tool/export_vocab.h: the tokenizer of a model directory laid out for a GGUF model file, for
 * glmtune export-adapter --format gguf --merge (and its tests): tool/ is where tokenize/ (the
 * tokenizer) and lora/ (the GGUF writer) meet, as dependencies point one way. */
#ifndef GLM_TOOL_EXPORT_VOCAB_H
#define GLM_TOOL_EXPORT_VOCAB_H

#include <stdint.h>

#include "common/status.h"
#include "lora/io/gguf_vocab.h"

/* A tokenizer's tokens for a GGUF model file (lora/io/gguf_vocab.h). */
typedef struct export_vocab {
    glm_gguf_vocab v;       /* points into the fields below */
    char *bytes;            /* the ordinary tokens' bytes, one after the other */
    const char **rank_bytes;
    size_t *rank_len;
    const char **special;
    uint32_t *special_id;
    struct glm_tokenizer *tok;  /* the loaded tokenizer (the specials and the template are its strings) */
} export_vocab;

/* Loads the tokenizer of `dir` as `glmtune tokenize --tokenizer DIR` does (glm_tokenizer_load:
 * tokenizer.model and tokenizer_config.json) and lays it out for a model of vocabulary V: the
 * ordinary tokens are the ids below the first special one (tiktoken ranks, their bytes from
 * glm_tokenizer_decode), the specials and the chat template from tokenizer_config.json, bos the
 * tokenizer's [gMASK] (GLM-4's prompt prefix; docs/design.md §9). What the family row says (the
 * kind, eos / eot / eom, padding) is the caller's: glm_gguf_vocab_use_family. Errors: glm_tokenizer_load's, GLM_ERR_UNSUPPORTED (not
 * a tiktoken tokenizer), GLM_ERR_MISMATCH (more tokens than V), GLM_ERR_NOMEM. Free with
 * export_vocab_free. */
glm_status export_vocab_load(const char *dir, int64_t V, export_vocab *out);
void export_vocab_free(export_vocab *e);

#endif
