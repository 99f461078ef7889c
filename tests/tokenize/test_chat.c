/* tests/tokenize/test_chat.c: GLM-4 chat rendering and training encoding against
 * tests/fixtures/chat_golden.jsonl (transformers' rendering + tiktoken ids) with the real
 * GLM-4 tokenizer; role strings inside content stay text; last-turn-only targets; the
 * glm-4-9b-chat template; template errors. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/fileio.h"
#include "common/pyjson.h"
#include "common/rng.h"
#include "tests/chat_same.h"
#include "tests/check.h"
#include "tokenize/template/chat.h"

static glm_tokenizer *tok;
static glm_template *tpl;

static char *render_text(const glm_template *t, json_t *msgs) {
    glm_tpl_output o = {0};
    glm_status st = glm_chat_render(t, msgs, 0, &o);
    char *s = st == GLM_OK ? glm_tpl_output_join(&o, NULL) : NULL;
    if (st != GLM_OK) fprintf(stderr, "render: %s\n", glm_errmsg());
    glm_tpl_output_free(&o);
    return s;
}

static int same_ids(const glm_u32vec *a, json_t *want) {
    if (a->n != json_array_size(want)) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i] != (uint32_t)json_integer_value(json_array_get(want, i))) return 0;
    return 1;
}

static void print_ids(const char *what, const glm_u32vec *a) {
    fprintf(stderr, "  %s (%zu):", what, a->n);
    for (size_t i = 0; i < a->n && i < 80; i++) fprintf(stderr, " %u", a->v[i]);
    fputc('\n', stderr);
}

static void golden_case(json_t *c, size_t line) {
    json_t *msgs = json_object_get(c, "messages");
    const char *text = json_string_value(json_object_get(c, "text"));
    json_t *want_ids = json_object_get(c, "input_ids"), *labels = json_object_get(c, "labels");
    char *got = render_text(tpl, msgs);
    CHECK(got && !strcmp(got, text), "case %zu text:\n  got  [%s]\n  want [%s]", line, got ? got : "(null)", text);
    free(got);

    glm_u32vec ids = {0};
    glm_u8vec tg = {0};
    /* appends: start from a non-empty vector */
    glm_vec_push(ids, 7u);
    glm_vec_push(tg, (uint8_t)1);
    glm_status st = glm_chat_encode(tok, tpl, msgs, GLM_TRAIN_ALL, &ids, &tg);
    CHECK(st == GLM_OK, "case %zu encode: %s", line, glm_errmsg());
    CHECK(ids.n == tg.n && ids.v[0] == 7 && tg.v[0] == 1, "case %zu: append semantics", line);
    glm_u32vec body = {ids.v + 1, ids.n - 1, 0};
    int ok = same_ids(&body, want_ids);
    CHECK(ok, "case %zu input_ids differ", line);
    if (!ok) print_ids("got", &body);
    int lab_ok = json_array_size(labels) == tg.n - 1;
    for (size_t i = 0; lab_ok && i + 1 < tg.n; i++) {
        json_int_t l = json_integer_value(json_array_get(labels, i));
        lab_ok = (tg.v[i + 1] != 0) == (l != -100) && (l == -100 || l == (json_int_t)ids.v[i + 1]);
    }
    CHECK(lab_ok, "case %zu labels differ", line);

    /* the same ids from encoding the whole text (all literal) plus the end token */
    glm_tpl_output o = {0};
    glm_tpl_segment s = {(char *)text, strlen(text), 1};
    o.seg = &s;
    o.n = 1;
    glm_u32vec whole = {0};
    CHECK(glm_chat_encode_output(tok, &o, &whole) == GLM_OK, "encode text: %s", glm_errmsg());
    glm_vec_push(whole, 151336u);
    CHECK(same_ids(&whole, want_ids), "case %zu: encoding `text` with specials differs", line);
    free(whole.v);

    /* GLM_TRAIN_LAST: targets only right after tokens of the last assistant message */
    glm_u32vec ids2 = {0};
    glm_u8vec tg2 = {0};
    CHECK(glm_chat_encode(tok, tpl, msgs, GLM_TRAIN_LAST, &ids2, &tg2) == GLM_OK, "last: %s", glm_errmsg());
    CHECK(ids2.n == body.n && !memcmp(ids2.v, body.v, body.n * 4), "case %zu: TRAIN_LAST changed ids", line);
    /* the last assistant turn starts after the last <|assistant|> */
    size_t last = 0;
    for (size_t i = 0; i < ids2.n; i++)
        if (ids2.v[i] == 151337) last = i;
    size_t n_all = 0, n_last = 0, bad = 0;
    for (size_t i = 0; i < tg2.n; i++) {
        n_all += tg.v[i + 1];
        n_last += tg2.v[i];
        if (tg2.v[i] && !tg.v[i + 1]) bad++;
        if (i > last && tg2.v[i] != tg.v[i + 1]) bad++;
        if (i <= last && tg2.v[i]) bad++;
    }
    CHECK(bad == 0 && n_last > 0 && n_last <= n_all, "case %zu: TRAIN_LAST targets wrong (%zu bad)", line, bad);
    free(ids.v);
    free(tg.v);
    free(ids2.v);
    free(tg2.v);
}

static void test_plain_role_strings(void) {
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"Say <|user|> or <|assistant|>[gMASK]\"},"
                              "{\"role\":\"assistant\",\"content\":\"<|observation|>ok\"}]", 0, NULL);
    glm_u32vec ids = {0}, want = {0};
    glm_u8vec tg = {0};
    CHECK(glm_chat_encode(tok, tpl, msgs, GLM_TRAIN_ALL, &ids, &tg) == GLM_OK, "encode: %s", glm_errmsg());
    /* expected: [gMASK] <sop> <|user|> enc("\nSay <|user|> or <|assistant|>[gMASK]") <|assistant|>
     * enc("\n<|observation|>ok") <|user|> */
    glm_vec_push(want, 151331u);
    glm_vec_push(want, 151333u);
    glm_vec_push(want, 151336u);
    const char *a = "\nSay <|user|> or <|assistant|>[gMASK]", *b = "\n<|observation|>ok";
    glm_tokenizer_encode(tok, a, strlen(a), &want);
    glm_vec_push(want, 151337u);
    size_t asst_start = want.n;
    glm_tokenizer_encode(tok, b, strlen(b), &want);
    glm_vec_push(want, 151336u);
    CHECK(ids.n == want.n && !memcmp(ids.v, want.v, want.n * 4), "role strings in content must stay text");
    if (ids.n != want.n || memcmp(ids.v, want.v, want.n * 4)) { print_ids("got", &ids); print_ids("want", &want); }
    size_t nspec = 0;
    for (size_t i = 0; i < ids.n; i++) nspec += ids.v[i] >= 151329;
    CHECK(nspec == 5, "special ids: %zu, want 5", nspec);
    for (size_t i = 0; i < tg.n; i++) CHECK(tg.v[i] == (i >= asst_start), "target %zu = %d", i, tg.v[i]);
    free(ids.v);
    free(want.v);
    free(tg.v);
    json_decref(msgs);
}

static void test_errors(const char *data_dir) {
    glm_u32vec ids = {0};
    glm_u8vec tg = {0};
    json_t *bad = json_loads("[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"robot\",\"content\":\"x\"}]", 0, NULL);
    glm_status st = glm_chat_encode(tok, tpl, bad, GLM_TRAIN_ALL, &ids, &tg);
    CHECK(st == GLM_ERR_FORMAT && strstr(glm_errmsg(), "message 1") && strstr(glm_errmsg(), "robot"), "bad role: %s", glm_errmsg());
    CHECK(ids.n == 0 && tg.n == 0, "ids left as they were");
    json_decref(bad);
    bad = json_loads("[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]", 0, NULL);
    st = glm_chat_encode(tok, tpl, bad, GLM_TRAIN_ALL, &ids, &tg);
    CHECK(st == GLM_ERR_FORMAT && strstr(glm_errmsg(), "content"), "list content: %s", glm_errmsg());
    json_decref(bad);
    glm_template *t = NULL;
    st = glm_template_parse("[gMASK]<sop>\n{% for m in messages %}\n  {{ m.content + }}\n{% endfor %}", "bad.jinja", &t);
    CHECK(st == GLM_ERR_FORMAT && strstr(glm_errmsg(), "bad.jinja:3:"), "line/col: %s", glm_errmsg());
    st = glm_template_parse("{% for m in messages %}{{ m }}", "open.jinja", &t);
    CHECK(st == GLM_ERR_FORMAT && strstr(glm_errmsg(), "open.jinja:1:1") && strstr(glm_errmsg(), "endfor"), "unclosed: %s", glm_errmsg());
    /* a template whose preamble depends on the messages cannot be split per message */
    CHECK(glm_template_parse("{{ messages | length }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}", "count", &t) == GLM_OK, "parse");
    json_t *two = json_loads("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}]", 0, NULL);
    st = glm_chat_encode(tok, t, two, GLM_TRAIN_ALL, &ids, &tg);
    CHECK(st == GLM_ERR_MISMATCH, "preamble mismatch: %s", glm_errmsg());
    glm_template_free(t);
    /* a .jinja file */
    char path[] = "/tmp/glm_test_chat_XXXXXX.jinja";
    int fd = mkstemps(path, 6);
    const char *src = "[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% endfor %}\n";
    CHECK(fd >= 0 && write(fd, src, strlen(src)) == (ssize_t)strlen(src), "temp file");
    close(fd);
    st = glm_chat_template_load(tok, path, &t);
    CHECK(st == GLM_OK, "load .jinja: %s", glm_errmsg());
    if (st == GLM_OK) {
        char *s = render_text(t, two);
        CHECK(s && !strcmp(s, "[gMASK]<sop><|user|>\na<|assistant|>\nb"), "jinja file render: %s", s ? s : "");
        free(s);
        glm_template_free(t);
    }
    unlink(path);
    json_decref(two);
    free(ids.v);
    free(tg.v);
    (void)data_dir;
}

/* glm-4-9b-chat's template differs only in the assistant's name in the tool preamble. */
static void test_9b_chat(const char *data_dir, json_t *tools_case) {
    char path[4096];
    snprintf(path, sizeof path, "%s/glm4-tokenizer/tokenizer_config.glm-4-9b-chat.json", data_dir);
    glm_template *t = NULL;
    glm_status st = glm_chat_template_load(tok, path, &t);
    CHECK(st == GLM_OK, "load %s: %s", path, glm_errmsg());
    if (st != GLM_OK || !tools_case) return;
    char *got = render_text(t, json_object_get(tools_case, "messages"));
    const char *text = json_string_value(json_object_get(tools_case, "text"));
    const char *at = strstr(text, "GLM-4");
    CHECK(at != NULL, "fixture has GLM-4 in its tool preamble");
    if (got && at) {
        char want[16384];
        snprintf(want, sizeof want, "%.*sChatGLM%s", (int)(at - text), text, at + 5);
        CHECK(!strcmp(got, want), "glm-4-9b-chat render:\n  got  [%s]\n  want [%s]", got, want);
    }
    free(got);
    json_t *m = json_loads("[{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL);
    glm_tpl_output o = {0};
    CHECK(glm_chat_render(t, m, 1, &o) == GLM_OK, "render");
    char *s = glm_tpl_output_join(&o, NULL);
    CHECK(s && !strcmp(s, "[gMASK]<sop><|user|>\nhi<|assistant|>"), "generation prompt: %s", s ? s : "");
    free(s);
    glm_tpl_output_free(&o);
    json_decref(m);
    glm_template_free(t);
}

/* The demo's sample data with the sample SentencePiece tokenizer and its own template: every
 * conversation encodes, ids decode back to the rendered text plus the end token, each role
 * token is a special id, and every conversation has targets. Needs only the repository. */
static void test_samples(void) {
    const char *src = getenv("GLM_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/samples/tokenizer", src ? src : ".");
    glm_tokenizer *st_tok = NULL;
    glm_template *st_tpl = NULL;
    glm_status st = glm_tokenizer_load(path, &st_tok);
    CHECK(st == GLM_OK, "load %s: %s", path, glm_errmsg());
    if (st != GLM_OK) return;
    st = glm_chat_template_load(st_tok, NULL, &st_tpl);
    CHECK(st == GLM_OK, "sample template: %s", glm_errmsg());
    snprintf(path, sizeof path, "%s/samples/data/chat_messages.jsonl", src ? src : ".");
    char *data;
    size_t len, n = 0, bad = 0;
    CHECK(glm_read_file(path, &data, &len) == GLM_OK, "read %s", path);
    int64_t user = glm_tokenizer_special_id(st_tok, "<|user|>", 8), asst = glm_tokenizer_special_id(st_tok, "<|assistant|>", 13);
    CHECK(user >= 0 && asst >= 0, "sample tokenizer specials");
    char *save = NULL;
    for (char *line = strtok_r(data, "\n", &save); line && st_tpl; line = strtok_r(NULL, "\n", &save)) {
        json_t *c = json_loads(line, 0, NULL), *msgs = json_object_get(c, "messages");
        glm_u32vec ids = {0};
        glm_u8vec tg = {0};
        glm_charvec dec = {0};
        n++;
        st = glm_chat_encode(st_tok, st_tpl, msgs, GLM_TRAIN_ALL, &ids, &tg);
        char *text = render_text(st_tpl, msgs);
        if (st == GLM_OK && text) st = glm_tokenizer_decode(st_tok, ids.v, ids.n, &dec);
        size_t nt = 0, nroles = 0, nasst = 0;
        for (size_t i = 0; i < tg.n; i++) nt += tg.v[i];
        for (size_t i = 0; i < ids.n; i++) nasst += ids.v[i] == (uint32_t)asst;
        for (size_t i = 0; i < json_array_size(msgs); i++)
            nroles += !strcmp(json_string_value(json_object_get(json_array_get(msgs, i), "role")), "assistant");
        size_t tl = text ? strlen(text) : 0;
        int ok = st == GLM_OK && text && dec.n == tl + 8 && !memcmp(dec.v, text, tl) && !memcmp(dec.v + tl, "<|user|>", 8) &&
                 nt > 0 && nasst == nroles && ids.n && ids.v[ids.n - 1] == (uint32_t)user;
        if (!ok && bad++ < 3)
            fprintf(stderr, "sample line %zu: st=%d (%s) targets=%zu asst=%zu/%zu\n  text [%s]\n  dec  [%.*s]\n", n, st,
                    glm_errmsg(), nt, nasst, nroles, text ? text : "", (int)dec.n, dec.v ? dec.v : "");
        free(text);
        free(ids.v);
        free(tg.v);
        free(dec.v);
        json_decref(c);
    }
    CHECK(n >= 100 && bad == 0, "samples: %zu of %zu conversations failed", bad, n);
    free(data);
    glm_template_free(st_tpl);
    glm_tokenizer_free(st_tok);
}

/* glm_chat_encode_output's rule written plainly (the reference): at each byte the longest special
 * that starts there becomes its id unless it lies entirely inside one data segment; the text
 * between specials is encoded as one run. */
static void encode_output_ref(const glm_tpl_output *o, glm_u32vec *ids) {
    glm_charvec t = {0};
    GLM_VEC(size_t) seg = {0}; /* segment of each byte */
    for (size_t i = 0; i < o->n; i++)
        for (size_t k = 0; k < o->seg[i].len; k++) glm_vec_push(t, o->seg[i].text[k]), glm_vec_push(seg, i);
    size_t run = 0, p = 0;
    while (p < t.n) {
        size_t best = 0;
        uint32_t best_id = 0;
        for (size_t s = 0; s < glm_tokenizer_n_special(tok); s++) {
            uint32_t id;
            const char *sp = glm_tokenizer_special(tok, s, &id);
            size_t l = strlen(sp);
            if (l > best && l <= t.n - p && !memcmp(t.v + p, sp, l)) best = l, best_id = id;
        }
        if (best && seg.v[p] == seg.v[p + best - 1] && !o->seg[seg.v[p]].literal) best = 0;
        if (!best) {
            p++;
            continue;
        }
        glm_tokenizer_encode(tok, t.v + run, p - run, ids);
        glm_vec_push(*ids, best_id);
        run = p += best;
    }
    glm_tokenizer_encode(tok, t.v + run, t.n - run, ids);
    glm_vec_free(t);
    glm_vec_free(seg);
}

/* Random outputs built from special tokens, parts of them and text, as literal and data
 * segments of any length: glm_chat_encode_output (which skips the inside of data segments)
 * gives the reference's ids. */
static void test_encode_output(void) {
    static const char *const PARTS[] = {"<|user|>", "<|assistant|>", "[gMASK]", "<sop>", "<|", "|>", "user", "<|us", "er|>",
                                        "[gM", "ASK]", "hello ", "\u4f60\u597d", "\n", " ", "<", "|", "<|endoftext|>", "x",
                                        "<|observation|>", "<|observation|", ">", "<|observ", "ation|>", "<|system|",
                                        "<|begin_of_image|>", "<|begin_of_image|", "<|begin_of_", "image|>"};
    glm_rng r;
    glm_rng_seed(&r, 5, 0);
    size_t bad = 0, specials = 0;
    for (int t = 0; t < 3000; t++) {
        glm_tpl_output o = {0};
        size_t nseg = 1 + glm_rng_below(&r, 6);
        o.seg = calloc(nseg, sizeof *o.seg);
        for (size_t i = 0; i < nseg; i++) {
            glm_charvec x = {0};
            size_t np = glm_rng_below(&r, 12);
            for (size_t k = 0; k < np; k++) {
                const char *p = PARTS[glm_rng_below(&r, sizeof PARTS / sizeof *PARTS)];
                glm_vec_reserve(x, strlen(p) + 1);
                memcpy(x.v + x.n, p, strlen(p));
                x.n += strlen(p);
            }
            glm_vec_reserve(x, 1);
            x.v[x.n] = 0;
            o.seg[o.n++] = (glm_tpl_segment){x.v, x.n, (int)glm_rng_below(&r, 2)};
        }
        glm_u32vec a = {0}, b = {0};
        glm_status st = glm_chat_encode_output(tok, &o, &a);
        encode_output_ref(&o, &b);
        for (size_t i = 0; i < b.n; i++) specials += b.v[i] >= 151329;
        if (st != GLM_OK || a.n != b.n || (a.n && memcmp(a.v, b.v, a.n * 4))) bad++; /* empty: v may be NULL */
        glm_vec_free(a);
        glm_vec_free(b);
        glm_tpl_output_free(&o);
    }
    CHECK(bad == 0 && specials > 3000, "encode_output: %zu of 3000 outputs differ from the reference (%zu specials)", bad, specials);
}

/* The native GLM-4 renderer (tokenize/template/chat_native.c) against the interpreter: the same segments
 * for messages of every branch of the template; unusual messages and other templates are left
 * to the interpreter. */
static void test_native(const char *data_dir) {
    static const char *const COMMON[] = {
        "{\"role\": \"user\", \"content\": \"hi <|user|> [gMASK]\"}",
        "{\"role\": \"assistant\", \"content\": \"{\\\"a\\\": 1}\", \"metadata\": \"get_weather\"}",
        "{\"role\": \"assistant\", \"content\": \"x\", \"metadata\": \"\"}",
        "{\"role\": \"observation\", \"content\": \"\\u4f60\\u597d\\n\", \"loss\": true}",
        "{\"role\": \"user\", \"content\": \"\"}", "{\"role\": \"user\", \"content\": null}", "{\"role\": \"user\"}",
        "{\"role\": \"system\", \"content\": \"\", \"tools\": []}",
        "{\"role\": \"system\", \"content\": \"be brief\", \"tools\": [{\"type\": \"python\"}, {\"type\": \"simple_browser\"}, "
        "{\"type\": \"cogview\"}, {\"type\": \"other\"}, {}]}",
        "{\"role\": \"system\", \"content\": \"\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
        "\"description\": \"\\u5929\\u6c14 \\\"q\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"n\": "
        "{\"type\": \"integer\", \"minimum\": 1.5e-07, \"maximum\": 18446744073709551616, \"enum\": [1, 2.0, true, null]}}, "
        "\"required\": []}}}, {\"type\": \"python\"}, {\"type\": \"function\", \"function\": {\"name\": \"\"}}]}",
    };
    static const char *const UNUSUAL[] = {
        "{\"role\": \"user\", \"content\": \"x\", \"metadata\": null}",
        "{\"role\": \"system\", \"content\": \"x\", \"tools\": null}",
        "{\"role\": \"system\", \"content\": \"x\", \"tools\": [\"python\"]}",
        "{\"role\": \"system\", \"content\": \"x\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": 5}}]}",
        "{\"role\": \"system\", \"content\": \"x\", \"tools\": [{\"type\": \"function\", \"function\": {\"description\": \"d\"}}]}",
        "{\"role\": \"system\", \"content\": \"x\", \"tools\": [{\"type\": 7}]}",
    };
    char path[4096];
    snprintf(path, sizeof path, "%s/glm4-tokenizer/tokenizer_config.glm-4-9b-chat.json", data_dir);
    glm_template *chat9b = NULL;
    CHECK(glm_chat_template_load(tok, path, &chat9b) == GLM_OK, "load %s", path);
    const glm_template *tpls[2] = {tpl, chat9b};
    for (int k = 0; k < 2 && chat9b; k++) {
        CHECK(glm_chat_native_template(tpls[k]), "template %d is rendered natively", k);
        glm_tpl_output a = {0}, b = {0};
        json_t *none = json_array();
        CHECK(glm_chat_render_native(tpls[k], NULL, &a) && glm_chat_render(tpls[k], none, 0, &b) == GLM_OK &&
                  same_segments(&a, &b), "template %d, no message", k);
        json_decref(none);
        glm_tpl_output_free(&a);
        glm_tpl_output_free(&b);
        for (size_t i = 0; i < sizeof COMMON / sizeof *COMMON + sizeof UNUSUAL / sizeof *UNUSUAL; i++) {
            bool common = i < sizeof COMMON / sizeof *COMMON;
            const char *txt = common ? COMMON[i] : UNUSUAL[i - sizeof COMMON / sizeof *COMMON];
            json_error_t je;
            json_t *m = glm_json_loadb_py(txt, strlen(txt), 0, &je), *list = json_pack("[O]", m);
            CHECK(m != NULL, "case %zu: %s", i, je.text);
            bool native = glm_chat_render_native(tpls[k], m, &a);
            json_t *vars = json_pack("{s:o, s:b}", "messages", list, "add_generation_prompt", 0);
            glm_status st = glm_template_render(tpls[k], vars, &b);
            json_decref(vars);
            if (common) {
                CHECK(native && st == GLM_OK && same_segments(&a, &b), "template %d, case %zu rendered natively and the same: %s", k, i, txt);
                char *x = glm_tpl_output_join(&a, NULL), *y = glm_tpl_output_join(&b, NULL);
                if (x && y && strcmp(x, y)) fprintf(stderr, "  native [%s]\n  interp [%s]\n", x, y);
                free(x);
                free(y);
            } else {
                CHECK(!native && a.n == 0, "template %d, case %zu left to the interpreter: %s", k, i, txt);
            }
            glm_tpl_output_free(&a);
            glm_tpl_output_free(&b);
            json_decref(m);
        }
    }
    glm_template_free(chat9b);
    /* other templates: a byte more, or the sample tokenizer's own, are not GLM-4's */
    size_t n;
    const char *src = glm_template_source(tpl, &n);
    char *changed = malloc(n + 2);
    memcpy(changed, src, n);
    memcpy(changed + n, " ", 2);
    glm_template *t2 = NULL;
    CHECK(glm_template_parse(changed, "changed", &t2) == GLM_OK && !glm_chat_native_template(t2), "a changed template");
    glm_tpl_output a = {0};
    json_t *m = json_loads("{\"role\": \"user\", \"content\": \"x\"}", 0, NULL);
    CHECK(t2 && !glm_chat_render_native(t2, m, &a) && a.n == 0, "a changed template is interpreted");
    json_decref(m);
    glm_template_free(t2);
    free(changed);
}

int main(void) {
    test_samples();
    const char *data_dir = test_data_dir();
    char path[4096];
    snprintf(path, sizeof path, "%s/glm4-tokenizer", data_dir);
    glm_status st = glm_tokenizer_load(path, &tok);
    CHECK(st == GLM_OK, "load tokenizer %s: %s", path, glm_errmsg());
    if (st != GLM_OK) return check_summary("test_chat");
    st = glm_chat_template_load(tok, NULL, &tpl);
    CHECK(st == GLM_OK, "chat template: %s", glm_errmsg());
    if (st != GLM_OK) return check_summary("test_chat");

    snprintf(path, sizeof path, "%s/chat_golden.jsonl", data_dir);
    char *data;
    size_t len, n = 0;
    json_t *tools_case = NULL;
    CHECK(glm_read_file(path, &data, &len) == GLM_OK, "read %s", path);
    char *save = NULL;
    for (char *line = strtok_r(data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_t *c = json_loads(line, 0, NULL);
        CHECK(c != NULL, "bad JSON in %s", path);
        if (!c) continue;
        golden_case(c, ++n);
        json_t *m0 = json_array_get(json_object_get(c, "messages"), 0);
        if (json_object_get(m0, "tools") && !tools_case) tools_case = json_incref(c);
        json_decref(c);
    }
    free(data);
    CHECK(n == 6, "golden cases: %zu", n);
    CHECK(tools_case != NULL, "a tools case");
    test_plain_role_strings();
    test_encode_output();
    test_errors(data_dir);
    test_9b_chat(data_dir, tools_case);
    test_native(data_dir);
    json_decref(tools_case);
    glm_template_free(tpl);
    glm_tokenizer_free(tok);
    return check_summary("test_chat");
}
