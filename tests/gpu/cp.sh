#!/bin/bash
# tests/gpu/cp.sh: context parallel (--context-parallel) on a machine with 8 GPUs (H200),
# with the binaries staged by tests/gpu/stage.sh (.device/gpu carried, as for tests/gpu/run.sh):
#   1. equivalence with one GPU on a row short enough for one GPU: the tiny GLM-4 fixture, rows of
#      50 tokens packed as in tests/dist/test_train_cp.c ([50] [30|11|9] [27|23] [26|24]), 1 GPU
#      against --gpus N --context-parallel N for N = 2, 4, 8 and --gpus 8 --context-parallel 4
#      (2 groups): step 1 and 2 losses and step 1's gradients within 1e-2 relative (bf16
#      activations: other row counts round differently; the CPU backend holds the same
#      equivalence to 1e-6 in CI, tests/dist/test_cp_mpi.c);
#   2. the longest trainable row on 8 GPUs: a random GLM-4-9B-Chat-1M-shaped checkpoint
#      (glmtune init-model, ~19 GB on disk), one pre-tokenized row of L random tokens per step,
#      --gpus 8 --context-parallel 8, L = 1M, 1.5M, 2M, 2.5M, ... until a run fails (the dry run
#      plans 2,293,760 tokens at 137 GiB per GPU): the longest L that trained;
#   3. speed at 256k, 512k and 1M tokens per row on --gpus 8 --context-parallel 8: tokens/s of the
#      last logging window (all 8 GPUs), peak GPU memory (nvidia-smi every 0.5 s), and MFU =
#      tokens/s x useful FLOP per token / (8 x 989e12), useful FLOP per token (docs/design.md §6)
#      = 4 x 8.86e9 + 6 L T H Dh (L = 40 layers, H Dh = 4096).
# Prints a table and writes it, with the machine, the commit and the commands, to
# docs/bench/$(date +%F)-cp-8xh200.md (commit it with this script). Exit 1 on any failure.
# Usage (on the GPU machine): tests/gpu/cp.sh   (GLM_CP_STEPS: optimizer steps of the speed runs,
# default 4; GLM_CP_TMP: a directory with room for the 9B checkpoint and the rows, default mktemp -d;
# GLM_CP_MAX: the longest row to try in step 2, default 4194304).
#
# One GPU (or GLM_CP_ONE_GPU=1): part 1 only, the ranks sharing GPU 0 (--gpus 0,0 /
# 0,0,0,0: NCCL's socket transport, tool/train/launch.c; correctness only), for --context-parallel 2, 4
# and 2 x 2 (2 groups of 2), plus: the bytes every rank sent against the dry run's prediction, and
# the tolerance analysis of tests/gpu/tol.h (TOL_CP_GRAD): the 1-GPU reference run twice, with
# cuDNN's attention and with glmtune's own kernels (GLMTUNE_ATTENTION=glmtune, the kernels the
# ring's blocks use), and every run's gradients against the CPU backend's (the specification,
# made by tests/gpu/stage.sh in .device/gpu/cp), printed as a table.
# The table goes to $OUT/cp.txt too when OUT is set.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/gpu/env.sh"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$ngpu" -ge 1 ] || { echo "SKIPPED: no GPU here"; exit 77; }
one=0
{ [ "$ngpu" -lt 2 ] || [ "${GLM_CP_ONE_GPU:-0}" = 1 ]; } && one=1
gpus_of() { if [ "$one" = 1 ]; then printf '0%.0s' $(seq 1 "$1") | sed 's/./&,/g; s/,$//'; else echo "$1"; fi; } # 2 -> "0,0"
tol() { awk -v k="$1" '$0 ~ "static const double " k " =" { v = $NF; sub(";", "", v); print v }' "$root/tests/gpu/tol.h"; }
TOL_CP_LOSS=$(tol TOL_CP_LOSS); TOL_CP_GRAD=$(tol TOL_CP_GRAD); TOL_MODEL_GRAD=$(tol TOL_MODEL_GRAD)
T=${GLM_CP_TMP:-$(mktemp -d)}
steps=${GLM_CP_STEPS:-4}
maxlen=${GLM_CP_MAX:-4194304}
res=$root/docs/bench/$(date +%F)-cp-8xh200.md
fail=0
table=""
row() { local line; line=$(printf '| %-8s | %-58s | %-4s | %s |' "$1" "$2" "$3" "$4"); echo "$line"; table+="$line"$'\n'; [ "$3" = ok ] || [ "$3" = SKIP ] || [ "$3" = info ] || fail=1; }
json_num() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]).get(sys.argv[2], 0))" "$1" "$2" 2>/dev/null || echo 0; }
loss_of() { python3 -c "
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o.get('step') == int(sys.argv[2]) and 'loss' in o: print(o['loss'])" "$1/metrics.jsonl" "$2"; }
relerr() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.2e", (b != 0 ? d / (b < 0 ? -b : b) : 1) }'; }
okif() { awk -v r="$1" -v t="$2" 'BEGIN { print (r != "" && r + 0 < t + 0) ? "ok" : "FAIL" }'; }
grads_rel() {
  python3 - "$1" "$2" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert a.keys() == b.keys()
print(f"{max(float(np.linalg.norm(a[k].astype(np.float64) - b[k]) / np.linalg.norm(b[k].astype(np.float64))) for k in b):.3e}")
PY
}

# ---- 0. does this build run the ring on CUDA at all?
base=$root/tests/fixtures/tiny-glm4/chatglm
# (tests/gpu/stage.sh writes the same documents and the CPU reference into $pre/cp)
python3 - "$T/docs.jsonl" <<'PY'
import random, sys, json
random.seed(7)
with open(sys.argv[1], "w") as f:
    for n in (50, 30, 27, 26, 24, 23, 11, 9):
        ids = [random.randrange(512) for _ in range(n)]
        labels = [-100 if t == 0 or random.random() < 0.15 else ids[t] for t in range(n)]
        f.write(json.dumps({"input_ids": ids, "labels": labels}) + "\n")
PY
"$G" tokenize --quiet --seq-len 50 -o "$T/s50" "$T/docs.jsonl" 2>"$T/tok50.log" || { echo "tokenize failed: $(tail -2 "$T/tok50.log")"; exit 1; }
flags="--quiet --device cuda --model $base --init-adapter $base/adapter_init --data $T/s50 --lora-target all --lora-rank 4
  --lora-alpha 8 --learning-rate 1e-3 --lr-scheduler-type constant --max-steps 2 --logging-steps 1 --seed 5
  --per-device-train-batch-size 1"
if ! "$G" train $flags --gpus "$(gpus_of 2)" --context-parallel 2 --gradient-accumulation-steps 4 --output-dir "$T/probe" 2>"$T/probe.log"; then
  if grep -q "context parallel attention on CUDA" "$T/probe.log"; then
    echo "NOT RUN: this glmtune has no CUDA kernels for the ring's block attention ($(tail -1 "$T/probe.log"))"
    exit 1
  fi
fi

# ---- 1. equivalence with one GPU (tiny fixture, rows of 50 tokens)
flags="$flags --gradient-checkpointing full --max-gpu-memory 16"
"$G" train $flags --gradient-accumulation-steps 4 --output-dir "$T/eq1" --dump-grads "$T/eq1.st" 2>"$T/eq1.log" \
  || row equiv "1 GPU" FAIL "$(tail -2 "$T/eq1.log")"
GLMTUNE_ATTENTION=glmtune "$G" train $flags --gradient-accumulation-steps 4 --output-dir "$T/eq1g" --dump-grads "$T/eq1g.st" \
  2>"$T/eq1g.log" || row equiv "1 GPU, glmtune's attention kernels" FAIL "$(tail -2 "$T/eq1g.log")"
cpu_ref=$pre/cp/cpu.st
runs=""
for v in "2:2:4" "4:4:4" "4:2:2" "8:8:4" "8:4:2"; do
  IFS=: read -r g c acc <<<"$v"
  if [ "$one" = 1 ]; then [ "$g" -le 4 ] || continue; elif [ "$g" -gt "$ngpu" ]; then row equiv "--gpus $g --context-parallel $c" SKIP "$ngpu GPUs here"; continue; fi
  gl=$(gpus_of "$g")
  name=g$g-c$c
  if ! "$G" train $flags --gpus "$gl" --context-parallel "$c" --gradient-accumulation-steps "$acc" --output-dir "$T/$name" \
       --dump-grads "$T/$name.st" 2>"$T/$name.log"; then
    row equiv "--gpus $gl --context-parallel $c" FAIL "$(tail -2 "$T/$name.log" | tr '\n' ' ')"; continue
  fi
  runs="$runs $name"
  for s in 1 2; do
    r=$(relerr "$(loss_of "$T/$name" $s)" "$(loss_of "$T/eq1" $s)")
    row equiv "step $s loss: --gpus $gl --context-parallel $c vs 1 GPU" "$(okif "$r" "$TOL_CP_LOSS")" "rel $r (tol $TOL_CP_LOSS)"
  done
  r=$(grads_rel "$T/$name.st" "$T/eq1.st")
  row equiv "step 1 grads (worst tensor): --gpus $gl --cp $c vs 1 GPU" "$(okif "$r" "$TOL_CP_GRAD")" "rel $r (tol $TOL_CP_GRAD)"
  # the bytes every rank sent (step 2) against the dry run's
  p=$("$G" train --dry-run $flags --gpus "$gl" --context-parallel "$c" --gradient-accumulation-steps "$acc" 2>/dev/null \
      | sed -n 's/^comm bytes per step per rank: //p')
  m=$(python3 -c "
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o.get('step') == 2 and 'comm_bytes_per_step' in o:
        b = o['comm_bytes_per_step']; print('all_reduce %.0f all_gather %.0f sendrecv %.0f' % (b['all_reduce'], b['all_gather'], b['sendrecv']))" "$T/$name/metrics.jsonl")
  row bytes "--gpus $gl --cp $c: bytes sent = dry run's" "$([ -n "$p" ] && [ "$p" = "$m" ] && echo ok || echo FAIL)" "sent [$m] predicted [$p]"
done
# the tolerance analysis (tests/gpu/tol.h, TOL_CP_GRAD): every CUDA run against the CPU, and the
# ring (glmtune's block kernels) against the 1-GPU run with glmtune's whole-row kernels
if [ -f "$cpu_ref" ]; then
  for name in eq1 eq1g $runs; do
    r=$(grads_rel "$T/$name.st" "$cpu_ref")
    row tol "step 1 grads (worst tensor) vs the CPU backend: $name" "$(okif "$r" "$TOL_MODEL_GRAD")" "rel $r (TOL_MODEL_GRAD $TOL_MODEL_GRAD)"
  done
else
  row tol "the CPU reference ($cpu_ref)" FAIL "missing: run tests/gpu/stage.sh"
fi
r=$(grads_rel "$T/eq1g.st" "$T/eq1.st")
row tol "1 GPU: glmtune's attention kernels vs cuDNN's (worst tensor)" info "rel $r"
for name in $runs; do
  r=$(grads_rel "$T/$name.st" "$T/eq1g.st")
  row tol "$name vs 1 GPU with glmtune's attention kernels" info "rel $r"
done
[ "$one" = 1 ] && { mkdir -p "${OUT:-$T}"; printf '%s' "$table" >"${OUT:-$T}/cp.txt"; echo "one GPU: parts 2 and 3 need 8 GPUs; table in ${OUT:-$T}/cp.txt"; exit $fail; }

# ---- the 9B checkpoint and rows of L random tokens
cfg=$root/tests/fixtures/glm4-tokenizer/config.glm-4-9b-chat-1m.json
if [ ! -f "$T/m9b/config.json" ]; then
  "$G" init-model --config "$cfg" -o "$T/m9b" --seed 1 2>"$T/init.log" || { row setup "init-model 9B" FAIL "$(tail -2 "$T/init.log")"; exit 1; }
fi
rows_of() { # L: shards of 2 rows of L tokens, one document each, every token but the first a target
  local L=$1
  [ -f "$T/r$L/manifest.json" ] && return 0
  python3 - "$L" "$T/r$L.jsonl" <<'PY'
import random, sys
L = int(sys.argv[1]); random.seed(L)
with open(sys.argv[2], "w") as f:
    for _ in range(2):
        ids = [random.randrange(151000) for _ in range(L)]
        f.write('{"input_ids": [' + ", ".join(map(str, ids)) + '], "labels": [-100, ' + ", ".join(map(str, ids[1:])) + "]}\n")
PY
  "$G" tokenize --quiet --seq-len "$L" -o "$T/r$L" "$T/r$L.jsonl" 2>"$T/tok$L.log"
}
run9b() { # L steps -> prints "tokens/s peak_MiB" (0 0 when the run failed)
  local L=$1 n=$2 out=$T/run-$1-$RANDOM
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$out.mem" 2>/dev/null &
  local mon=$!
  if "$G" train --quiet --device cuda --model "$T/m9b" --data "$T/r$L" --output-dir "$out" --gpus 8 --context-parallel 8 \
       --max-steps "$n" --logging-steps "$n" --save-steps 1000000 --lora-rank 8 --per-device-train-batch-size 1 \
       2>"$out.log"; then
    kill "$mon" 2>/dev/null
    echo "$(json_num "$out/metrics.jsonl" tokens_per_second) $(sort -n "$out.mem" | tail -1)"
  else
    kill "$mon" 2>/dev/null
    tail -2 "$out.log" >&2
    echo "0 0"
  fi
}

# ---- 2. the longest trainable row on 8 GPUs
longest=0
for L in 1048576 1572864 2097152 2621440 3145728 3670016 4194304; do
  [ "$L" -le "$maxlen" ] || break
  rows_of "$L" || { row longest "tokenize $L" FAIL "$(tail -2 "$T/tok$L.log")"; break; }
  read -r tps peak <<<"$(run9b "$L" 1)"
  if awk -v t="$tps" 'BEGIN { exit !(t > 0) }'; then longest=$L; else break; fi
done
row longest "longest row trained on 8 GPUs (goal: 1048576)" "$([ "$longest" -ge 1048576 ] && echo ok || echo FAIL)" "$longest tokens"

# ---- 3. tokens/s and MFU at 256k, 512k, 1M
for L in 262144 524288 1048576; do
  rows_of "$L" || { row speed "tokenize $L" FAIL "$(tail -2 "$T/tok$L.log")"; continue; }
  read -r tps peak <<<"$(run9b "$L" "$steps")"
  mfu=$(awk -v t="$tps" -v L="$L" 'BEGIN { f = 4 * 8.86e9 + 6 * 40 * L * 4096; printf "%.1f%%", 100 * t * f / (8 * 989e12) }')
  row speed "$L tokens per row, --gpus 8 --context-parallel 8" "$(awk -v t="$tps" 'BEGIN { print t > 0 ? "ok" : "FAIL" }')" \
    "$tps tokens/s, MFU $mfu, peak ${peak:-?} MiB"
done

mkdir -p "$(dirname "$res")"
{
  echo "# Context parallel on $(nvidia-smi -L | head -1 | sed 's/ (UUID.*//') x $ngpu ($(date +%F))"
  echo
  echo "Commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), tests/gpu/cp.sh (GLM_CP_STEPS=$steps)."
  echo "MFU = tokens/s x (4 x 8.86e9 + 6 L T H Dh) / (8 x 989e12), docs/design.md §6."
  echo
  echo "| part | what | ok | value |"
  echo "|---|---|---|---|"
  printf '%s' "$table"
} >"$res"
echo "results in $res; outputs in $T"
exit $fail
