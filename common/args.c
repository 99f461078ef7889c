/* common/args.c: the command-line option engine (see args.h). */
#include "common/args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/strdist.h"

enum { NAME_MAX_LEN = 128 };
_Static_assert(sizeof(int64_t) == 8 && sizeof(uint64_t) == 8 && sizeof(double) == 8, "list items are 8 bytes");

bool glm_args_parse_bool(const char *s, bool *out) {
    static const char *const t[] = {"true", "yes", "on", "1"}, *const f[] = {"false", "no", "off", "0"};
    if (!s) return false;
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, t[i])) return *out = true, true;
        if (!strcasecmp(s, f[i])) return *out = false, true;
    }
    return false;
}

const char *glm_args_hint(char *buf, size_t n, const char *near, bool as_flag, const char *cmd) {
    if (near)
        snprintf(buf, n, "; hint: did you mean %s%s%s?", as_flag ? "--" : "'", near, as_flag ? "" : "'");
    else
        snprintf(buf, n, "; hint: `glmtune %s --help` lists the options", cmd);
    return buf;
}

/* ------------------------------------------------------------------ names */

/* a (NUL-terminated) equals b[0 .. nb) with '_' and '-' the same character */
static bool same_name(const char *a, const char *b, size_t nb) {
    size_t i = 0;
    for (; i < nb && a[i]; i++) {
        char x = a[i] == '_' ? '-' : a[i], y = b[i] == '_' ? '-' : b[i];
        if (x != y) return false;
    }
    return i == nb && !a[i];
}

/* name is opt's long name or one of its aliases */
static bool opt_has_name(const glm_arg_opt *o, const char *name) {
    if (o->name && same_name(name, o->name, strlen(o->name))) return true;
    for (const char *p = o->alias; p && *p;) {
        size_t n = strcspn(p, "|");
        if (n && same_name(name, p, n)) return true;
        p += n + (p[n] == '|');
    }
    return false;
}

static const glm_arg_opt *find_long(const glm_arg_cmd *cmd, const char *name) {
    for (size_t i = 0; i < cmd->n_opts; i++)
        if (opt_has_name(&cmd->opts[i], name)) return &cmd->opts[i];
    return NULL;
}

static const glm_arg_opt *find_short(const glm_arg_cmd *cmd, char c) {
    for (size_t i = 0; i < cmd->n_opts; i++)
        if (c && cmd->opts[i].short_name == c) return &cmd->opts[i];
    return NULL;
}

/* The known long name (or alias) closest to `name` (kebab-case), written to out; NULL when none
 * is close enough (glm_closest_name's rule). */
static const char *closest_long(const glm_arg_cmd *cmd, const char *name, char *out, size_t outn) {
    size_t n = 1; /* "help" */
    for (size_t i = 0; i < cmd->n_opts; i++) {
        n++;
        for (const char *p = cmd->opts[i].alias; p && *p; p++) n += *p == '|';
        n += cmd->opts[i].alias != NULL;
    }
    char (*names)[NAME_MAX_LEN] = calloc(n, sizeof *names);
    const char **cands = calloc(n, sizeof *cands);
    const char *best = NULL;
    if (names && cands) {
        size_t k = 0;
        snprintf(names[k], sizeof names[k], "help");
        cands[k] = names[k];
        k++;
        for (size_t i = 0; i < cmd->n_opts; i++) {
            const glm_arg_opt *o = &cmd->opts[i];
            if (o->hidden) continue;
            if (o->name) {
                snprintf(names[k], sizeof names[k], "%s", o->name);
                cands[k] = names[k];
                k++;
            }
            for (const char *p = o->alias; p && *p;) {
                size_t len = strcspn(p, "|");
                if (len && len < NAME_MAX_LEN) {
                    snprintf(names[k], sizeof names[k], "%.*s", (int)len, p);
                    cands[k] = names[k];
                    k++;
                }
                p += len + (p[len] == '|');
            }
        }
        for (size_t j = 0; j < k; j++)
            for (char *q = names[j]; *q; q++) *q = *q == '_' ? '-' : *q;
        const char *c = glm_closest_name(name, cands, k);
        if (c) {
            snprintf(out, outn, "%s", c);
            best = out;
        }
    }
    free(names);
    free(cands);
    return best;
}

/* ------------------------------------------------------------------ values */

static const char *type_metavar(glm_arg_type t) {
    switch (t) {
    case GLM_ARG_INT:
    case GLM_ARG_U64: return "N";
    case GLM_ARG_DOUBLE: return "X";
    case GLM_ARG_BOOL: return "true|false";
    default: return "TEXT";
    }
}

/* The value's name for help and messages: metavar, the choices, "N,..." for a list. */
static const char *metavar(const glm_arg_opt *o, char *buf, size_t n) {
    if (o->metavar) return o->metavar;
    if (o->type == GLM_ARG_ENUM && o->choices) {
        size_t used = 0;
        buf[0] = 0;
        for (size_t i = 0; o->choices[i].name; i++) {
            bool dup = false;
            for (size_t j = 0; j < i; j++) dup |= o->choices[j].value == o->choices[i].value;
            if (dup) continue;
            int w = snprintf(buf + used, n - used, "%s%s", used ? "|" : "", o->choices[i].name);
            if (w < 0 || (size_t)w >= n - used) break;
            used += (size_t)w;
        }
        return buf;
    }
    if (o->type == GLM_ARG_LIST) {
        snprintf(buf, n, "%s,...", type_metavar(o->elem));
        return buf;
    }
    return type_metavar(o->type);
}

/* "8192", "1e-09": integers in full, other values as %g */
static void fmt_num(char *buf, size_t n, double x) {
    if (x == floor(x) && fabs(x) < 1e15) snprintf(buf, n, "%.0f", x);
    else snprintf(buf, n, "%g", x);
}

static glm_status range_check(const glm_arg_opt *o, const char *flag, const char *v, double x) {
    if (!o->ranged || (x >= o->min && x <= o->max)) return GLM_OK;
    char lo[32], hi[32];
    fmt_num(lo, sizeof lo, o->min);
    fmt_num(hi, sizeof hi, o->max);
    return glm_err(GLM_ERR_ARG, "%s %s: expected %s .. %s%s%s", flag, v, lo, hi, o->unit ? " " : "", o->unit ? o->unit : "");
}

/* One number of type t from v into *slot (int64_t, uint64_t or double). */
static glm_status number(const glm_arg_opt *o, glm_arg_type t, const char *flag, const char *v, void *slot) {
    char *end;
    errno = 0;
    if (t == GLM_ARG_INT) {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno) return glm_err(GLM_ERR_ARG, "%s: expected an integer, got \"%s\"", flag, v);
        GLM_TRY(range_check(o, flag, v, (double)x));
        *(int64_t *)slot = x;
    } else if (t == GLM_ARG_U64) {
        if (!*v || *v == '-') return glm_err(GLM_ERR_ARG, "%s: expected a non-negative integer, got \"%s\"", flag, v);
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || *end) return glm_err(GLM_ERR_ARG, "%s: expected a non-negative integer, got \"%s\"", flag, v);
        GLM_TRY(range_check(o, flag, v, (double)x));
        *(uint64_t *)slot = x;
    } else {
        double x = strtod(v, &end);
        if (errno || *end || end == v) return glm_err(GLM_ERR_ARG, "%s: expected a number, got \"%s\"", flag, v);
        GLM_TRY(range_check(o, flag, v, x));
        *(double *)slot = x;
    }
    return GLM_OK;
}

static glm_status list(const glm_arg_opt *o, const char *flag, const char *v) {
    size_t k = 0;
    for (const char *p = v; *p;) {
        size_t len = strcspn(p, ",");
        if (len) {
            char item[64];
            if (len >= sizeof item) return glm_err(GLM_ERR_ARG, "%s: an item of \"%s\" is too long", flag, v);
            memcpy(item, p, len);
            item[len] = 0;
            if (k == o->max_items) return glm_err(GLM_ERR_ARG, "%s: at most %zu values, got \"%s\"", flag, o->max_items, v);
            GLM_TRY(number(o, o->elem, flag, item, (char *)o->dest + k * 8)); /* int64_t, uint64_t, double: 8 bytes */
            k++;
        }
        p += len + (p[len] == ',');
    }
    if (!k) return glm_err(GLM_ERR_ARG, "%s: expected at least one value, got \"%s\"", flag, v);
    if (o->count) *o->count = k;
    return GLM_OK;
}

/* Converts v by o's type into o->dest (which is not NULL). */
static glm_status store(const glm_arg_opt *o, const char *flag, const char *v) {
    switch (o->type) {
    case GLM_ARG_FLAG:
    case GLM_ARG_BOOL:
        if (!glm_args_parse_bool(v, (bool *)o->dest))
            return glm_err(GLM_ERR_ARG, "%s: expected true or false, got \"%s\"", flag, v);
        return GLM_OK;
    case GLM_ARG_INT:
    case GLM_ARG_U64:
    case GLM_ARG_DOUBLE: return number(o, o->type, flag, v, o->dest);
    case GLM_ARG_STRING: *(const char **)o->dest = v; return GLM_OK;
    case GLM_ARG_ENUM:
        for (size_t i = 0; o->choices && o->choices[i].name; i++)
            if (!strcmp(v, o->choices[i].name)) {
                *(int *)o->dest = o->choices[i].value;
                return GLM_OK;
            }
        {
            char names[256] = "";
            size_t used = 0, n = 0, shown = 0;
            for (size_t i = 0; o->choices && o->choices[i].name; i++) {
                bool dup = false;
                for (size_t j = 0; j < i; j++) dup |= o->choices[j].value == o->choices[i].value;
                n += !dup;
            }
            for (size_t i = 0; o->choices && o->choices[i].name; i++) {
                bool dup = false;
                for (size_t j = 0; j < i; j++) dup |= o->choices[j].value == o->choices[i].value;
                if (dup) continue;
                shown++;
                int w = snprintf(names + used, sizeof names - used, "%s%s", shown == 1 ? "" : shown == n ? " or " : ", ",
                                 o->choices[i].name);
                if (w < 0 || (size_t)w >= sizeof names - used) break;
                used += (size_t)w;
            }
            return glm_err(GLM_ERR_ARG, "%s: expected %s, got \"%s\"", flag, names, v);
        }
    case GLM_ARG_LIST: return list(o, flag, v);
    }
    return glm_err(GLM_ERR_INTERNAL, "%s: option type %d unknown", flag, (int)o->type);
}

/* Stores a value given on the command line, marks it given and calls the hook. */
static glm_status take(const glm_arg_cmd *cmd, const glm_arg_opt *o, const char *flag, const char *v) {
    if (o->dest) GLM_TRY(store(o, flag, v));
    if (o->given) *o->given = true;
    if (o->hook) GLM_TRY(o->hook(o, flag, v, cmd->user));
    return GLM_OK;
}

/* ------------------------------------------------------------------ parse */

static glm_status positional(const glm_arg_cmd *cmd, const char *a) {
    size_t n = cmd->n_pos ? *cmd->n_pos : 0;
    char hint[160];
    glm_args_hint(hint, sizeof hint, NULL, false, cmd->name);
    if (cmd->max_pos == 0)
        return glm_err(GLM_ERR_ARG, "%s: unexpected argument '%s'; hint: options look like --name value (`glmtune %s "
                       "--help` lists them)", cmd->name, a, cmd->name);
    if (n >= cmd->max_pos) {
        if (cmd->max_pos == 1)
            return glm_err(GLM_ERR_ARG, "%s: one %s, got a second: '%s'%s", cmd->name, cmd->pos_name ? cmd->pos_name : "argument",
                           a, hint);
        return glm_err(GLM_ERR_ARG, "%s: at most %zu %s, got another: '%s'%s", cmd->name, cmd->max_pos,
                       cmd->pos_name ? cmd->pos_name : "arguments", a, hint);
    }
    cmd->pos[n] = a;
    *cmd->n_pos = n + 1;
    return GLM_OK;
}

glm_status glm_args_parse(const glm_arg_cmd *cmd, int argc, char **argv, bool *help) {
    if (help) *help = false;
    if (cmd->n_pos) *cmd->n_pos = 0;
    for (size_t k = 0; k < cmd->n_opts; k++) {
        const glm_arg_opt *o = &cmd->opts[k];
        if (o->def && o->dest && o->type != GLM_ARG_FLAG && store(o, "default", o->def) != GLM_OK)
            return glm_err_context(GLM_ERR_INTERNAL, "glmtune %s: the default of --%s (a bug in its option table)", cmd->name,
                                   o->name);
    }
    bool options_end = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (options_end || a[0] != '-' || !a[1]) { /* "-": standard input */
            GLM_TRY(positional(cmd, a));
            continue;
        }
        if (!strcmp(a, "--")) {
            options_end = true;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (help) *help = true;
            if (!cmd->help_continues) return GLM_OK;
            continue;
        }
        const glm_arg_opt *o;
        const char *val = NULL;
        char flag[NAME_MAX_LEN + 8];
        bool negated = false;
        if (a[1] != '-') { /* -o VALUE, -o=VALUE, -q */
            o = (a[2] == 0 || a[2] == '=') ? find_short(cmd, a[1]) : NULL;
            if (!o) {
                char hint[160];
                return glm_err(GLM_ERR_ARG, "%s: unknown option %s%s", cmd->name, a,
                               glm_args_hint(hint, sizeof hint, NULL, true, cmd->name));
            }
            snprintf(flag, sizeof flag, "-%c", a[1]);
            if (a[2] == '=') val = a + 3;
        } else { /* --name VALUE, --name=VALUE, --no-name */
            const char *body = a + 2, *eq = strchr(body, '=');
            size_t len = eq ? (size_t)(eq - body) : strlen(body);
            if (len >= NAME_MAX_LEN) return glm_err(GLM_ERR_ARG, "option '%.60s...' is too long", a);
            char name[NAME_MAX_LEN];
            memcpy(name, body, len);
            name[len] = 0;
            snprintf(flag, sizeof flag, "--%s", name);
            if (eq) val = eq + 1;
            o = find_long(cmd, name);
            if (!o && (!strncmp(name, "no-", 3) || !strncmp(name, "no_", 3))) {
                o = find_long(cmd, name + 3);
                if (o && o->type != GLM_ARG_BOOL && o->type != GLM_ARG_FLAG) o = NULL;
                negated = o != NULL;
            }
            if (!o && cmd->unknown) {
                GLM_TRY(cmd->unknown(flag, val, argc, argv, &i, cmd->user));
                continue;
            }
            if (!o) {
                char kebab[NAME_MAX_LEN], near[NAME_MAX_LEN], hint[200];
                snprintf(kebab, sizeof kebab, "%s", name);
                for (char *q = kebab; *q; q++) *q = *q == '_' ? '-' : *q;
                const char *c = closest_long(cmd, kebab, near, sizeof near);
                return glm_err(GLM_ERR_ARG, "%s: unknown option %s%s", cmd->name, flag,
                               glm_args_hint(hint, sizeof hint, c, true, cmd->name));
            }
        }
        if (negated) {
            if (val) return glm_err(GLM_ERR_ARG, "%s takes no value; hint: %s alone", flag, flag);
            GLM_TRY(take(cmd, o, flag, "false"));
            continue;
        }
        if (o->type == GLM_ARG_BOOL || o->type == GLM_ARG_FLAG) {
            /* one rule for every boolean: bare, --x=B, or --x B when the next argument is a boolean
             * word (anything else stays where it is: a positional argument or the next option) */
            bool b;
            if (!val) val = i + 1 < argc && glm_args_parse_bool(argv[i + 1], &b) ? argv[++i] : "true";
        } else if (!val) {
            if (o->bare && !(i + 1 < argc && strncmp(argv[i + 1], "--", 2))) {
                val = o->bare;
            } else if (i + 1 < argc) {
                val = argv[++i];
            } else {
                char mv[160];
                return glm_err(GLM_ERR_ARG, "%s needs a value (%s); hint: `glmtune %s --help` lists the options", flag,
                               metavar(o, mv, sizeof mv), cmd->name);
            }
        }
        GLM_TRY(take(cmd, o, flag, val));
    }
    return GLM_OK;
}

/* ------------------------------------------------------------------ help */

void glm_args_help_entry(FILE *f, const char *head, const char *text, int col, int width) {
    int pos = fprintf(f, "  %s", head);
    if (pos + 2 <= col) {
        fprintf(f, "%*s", col - pos, "");
    } else {
        fprintf(f, "\n%*s", col, "");
    }
    pos = col;
    bool at_start = true;
    for (const char *p = text ? text : ""; *p;) {
        if (*p == '\n') {
            fprintf(f, "\n%*s", col, "");
            pos = col;
            at_start = true;
            p++;
            continue;
        }
        if (*p == ' ') {
            p++;
            continue;
        }
        int len = (int)strcspn(p, " \n");
        if (!at_start && width > 0 && pos + 1 + len > width) {
            fprintf(f, "\n%*s", col, "");
            pos = col;
            at_start = true;
        }
        if (!at_start) {
            fputc(' ', f);
            pos++;
        }
        fwrite(p, 1, (size_t)len, f);
        pos += len;
        at_start = false;
        p += len;
    }
    fputc('\n', f);
}

static void head_of(const glm_arg_opt *o, char *buf, size_t n) {
    char mv[160], sh[8] = "";
    if (o->short_name) snprintf(sh, sizeof sh, "-%c, ", o->short_name);
    if (o->type == GLM_ARG_FLAG)
        snprintf(buf, n, "%s--%s", sh, o->name);
    else if (o->type == GLM_ARG_BOOL)
        snprintf(buf, n, "%s--%s, --no-%s", sh, o->name, o->name);
    else if (o->bare)
        snprintf(buf, n, "%s--%s [%s]", sh, o->name, metavar(o, mv, sizeof mv));
    else
        snprintf(buf, n, "%s--%s %s", sh, o->name, metavar(o, mv, sizeof mv));
}

/* help text + " (default: D; also --a, --b)", malloc'd */
static char *text_of(const glm_arg_opt *o) {
    const char *help = o->help ? o->help : "";
    size_t n = strlen(help) + (o->def ? strlen(o->def) : 0) + (o->alias ? 4 * strlen(o->alias) : 0) + 64;
    char *t = malloc(n);
    if (!t) return NULL;
    size_t used = (size_t)snprintf(t, n, "%s", help);
    const char *sep = " (";
    if (o->def && o->type != GLM_ARG_FLAG) {
        used += (size_t)snprintf(t + used, n - used, "%sdefault: %s", sep, o->def);
        sep = "; ";
    }
    bool first_alias = true;
    for (const char *p = o->alias; p && *p;) {
        size_t len = strcspn(p, "|");
        if (len) {
            used += (size_t)snprintf(t + used, n - used, "%s%s--%.*s", first_alias ? sep : ", ", first_alias ? "also " : "",
                                     (int)len, p);
            first_alias = false;
            sep = "; ";
        }
        p += len + (p[len] == '|');
    }
    if (strcmp(sep, " (")) snprintf(t + used, n - used, ")");
    return t;
}

static void print_block(FILE *f, const char *s) {
    size_t n = strlen(s);
    fputs(s, f);
    if (n && s[n - 1] != '\n') fputc('\n', f);
}

void glm_args_help(FILE *f, const glm_arg_cmd *cmd) {
    enum { WIDTH = 100, MAX_COL = 28 };
    int col = 8;
    for (size_t i = 0; i < cmd->n_opts; i++) {
        char head[256];
        if (cmd->opts[i].hidden) continue;
        head_of(&cmd->opts[i], head, sizeof head);
        int w = 2 + (int)strlen(head) + 2;
        if (w <= MAX_COL && w > col) col = w;
    }
    print_block(f, cmd->usage ? cmd->usage : "");
    if (cmd->about) {
        fputc('\n', f);
        print_block(f, cmd->about);
    }
    fputs("\noptions:\n", f);
    for (size_t i = 0; i < cmd->n_opts; i++) {
        const glm_arg_opt *o = &cmd->opts[i];
        if (o->hidden) continue;
        char head[256];
        head_of(o, head, sizeof head);
        char *text = text_of(o);
        glm_args_help_entry(f, head, text ? text : o->help, col, WIDTH);
        free(text);
    }
    glm_args_help_entry(f, "-h, --help", "this help", col, WIDTH);
    if (cmd->epilog) {
        fputc('\n', f);
        print_block(f, cmd->epilog);
    }
}
