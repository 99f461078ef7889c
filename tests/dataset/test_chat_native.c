/* tests/dataset/test_chat_native.c: the native GLM-4 renderer (tokenize/template/chat_native.c) against
 * the template interpreter on every corpus record: each record of tests/fixtures/corpora is converted
 * (default options, and with --keep-reasoning --merge-consecutive-turns), and every message of
 * the conversation must be rendered natively, into exactly the segments (texts, literal flags,
 * boundaries) the interpreter renders, for the templates of glm-4-9b-chat-1m and glm-4-9b-chat. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "dataset/formats.h"
#include "dataset/reader.h"
#include "tests/chat_same.h"
#include "tests/check.h"
#include "tokenize/template/chat.h"

typedef struct {
    size_t records, messages, native, same, tools;
} tally;

/* Every message of every record of the corpus files, rendered both ways with `tpl`. */
static void check_corpus(const char *data_dir, const glm_template *tpl, const glm_convert_opts *copt, tally *t) {
    char bufs[3][4096];
    const char *in[3];
    size_t nin = corpora_inputs(data_dir, bufs, in);
    glm_reader *r = NULL;
    CHECK(glm_reader_open(in, nin, NULL, &r) == GLM_OK, "open %s: %s", in[0], glm_errmsg());
    glm_record rec;
    while (r && glm_reader_next(r, &rec) == GLM_OK) {
        glm_conversation conv;
        const char *reason = NULL;
        if (!rec.reason && glm_record_convert_ex(&rec, copt, &conv, &reason) == GLM_OK) {
            t->records++;
            for (size_t i = 0; i < json_array_size(conv.messages); i++) {
                json_t *m = json_array_get(conv.messages, i), *list = json_pack("[O]", m);
                glm_tpl_output a = {0}, b = {0};
                bool native = glm_chat_render_native(tpl, m, &a);
                glm_status st = glm_chat_render(tpl, list, 0, &b);
                t->messages++;
                t->native += native;
                t->tools += json_object_get(m, "tools") != NULL;
                if (native && st == GLM_OK && same_segments(&a, &b)) {
                    t->same++;
                } else if (t->messages - t->same <= 3) {
                    char *x = glm_tpl_output_join(&a, NULL), *y = glm_tpl_output_join(&b, NULL);
                    fprintf(stderr, "%s record %lld message %zu: native %d\n  native [%s]\n  interp [%s]\n", rec.source,
                            (long long)rec.index, i, native, x ? x : "", y ? y : "");
                    free(x);
                    free(y);
                }
                glm_tpl_output_free(&a);
                glm_tpl_output_free(&b);
                json_decref(list);
            }
            glm_conversation_free(&conv);
        }
        json_decref(rec.value);
    }
    glm_reader_close(r);
}

int main(void) {
    const char *data_dir = test_data_dir();
    char path[4096];
    snprintf(path, sizeof path, "%s/glm4-tokenizer", data_dir);
    glm_tokenizer *tok = NULL;
    CHECK(glm_tokenizer_load(path, &tok) == GLM_OK, "load %s: %s", path, glm_errmsg());
    if (!tok) return check_summary("test_chat_native");
    const char *templates[2] = {NULL, "tokenizer_config.glm-4-9b-chat.json"};
    for (int k = 0; k < 2; k++) {
        char tp[4096];
        snprintf(tp, sizeof tp, "%s/glm4-tokenizer/%s", data_dir, templates[k] ? templates[k] : "");
        glm_template *tpl = NULL;
        CHECK(glm_chat_template_load(tok, templates[k] ? tp : NULL, &tpl) == GLM_OK, "template: %s", glm_errmsg());
        if (!tpl) continue;
        CHECK(glm_chat_native_template(tpl), "template %d is a known GLM-4 template", k);
        glm_convert_opts plain = {0}, other = {.keep_reasoning = true, .merge_consecutive_turns = true};
        const glm_convert_opts *opts[2] = {&plain, &other};
        for (int o = 0; o < 2; o++) {
            tally t = {0};
            check_corpus(data_dir, tpl, opts[o], &t);
            printf("template %d, options %d: %zu records, %zu messages (%zu with tools), %zu native, %zu the same\n", k, o,
                   t.records, t.messages, t.tools, t.native, t.same);
            /* 1,497: SOURCES.md's 1,500 records less the 3 that test_corpora expects dropped */
            CHECK(t.records == 1497 && t.tools > 150 && t.native == t.messages && t.same == t.messages,
                  "template %d, options %d: %zu of %zu messages rendered natively and the same", k, o, t.same, t.messages);
        }
        glm_template_free(tpl);
    }
    glm_tokenizer_free(tok);
    return check_summary("test_chat_native");
}
