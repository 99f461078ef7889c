/* lora/io/gguf_vocab.h: a GLM-4 tokenizer as the tokenizer.* keys of a GGUF model, the way
 * llama.cpp's convert_hf_to_gguf.py writes GLM-4 (ChatGLMModel.set_vocab, docs/design.md §9):
 *
 *   tokenizer.ggml.model "gpt2", tokenizer.ggml.pre "glm4" (llama.cpp's pre-tokenizer with
 *     GLM-4's split regex; src/llama-vocab.cpp);
 *   tokenizer.ggml.tokens: one string per id 0 .. vocab_size-1: an ordinary (tiktoken rank) token
 *     as its bytes in GPT-2's byte-to-unicode form (transformers' bytes_to_unicode: the bytes
 *     '!'..'~', 0xA1..0xAC and 0xAE..0xFF are the code point of the same value, the other 68
 *     bytes, in increasing order, U+0100, U+0101, ...), a special token as its string, and every
 *     other id up to the model's vocabulary size the filler "[PAD<id>]" (gguf-py's
 *     TextModel.get_vocab_base);
 *   tokenizer.ggml.token_type (i32 per id): NORMAL 1 for ranks, CONTROL 3 for specials, UNUSED 5
 *     for fillers (gguf-py constants.py TokenType);
 *   tokenizer.ggml.merges: "<left> <right>" in byte-to-unicode form: for each ordinary token in
 *     rank order, every split into two pieces that are both tokens, ordered by (rank of left, rank
 *     of right) (transformers' TikTokenConverter.extract_vocab_merges_from_model, which the
 *     converter's SpecialVocab(load_merges=True) reads back from tokenizer.json); GLM-4: 318,088;
 *   tokenizer.ggml.bos/eos/eot/eom/padding/unknown_token_id (u32, the ones given),
 *   tokenizer.ggml.add_bos_token false (GLM-4's prompt starts with [gMASK]<sop>, which the chat
 *     template writes), tokenizer.chat_template (tokenizer_config.json's). */
#ifndef GLM_LORA_GGUF_VOCAB_H
#define GLM_LORA_GGUF_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "lora/io/gguf.h"

struct glm_family;

/* GLM-4 tokens; the caller's memory. */
typedef struct glm_gguf_vocab {
    int kind;                        /* the family row's glm_family_tokenizer (lora/model/family.h) */
    size_t n_ranks;                  /* ordinary tokens: ids 0 .. n_ranks-1, the tiktoken ranks */
    const char *const *rank_bytes;   /* their bytes */
    const size_t *rank_len;
    size_t n_special;                /* special tokens: ids >= n_ranks, strings NUL-terminated */
    const char *const *special;
    const uint32_t *special_id;
    int64_t vocab_size;              /* the model's vocabulary (embedding rows); the rest are fillers */
    const char *chat_template;       /* NULL: none written */
    int64_t bos, eos, eot, eom, pad, unk; /* ids; < 0: the key is not written */
} glm_gguf_vocab;

/* Takes from family row f what it says of the tokenizer: v->kind its tokenizer, eos / eot / eom its
 * chat stop ids in their order (GLM-4: <|endoftext|> 151329, <|user|> 151336, <|observation|>
 * 151338; fewer ids: -1), padding and unknown its pad_token_id. */
void glm_gguf_vocab_use_family(glm_gguf_vocab *v, const struct glm_family *f);

/* The GPT-2 byte-to-unicode form of n bytes into out (room for 2 n bytes: every mapped code
 * point is below U+0800), NUL-terminated; returns its length. */
size_t glm_gguf_bytes_to_unicode(const char *b, size_t n, char *out);

/* The merges of v's ordinary tokens (see the top of this file): *merges (n strings "<left>
 * <right>", malloc'd; free with glm_gguf_merges_free) and their count *n.
 * Errors: GLM_ERR_FORMAT (two ranks with the same bytes, naming them), GLM_ERR_NOMEM. */
glm_status glm_gguf_vocab_merges(const glm_gguf_vocab *v, char ***merges, size_t *n);
void glm_gguf_merges_free(char **merges, size_t n);

/* Adds the tokenizer.* keys of v to g. Errors: GLM_ERR_ARG (a tokenizer kind with no GGUF form,
 * more tokens than vocab_size, a special id below n_ranks, twice or outside the vocabulary, a
 * given bos/eos/... id that is not a special token), glm_gguf_vocab_merges's, g's. */
glm_status glm_gguf_add_vocab(glm_gguf *g, const glm_gguf_vocab *v);

#endif
