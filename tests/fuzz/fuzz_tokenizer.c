/* tests/fuzz/fuzz_tokenizer.c: a tokenizer folder as glmtune tokenize --tokenizer reads it
 * (tokenize/tokenizer.c: kind detection by content, the tiktoken rank lines of tokenizer.model
 * (tokenize/bpe: base64, ranks, duplicates), a SentencePiece model through the shim,
 * tokenizer_config.json's added_tokens_decoder / eos_token / chat_template), then text encoded
 * and decoded with what was loaded. The input is tokenizer.model, optionally followed by the line
 * "#tokenizer_config.json" and that file's text (without it, the folder has no
 * tokenizer_config.json). */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/vec.h"
#include "fuzz_common.h"
#include "tokenize/tokenizer.h"

static const char k_sep[] = "\n#tokenizer_config.json\n";
static const char k_text[] = "Hello, world! 你好 <|user|>\n\n  12345 don't\t\xf0\x9f\x98\x80 [gMASK]<sop>";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    const uint8_t *sep = memmem(data, size, k_sep, sizeof k_sep - 1);
    size_t model_len = sep ? (size_t)(sep - data) : size;
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", fuzz_dir());
    if (sep) {
        size_t off = model_len + sizeof k_sep - 1;
        fuzz_write_in_dir("tokenizer_config.json", data + off, size - off);
    } else {
        unlink(cfg);
    }
    const char *model = fuzz_write_in_dir("tokenizer.model", data, model_len);
    glm_tokenizer *t = NULL;
    if (glm_tokenizer_load(model, &t) == GLM_OK) {
        glm_u32vec ids = {0};
        glm_charvec text = {0};
        if (glm_tokenizer_encode(t, k_text, sizeof k_text - 1, &ids) == GLM_OK)
            (void)glm_tokenizer_decode(t, ids.v, ids.n, &text);
        text.n = 0;
        uint32_t v = glm_tokenizer_vocab_size(t), all[300];
        size_t n = v < 300 ? v : 300;
        for (size_t i = 0; i < n; i++) all[i] = (uint32_t)i;
        (void)glm_tokenizer_decode(t, all, n, &text);
        for (size_t i = 0; i < glm_tokenizer_n_special(t); i++) {
            uint32_t id;
            const char *s = glm_tokenizer_special(t, i, &id);
            if (s && *s && glm_tokenizer_special_id(t, s, strlen(s)) < 0) abort(); /* every special is found */
        }
        uint32_t sid;
        (void)glm_tokenizer_special_at(t, "<|user|>x", 9, &sid);
        (void)glm_tokenizer_eos_id(t);
        (void)glm_tokenizer_fingerprint(t);
        (void)glm_tokenizer_chat_template(t);
        free(ids.v);
        free(text.v);
        glm_tokenizer_free(t);
    }
    return 0;
}
