/* tests/tokenize/test_tokenizer_spm.c: SentencePiece models through glm_tokenizer.
 * Trains tiny models at test time with spm_train (skipped, exit 77, when it is not installed):
 *   1. BPE with --user_defined_symbols = the GLM-4 specials, byte fallback, identity normalizer:
 *      detection by content, special ids found (user-defined and control pieces), round trips,
 *      special strings in text stay plain text, tokenizer_config.json added_tokens_decoder;
 *   2. unigram without user-defined symbols and no config: the ChatGLM3 specials follow the
 *      vocabulary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "tests/check.h"
#include "tokenize/bpe/spm_shim.h"
#include "tokenize/tokenizer.h"

static const char *glm4_specials[] = {"<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>",
                                      "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"};

static int train(const char *dir, const char *prefix, int vocab, const char *extra) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "spm_train --input=%s/corpus.txt --model_prefix=%s/%s --vocab_size=%d "
             "--character_coverage=1.0 --normalization_rule_name=identity "
             "--remove_extra_whitespaces=false --minloglevel=2 %s > %s/%s.log 2>&1",
             dir, dir, prefix, vocab, extra, dir, prefix);
    return system(cmd);
}

static int roundtrip(const glm_tokenizer *t, const char *text, glm_u32vec *ids) {
    ids->n = 0;
    if (glm_tokenizer_encode(t, text, strlen(text), ids) != GLM_OK) return 0;
    glm_charvec d = {0};
    int ok = glm_tokenizer_decode(t, ids->v, ids->n, &d) == GLM_OK && d.n == strlen(text) &&
             (d.n == 0 || memcmp(d.v, text, d.n) == 0);
    if (!ok) fprintf(stderr, "round trip of \"%s\" gave \"%.*s\"\n", text, (int)d.n, d.v ? d.v : "");
    glm_vec_free(d);
    return ok;
}

int main(void) {
    if (system("command -v spm_train > /dev/null 2>&1") != 0) {
        printf("SKIPPED: spm_train (sentencepiece) is not installed\n");
        return 77;
    }
    char dir[] = "/tmp/glm_spm_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    /* a small bilingual corpus */
    glm_charvec corpus = {0};
    static const char *lines[] = {
        "The quick brown fox jumps over the lazy dog.",
        "Fine-tuning GLM-4 with LoRA adapters needs a tokenizer.",
        "hello world, hello tokenizer, hello sentencepiece",
        "今天天气很好，我们去公园散步吧。",
        "机器学习模型需要大量的训练数据。",
        "Numbers like 12345 and 3.14159 appear in text too.",
        "def f(x):\n    return x * 2",
    };
    for (int rep = 0; rep < 40; rep++)
        for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
            char buf[512];
            int n = snprintf(buf, sizeof buf, "%s %d\n", lines[i], rep);
            for (int k = 0; k < n; k++) glm_vec_push(corpus, buf[k] == '\n' && k < n - 1 ? ' ' : buf[k]);
        }
    char path[1024];
    snprintf(path, sizeof path, "%s/corpus.txt", dir);
    CHECK(glm_write_file_atomic(path, corpus.v, corpus.n) == GLM_OK, "%s", glm_errmsg());
    glm_vec_free(corpus);

    char uds[512] = "--model_type=bpe --byte_fallback=true --user_defined_symbols='";
    for (size_t i = 0; i < sizeof glm4_specials / sizeof *glm4_specials; i++) {
        strcat(uds, glm4_specials[i]);
        strcat(uds, i + 1 < sizeof glm4_specials / sizeof *glm4_specials ? "," : "'");
    }
    CHECK(train(dir, "m1", 400, uds) == 0, "spm_train failed (see %s/m1.log)", dir);
    CHECK(train(dir, "m2", 360, "--model_type=unigram --byte_fallback=true") == 0, "spm_train failed (see %s/m2.log)", dir);

    /* ---- model 1: user-defined GLM-4 specials */
    glm_tokenizer *t = NULL;
    snprintf(path, sizeof path, "%s/m1.model", dir);
    glm_status st = glm_tokenizer_load(path, &t);
    CHECK(st == GLM_OK, "load %s: %s", path, glm_errmsg());
    if (t) {
        CHECK(strcmp(glm_tokenizer_kind(t), "sentencepiece") == 0, "kind %s", glm_tokenizer_kind(t));
        CHECK(glm_tokenizer_vocab_size(t) == 400, "vocab %u", glm_tokenizer_vocab_size(t));
        CHECK(glm_tokenizer_chat_template(t) == NULL, "template without a config");
        /* spm_train puts <unk>=0 <s>=1 </s>=2, then the user-defined symbols in order */
        for (size_t i = 0; i < sizeof glm4_specials / sizeof *glm4_specials; i++) {
            int64_t id = glm_tokenizer_special_id(t, glm4_specials[i], strlen(glm4_specials[i]));
            CHECK(id == (int64_t)(3 + i), "special %s -> %lld, want %zu", glm4_specials[i], (long long)id, 3 + i);
        }
        CHECK(glm_tokenizer_special_id(t, "<s>", 3) == 1 && glm_tokenizer_special_id(t, "</s>", 4) == 2,
              "control pieces are not special");
        CHECK(glm_tokenizer_special_id(t, "<unk>", 5) == -1, "<unk> is special");
        CHECK(glm_tokenizer_n_special(t) == 12, "n_special %zu", glm_tokenizer_n_special(t));
        glm_u32vec ids = {0};
        static const char *texts[] = {
            "hello world",
            "The quick brown fox",
            "  two leading spaces and trailing  ",
            "今天天气很好",
            "emoji 😀 and unseen ß Ω letters",
            "<|user|> is plain text, [gMASK] too",
            "line one\nline two\ttab",
            "",
        };
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) CHECK(roundtrip(t, texts[i], &ids), "round trip %zu", i);
        roundtrip(t, "<|user|>hello<|assistant|>", &ids);
        for (size_t i = 0; i < ids.n; i++)
            CHECK(ids.v[i] < 3 || ids.v[i] > 12, "special id %u produced from plain text", ids.v[i]);
        /* decode of special ids and of a mix; out-of-range id */
        uint32_t mix[3] = {(uint32_t)glm_tokenizer_special_id(t, "<|user|>", 8), 0, 0};
        glm_u32vec hi = {0};
        CHECK(glm_tokenizer_encode(t, "hello", 5, &hi) == GLM_OK && hi.n >= 1, "encode hello");
        glm_charvec d = {0};
        CHECK(glm_tokenizer_decode(t, mix, 1, &d) == GLM_OK && d.n == 8 && !memcmp(d.v, "<|user|>", 8), "special decode");
        d.n = 0;
        uint32_t bad[2] = {5, 400};
        CHECK(glm_tokenizer_decode(t, bad, 2, &d) == GLM_ERR_ARG && strstr(glm_errmsg(), "400"), "id 400 accepted");
        CHECK(d.n == 0, "output changed on error");
        glm_vec_free(d);
        glm_vec_free(hi);
        /* agreement with sentencepiece's own decoder on ordinary ids */
        ids.n = 0;
        glm_tokenizer_encode(t, "hello world 今天", strlen("hello world 今天"), &ids);
        char *data;
        size_t len;
        if (glm_read_file(path, &data, &len) == GLM_OK) {
            char err[256];
            glm_spm *m = glm_spm_load(data, len, err, sizeof err);
            CHECK(m != NULL, "shim load: %s", err);
            if (m) {
                size_t dl;
                char *sd = glm_spm_decode(m, ids.v, ids.n, &dl, err, sizeof err);
                CHECK(sd && dl == strlen("hello world 今天") && !memcmp(sd, "hello world 今天", dl), "DecodeIds");
                free(sd);
                CHECK(glm_spm_piece_to_id(m, "<|user|>", 8) == 10, "piece_to_id");
                CHECK(glm_spm_piece_to_id(m, "no such piece", 13) == -1, "piece_to_id of a non-piece");
                CHECK(glm_spm_piece_type(m, 1) == GLM_SPM_CONTROL && glm_spm_piece_type(m, 0) == GLM_SPM_UNKNOWN,
                      "piece types");
                glm_spm_free(m);
            }
            free(data);
        }
        uint64_t fp1 = glm_tokenizer_fingerprint(t);
        glm_vec_free(ids);
        glm_tokenizer_free(t);

        /* the same model by directory, with a config adding tokens beyond the vocabulary */
        char mdir[600];
        snprintf(mdir, sizeof mdir, "%s/m1dir", dir);
        glm_mkdir_p(mdir);
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "cp %s/m1.model %s/tokenizer.model", dir, mdir);
        CHECK(system(cmd) == 0, "cp");
        snprintf(path, sizeof path, "%s/tokenizer_config.json", mdir);
        const char *cfg = "{\"added_tokens_decoder\": {\"400\": {\"content\": \"<|extra|>\"}}, "
                          "\"chat_template\": \"{{ messages }}\"}";
        glm_write_file_atomic(path, cfg, strlen(cfg));
        t = NULL;
        CHECK(glm_tokenizer_load(mdir, &t) == GLM_OK, "load dir: %s", glm_errmsg());
        if (t) {
            CHECK(glm_tokenizer_special_id(t, "<|extra|>", 9) == 400, "config special");
            CHECK(glm_tokenizer_vocab_size(t) == 401, "vocab with config %u", glm_tokenizer_vocab_size(t));
            CHECK(glm_tokenizer_chat_template(t) && !strcmp(glm_tokenizer_chat_template(t), "{{ messages }}"), "template");
            CHECK(glm_tokenizer_fingerprint(t) != fp1, "fingerprint ignores the special table");
            glm_tokenizer_free(t);
        }
        glm_write_file_atomic(path, "{\"added_tokens_decoder\": ", 25);
        t = NULL;
        CHECK(glm_tokenizer_load(mdir, &t) == GLM_ERR_FORMAT && strstr(glm_errmsg(), "tokenizer_config.json:"),
              "bad config accepted: %s", glm_errmsg());
    }

    /* ---- model 2: no user-defined symbols, no config: ChatGLM3 specials after the vocabulary */
    t = NULL;
    snprintf(path, sizeof path, "%s/m2.model", dir);
    CHECK(glm_tokenizer_load(path, &t) == GLM_OK, "load m2: %s", glm_errmsg());
    if (t) {
        static const char *c3[] = {"[MASK]", "[gMASK]", "[sMASK]", "sop", "eop", "<|system|>", "<|user|>",
                                   "<|assistant|>", "<|observation|>"};
        for (size_t i = 0; i < 9; i++)
            CHECK(glm_tokenizer_special_id(t, c3[i], strlen(c3[i])) == 360 + (int64_t)i, "ChatGLM3 %s", c3[i]);
        CHECK(glm_tokenizer_vocab_size(t) == 369, "vocab %u", glm_tokenizer_vocab_size(t));
        glm_u32vec ids = {0};
        CHECK(roundtrip(t, "hello world 今天天气", &ids), "m2 round trip");
        uint32_t sp[2] = {366, 361};
        glm_charvec d = {0};
        CHECK(glm_tokenizer_decode(t, sp, 2, &d) == GLM_OK && d.n == 15 && !memcmp(d.v, "<|user|>[gMASK]", 15), "m2 specials");
        CHECK(glm_tokenizer_encode(t, "\xff", 1, &ids) == GLM_ERR_FORMAT, "invalid UTF-8 accepted");
        glm_vec_free(d);
        glm_vec_free(ids);
        glm_tokenizer_free(t);
    }
    glm_rmtree(dir);
    return check_summary("test_tokenizer_spm");
}
