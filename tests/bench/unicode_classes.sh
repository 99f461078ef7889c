#!/usr/bin/env bash
# tests/bench/unicode_classes.sh: do PCRE2's \p{L} \p{N} \s agree with tiktoken's (Rust regex)?
# usage: tests/bench/unicode_classes.sh [BUILD_DIR] [DATA_DIR]   (a folder with glm4-tokenizer/:
#        default $GLM_FIXTURES or tests/fixtures; ../shared works too)
# 1. Lists, per class, the code-point ranges where plain PCRE2 (this machine's libpcre2-8, UTF+UCP)
#    and tiktoken disagree: the reason for the spelled-out classes in tokenize/bpe/bpe_split.c.
# 2. Encodes every code point in several contexts with tiktoken and with glmtune (test_tokenizer
#    given the probe file): must print "0 encode mismatches".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
shared=${2:-${GLM_FIXTURES:-$root/tests/fixtures}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/unicode_classes.py" classes "$tmp"
cat > "$tmp/cmp.c" <<'CEOF'
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <string.h>
static unsigned char ref[0x110000];
static size_t put(unsigned char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = cp; return 1; }
    if (cp < 0x800) { o[0] = 0xC0 | cp >> 6; o[1] = 0x80 | (cp & 63); return 2; }
    if (cp < 0x10000) { o[0] = 0xE0 | cp >> 12; o[1] = 0x80 | ((cp >> 6) & 63); o[2] = 0x80 | (cp & 63); return 3; }
    o[0] = 0xF0 | cp >> 18; o[1] = 0x80 | ((cp >> 12) & 63); o[2] = 0x80 | ((cp >> 6) & 63); o[3] = 0x80 | (cp & 63);
    return 4;
}
int main(int argc, char **argv) {
    const char *names[3] = {"L", "N", "S"}, *pats[3] = {"^\\p{L}$", "^\\p{N}$", "^\\s$"};
    for (int k = 0; k < 3; k++) {
        int e; PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pats[k], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &e, &eo, NULL);
        pcre2_match_data *md = pcre2_match_data_create(1, NULL);
        char fn[4096]; snprintf(fn, sizeof fn, "%s/rust_%s.txt", argv[1], names[k]);
        FILE *f = fopen(fn, "r"); unsigned c; memset(ref, 0, sizeof ref);
        while (fscanf(f, "%u", &c) == 1) ref[c] = 1;
        fclose(f);
        long nd = 0; unsigned rs = 0, rl = 0; int rt = -1;
        for (unsigned cp = 0; cp <= 0x110000; cp++) {
            int m = -1;
            if (cp < 0x110000 && !(cp >= 0xD800 && cp <= 0xDFFF)) {
                unsigned char b[4]; size_t n = put(b, cp);
                m = pcre2_match(re, b, n, 0, 0, md, NULL) >= 0;
                if (m == ref[cp]) m = -1; else nd++;
            }
            if (m >= 0 && m == rt && cp == rs + rl) { rl++; continue; }
            if (rl) printf("  %s: U+%04X..U+%04X tiktoken=%d pcre2=%d\n", names[k], rs, rs + rl - 1, !rt, rt);
            rl = 0; rt = m;
            if (m >= 0) { rs = cp; rl = 1; }
        }
        printf("%s: %ld code points differ between plain PCRE2 and tiktoken\n", names[k], nd);
    }
    return 0;
}
CEOF
cc -O2 -o "$tmp/cmp" "$tmp/cmp.c" $(pkg-config --cflags --libs libpcre2-8)
echo "PCRE2 $(pkg-config --modversion libpcre2-8), tiktoken $(python3 -c 'import tiktoken; print(tiktoken.__version__)')"
"$tmp/cmp" "$tmp"
python3 "$here/unicode_classes.py" probes "$shared/glm4-tokenizer" "$tmp/probes.jsonl"
GLM_FIXTURES=$shared "$build/tests/tokenize/test_tokenizer" "$tmp/probes.jsonl" | grep -E "^golden|passed"
