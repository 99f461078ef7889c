#!/usr/bin/env bash
# export-adapter --format gguf end to end: a small GLM-4 of the real vocabulary (151,552, the
# fixture tokenizer) trained one step in each layout, exported as a GGUF adapter and as a merged
# GGUF model (q8_0, and the base's dtype) with its Ollama Modelfile; the options' refusals. The
# files' contents are checked by tests/lora/test_gguf (its own reader); here, when Python's `gguf`
# package (llama.cpp's reader) is importable, it reads them back too, else that check is skipped
# with a line saying so.
set -uo pipefail
G=${GLMTUNE:?}
SRC=${GLM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
FX=${GLM_FIXTURES:-$SRC/tests/fixtures}
T=$(mktemp -d /tmp/glmgguf.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
has() { grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }
magic() { [ "$(head -c 4 "$1" 2>/dev/null)" = GGUF ]; }

sed 's/"padded_vocab_size": 2048/"padded_vocab_size": 151552/' "$SRC/samples/model-config.json" > "$T/big.json"
awk 'BEGIN { srand(5); for (i = 0; i < 12; i++) { k = 12 + int(rand() * 30); ids = ""; lab = "";
     for (j = 0; j < k; j++) { x = 10 + int(rand() * 150000); ids = ids (j ? ", " : "") x; lab = lab (j ? ", " : "") (j < 4 ? -100 : x) }
     print "{\"input_ids\": [" ids "], \"labels\": [" lab "]}" } }' > "$T/data.jsonl"
"$G" tokenize --quiet --seq-len 64 -o "$T/shards" "$T/data.jsonl" 2>/dev/null
for layout in chatglm hf; do
    "$G" init-model --config "$T/big.json" --layout $layout --tokenizer "$FX/glm4-tokenizer" -o "$T/base-$layout" 2>/dev/null
    "$G" train --quiet --device cpu --model "$T/base-$layout" --data "$T/shards" --output-dir "$T/run-$layout" \
        --max-steps 1 --lora-rank 4 --learning-rate 0.01 2>/dev/null
    "$G" export-adapter --checkpoint "$T/run-$layout" --format gguf -o "$T/ad-$layout" 2>"$T/ad-$layout.log"
    check "$layout: adapter.gguf written" magic "$T/ad-$layout/adapter.gguf"
    check "... and said where" has "$T/ad-$layout.log" "wrote the GGUF adapter"
done
"$G" export-adapter --checkpoint "$T/run-chatglm" --format gguf --merge --dtype q8_0 -o "$T/mq" 2>"$T/mq.log"
check "merged q8_0: model.gguf" magic "$T/mq/model.gguf"
check "... rows of 344 (F) are not whole q8_0 blocks: ffn_down written f16, and said so" has "$T/mq.log" "dense_4h_to_h.weight: rows of 344 values are not whole q8_0 blocks of 32: written f16"
check "... a Modelfile beside it: FROM ./model.gguf" has "$T/mq/Modelfile" "^FROM ./model.gguf$"
check "... stop at <|user|>" has "$T/mq/Modelfile" 'PARAMETER stop "<|user|>"'
check "... stop at <|observation|>" has "$T/mq/Modelfile" 'PARAMETER stop "<|observation|>"'
check "... stop at <|endoftext|>" has "$T/mq/Modelfile" 'PARAMETER stop "<|endoftext|>"'
"$G" export-adapter --checkpoint "$T/run-hf" --format gguf --merge -o "$T/mh" 2>"$T/mh.log"
check "merged hf layout in the base's dtype: model.gguf" magic "$T/mh/model.gguf"
"$G" export-adapter --checkpoint "$T/run-hf" --format gguf --merge -o "$T/mh" 2>"$T/mh2.log"
check "an earlier GGUF export is replaced" magic "$T/mh/model.gguf"

# refusals
"$G" export-adapter --checkpoint "$T/run-chatglm" --format gguf --dtype q8_0 -o "$T/x1" 2>"$T/x1.log"
check "--dtype q8_0 without --merge: refused" test $? = 2
check "... with a hint" has "$T/x1.log" "hint: --format gguf --merge --dtype q8_0"
"$G" export-adapter --checkpoint "$T/run-chatglm" --merge --tokenizer "$FX/glm4-tokenizer" -o "$T/x2" 2>"$T/x2.log"
check "--tokenizer without --format gguf: refused" has "$T/x2.log" "only used with --format gguf --merge"
"$G" export-adapter --checkpoint "$T/run-chatglm" --format ggml -o "$T/x3" 2>"$T/x3.log"
check "--format ggml: refused" has "$T/x3.log" 'expected peft or gguf'
mkdir -p "$T/notok"
"$G" export-adapter --checkpoint "$T/run-chatglm" --format gguf --merge --tokenizer "$T/notok" -o "$T/x4" 2>"$T/x4.log"
check "a --tokenizer without tokenizer.model: refused" test $? != 0
check "... and -o not left behind" test ! -e "$T/x4"
"$G" export-adapter --help > "$T/help.txt"
check "--help names --format gguf" has "$T/help.txt" "format"

if "${PYTHON:-python3}" -c 'import gguf' 2>/dev/null; then
    "${PYTHON:-python3}" - "$T" > "$T/py.log" 2>&1 <<'PY'
import sys
from gguf import GGUFReader
t = sys.argv[1]
r = GGUFReader(t + '/mq/model.gguf')
assert r.fields['general.architecture'].contents() == 'chatglm'
assert len(r.fields['tokenizer.ggml.merges'].data) == 318088
assert len(r.fields['tokenizer.ggml.tokens'].data) == 151552
types = {x.name: x.tensor_type.name for x in r.tensors}
assert types['token_embd.weight'] == 'Q8_0' and types['blk.0.ffn_down.weight'] == 'F16' and types['output_norm.weight'] == 'F32', types
h = GGUFReader(t + '/mh/model.gguf')
assert 'blk.1.attn_k.bias' in {x.name for x in h.tensors}
a = GGUFReader(t + '/ad-hf/adapter.gguf')
assert a.fields['adapter.type'].contents() == 'lora'
assert 'blk.0.attn_q.weight.lora_a' in {x.name for x in a.tensors}
print('gguf reader: ok')
PY
    check "llama.cpp's gguf package reads the files" has "$T/py.log" "gguf reader: ok"
else
    echo "SKIPPED: Python's gguf package is not importable here: the files were not read back with llama.cpp's reader (tests/lora/test_gguf reads them with its own)"
fi

echo "test_gguf_cli: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
