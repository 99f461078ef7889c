#!/usr/bin/env bash
# docs/bench/fp8_fidelity.sh: the FP8 base's training fidelity on the CPU backend, which emulates
# the GPU's FP8 GEMMs (kernels/cpu/fp8_cpu.c: the same codes, products summed in double). A small
# GLM-4-shaped model (samples/model-config.json with an FFN of 352, a multiple of 16 as FP8 tensor
# cores need; random weights, seed 1) is trained for 50 steps on ../shared/corpora (tokenized with
# samples/tokenizer, rows of 512 tokens), LoRA r=8 on every linear layer, the same seed, data order
# and dropout, once with the unquantized base (fp32 on the CPU backend) and once with --base-dtype
# fp8. Prints a markdown table of the loss per step and the first step's LoRA gradient error.
# Usage: docs/bench/fp8_fidelity.sh GLMTUNE [GLMTUNE_E4M3_GRADS] > docs/bench/fp8-fidelity.md
#   GLMTUNE_E4M3_GRADS (optional): a glmtune built with -DGLM_FP8_GRAD_KIND=GLM_FP8_E4M3 (the input
#   gradients quantized to E4M3 instead of E5M2), a third column.
set -euo pipefail
G=${1:?usage: $0 GLMTUNE [GLMTUNE_E4M3_GRADS]}
G4=${2:-}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CORPORA=${GLM_CORPORA:-$SRC/../shared/corpora}
T=$(mktemp -d /tmp/glmfp8fid.XXXXXX)
trap 'rm -rf "$T"' EXIT
sed 's/"ffn_hidden_size": 344/"ffn_hidden_size": 352/' "$SRC/samples/model-config.json" >"$T/cfg.json"
"$G" init-model --config "$T/cfg.json" --tokenizer "$SRC/samples/tokenizer" --seed 1 -o "$T/model" 2>/dev/null
"$G" tokenize --quiet --tokenizer "$SRC/samples/tokenizer" --seq-len 512 -o "$T/shards" "$CORPORA" 2>/dev/null
common=(--device cpu --model "$T/model" --data "$T/shards" --lora-rank 8 --lora-alpha 16 --lora-target all
        --learning-rate 1e-3 --max-steps 50 --logging-steps 1 --save-steps 1000 --seed 3
        --per-device-train-batch-size 2 --gradient-accumulation-steps 2 --lora-dropout 0.05)
"$G" train "${common[@]}" --output-dir "$T/ref" --dump-grads "$T/ref.st" >"$T/ref.log" 2>&1
"$G" train "${common[@]}" --output-dir "$T/fp8" --base-dtype fp8 --dump-grads "$T/fp8.st" >"$T/fp8.log" 2>&1
if [ -n "$G4" ]; then
  "$G4" train "${common[@]}" --output-dir "$T/fp8e4" --base-dtype fp8 --dump-grads "$T/fp8e4.st" >"$T/fp8e4.log" 2>&1
fi
python3 - "$T" "$G4" <<'PY'
import json, math, os, struct, sys
t, g4 = sys.argv[1], sys.argv[2]
runs = ["ref", "fp8"] + (["fp8e4"] if g4 else [])
def losses(r):
    out = {}
    for line in open(os.path.join(t, r, "metrics.jsonl")):
        j = json.loads(line)
        if "loss" in j and "step" in j:
            out[j["step"]] = j["loss"]
    return out
def grads(r):
    p = os.path.join(t, r + ".st")
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    vals = []
    for k in sorted(h):
        if k == "__metadata__":
            continue
        s, e = h[k]["data_offsets"]
        assert h[k]["dtype"] == "F32"
        raw = b[8 + n + s:8 + n + e]
        vals += struct.unpack("<%df" % (len(raw) // 4), raw)
    return vals
L = {r: losses(r) for r in runs}
G = {r: grads(r) for r in runs}
def rel(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num / den)
def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
names = {"ref": "unquantized", "fp8": "fp8 (E5M2 grads)", "fp8e4": "fp8 (E4M3 grads)"}
print("| step | " + " | ".join(names[r] for r in runs) + " | " + " | ".join("%s - unquantized" % names[r] for r in runs[1:]) + " |")
print("|---" * (2 * len(runs)) + "|")
steps = sorted(L["ref"])
for s in steps:
    if s in (1, 2, 3, 5) or s % 5 == 0:
        row = [str(s)] + ["%.4f" % L[r][s] for r in runs] + ["%+.4f" % (L[r][s] - L["ref"][s]) for r in runs[1:]]
        print("| " + " | ".join(row) + " |")
print()
for r in runs[1:]:
    d = [L[r][s] - L["ref"][s] for s in steps]
    print("%s: mean |loss difference| over the %d steps %.4f (%.3f%% of the mean loss), largest %.4f; "
          "first step's LoRA gradients: relative error %.4f, cosine %.6f against the unquantized base's" %
          (names[r], len(steps), sum(map(abs, d)) / len(d), 100 * sum(map(abs, d)) / len(d) / (sum(L["ref"].values()) / len(steps)),
           max(map(abs, d)), rel(G[r], G["ref"]), cos(G[r], G["ref"])))
PY
