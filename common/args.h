/* common/args.h: the command-line option engine every glmtune command uses.
 *
 * A command declares its options as a table of glm_arg_opt (long flag, optional short flag and
 * other spellings, type, where the value goes, default, help text, value name) and calls
 * glm_args_parse on its arguments. The engine
 *   - reads `--name VALUE`, `--name=VALUE`, `-n VALUE` (and `-n=VALUE`); a name may be spelled
 *     with underscores for dashes (--max_samples = --max-samples, as LLaMA-Factory spells them);
 *   - reads every boolean option (FLAG and BOOL alike) one way: `--x` (true), `--x=B` and `--x B`
 *     where B is one of true/yes/on/1 or false/no/off/0 in any case (glm_args_parse_bool; any other
 *     next argument is not taken: it stays a positional argument), and `--no-x` (false);
 *   - converts and checks the value (integer, non-negative integer, number, choice, comma list;
 *     an optional range), stores it, marks it given and calls the option's hook, in argv order,
 *     and stops at the first error;
 *   - collects positional arguments (a lone "-" is one: standard input; everything after "--"
 *     is one), up to the command's maximum;
 *   - answers -h/--help (glm_args_help prints the help made from the table) and an unknown
 *     option with the closest known spelling ("did you mean --seq-len?", common/strdist.h).
 * Messages name the option as the user typed it: `--seed: expected a non-negative integer, got
 * "x"`, `--steps 0: expected 1 .. 1000`, `--tokenizer needs a value (PATH); hint: ...`,
 * `tokenize: unknown option --seqlen; hint: did you mean --seq-len?`. All are GLM_ERR_ARG.
 *
 * A command whose values need more than a type (glmtune train: YAML precedence, value sources)
 * gives options without dest and a hook that receives the value's text unconverted, and an
 * `unknown` hook for names outside its table (LLaMA-Factory keys); the reading of argv (the
 * spellings above, which argument is a value) stays the engine's. */
#ifndef GLM_COMMON_ARGS_H
#define GLM_COMMON_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/status.h"

/* What an option takes, and the type of its dest. */
typedef enum {
    GLM_ARG_FLAG,   /* a boolean read as BOOL is (--x, --x=B, --x B, --no-x); dest: bool; its def is not
                     * stored (dest keeps the caller's value, false) and the help shows --x alone */
    GLM_ARG_BOOL,   /* --x, --x=B, --x B, --no-x (see above); dest: bool; the help shows --x, --no-x */
    GLM_ARG_INT,    /* decimal integer, sign allowed; dest: int64_t */
    GLM_ARG_U64,    /* decimal integer >= 0 (no sign); dest: uint64_t */
    GLM_ARG_DOUBLE, /* a number as strtod reads it (nan and inf too, unless a range excludes them); dest: double */
    GLM_ARG_STRING, /* any text, "" included; dest: const char *, pointing into argv (or at def) */
    GLM_ARG_ENUM,   /* one of choices' names; dest: int, the choice's value */
    GLM_ARG_LIST,   /* comma-separated items of type elem (INT, U64 or DOUBLE; empty items skipped);
                     * dest: an array of max_items of elem's dest type, *count set to the items read;
                     * given again, the new list replaces the old */
} glm_arg_type;

/* One name of a GLM_ARG_ENUM; a table ends with {NULL, 0}. Names with the value of an earlier
 * name are other spellings of it: accepted, left out of the help and messages. */
typedef struct glm_arg_choice {
    const char *name;
    int value;
} glm_arg_choice;

typedef struct glm_arg_opt glm_arg_opt;

/* Called after an option's value is stored (and for an option without dest, instead of
 * storing). flag: the option as typed, without "=value" ("--cutoff_len", "-o", "--no-strict");
 * value: its text (for a FLAG or BOOL: "true" when bare, "false" when negated, else the word given); user: the
 * command's glm_arg_cmd.user. An error stops the parse with it. */
typedef glm_status (*glm_arg_hook)(const glm_arg_opt *opt, const char *flag, const char *value, void *user);

struct glm_arg_opt {
    const char *name;      /* long flag without "--", kebab-case: "seq-len" */
    char short_name;       /* 'o' for -o; 0: none */
    const char *alias;     /* other long names, "|"-separated ("cutoff-len|cutoff"), or NULL */
    glm_arg_type type;
    void *dest;            /* see glm_arg_type; NULL: only the hook sees the value (as text) */
    const char *def;       /* default as the text a user would type, stored before parsing and shown in
                            * the help; NULL: dest keeps what the caller put there (help prose says it) */
    const char *help;      /* one paragraph, wrapped by the help printer; "\n" starts a new line */
    const char *metavar;   /* the value's name in help and messages ("PATH"); NULL: from the type */
    const glm_arg_choice *choices; /* GLM_ARG_ENUM */
    glm_arg_type elem;     /* GLM_ARG_LIST: the items' type */
    size_t max_items;      /* GLM_ARG_LIST: dest's capacity */
    size_t *count;         /* GLM_ARG_LIST: the items read */
    bool ranged;           /* INT, U64, DOUBLE and LIST items: the value must lie in [min, max] */
    double min, max;
    const char *unit;      /* named after the range in its message ("tokens"), or NULL */
    const char *bare;      /* a value option given with no value (last, or before another --option):
                            * this value ("latest"); NULL: it needs one */
    bool *given;           /* set true when the command line gives the option; may be NULL */
    glm_arg_hook hook;     /* may be NULL */
    bool hidden;           /* accepted, but not in the help nor suggested */
};

/* Called for a long option outside the table (flag as typed, "--name"; value: the text after
 * '=', or NULL). It may take the next argument as its value by advancing *i (argv[*i] is the
 * option). Without this hook such an option is an error with a suggestion. */
typedef glm_status (*glm_arg_unknown_hook)(const char *flag, const char *value, int argc, char **argv, int *i,
                                           void *user);

/* A command: its table, its positional arguments and its help. */
typedef struct glm_arg_cmd {
    const char *name;      /* the subcommand ("tokenize"): messages and hints name `glmtune NAME --help` */
    const char *usage;     /* "usage: glmtune NAME ..." line(s), printed first by the help */
    const char *about;     /* printed after the usage, as written (own line breaks); or NULL */
    const char *epilog;    /* printed after the options, as written; or NULL */
    const glm_arg_opt *opts;
    size_t n_opts;
    const char **pos;      /* the positional arguments, in order: room for max_pos */
    size_t max_pos;        /* 0: none accepted */
    size_t *n_pos;         /* how many were given; may be NULL when max_pos is 0 */
    const char *pos_name;  /* what a positional argument is ("OUTDIR|SHARD"), for messages */
    glm_arg_unknown_hook unknown;
    void *user;            /* passed to the hooks */
    bool help_continues;   /* -h/--help sets *help and the parse goes on (else it stops there) */
} glm_arg_cmd;

/* Parses argv[0 .. argc-1] (the arguments after the subcommand's name) by cmd's table: first
 * every option's default (def) is stored, then the arguments are read in order (see the top of
 * this file). *help is set when -h or --help is given; the parse then stops, with GLM_OK, unless
 * cmd->help_continues. argv is not modified. Errors: GLM_ERR_ARG naming the option as typed (an
 * unknown option, a missing value, a value that is not of the option's type or outside its
 * range, too many positional arguments), with a hint; or a hook's error. A default that does not
 * parse is GLM_ERR_INTERNAL (a bug in the table). */
glm_status glm_args_parse(const glm_arg_cmd *cmd, int argc, char **argv, bool *help);

/* Prints cmd's help to f: the usage, the about text, "options:" with one entry per option that
 * is not hidden (its spellings and value name, its help text, its default and other names), the
 * -h/--help entry, and the epilog. */
void glm_args_help(FILE *f, const glm_arg_cmd *cmd);

/* Prints one help entry: "  HEAD", then TEXT from column col (on the same line when HEAD ends at
 * least two columns before it, else on the next line), wrapped at spaces so that lines end by
 * column width (a word longer than that stays whole); a "\n" in TEXT starts a new line at col. */
void glm_args_help_entry(FILE *f, const char *head, const char *text, int col, int width);

/* The end of an "unknown option" message, into buf (size n), returned: "; hint: did you mean
 * --NEAR?" (as_flag) or "; hint: did you mean 'NEAR'?" when near is not NULL, else "; hint:
 * `glmtune CMD --help` lists the options". */
const char *glm_args_hint(char *buf, size_t n, const char *near, bool as_flag, const char *cmd);

/* Reads a boolean word: true, yes, on, 1 / false, no, off, 0, in any case. False (and *out
 * untouched) for anything else. */
bool glm_args_parse_bool(const char *s, bool *out);

#endif
