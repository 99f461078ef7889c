/* tool/tokenize/tokenize_stdio.h: `glmtune tokenize --encode / --decode`: JSONL on stdin, JSONL on stdout,
 * for counting tokens and checking the tokenizer. */
#ifndef GLM_TOKENIZE_STDIO_H
#define GLM_TOKENIZE_STDIO_H

#include <stdbool.h>

#include "tokenize/tokenizer.h"

/* encode: each line {"text": str} -> {"ids": [...]} (ordinary text: special-token strings are
 * plain text). decode: each line {"ids": [...]} -> {"text": str}, or {"text": null,
 * "bytes_hex": "..."} when the bytes are not valid UTF-8 (ids ending inside a character).
 * Output line k answers input line k: a blank line gives a blank line, and a line that cannot be
 * read or converted gives {"error": message, "line": k} (the message also on stderr with the line
 * number), and the run goes on. Returns the exit code: 0, or 1 when any line failed. */
int tokenize_stdio(const glm_tokenizer *tok, bool encode);

#endif
