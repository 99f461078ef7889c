/* The command-line option engine (common/args.h): the spellings it reads (--x=v, --x v, -o v,
 * underscores, aliases, booleans, --no-x), the conversions and their messages (bad number,
 * range, choice, list), missing values, unknown options with a suggestion, positional
 * arguments and "--", defaults, hooks, and the help listing every option. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "tests/check.h"

typedef struct {
    bool json, strict, mask;
    int64_t offset;
    uint64_t seq_len, seed;
    double val_size;
    const char *out, *tok, *resume;
    int dtype;
    int64_t lens[4];
    size_t n_lens;
    bool seq_given;
    int hook_calls;
    char hook_flag[32];
    const char *pos[3];
    size_t n_pos;
    char unknown_flag[32];
    const char *unknown_val;
} opts;

static glm_status count_hook(const glm_arg_opt *opt, const char *flag, const char *value, void *user) {
    opts *o = user;
    o->hook_calls++;
    snprintf(o->hook_flag, sizeof o->hook_flag, "%s", flag);
    if (value && !strcmp(value, "13")) return glm_err(GLM_ERR_ARG, "%s: 13 refused by the hook", flag);
    return GLM_OK;
}

static glm_status unknown_hook(const char *flag, const char *value, int argc, char **argv, int *i, void *user) {
    opts *o = user;
    snprintf(o->unknown_flag, sizeof o->unknown_flag, "%s", flag);
    o->unknown_val = value ? value : *i + 1 < argc ? argv[++*i] : "true";
    return GLM_OK;
}

static const glm_arg_choice k_dtypes[] = {{"fp32", 0}, {"float32", 0}, {"bf16", 1}, {"fp16", 2}, {NULL, 0}};

/* The test command's table over o. */
static size_t table(opts *o, glm_arg_opt *t) {
    size_t n = 0;
    t[n++] = (glm_arg_opt){.name = "json", .type = GLM_ARG_FLAG, .dest = &o->json, .help = "JSON lines"};
    t[n++] = (glm_arg_opt){.name = "strict", .short_name = 's', .type = GLM_ARG_FLAG, .dest = &o->strict,
                           .help = "any bad record is fatal"};
    t[n++] = (glm_arg_opt){.name = "mask-history", .type = GLM_ARG_BOOL, .dest = &o->mask, .def = "false",
                           .help = "only the last turn"};
    t[n++] = (glm_arg_opt){.name = "offset", .type = GLM_ARG_INT, .dest = &o->offset, .def = "-1", .help = "an offset"};
    t[n++] = (glm_arg_opt){.name = "seq-len", .alias = "cutoff-len", .type = GLM_ARG_U64, .dest = &o->seq_len,
                           .def = "8192", .metavar = "T", .ranged = true, .min = 2, .max = 16777216, .unit = "tokens",
                           .given = &o->seq_given, .help = "tokens per packed row"};
    t[n++] = (glm_arg_opt){.name = "seed", .type = GLM_ARG_U64, .dest = &o->seed, .def = "42", .hook = count_hook,
                           .help = "the seed"};
    t[n++] = (glm_arg_opt){.name = "val-size", .type = GLM_ARG_DOUBLE, .dest = &o->val_size, .def = "0",
                           .help = "records set aside"};
    t[n++] = (glm_arg_opt){.name = "output", .short_name = 'o', .alias = "tokenized-path|out", .type = GLM_ARG_STRING,
                           .dest = &o->out, .metavar = "OUTDIR", .help = "output directory"};
    t[n++] = (glm_arg_opt){.name = "tokenizer", .type = GLM_ARG_STRING, .dest = &o->tok, .metavar = "PATH",
                           .help = "a long help text that the printer must wrap because it does not fit in one line of "
                                   "a hundred columns, with several more words after that"};
    t[n++] = (glm_arg_opt){.name = "resume", .type = GLM_ARG_STRING, .dest = &o->resume, .bare = "latest",
                           .help = "resume"};
    t[n++] = (glm_arg_opt){.name = "dtype", .type = GLM_ARG_ENUM, .dest = &o->dtype, .def = "fp32", .choices = k_dtypes,
                           .help = "the dtype"};
    t[n++] = (glm_arg_opt){.name = "lens", .type = GLM_ARG_LIST, .elem = GLM_ARG_INT, .dest = o->lens, .max_items = 4,
                           .count = &o->n_lens, .def = "8", .ranged = true, .min = 1, .max = 100, .help = "lengths"};
    t[n++] = (glm_arg_opt){.name = "secret", .type = GLM_ARG_FLAG, .hidden = true, .help = "not shown"};
    return n;
}

static glm_arg_opt g_tab[16];

static glm_arg_cmd command(opts *o) {
    memset(o, 0, sizeof *o);
    size_t n = table(o, g_tab);
    return (glm_arg_cmd){.name = "demo", .usage = "usage: glmtune demo [options] INPUT...", .about = "A demo.\n",
                         .epilog = "The end.", .opts = g_tab, .n_opts = n, .pos = o->pos, .max_pos = 3,
                         .n_pos = &o->n_pos, .pos_name = "INPUT", .user = o};
}

/* Parses the NULL-terminated argument list. */
static glm_status run(opts *o, bool *help, const char *const *args) {
    glm_arg_cmd c = command(o);
    int n = 0;
    while (args[n]) n++;
    return glm_args_parse(&c, n, (char **)args, help);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static bool has(const char *needle) { return strstr(glm_errmsg(), needle) != NULL; }

int main(void) {
    opts o;
    bool help;

    /* defaults */
    CHECK(run(&o, &help, (const char *const[]){NULL}) == GLM_OK && !help, "empty: %s", glm_errmsg());
    CHECK(o.seq_len == 8192 && o.seed == 42 && o.offset == -1 && !o.mask && o.dtype == 0 && o.n_lens == 1 &&
              o.lens[0] == 8 && !o.seq_given && o.hook_calls == 0 && !o.out && o.n_pos == 0,
          "defaults stored, not given, no hook");

    /* --x v, --x=v, -o v, -o=v, aliases and underscores */
    CHECK(run(&o, &help, ARGS("--seq-len", "64", "--seed=7", "-o", "out", "in.json")) == GLM_OK, "%s", glm_errmsg());
    CHECK(o.seq_len == 64 && o.seq_given && o.seed == 7 && !strcmp(o.out, "out") && o.n_pos == 1 &&
              !strcmp(o.pos[0], "in.json"), "--x v, --x=v, -o v, positional");
    CHECK(o.hook_calls == 1 && !strcmp(o.hook_flag, "--seed"), "hook once, with the flag: %s", o.hook_flag);
    CHECK(run(&o, &help, ARGS("--cutoff_len=32", "-o=x")) == GLM_OK && o.seq_len == 32 && !strcmp(o.out, "x"),
          "alias with underscores, -o=v: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--tokenized-path", "y", "--val_size", "0.5")) == GLM_OK && !strcmp(o.out, "y") &&
              o.val_size == 0.5, "second alias, snake spelling");
    CHECK(run(&o, &help, ARGS("--output=", "--offset", "-5")) == GLM_OK && !strcmp(o.out, "") && o.offset == -5,
          "empty string value, negative integer as the next argument");

    /* booleans as the commands read them */
    CHECK(run(&o, &help, ARGS("--mask-history")) == GLM_OK && o.mask, "bare bool = true");
    CHECK(run(&o, &help, ARGS("--mask-history", "false")) == GLM_OK && !o.mask && o.n_pos == 0, "--x false consumed");
    CHECK(run(&o, &help, ARGS("--mask-history=Yes")) == GLM_OK && o.mask, "--x=Yes");
    CHECK(run(&o, &help, ARGS("--mask-history", "data.json")) == GLM_OK && o.mask && o.n_pos == 1,
          "a non-bool next argument stays positional");
    CHECK(run(&o, &help, ARGS("--mask-history", "--no-mask-history")) == GLM_OK && !o.mask, "--no-x");
    CHECK(run(&o, &help, ARGS("--no_mask_history")) == GLM_OK && !o.mask, "--no_x");
    CHECK(run(&o, &help, ARGS("--no-mask-history=true")) == GLM_ERR_ARG && has("--no-mask-history takes no value"),
          "--no-x=v: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--mask-history=maybe")) == GLM_ERR_ARG &&
              has("--mask-history: expected true or false, got \"maybe\""), "bad bool: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--json", "-s")) == GLM_OK && o.json && o.strict, "flags, short flag");

    /* a flag (GLM_ARG_FLAG) is read as a bool is: bare, --x=B, --x B, --no-x (README) */
    CHECK(run(&o, &help, ARGS("--json=1")) == GLM_OK && o.json, "flag=1: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--json=false")) == GLM_OK && !o.json, "flag=false: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--json=ON")) == GLM_OK && o.json, "flag=ON: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--strict", "yes", "in.jsonl")) == GLM_OK && o.strict && o.n_pos == 1 &&
              !strcmp(o.pos[0], "in.jsonl"), "flag yes consumed: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--strict", "No", "in.jsonl")) == GLM_OK && !o.strict && o.n_pos == 1,
          "flag No consumed: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--strict", "off")) == GLM_OK && !o.strict && o.n_pos == 0, "flag off: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--strict", "0", "--json", "TRUE")) == GLM_OK && !o.strict && o.json && o.n_pos == 0,
          "flag 0, flag TRUE: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--strict", "in.jsonl")) == GLM_OK && o.strict && o.n_pos == 1 &&
              !strcmp(o.pos[0], "in.jsonl"), "a positional after a bare flag stays positional");
    CHECK(run(&o, &help, ARGS("-s", "false", "x")) == GLM_OK && !o.strict && o.n_pos == 1, "-s false: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--strict", "--no-strict")) == GLM_OK && !o.strict, "--no-flag: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--no_json")) == GLM_OK && !o.json, "--no_flag: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--no-json=true")) == GLM_ERR_ARG && has("--no-json takes no value"),
          "--no-flag=v: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--json=maybe")) == GLM_ERR_ARG && has("--json: expected true or false, got \"maybe\""),
          "bad flag word: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--no-seed")) == GLM_ERR_ARG && has("unknown option --no-seed"),
          "--no- only for booleans: %s", glm_errmsg());

    /* missing values, bare values */
    CHECK(run(&o, &help, ARGS("in", "--tokenizer")) == GLM_ERR_ARG && has("--tokenizer needs a value (PATH)") &&
              has("glmtune demo --help"), "missing value: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--seq-len")) == GLM_ERR_ARG && has("--seq-len needs a value (T)"), "%s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--tokenizer", "--json")) == GLM_OK && !strcmp(o.tok, "--json") && !o.json,
          "a value option takes the next argument whatever it is");
    CHECK(run(&o, &help, ARGS("--resume")) == GLM_OK && !strcmp(o.resume, "latest"), "bare value at the end");
    CHECK(run(&o, &help, ARGS("--resume", "--json")) == GLM_OK && !strcmp(o.resume, "latest") && o.json,
          "bare value before an option");
    CHECK(run(&o, &help, ARGS("--resume", "ck-4")) == GLM_OK && !strcmp(o.resume, "ck-4"), "bare option with a value");

    /* numbers */
    CHECK(run(&o, &help, ARGS("--seed", "x")) == GLM_ERR_ARG &&
              !strcmp(glm_errmsg(), "--seed: expected a non-negative integer, got \"x\""), "bad u64: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--seed=-1")) == GLM_ERR_ARG && has("--seed: expected a non-negative integer, got \"-1\""),
          "negative u64: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--seed", "")) == GLM_ERR_ARG && has("got \"\""), "empty u64");
    CHECK(run(&o, &help, ARGS("--seed", "99999999999999999999999")) == GLM_ERR_ARG, "u64 overflow");
    CHECK(run(&o, &help, ARGS("--offset", "1.5")) == GLM_ERR_ARG && has("--offset: expected an integer, got \"1.5\""),
          "bad int: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--val-size", "abc")) == GLM_ERR_ARG && has("--val-size: expected a number, got \"abc\""),
          "bad double: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--val-size", "nan")) == GLM_OK && isnan(o.val_size), "nan without a range");
    CHECK(run(&o, &help, ARGS("--cutoff-len", "1")) == GLM_ERR_ARG &&
              !strcmp(glm_errmsg(), "--cutoff-len 1: expected 2 .. 16777216 tokens"), "range, as typed: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--seed", "13")) == GLM_ERR_ARG && has("13 refused by the hook") && o.seed == 13,
          "a hook's error stops the parse");

    /* choices and lists */
    CHECK(run(&o, &help, ARGS("--dtype", "bf16")) == GLM_OK && o.dtype == 1, "enum");
    CHECK(run(&o, &help, ARGS("--dtype=float32")) == GLM_OK && o.dtype == 0, "enum alias");
    CHECK(run(&o, &help, ARGS("--dtype", "int8")) == GLM_ERR_ARG &&
              !strcmp(glm_errmsg(), "--dtype: expected fp32, bf16 or fp16, got \"int8\""), "bad enum: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--lens", "3,,5", "--lens", "7,9")) == GLM_OK && o.n_lens == 2 && o.lens[0] == 7 &&
              o.lens[1] == 9, "list replaced, empty items skipped");
    CHECK(run(&o, &help, ARGS("--lens", "3,x")) == GLM_ERR_ARG && has("--lens: expected an integer, got \"x\""),
          "bad item: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--lens", "3,500")) == GLM_ERR_ARG && has("--lens 500: expected 1 .. 100"),
          "item range: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--lens", "1,2,3,4,5")) == GLM_ERR_ARG && has("at most 4 values"), "too many items");
    CHECK(run(&o, &help, ARGS("--lens", ",")) == GLM_ERR_ARG && has("expected at least one value"), "empty list");

    /* unknown options */
    CHECK(run(&o, &help, ARGS("--seqlen", "64")) == GLM_ERR_ARG &&
              !strcmp(glm_errmsg(), "demo: unknown option --seqlen; hint: did you mean --seq-len?"), "suggestion: %s",
          glm_errmsg());
    CHECK(run(&o, &help, ARGS("--cutof_len=3")) == GLM_ERR_ARG && has("did you mean --cutoff-len?"),
          "an alias suggested, =value left out: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--frobnicate")) == GLM_ERR_ARG && !has("did you mean") &&
              has("`glmtune demo --help` lists the options"), "unrelated: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("--secre")) == GLM_ERR_ARG && !has("--secret"), "hidden options are not suggested");
    CHECK(run(&o, &help, ARGS("--secret")) == GLM_OK, "hidden options are accepted");
    CHECK(run(&o, &help, ARGS("-x")) == GLM_ERR_ARG && has("unknown option -x"), "unknown short: %s", glm_errmsg());

    /* positional arguments */
    CHECK(run(&o, &help, ARGS("-", "a", "--", "--json", "-o")) == GLM_ERR_ARG && has("at most 3 INPUT") && !o.json,
          "after --, options are arguments: %s", glm_errmsg());
    CHECK(run(&o, &help, ARGS("-", "--", "--json")) == GLM_OK && o.n_pos == 2 && !strcmp(o.pos[0], "-") &&
              !strcmp(o.pos[1], "--json") && !o.json, "- and -- ");

    /* help: stops the parse, or goes on */
    CHECK(run(&o, &help, ARGS("--json", "--help", "--bogus")) == GLM_OK && help && o.json, "--help stops");
    CHECK(run(&o, &help, ARGS("--bogus", "-h")) == GLM_ERR_ARG && !help, "an error before --help");
    {
        glm_arg_cmd c = command(&o);
        c.help_continues = true;
        c.unknown = unknown_hook;
        const char *a[] = {"-h", "--lr_kwargs", "x", "--mask-history", "--frob=1"};
        CHECK(glm_args_parse(&c, 5, (char **)a, &help) == GLM_OK && help && o.mask &&
                  !strcmp(o.unknown_flag, "--frob") && !strcmp(o.unknown_val, "1"),
              "help_continues, unknown hook: %s", glm_errmsg());
        const char *b[] = {"--lr_kwargs", "x"};
        CHECK(glm_args_parse(&c, 2, (char **)b, &help) == GLM_OK && !strcmp(o.unknown_flag, "--lr_kwargs") &&
                  !strcmp(o.unknown_val, "x") && o.n_pos == 0, "the unknown hook takes the next argument");
    }

    /* argv is left as it was */
    {
        char a0[] = "--max_x", a1[] = "--cutoff_len=40";
        char *a[] = {a1, a0};
        glm_arg_cmd c = command(&o);
        glm_args_parse(&c, 2, a, &help);
        CHECK(!strcmp(a0, "--max_x") && !strcmp(a1, "--cutoff_len=40") && o.seq_len == 40, "argv unchanged");
    }

    /* a default that does not parse is a bug in the table */
    {
        glm_arg_cmd c = command(&o);
        g_tab[3].def = "minus one";
        CHECK(glm_args_parse(&c, 0, NULL, &help) == GLM_ERR_INTERNAL && has("--offset"), "bad default: %s", glm_errmsg());
    }

    /* the help: every option that is not hidden, with its spellings, default and value name */
    {
        glm_arg_cmd c = command(&o);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        glm_args_help(f, &c);
        fclose(f);
        for (size_t i = 0; i < c.n_opts; i++) {
            char flag[64];
            snprintf(flag, sizeof flag, "--%s", c.opts[i].name);
            CHECK(!strstr(text, flag) == c.opts[i].hidden, "help and %s", flag);
        }
        const char *want[] = {"usage: glmtune demo [options] INPUT...\n\nA demo.\n\noptions:\n",
                              "  --json ",
                              "  -s, --strict ",
                              "--mask-history, --no-mask-history",
                              "(default: false)",
                              "--seq-len T ",
                              "tokens per packed row (default: 8192; also --cutoff-len)",
                              "-o, --output OUTDIR",
                              "(also --tokenized-path, --out)",
                              "--resume [TEXT]",
                              "--dtype fp32|bf16|fp16 ",
                              "--lens N,...",
                              "-h, --help",
                              "\nThe end.\n"};
        for (size_t i = 0; i < sizeof want / sizeof *want; i++) CHECK(strstr(text, want[i]), "help has '%s'", want[i]);
        int longest = 0;
        for (char *p = text; *p;) {
            int l = (int)strcspn(p, "\n");
            if (l > longest) longest = l;
            p += l + (p[l] == '\n');
        }
        CHECK(longest <= 100, "help lines wrap at 100 columns (longest %d)", longest);
        const char *lt = strstr(text, "a long help"), *end = lt ? strstr(lt, "words after that") : NULL;
        CHECK(lt && end && strchr(lt, '\n') < end, "the long text is wrapped:\n%s", text);
        free(text);
    }

    /* the shared pieces */
    char buf[128];
    CHECK(!strcmp(glm_args_hint(buf, sizeof buf, "seq-len", true, "x"), "; hint: did you mean --seq-len?"), "hint");
    CHECK(!strcmp(glm_args_hint(buf, sizeof buf, "seq_len", false, "x"), "; hint: did you mean 'seq_len'?"), "hint key");
    CHECK(!strcmp(glm_args_hint(buf, sizeof buf, NULL, true, "train"), "; hint: `glmtune train --help` lists the options"),
          "hint none");
    bool b = false;
    CHECK(glm_args_parse_bool("ON", &b) && b && glm_args_parse_bool("0", &b) && !b && !glm_args_parse_bool("2", &b),
          "bool words");
    return check_summary("test_args");
}
