#!/usr/bin/env bash
# Exports and configs that load everywhere:
#  - init-model writes pad_token_id / eos_token_id inside the vocabulary (the tokenizer's ids,
#    GLM-4's for the real vocabulary, else null); transformers' AutoConfig (when installed here)
#    loads it without its "pad_token_id must be None or an integer within the vocabulary" warning;
#  - a merged export of an hf-layout base whose config has GLM-4's pad_token_id 151329 and a
#    smaller vocabulary gets a valid pad_token_id;
#  - adapter_config.json: use_rslora only when true, floats in their shortest form (0.1);
#  - --lora-target vllm: no gate_up_proj in the hf layout; exporting an adapter with gate_up_proj
#    warns about vLLM; export-adapter --help says which vLLM versions load what.
set -uo pipefail
G=${GLMTUNE:?}
SRC=${GLM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
T=$(mktemp -d /tmp/glmexp.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
has() { grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }
flat() { tr -d ' \n' < "$1"; }

# the sample tokenizer's ids, by hand from its tokenizer_config.json ("<id>": {"content": ...})
tid() { tr -d '\n' < "$SRC/samples/tokenizer/tokenizer_config.json" | grep -o "\"[0-9]*\": *{ *\"content\": *\"$1\"" | grep -o '^"[0-9]*' | tr -d '"'; }
eot=$(tid '<|endoftext|>'); usr=$(tid '<|user|>'); obs=$(tid '<|observation|>')

"$G" init-model --config "$SRC/samples/model-config.json" --layout hf -o "$T/plain" 2>/dev/null
check "init-model hf, no tokenizer: pad_token_id null" grep -q '"pad_token_id":null' <(flat "$T/plain/config.json")
check "... no out-of-vocabulary eos ids" grep -q '"eos_token_id":null' <(flat "$T/plain/config.json")
"$G" init-model --config "$SRC/samples/model-config.json" --layout hf --tokenizer "$SRC/samples/tokenizer" -o "$T/tok" 2>/dev/null
check "init-model hf with the sample tokenizer: pad_token_id = <|endoftext|> ($eot)" grep -q "\"pad_token_id\":$eot," <(flat "$T/tok/config.json")
check "... eos_token_id = [<|endoftext|>, <|user|>, <|observation|>] ($eot, $usr, $obs)" grep -q "\"eos_token_id\":\[$eot,$usr,$obs\]" <(flat "$T/tok/config.json")
sed 's/"padded_vocab_size": 2048/"padded_vocab_size": 151552/' "$SRC/samples/model-config.json" > "$T/big.json"
check "the real vocabulary gets GLM-4's ids" bash -c "'$G' init-model --config '$T/big.json' --layout hf -o '$T/big' 2>/dev/null && tr -d ' \n' < '$T/big/config.json' | grep -q '\"pad_token_id\":151329,\"eos_token_id\":\[151329,151336,151338\]'"
if python3 -c 'import transformers' 2>/dev/null; then
    for d in plain tok; do
        python3 -c 'import sys; from transformers import AutoConfig; c = AutoConfig.from_pretrained(sys.argv[1]); print(c.pad_token_id)' "$T/$d" > "$T/$d.py" 2>&1
        check "transformers' AutoConfig loads the $d config without a token-id warning" bash -c "! grep -q 'must be .None. or an integer' '$T/$d.py'"
    done
else
    echo "SKIPPED: transformers is not installed here: AutoConfig not tried"
fi

# data for a few steps
awk 'BEGIN { srand(3); for (i = 0; i < 60; i++) { k = 10 + int(rand() * 30); ids = ""; lab = "";
     for (j = 0; j < k; j++) { x = 10 + int(rand() * 1900); ids = ids (j ? ", " : "") x; lab = lab (j ? ", " : "") (j < 4 ? -100 : x) }
     print "{\"input_ids\": [" ids "], \"labels\": [" lab "]}" } }' > "$T/data.jsonl"
"$G" tokenize --quiet --seq-len 64 -o "$T/shards" "$T/data.jsonl" 2>/dev/null

# a base carrying GLM-4's pad_token_id with a small vocabulary (as a copied GLM-4 config would)
cp -r "$T/plain" "$T/base"
sed -i 's/"pad_token_id": null/"pad_token_id": 151329/; s/"eos_token_id": null/"eos_token_id": [151329, 151336, 2]/' "$T/base/config.json"
"$G" train --quiet --device cpu --model "$T/base" --data "$T/shards" --output-dir "$T/run" --max-steps 1 --lora-rank 2 \
    --lora-dropout 0.1 2>/dev/null
"$G" export-adapter --checkpoint "$T/run" --merge -o "$T/merged" 2>"$T/merge.log"
check "merged export: pad_token_id made valid (the first eos id inside the vocabulary, 2)" grep -q '"pad_token_id":2,' <(flat "$T/merged/config.json")
check "... and said so" has "$T/merge.log" "pad_token_id 151329 is outside the vocabulary"
"$G" export-adapter --checkpoint "$T/run" -o "$T/adapter" 2>"$T/adapter.log"
check "adapter_config.json: lora_dropout 0.1, not 0.10000000149011612" grep -q '"lora_dropout":0.1,' <(flat "$T/adapter/adapter_config.json")
check "... no use_rslora key when false (PEFT <= 0.7 rejects it)" bash -c "! grep -q use_rslora '$T/adapter/adapter_config.json'"
check "... the checkpoint's copy too" grep -q '"lora_dropout":0.1,' <(flat "$T/run/checkpoint-1/adapter_config.json")
check "exporting an hf adapter with gate_up_proj warns about vLLM" has "$T/adapter.log" "vLLM does not"
# a checkpoint whose adapter holds a tensor that is not a LoRA weight of the run's modules (its checksums.txt
# made to match): refused, naming the tensor, not copied into the export
add_tensor() { # checkpoint dir, tensor name: the name added to adapter_model.safetensors (f32 [2, 64]), checksums.txt remade
    python3 - "$1" "$2" <<'PY'
import json, struct, sys, zlib, os
d, name = sys.argv[1], sys.argv[2]
p = os.path.join(d, "adapter_model.safetensors")
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h, data = json.loads(b[8:8 + n]), b[8 + n:]
h[name] = {"dtype": "F32", "shape": [2, 64], "data_offsets": [len(data), len(data) + 512]}
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + data + bytes(512))
c = os.path.join(d, "checksums.txt")
lines = []
for ln in open(c).read().splitlines():
    f = ln.split(" ", 2)[2]
    x = open(os.path.join(d, f), "rb").read()
    lines.append("%08x %d %s" % (zlib.crc32(x), len(x), f))
open(c, "w").write("\n".join(lines) + "\n")
PY
}
for x in base_model.model.foo.bar base_model.model.model.layers.0.self_attn.bogus.lora_A.weight \
         base_model.model.transformer.encoder.layers.0.self_attention.query_key_value.lora_A.weight; do
    rm -rf "$T/xck" "$T/xout"; cp -r "$T/run/checkpoint-1" "$T/xck"; add_tensor "$T/xck" "$x"
    "$G" export-adapter --checkpoint "$T/xck" -o "$T/xout" 2>"$T/x.log"; rc=$?
    check "export-adapter of a checkpoint holding $x: refused (rc $rc)" test $rc -ne 0
    check "... naming the tensor and the file" has "$T/x.log" "xck/adapter_model.safetensors: tensor '$x' is not a LoRA weight"
    check "... nothing exported" test ! -e "$T/xout/adapter_model.safetensors"
done
"$G" train --quiet --device cpu --model "$T/base" --data "$T/shards" --output-dir "$T/rs" --max-steps 1 --lora-rank 2 --use-rslora 2>/dev/null
check "use_rslora true is written" grep -q '"use_rslora":true' <(flat "$T/rs/checkpoint-1/adapter_config.json")

# --lora-target vllm
"$G" train --quiet --device cpu --model "$T/base" --data "$T/shards" --output-dir "$T/vl" --max-steps 1 --lora-rank 2 --lora-target vllm 2>/dev/null
check "--lora-target vllm (hf layout): q, k, v, o, down; no gate_up_proj" grep -q '"target_modules":\["q_proj","k_proj","v_proj","o_proj","down_proj"\]' <(flat "$T/vl/checkpoint-1/adapter_config.json")
"$G" export-adapter --checkpoint "$T/vl" -o "$T/vl-adapter" 2>"$T/vl.log"
check "... its export does not warn" bash -c "! grep -q vLLM '$T/vl.log'"
"$G" init-model --config "$SRC/samples/model-config.json" -o "$T/thudm" 2>/dev/null
# init-model's config.json carries the other layout's names llama.cpp's converter reads, with the same values
python3 - "$T/plain/config.json" "$T/thudm/config.json" <<'PY' 2>"$T/alias.err"; rc=$?
import json, sys
h, c = (json.load(open(p)) for p in sys.argv[1:3])
assert h["rope_ratio"] == h["rope_theta"] / 10000 and h["layernorm_epsilon"] == h["rms_norm_eps"], h
assert h["seq_length"] == h["max_position_embeddings"] and isinstance(h["seq_length"], int), h
assert c["vocab_size"] == c["padded_vocab_size"] and "rope_theta" not in c, c
PY
check "init-model: hf config.json has rope_ratio, layernorm_epsilon, seq_length; chatglm has vocab_size ($rc: $(tail -1 "$T/alias.err"))" test $rc = 0
"$G" train --quiet --device cpu --model "$T/thudm" --data "$T/shards" --output-dir "$T/vc" --max-steps 1 --lora-rank 2 --lora-target vllm 2>/dev/null
check "--lora-target vllm (chatglm layout): all four modules" grep -q '"target_modules":\["query_key_value","dense","dense_h_to_4h","dense_4h_to_h"\]' <(flat "$T/vc/checkpoint-1/adapter_config.json")
"$G" export-adapter --help > "$T/help.txt"
check "export-adapter --help: which vLLM versions load hf adapters with gate_up_proj" has "$T/help.txt" "no vLLM version loads one with gate_up_proj"
"$G" train --help > "$T/thelp.txt"
check "train --help names the vLLM-safe target set" has "$T/thelp.txt" "vllm (every module vLLM loads adapters for"

echo "test_exports: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
