#!/bin/bash
# tests/gpu/cli_check.sh: `glmtune train --device cuda` end to end on the GPU machine, against the
# same run on the CPU backend (made by tests/gpu/stage.sh): per-step losses and the first step's
# gradients within bf16 tolerance, checkpoints and a resume on the GPU, export-adapter.
# Run by tests/gpu/run.sh with .device/gpu carried. Prints a table; exit 1 on any failure.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
pre=$root/.device/gpu
G=$pre/bin/glmtune
. "$root/tests/gpu/env.sh" # LD_LIBRARY_PATH: staged libraries, CUDA, cuDNN / NCCL from the wheels
flags=$(cat "$root/tests/gpu/cli_flags.txt")
T=$(mktemp -d)
fail=0
row() { printf '%-8s %-44s %-6s %s\n' "$1" "$2" "$3" "$4"; [ "$3" = ok ] || fail=1; }
# the loss logged at a step in metrics.jsonl (empty when the step is not there): JSON parsed, so
# the check cannot pass on a missing value
loss_at() {
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if o.get("step") == int(sys.argv[2]) and "loss" in o:
        print(repr(o["loss"])); break' "$1" "$2" 2>/dev/null
}
for layout in chatglm hf; do
  base="$root/tests/fixtures/tiny-glm4/$layout"
  if ! "$G" train --quiet --device cuda --model "$base" --data "$pre/cli/$layout-shards" --output-dir "$T/$layout" $flags \
       --dump-grads "$T/$layout-grads.safetensors" 2>"$T/$layout.log"; then
    row $layout "train --device cuda" FAIL "$(tail -2 "$T/$layout.log")"; continue
  fi
  row $layout "train --device cuda, 3 steps" ok "$(grep -o 'cuda' "$T/$layout.log" | head -1)"
  for step in 1 2 3; do
    a=$(loss_at "$pre/cli/$layout-cpu/metrics.jsonl" $step)
    b=$(loss_at "$T/$layout/metrics.jsonl" $step)
    r=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a == "" || b == "") { print "missing"; exit } d = a - b; if (d < 0) d = -d;
                                         printf "%.2e", (a != 0 ? d / a : 1) }')
    ok=$(awk -v r="$r" 'BEGIN { print (r != "missing" && r + 0 < 1e-2) ? "ok" : "FAIL" }')
    row $layout "step $step loss: cuda vs cpu (tol 1e-2)" $ok "$b vs $a (rel $r)"
  done
  r=$(python3 - "$T/$layout-grads.safetensors" "$pre/cli/$layout-cpu-grads.safetensors" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert a.keys() == b.keys()
# one norm over every tensor: lora_A's gradients are exactly 0 at step 1 (lora_B starts at 0)
num = sum(float(np.sum((a[k].astype(np.float64) - b[k]) ** 2)) for k in b)
den = sum(float(np.sum(b[k].astype(np.float64) ** 2)) for k in b)
zeros_agree = all(bool(np.all(a[k] == 0)) == bool(np.all(b[k] == 0)) for k in b)
print(f"{(num / den) ** 0.5:.3e}" if zeros_agree else "1e9")
PY
)
  ok=$(awk -v r="$r" 'BEGIN { print (r != "" && r < 5e-2) ? "ok" : "FAIL" }')
  row $layout "first-step grads: cuda vs cpu (tol 5e-2)" $ok "norm-rel over all tensors $r"
  rm -rf "$T/$layout-r"
  "$G" train --quiet --device cuda --model "$base" --data "$pre/cli/$layout-shards" --output-dir "$T/$layout-r" $flags \
      --resume-from-checkpoint "$T/$layout/checkpoint-2" 2>"$T/$layout-r.log"
  a=$(loss_at "$T/$layout/metrics.jsonl" 3)
  b=$(loss_at "$T/$layout-r/metrics.jsonl" 3)
  row $layout "resume from checkpoint-2 on the GPU" $([ -n "$a" ] && [ "$a" = "$b" ] && echo ok || echo FAIL) "step 3 $b vs $a"
  "$G" export-adapter --checkpoint "$T/$layout" -o "$T/$layout-adapter" 2>/dev/null
  row $layout "export-adapter of the GPU run" $([ -f "$T/$layout-adapter/adapter_model.safetensors" ] && echo ok || echo FAIL) ""
done
rm -rf "$T"
exit $fail
