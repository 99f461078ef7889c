/* tokenize/template/chat_native.c: GLM-4's chat template rendered without the interpreter (chat.h,
 * glm_chat_render_native).
 *
 * The template interpreter walks the chat template's syntax tree and builds jansson values for
 * every message: about 15,000 instructions per message, an eighth of `glmtune tokenize`. For the
 * chat templates of the GLM-4-9B models, recognised by their exact text (length and FNV-1a 64 of
 * the source as glm_template_source gives it), this file produces the same segments directly.
 *
 * Only the control flow of that template is written here. Its text pieces (the tool preamble,
 * the python / simple_browser / cogview blocks, the function header and footer, "<|", "|>",
 * "\n") are not copied into this file: each thread renders a handful of probe messages through
 * the interpreter once per template and cuts the pieces out of its output, checking the shape of
 * every probe. So the two template variants (glm-4-9b-chat-1m says "GLM-4" where glm-4-9b-chat
 * says "ChatGLM") share one code path, and a piece can only be what the interpreter renders.
 *
 * The template, per message `item` (after "[gMASK]<sop>" once):
 *   {% if item['tools'] is defined %}<|system|>\n...# 可用工具
 *     {% for tool in item['tools'] %} function: "\n## " name "\n\n" tojson(function, indent=4)
 *     "\n在调用上述函数时..."; python / simple_browser / cogview: their fixed blocks {% endfor %}
 *   {% endif %}
 *   {% if item['content'] %}<|{{ item['role'] }}|>{{ item['metadata'] }}\n{{ item['content'] }}
 *   {% endif %}
 * A message outside the common form is left to the interpreter (glm_chat_render_native returns
 * false): tools that are not a list of objects with a text "type", a function without an object
 * "function" holding a text "name", a role, content or metadata that is not text (null metadata
 * prints "None", for instance), or a number kept as text (common/pyjson.h). */
#include <stdio.h>
#include <string.h>

#include "common/hash.h"
#include "common/pyjson.h"
#include "tokenize/template/chat_internal.h"

/* The known templates: glm-4-9b-chat-1m's and glm-4-9b-chat's tokenizer_config.json
 * chat_template (tests/fixtures/glm4-tokenizer), as normalised by the template parser. */
static const struct {
    size_t len;
    uint64_t fnv;
} KNOWN[] = {
    {2891, 0x5211a5292e2cbd4aULL}, /* glm-4-9b-chat-1m */
    {2893, 0x8ab38a1e7435879bULL}, /* glm-4-9b-chat */
};

enum { P_PREFIX, P_HEAD, P_FN_A, P_FN_B, P_FN_C, P_PYTHON, P_BROWSER, P_COGVIEW, P_OPEN, P_MID, P_NL, N_PIECES };
static const char *const BLOCK_TYPES[3] = {"python", "simple_browser", "cogview"};

/* The pieces of one template, cut out of probe renders; per thread, so no locking. */
typedef struct {
    uint64_t serial; /* the template they belong to (0: none yet) */
    bool native;     /* a known template whose probes all had the expected shape */
    size_t off[N_PIECES], len[N_PIECES];
    char buf[8192];
} pieces;

static _Thread_local pieces tl;

/* Appends s[0..n) as the interpreter does (template_eval.c seg_add): nothing when empty, merged into
 * the previous segment when both are literal. */
static bool flat_add(chat_flat *f, const char *s, size_t n, int literal) {
    if (n == 0) return true;
    if (!(literal && f->start.n && f->literal.v[f->literal.n - 1]) &&
        (glm_vec_push(f->start, f->text.n) != GLM_OK || glm_vec_push(f->literal, (uint8_t)literal) != GLM_OK))
        return false;
    if (glm_vec_reserve(f->text, n + 1) != GLM_OK) return false;
    memcpy(f->text.v + f->text.n, s, n);
    f->text.n += n;
    return true;
}

static bool piece(chat_flat *f, int k) { return flat_add(f, tl.buf + tl.off[k], tl.len[k], 1); }

/* Renders messages=[m] (m as JSON text; NULL: no message) through the interpreter. */
static bool probe(const glm_template *tpl, const char *m, glm_tpl_output *o) {
    char vars[512];
    snprintf(vars, sizeof vars, "{\"messages\": [%s], \"add_generation_prompt\": false}", m ? m : "");
    json_t *v = json_loads(vars, 0, NULL);
    bool ok = v && glm_template_render(tpl, v, o) == GLM_OK;
    json_decref(v);
    return ok;
}

/* Stores piece k = s[0..n). */
static bool keep(int k, const char *s, size_t n) {
    size_t at = k ? tl.off[k - 1] + tl.len[k - 1] : 0;
    if (at + n > sizeof tl.buf) return false;
    memcpy(tl.buf + at, s, n);
    tl.off[k] = at;
    tl.len[k] = n;
    return true;
}

/* Is segment i of o (n segments expected) literal/data as wanted, holding `text` when given? */
static bool seg_is(const glm_tpl_output *o, size_t i, int literal, const char *text) {
    return i < o->n && o->seg[i].literal == literal && (!text || (o->seg[i].len == strlen(text) && !memcmp(o->seg[i].text, text, o->seg[i].len)));
}

/* Does segment 0 of o start with the pieces P_PREFIX (and P_HEAD when head)? Returns the
 * length of that start, or 0. */
static size_t starts(const glm_tpl_output *o, bool head) {
    size_t a = tl.len[P_PREFIX], b = head ? tl.len[P_HEAD] : 0;
    if (o->n == 0 || !o->seg[0].literal || o->seg[0].len < a + b || memcmp(o->seg[0].text, tl.buf + tl.off[P_PREFIX], a) ||
        (head && memcmp(o->seg[0].text + a, tl.buf + tl.off[P_HEAD], b)))
        return 0;
    return a + b;
}

/* Cuts the pieces out of probe renders; false when a probe is not shaped as expected. */
static bool learn(const glm_template *tpl) {
    glm_tpl_output o = {0};
    bool ok = probe(tpl, NULL, &o) && o.n == 1 && o.seg[0].literal && keep(P_PREFIX, o.seg[0].text, o.seg[0].len);
    glm_tpl_output_free(&o);
    size_t s;
    ok = ok && probe(tpl, "{\"role\": \"system\", \"tools\": []}", &o) && o.n == 1 && (s = starts(&o, false)) &&
         keep(P_HEAD, o.seg[0].text + s, o.seg[0].len - s);
    glm_tpl_output_free(&o);
    /* function: L(prefix head FN_A) D(name) L(FN_B) D(tojson) L(FN_C) */
    char *fj = NULL;
    json_t *fn = json_pack("{s:s}", "name", "N");
    if (ok && fn && (fj = glm_tojson(fn, 4)) &&
        probe(tpl, "{\"role\": \"system\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"N\"}}]}", &o))
        ok = o.n == 5 && (s = starts(&o, true)) && seg_is(&o, 1, 0, "N") && seg_is(&o, 2, 1, NULL) && seg_is(&o, 3, 0, fj) &&
             seg_is(&o, 4, 1, NULL) && keep(P_FN_A, o.seg[0].text + s, o.seg[0].len - s) &&
             keep(P_FN_B, o.seg[2].text, o.seg[2].len) && keep(P_FN_C, o.seg[4].text, o.seg[4].len);
    else
        ok = false;
    free(fj);
    json_decref(fn);
    glm_tpl_output_free(&o);
    for (int b = 0; b < 3 && ok; b++) {
        char m[128];
        snprintf(m, sizeof m, "{\"role\": \"system\", \"tools\": [{\"type\": \"%s\"}]}", BLOCK_TYPES[b]);
        ok = probe(tpl, m, &o) && o.n == 1 && (s = starts(&o, true)) && keep(P_PYTHON + b, o.seg[0].text + s, o.seg[0].len - s);
        glm_tpl_output_free(&o);
    }
    /* a message: L(prefix OPEN) D(role) L(MID) D(metadata) L(NL) D(content) */
    ok = ok && probe(tpl, "{\"role\": \"R\", \"content\": \"C\", \"metadata\": \"M\"}", &o) && o.n == 6 &&
         (s = starts(&o, false)) && seg_is(&o, 1, 0, "R") && seg_is(&o, 2, 1, NULL) && seg_is(&o, 3, 0, "M") &&
         seg_is(&o, 4, 1, NULL) && seg_is(&o, 5, 0, "C") && keep(P_OPEN, o.seg[0].text + s, o.seg[0].len - s) &&
         keep(P_MID, o.seg[2].text, o.seg[2].len) && keep(P_NL, o.seg[4].text, o.seg[4].len);
    glm_tpl_output_free(&o);
    return ok;
}

bool glm_chat_native_template(const glm_template *tpl) {
    uint64_t serial = glm_template_serial(tpl);
    if (tl.serial == serial) return tl.native;
    tl.serial = serial;
    tl.native = false;
    size_t n;
    const char *src = glm_template_source(tpl, &n);
    uint64_t h = glm_fnv1a64(GLM_FNV1A64_INIT, src, n);
    bool known = false;
    for (size_t i = 0; i < sizeof KNOWN / sizeof *KNOWN; i++) known |= KNOWN[i].len == n && KNOWN[i].fnv == h;
    tl.native = known && learn(tpl);
    return tl.native;
}

/* A JSON string that is text (not a number kept as text by glm_json_loadb_py). */
static bool text(const json_t *v) { return json_is_string(v) && !glm_json_numtext(v, NULL, NULL, NULL); }

static bool same_str(const json_t *v, const char *s) {
    size_t n = strlen(s);
    return json_string_length(v) == n && !memcmp(json_string_value(v), s, n);
}

/* Appends the tool block of one message; false when a tool is outside the common form (or out
 * of memory). */
static bool tools_block(json_t *tools, chat_flat *f) {
    if (!json_is_array(tools)) return false;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i), *type = json_object_get(t, "type");
        if (!json_is_object(t) || (type && !text(type))) return false;
        if (!type) continue; /* undefined == 'function' ... is false: nothing */
        if (same_str(type, "function")) {
            json_t *fn = json_object_get(t, "function"), *name = json_object_get(fn, "name");
            if (!json_is_object(fn) || !text(name)) return false;
            char *js = glm_tojson(fn, 4);
            bool ok = js && piece(f, P_FN_A) && flat_add(f, json_string_value(name), json_string_length(name), 0) &&
                      piece(f, P_FN_B) && flat_add(f, js, strlen(js), 0) && piece(f, P_FN_C);
            free(js);
            if (!ok) return false;
            continue;
        }
        for (int b = 0; b < 3; b++)
            if (same_str(type, BLOCK_TYPES[b]) && !piece(f, P_PYTHON + b)) return false;
    }
    return true;
}

bool chat_native_flat(const glm_template *tpl, const chat_msg *m, chat_flat *f) {
    if (f->start.n || !glm_chat_native_template(tpl)) return false;
    bool ok = piece(f, P_PREFIX);
    if (ok && m) {
        ok = (!m->content || json_is_null(m->content) || text(m->content)) && (!m->metadata || text(m->metadata)) &&
             text(m->role);
        if (ok && m->tools) ok = piece(f, P_HEAD) && tools_block(m->tools, f);
        if (ok && text(m->content) && json_string_length(m->content) > 0)
            ok = piece(f, P_OPEN) && flat_add(f, json_string_value(m->role), json_string_length(m->role), 0) &&
                 piece(f, P_MID) &&
                 (!m->metadata || flat_add(f, json_string_value(m->metadata), json_string_length(m->metadata), 0)) &&
                 piece(f, P_NL) && flat_add(f, json_string_value(m->content), json_string_length(m->content), 0);
    }
    if (!ok) chat_flat_clear(f); /* outside the common form (or out of memory): for the interpreter */
    return ok;
}

bool glm_chat_render_native(const glm_template *tpl, json_t *m, glm_tpl_output *o) {
    if (o->n || (m && !json_is_object(m))) return false;
    chat_flat f = {0};
    chat_msg cm = m ? chat_msg_of(m) : (chat_msg){0};
    bool ok = chat_native_flat(tpl, m ? &cm : NULL, &f);
    for (size_t i = 0; ok && i < f.start.n; i++) { /* the same segments, each its own allocation */
        size_t a = f.start.v[i], b = i + 1 < f.start.n ? f.start.v[i + 1] : f.text.n;
        char *x = malloc(b - a + 1);
        if (o->n == o->cap) {
            size_t nc = o->cap ? o->cap * 2 : 16;
            glm_tpl_segment *y = realloc(o->seg, nc * sizeof *y);
            if (y) o->seg = y, o->cap = nc;
        }
        if (!x || o->n == o->cap) {
            free(x);
            ok = false;
            break;
        }
        memcpy(x, f.text.v + a, b - a);
        x[b - a] = 0;
        o->seg[o->n++] = (glm_tpl_segment){x, b - a, f.literal.v[i]};
    }
    chat_flat_free(&f);
    if (!ok) glm_tpl_output_free(o);
    return ok;
}
