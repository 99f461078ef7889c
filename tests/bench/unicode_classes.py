"""Cross-check of the GLM-4 split regex's Unicode classes (used by unicode_classes.sh; Python is
for this check only).

usage: unicode_classes.py classes OUTDIR   -> OUTDIR/rust_{L,N,S}.txt: the code points (decimal,
           one a line) that tiktoken's regex engine puts in \\p{L}, \\p{N}, \\s. Oracle: a tiktoken
           Encoding whose pattern is just the class and whose vocabulary is the 256 single bytes
           encodes exactly the matching characters of a text holding every code point.
       unicode_classes.py probes TOKENIZER_DIR OUT.jsonl -> {"text","ids"} lines (tiktoken with the
           GLM-4 vocabulary) that put every code point in contexts exercising each alternative of
           the pattern; test_tokenizer OUT.jsonl must reproduce them all."""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
CPS = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF)]

if len(sys.argv) == 3 and sys.argv[1] == "classes":
    import tiktoken
    ranks = {bytes([i]): i for i in range(256)}
    text = "".join(map(chr, CPS))
    for name, pat in [("L", r"\p{L}"), ("N", r"\p{N}"), ("S", r"\s")]:
        enc = tiktoken.Encoding("cls" + name, pat_str=pat, mergeable_ranks=ranks, special_tokens={})
        got = enc.decode_bytes(enc.encode_ordinary(text)).decode("utf-8")
        with open(os.path.join(sys.argv[2], "rust_%s.txt" % name), "w") as f:
            f.write("".join("%d\n" % ord(c) for c in got))
elif len(sys.argv) == 4 and sys.argv[1] == "probes":
    from glm4_tiktoken import glm4_encoding
    enc = glm4_encoding(sys.argv[2])
    with open(sys.argv[3], "w") as f:
        for i in range(0, len(CPS), 64):
            t = "".join("a{0}b 1{0}2 {0}{0} x'{0}\t{0}\n{0}  ".format(chr(c)) for c in CPS[i:i + 64])
            f.write(json.dumps({"text": t, "ids": enc.encode_ordinary(t)}, ensure_ascii=False) + "\n")
else:
    sys.exit(__doc__)
