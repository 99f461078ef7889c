/* tests/dataset/test_targets.c: what each record trains, end to end below the CLI (record ->
 * dataset/formats conversion -> tokenize/chat encoding), against ids and labels computed without
 * glmtune (tests/tokenize/data/make_target_cases.py: transformers' chat-template renderer,
 * tiktoken, json.dumps, and the target rules written out by hand): per-turn loss flags
 * (xtuner/ms-swift "loss", axolotl "weight", LLaMA-Factory "loss_weight"), train_on_prompt and
 * mask_history, tool-call arguments with integers above 2^64 beside small ones, reasoning dropped
 * or kept, role order and empty turns, pretraining text. Then LLaMA-Factory's pretraining sample
 * tests/fixtures/pretrain/c4_demo.jsonl, read directly and through a dataset_info.json entry
 * {"file_name": "c4_demo.jsonl", "columns": {"prompt": "text"}}: every record's ids against
 * tiktoken's (tests/cli/data/c4_demo.expected). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/hash.h"
#include "common/pyjson.h"
#include "dataset/formats.h"
#include "dataset/reader.h"
#include "tests/check.h"
#include "tokenize/template/chat.h"

static glm_tokenizer *tok;
static glm_template *tpl;

/* Converts and encodes `raw` (JSON text) with the case's options; *reason on a drop. */
static glm_status encode_record(const char *raw, const glm_convert_opts *copt, int train_on, glm_u32vec *ids,
                                glm_u8vec *tg, const char **reason) {
    json_error_t je;
    glm_record rec = {0};
    rec.source = "case.jsonl";
    rec.line = 1;
    rec.value = glm_json_loadb_py(raw, strlen(raw), 0, &je);
    if (!rec.value) {
        fprintf(stderr, "bad case JSON: %s\n", je.text);
        return GLM_ERR_INTERNAL;
    }
    glm_conversation conv;
    glm_status st = glm_record_convert_ex(&rec, copt, &conv, reason);
    json_decref(rec.value);
    if (st != GLM_OK) return st;
    if (conv.format == GLM_FMT_TEXT)
        st = glm_text_encode(tok, tpl, json_string_value(conv.text), json_string_length(conv.text), ids, tg);
    else
        st = glm_chat_encode(tok, tpl, conv.messages, (glm_train_on)train_on, ids, tg);
    glm_conversation_free(&conv);
    return st;
}

static void run_case(json_t *c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    const char *raw = json_string_value(json_object_get(c, "record"));
    json_t *o = json_object_get(c, "opts");
    glm_convert_opts copt = {0};
    copt.keep_reasoning = json_is_true(json_object_get(o, "keep_reasoning"));
    copt.merge_consecutive_turns = json_is_true(json_object_get(o, "merge"));
    copt.text_column = json_string_value(json_object_get(o, "text_column"));
    const char *to = json_string_value(json_object_get(o, "train_on"));
    int train_on = !to ? GLM_TRAIN_ALL : !strcmp(to, "last") ? GLM_TRAIN_LAST : !strcmp(to, "prompt")
                   ? GLM_TRAIN_PROMPT : GLM_TRAIN_LAST | GLM_TRAIN_PROMPT;
    glm_u32vec ids = {0};
    glm_u8vec tg = {0};
    const char *reason = NULL;
    glm_status st = encode_record(raw, &copt, train_on, &ids, &tg, &reason);
    const char *drop = json_string_value(json_object_get(c, "drop"));
    if (drop) {
        CHECK(st == GLM_ERR_FORMAT && reason && !strcmp(reason, drop), "%s: status %d reason %s, want %s", name, st,
              reason ? reason : "-", drop);
    } else {
        json_t *want = json_object_get(c, "input_ids"), *labels = json_object_get(c, "labels");
        CHECK(st == GLM_OK, "%s: %s", name, glm_errmsg());
        int ok = st == GLM_OK && ids.n == json_array_size(want) && tg.n == ids.n;
        for (size_t i = 0; ok && i < ids.n; i++) {
            json_int_t w = json_integer_value(json_array_get(want, i)), l = json_integer_value(json_array_get(labels, i));
            if (ids.v[i] != (uint32_t)w || (tg.v[i] != 0) != (l != -100)) {
                fprintf(stderr, "%s: first difference at token %zu: id %u target %d, want id %lld label %lld\n", name, i,
                        ids.v[i], tg.v[i], (long long)w, (long long)l);
                ok = 0;
            }
        }
        CHECK(ok, "%s: %zu ids, want %zu", name, ids.n, json_array_size(want));
    }
    glm_vec_free(ids);
    glm_vec_free(tg);
}

/* Reads every record of `input` (a file or a registry) and checks each against c4_demo.expected. */
static void check_c4(const char *input, const char *dataset, const char *expected_path, const char *what) {
    char *exp;
    size_t n;
    if (glm_read_file(expected_path, &exp, &n) != GLM_OK) {
        CHECK(0, "%s: %s", what, glm_errmsg());
        return;
    }
    glm_reader *r;
    const char *in[1] = {input};
    glm_status st = glm_reader_open(in, 1, dataset, &r);
    CHECK(st == GLM_OK, "%s: %s", what, glm_errmsg());
    if (st != GLM_OK) {
        free(exp);
        return;
    }
    glm_record rec;
    size_t records = 0, bad = 0;
    char *line = exp;
    while ((st = glm_reader_next(r, &rec)) == GLM_OK) {
        glm_conversation conv;
        const char *reason;
        glm_u32vec ids = {0};
        glm_u8vec tg = {0};
        if (glm_record_convert(&rec, GLM_FMT_AUTO, &conv, &reason) != GLM_OK || conv.format != GLM_FMT_TEXT ||
            glm_text_encode(tok, tpl, json_string_value(conv.text), json_string_length(conv.text), &ids, &tg) != GLM_OK) {
            bad++;
        } else {
            unsigned long long idx = 0, count = 0, hash = 0;
            if (!line || sscanf(line, "%llu %llu %llx", &idx, &count, &hash) != 3 || idx != (unsigned long long)rec.index ||
                count != ids.n || hash != glm_fnv1a64(GLM_FNV1A64_INIT, ids.v, ids.n * sizeof *ids.v)) {
                if (bad++ < 3) fprintf(stderr, "%s: record %lld: %zu ids differ from tiktoken's\n", what, (long long)rec.index, ids.n);
            }
            size_t nt = 0;
            for (size_t i = 0; i < tg.n; i++) nt += tg.v[i];
            if (nt != ids.n - 2 || ids.v[0] != 151331 || ids.v[1] != 151333 || ids.v[ids.n - 1] != 151329) bad++;
            glm_conversation_free(&conv);
        }
        line = line ? strchr(line, '\n') : NULL;
        if (line) line++;
        records++;
        glm_vec_free(ids);
        glm_vec_free(tg);
        json_decref(rec.value);
    }
    glm_reader_close(r);
    free(exp);
    CHECK(st == GLM_EOF && records == 300 && bad == 0, "%s: %zu records, %zu differ (%s)", what, records, bad,
          st == GLM_EOF ? "" : glm_errmsg());
    printf("%s: %zu records as tiktoken encodes them, [gMASK]<sop> + text + <|endoftext|>\n", what, records);
}

int main(void) {
    const char *data_dir = test_data_dir();
    const char *src = getenv("GLM_SRC");
    char path[4096], cases[4096];
    snprintf(path, sizeof path, "%s/glm4-tokenizer", data_dir);
    CHECK(glm_tokenizer_load(path, &tok) == GLM_OK, "load: %s", glm_errmsg());
    CHECK(glm_chat_template_load(tok, NULL, &tpl) == GLM_OK, "template: %s", glm_errmsg());
    if (!tok || !tpl) return check_summary("test_targets");

    snprintf(cases, sizeof cases, "%s/tests/tokenize/data/target_cases.jsonl", src ? src : ".");
    char *data;
    size_t len;
    CHECK(glm_read_file(cases, &data, &len) == GLM_OK, "%s", glm_errmsg());
    int n = 0;
    for (char *p = data; data && p < data + len;) {
        char *nl = memchr(p, '\n', (size_t)(data + len - p));
        size_t ll = nl ? (size_t)(nl - p) : (size_t)(data + len - p);
        json_error_t je;
        json_t *c = ll ? json_loadb(p, ll, 0, &je) : NULL;
        if (c) {
            run_case(c);
            json_decref(c);
            n++;
        }
        p += ll + 1;
    }
    free(data);
    CHECK(n >= 20, "only %d cases read from %s", n, cases);
    printf("%d cases against transformers' rendering and tiktoken's ids\n", n);

    /* c4_demo: directly, and through a dataset_info.json entry naming it with columns {prompt: text} */
    char c4[4096], expected[4096];
    snprintf(c4, sizeof c4, "%s/pretrain/c4_demo.jsonl", data_dir);
    snprintf(expected, sizeof expected, "%s/tests/cli/data/c4_demo.expected", src ? src : ".");
    if (!glm_is_file(c4)) {
        printf("SKIPPED c4_demo: %s not found\n", c4);
    } else {
        check_c4(c4, NULL, expected, "c4_demo.jsonl");
        char dir[] = "/tmp/glm_targets_XXXXXX";
        CHECK(mkdtemp(dir) != NULL, "mkdtemp");
        char reg[4200], text[8600];
        snprintf(reg, sizeof reg, "%s/dataset_info.json", dir);
        snprintf(text, sizeof text, "{\"c4_demo\": {\"file_name\": \"%s\", \"columns\": {\"prompt\": \"text\"}}}", c4);
        CHECK(glm_write_file_atomic(reg, text, strlen(text)) == GLM_OK, "%s", glm_errmsg());
        check_c4(reg, "c4_demo", expected, "dataset_info entry c4_demo");
        glm_rmtree(dir);
    }
    glm_template_free(tpl);
    glm_tokenizer_free(tok);
    return check_summary("test_targets");
}
