/* tokenize/template/chat.c: GLM-4 chat encoding for training. See chat.h. */
#include "tokenize/template/chat_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"

static const char *const known_roles[] = {"system", "user", "assistant", "observation", NULL};

/* Checks one message's shape; i is its index (0-based) for the message. *f (may be NULL) gets its
 * fields. */
static glm_status check_message(json_t *m, size_t i, chat_msg *f) {
    if (!json_is_object(m))
        return glm_err(GLM_ERR_FORMAT, "message %zu is not a JSON object; hint: messages look like {\"role\": \"user\", \"content\": \"...\"}", i);
    json_t *role = json_object_get(m, "role");
    if (!json_is_string(role))
        return glm_err(GLM_ERR_FORMAT, "message %zu: \"role\" is missing or not a string; hint: use one of system, user, assistant, observation", i);
    int ok = 0;
    for (int k = 0; known_roles[k]; k++) ok |= !strcmp(json_string_value(role), known_roles[k]);
    if (!ok)
        return glm_err(GLM_ERR_FORMAT, "message %zu: unknown role \"%s\"; hint: GLM-4 knows system, user, assistant, observation (map \"tool\" to observation, \"human\"/\"gpt\" to user/assistant)",
                       i, json_string_value(role));
    json_t *c = json_object_get(m, "content");
    if (c && !json_is_string(c) && !json_is_null(c))
        return glm_err(GLM_ERR_FORMAT, "message %zu (%s): \"content\" must be a string, not %s; hint: multimodal content lists are not supported, join the text parts",
                       i, json_string_value(role), json_is_array(c) ? "a list" : json_is_object(c) ? "an object" : "a number/bool");
    json_t *md = json_object_get(m, "metadata");
    if (md && !json_is_string(md) && !json_is_null(md))
        return glm_err(GLM_ERR_FORMAT, "message %zu (%s): \"metadata\" must be a string (the tool name of a call)", i, json_string_value(role));
    json_t *tools = json_object_get(m, "tools");
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return glm_err(GLM_ERR_FORMAT, "message %zu (%s): \"tools\" must be a list", i, json_string_value(role));
    json_t *loss = json_object_get(m, "loss");
    if (loss && !json_is_boolean(loss) && !json_is_null(loss))
        return glm_err(GLM_ERR_FORMAT, "message %zu (%s): \"loss\" must be true or false", i, json_string_value(role));
    if (f) *f = (chat_msg){role, c, md, tools, loss};
    return GLM_OK;
}

glm_status glm_chat_render(const glm_template *tpl, json_t *messages, int add_generation_prompt, glm_tpl_output *out) {
    if (!json_is_array(messages)) return glm_err(GLM_ERR_FORMAT, "messages must be a JSON array of {role, content} objects");
    for (size_t i = 0; i < json_array_size(messages); i++) GLM_TRY(check_message(json_array_get(messages, i), i, NULL));
    json_t *vars = json_pack("{sOsb}", "messages", messages, "add_generation_prompt", add_generation_prompt != 0);
    if (!vars) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status st = glm_template_render(tpl, vars, out);
    json_decref(vars);
    return st;
}

/* The segment that holds byte `off` of a flat output: the last i with start[i] <= off. */
static size_t seg_of(const chat_flat *f, size_t off) {
    size_t lo = 0, hi = f->start.n;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (f->start.v[mid] <= off) lo = mid; else hi = mid;
    }
    return lo;
}

glm_status chat_encode_flat(const glm_tokenizer *tok, const chat_flat *f, bool valid, glm_u32vec *ids) {
    glm_status (*encode)(const glm_tokenizer *, const char *, size_t, glm_u32vec *) =
        valid ? glm_tokenizer_encode_valid : glm_tokenizer_encode;
    size_t n0 = ids->n, total = f->text.n, nseg = f->start.n;
    const char *text = f->text.v;
    /* Which bytes can start a special, and the longest one. */
    const unsigned char *first = glm_tokenizer_special_starts(tok);
    size_t maxlen = glm_tokenizer_special_maxlen(tok);
    glm_status st = GLM_OK;
    size_t run = 0, p = 0, j = 0; /* j: the segment that holds byte p (seg_of) */
    while (p < total && st == GLM_OK) {
        while (j + 1 < nseg && f->start.v[j + 1] <= p) j++;
        size_t end = j + 1 < nseg ? f->start.v[j + 1] : total;
        if (f->literal.v[j]) { /* to the next byte that can start a special */
            while (p < end && !first[(unsigned char)text[p]]) p++;
            if (p == end) continue;
        } else if (maxlen && p + maxlen <= end) {
            /* a special starting at p would lie entirely in this data segment and stay text:
             * only the segment's last maxlen - 1 bytes need a look */
            p = end - maxlen + 1;
            continue;
        } else if (!first[(unsigned char)text[p]]) {
            p++;
            continue;
        }
        uint32_t best_id = 0;
        size_t best_len = glm_tokenizer_special_at(tok, text + p, total - p, &best_id);
        if (best_len) {
            size_t a = seg_of(f, p), b = seg_of(f, p + best_len - 1);
            if (a == b && !f->literal.v[a]) best_len = 0; /* typed by a user: plain text */
        }
        if (!best_len) { p++; continue; }
        if (p > run) st = encode(tok, text + run, p - run, ids);
        if (st == GLM_OK) st = glm_vec_push(*ids, best_id);
        p += best_len;
        run = p;
    }
    if (st == GLM_OK && total > run) st = encode(tok, text + run, total - run, ids);
    if (st != GLM_OK) ids->n = n0;
    return st;
}

glm_status glm_chat_encode_output(const glm_tokenizer *tok, const glm_tpl_output *o, glm_u32vec *ids) {
    chat_flat f = {0};
    glm_status st = GLM_OK;
    for (size_t i = 0; i < o->n && st == GLM_OK; i++) {
        if ((st = glm_vec_push(f.start, f.text.n)) == GLM_OK && (st = glm_vec_push(f.literal, (uint8_t)(o->seg[i].literal != 0))) == GLM_OK &&
            (st = glm_vec_reserve(f.text, o->seg[i].len + 1)) == GLM_OK) {
            memcpy(f.text.v + f.text.n, o->seg[i].text, o->seg[i].len);
            f.text.n += o->seg[i].len;
        }
    }
    if (st == GLM_OK) st = chat_encode_flat(tok, &f, false, ids);
    else st = glm_err(GLM_ERR_NOMEM, "out of memory encoding a chat");
    chat_flat_free(&f);
    return st;
}

/* Renders messages=[m] (or [] when m is NULL; cm: its fields) and encodes it; f: a flat output
 * to reuse. */
static glm_status render_ids(const glm_tokenizer *tok, const glm_template *tpl, json_t *m, const chat_msg *cm,
                             chat_flat *f, glm_u32vec *ids) {
    chat_flat_clear(f);
    if (chat_native_flat(tpl, m ? cm : NULL, f)) return chat_encode_flat(tok, f, true, ids); /* JSON strings: valid UTF-8 */
    /* not GLM-4's template, or an unusual message: the interpreter */
    json_t *list = m ? json_pack("[O]", m) : json_array();
    if (!list) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_tpl_output o = {0};
    glm_status st = glm_chat_render(tpl, list, 0, &o);
    json_decref(list);
    if (st == GLM_OK) st = glm_chat_encode_output(tok, &o, ids);
    glm_tpl_output_free(&o);
    return st;
}

/* The ids of the template rendered with no messages (GLM-4: [gMASK] <sop>), appended to *ids:
 * the same for every conversation, so each thread keeps the last one (keyed by the tokenizer's
 * fingerprint and the template's serial: no stale hit after either is freed). */
static glm_status prefix_ids(const glm_tokenizer *tok, const glm_template *tpl, glm_u32vec *ids) {
    static _Thread_local struct {
        uint64_t fp, serial;
        uint32_t n, v[32];
    } cache;
    uint64_t fp = glm_tokenizer_fingerprint(tok), serial = glm_template_serial(tpl);
    if (cache.serial != serial || cache.fp != fp) {
        size_t n0 = ids->n;
        chat_flat f = {0};
        glm_status st = render_ids(tok, tpl, NULL, NULL, &f, ids);
        chat_flat_free(&f);
        GLM_TRY(st);
        if (ids->n - n0 <= 32) {
            cache.fp = fp;
            cache.serial = serial;
            cache.n = (uint32_t)(ids->n - n0);
            memcpy(cache.v, ids->v + n0, cache.n * sizeof *cache.v);
        }
        return GLM_OK;
    }
    GLM_TRY(glm_vec_reserve(*ids, cache.n));
    memcpy(ids->v + ids->n, cache.v, cache.n * sizeof *cache.v);
    ids->n += cache.n;
    return GLM_OK;
}

static glm_status chat_encode_msgs(const glm_tokenizer *tok, const glm_template *tpl, json_t *messages,
                                   const chat_msg *cm, size_t nmsg, glm_train_on train_on, glm_u32vec *ids,
                                   glm_u8vec *targets);

glm_status glm_chat_encode(const glm_tokenizer *tok, const glm_template *tpl, json_t *messages,
                           glm_train_on train_on, glm_u32vec *ids, glm_u8vec *targets) {
    if (!tok || !tpl || !ids || !targets) return glm_err(GLM_ERR_ARG, "glm_chat_encode: NULL argument");
    if (!json_is_array(messages)) return glm_err(GLM_ERR_FORMAT, "messages must be a JSON array of {role, content} objects");
    size_t nmsg = json_array_size(messages);
    chat_msg small[16], *cm = nmsg <= 16 ? small : malloc(nmsg * sizeof *cm);
    if (!cm) return glm_err(GLM_ERR_NOMEM, "out of memory");
    glm_status st = GLM_OK;
    for (size_t i = 0; i < nmsg && st == GLM_OK; i++) st = check_message(json_array_get(messages, i), i, &cm[i]);
    if (st == GLM_OK) st = chat_encode_msgs(tok, tpl, messages, cm, nmsg, train_on, ids, targets);
    if (cm != small) free(cm);
    return st;
}

/* glm_chat_encode once the messages are checked; cm: their fields. */
static glm_status chat_encode_msgs(const glm_tokenizer *tok, const glm_template *tpl, json_t *messages,
                                   const chat_msg *cm, size_t nmsg, glm_train_on train_on, glm_u32vec *ids,
                                   glm_u8vec *targets) {
    int64_t end_id = glm_tokenizer_special_id(tok, "<|user|>", 8);
    if (end_id < 0)
        return glm_err(GLM_ERR_MISMATCH, "the tokenizer has no <|user|> special token to end the last turn; hint: use a GLM-4 tokenizer (tokenizer_config.json added_tokens_decoder)");
    /* Which assistant message counts for training. */
    size_t last_asst = (size_t)-1;
    for (size_t i = 0; i < nmsg; i++)
        if (!strcmp(json_string_value(cm[i].role), "assistant")) last_asst = i;

    size_t n0 = ids->n, t0 = targets->n;
    glm_u32vec prefix = {0}, one = {0};
    chat_flat flat = {0};
    glm_status st = prefix_ids(tok, tpl, &prefix);
    int prev_counted = 0; /* does the token before the next one belong to a counted message? */
    if (st == GLM_OK) st = glm_vec_reserve(*ids, prefix.n);
    if (st == GLM_OK) st = glm_vec_reserve(*targets, prefix.n);
    if (st == GLM_OK) {
        for (size_t i = 0; i < prefix.n; i++) {
            ids->v[ids->n++] = prefix.v[i];
            targets->v[targets->n++] = 0;
        }
    }
    for (size_t i = 0; i < nmsg && st == GLM_OK; i++) {
        json_t *m = json_array_get(messages, i);
        one.n = 0;
        st = render_ids(tok, tpl, m, &cm[i], &flat, &one);
        if (st != GLM_OK) {
            glm_err_context(st, "message %zu", i);
            break;
        }
        if (one.n < prefix.n || memcmp(one.v, prefix.v, prefix.n * sizeof(uint32_t)) != 0) {
            st = glm_err(GLM_ERR_MISMATCH, "message %zu: the chat template's render of this message does not start with what it renders for no messages (%zu ids); hint: glmtune renders each message alone (the template applied to a one-message list) and joins the renders, so it supports only templates whose output for a message does not depend on the other messages (GLM-4's do); a template that looks at the whole conversation (loop.last, a system message merged into the first user turn, ...) cannot be used: use the model's own tokenizer_config.json",
                         i, prefix.n);
            break;
        }
        const char *role = json_string_value(cm[i].role);
        json_t *flag = cm[i].loss;
        int counted = json_is_boolean(flag) ? json_is_true(flag)
                      : !strcmp(role, "assistant") ? !(train_on & GLM_TRAIN_LAST) || i == last_asst
                                                   : (train_on & GLM_TRAIN_PROMPT) != 0;
        size_t add = one.n - prefix.n;
        if ((st = glm_vec_reserve(*ids, add)) != GLM_OK || (st = glm_vec_reserve(*targets, add)) != GLM_OK) break;
        for (size_t k = prefix.n; k < one.n; k++) {
            ids->v[ids->n++] = one.v[k];
            targets->v[targets->n++] = (uint8_t)prev_counted;
            prev_counted = counted;
        }
    }
    if (st == GLM_OK) {
        st = glm_vec_push(*ids, (uint32_t)end_id);
        if (st == GLM_OK) st = glm_vec_push(*targets, (uint8_t)prev_counted);
    }
    free(prefix.v);
    free(one.v);
    chat_flat_free(&flat);
    if (st != GLM_OK) {
        ids->n = n0;
        targets->n = t0;
    }
    return st;
}

glm_status glm_text_encode(const glm_tokenizer *tok, const glm_template *tpl, const char *text, size_t len,
                           glm_u32vec *ids, glm_u8vec *targets) {
    if (!tok || !tpl || !ids || !targets) return glm_err(GLM_ERR_ARG, "glm_text_encode: NULL argument");
    int64_t eos = glm_tokenizer_eos_id(tok);
    if (eos < 0)
        return glm_err(GLM_ERR_MISMATCH, "%s: the tokenizer has no end-of-text token to end a pretraining "
                       "document; hint: set \"eos_token\" in tokenizer_config.json", glm_tokenizer_path(tok));
    size_t n0 = ids->n, t0 = targets->n;
    glm_status st = prefix_ids(tok, tpl, ids); /* the prefix */
    size_t np = ids->n - n0;
    if (st == GLM_OK) st = glm_tokenizer_encode(tok, text, len, ids);
    if (st == GLM_OK) st = glm_vec_push(*ids, (uint32_t)eos);
    if (st == GLM_OK) st = glm_vec_reserve(*targets, ids->n - n0);
    if (st == GLM_OK)
        for (size_t i = n0; i < ids->n; i++) targets->v[targets->n++] = (uint8_t)(i - n0 >= np && i > n0);
    if (st != GLM_OK) {
        ids->n = n0;
        targets->n = t0;
    }
    return st;
}

glm_status glm_chat_template_load(const glm_tokenizer *tok, const char *path, glm_template **out) {
    if (!path) {
        const char *src = tok ? glm_tokenizer_chat_template(tok) : NULL;
        if (!src)
            return glm_err(GLM_ERR_FORMAT, "%s: tokenizer_config.json has no \"chat_template\"; hint: pass a template file (.jinja, or a tokenizer_config.json that has one)",
                           tok ? glm_tokenizer_path(tok) : "(no tokenizer)");
        char name[4200];
        snprintf(name, sizeof name, "%s (chat_template)", glm_tokenizer_path(tok));
        return glm_template_parse(src, name, out);
    }
    char *data;
    size_t len;
    GLM_TRY(glm_read_file(path, &data, &len));
    if (strlen(data) != len) {
        free(data);
        return glm_err(GLM_ERR_FORMAT, "%s: contains a NUL byte; hint: a chat template is UTF-8 text", path);
    }
    size_t pl = strlen(path);
    glm_status st;
    if (pl >= 5 && !strcmp(path + pl - 5, ".json")) {
        json_error_t je;
        json_t *root = json_loadb(data, len, 0, &je);
        free(data);
        if (!root)
            return glm_err(GLM_ERR_FORMAT, "%s:%d:%d: invalid JSON: %s", path, je.line, je.column, je.text);
        json_t *ct = json_object_get(root, "chat_template");
        if (json_is_array(ct)) { /* [{"name": "default", "template": "..."}, ...] */
            json_t *pick = NULL;
            for (size_t i = 0; i < json_array_size(ct); i++) {
                json_t *e = json_array_get(ct, i);
                const char *nm = json_string_value(json_object_get(e, "name"));
                if (nm && !strcmp(nm, "default")) pick = json_object_get(e, "template");
            }
            ct = pick;
        }
        if (!json_is_string(ct)) {
            json_decref(root);
            return glm_err(GLM_ERR_FORMAT, "%s: no \"chat_template\" string; hint: pass a .jinja file with the template text", path);
        }
        st = glm_template_parse(json_string_value(ct), path, out);
        json_decref(root);
        return st;
    }
    st = glm_template_parse(data, path, out);
    free(data);
    return st;
}
