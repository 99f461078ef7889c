#!/bin/bash
# tests/gpu/multi.sh: data parallel on CUDA over NCCL, with the binaries staged by
# tests/gpu/stage.sh (.device/gpu carried, as for tests/gpu/run.sh). Two modes:
#   several GPUs: --gpus 2 / 4 (distinct GPUs), every part below;
#   one GPU: the ranks share GPU 0 (--gpus 0,0 / 0,0,0,0: each worker its own NCCL_HOSTID,
#     NCCL's socket transport over loopback, tool/train/launch.c), which checks the multi-rank code
#     paths' correctness only: part 1 and the 9B-shape equivalence of part 4; parts 2 and 3
#     (speed, memory per GPU) need several GPUs and are skipped.
#   1. equivalence on CUDA, the tiny GLM-4 fixture: 1 GPU x micro-batch 2 against 2 ranks x 1 and
#      2 ranks x 1 --shard-base, 1 GPU x 4 against 4 ranks x 1 (and --shard-base): the 3 steps'
#      losses and the first step's gradients within 1e-2 relative (bf16 activations: B=2 and B=1
#      run GEMMs of other shapes; the CPU backend's test_train_dp holds 1e-6); the bytes every rank
#      sent (metrics.jsonl comm_bytes_per_step, step 2) equal the dry run's prediction
#      (lora/model/comm_plan.c); resume across rank counts (2 ranks to step 2, then 1 GPU x 2 to step 4,
#      against 2 ranks straight); a killed rank (kill -9 of rank 1: the run stops, non-zero, the
#      message names rank 1, no worker left); a slowed link (GLMTUNE_COMM_DELAY_MS=40 on every
#      transfer): comm_exposed_share accounts for at least 70% of the slowdown (the CUDA stall
#      timing of kernels/cuda/comm.cu);
#   2. speed (several GPUs): a random GLM-4-9B-Chat-1M-shaped checkpoint, rows of 8192 tokens,
#      1 GPU against --gpus 2: the goal is >= 1.95x (torchrun + PEFT: 1.98x);
#   3. --shard-base --max-gpu-memory 22 on --gpus 2 at 8k (several GPUs): trains, peak below 24 GB;
#   4. the 9B shape with 4 layers at 8k (one GPU and several): 2 ranks x 1 against 1 x 2, and
#      --shard-base: step losses within 1e-2; the bytes against the dry run; tokens/s and
#      comm_exposed_share of both, and whether the share accounts for --shard-base's slowdown.
# Prints a table (and writes it to $OUT/multi.txt when OUT is set); exit 1 on any failure.
# Usage (on the GPU machine): tests/gpu/multi.sh  (GLM_MULTI_STEPS: optimizer steps of the speed
# runs, default 12; GLM_MULTI_TMP: a directory with room for the 9B checkpoint, default mktemp -d;
# GLM_MULTI_ONE_GPU=1 forces the one-GPU mode).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/gpu/env.sh"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$ngpu" -ge 1 ] || { echo "SKIPPED: no GPU here"; exit 77; }
if [ "$ngpu" -ge 2 ] && [ "${GLM_MULTI_ONE_GPU:-0}" != 1 ]; then
  one=0; g2=0,1; g4=$([ "$ngpu" -ge 4 ] && echo 0,1,2,3 || echo "")
else
  one=1; g2=0,0; g4=0,0,0,0
fi
T=${GLM_MULTI_TMP:-$(mktemp -d)}
steps=${GLM_MULTI_STEPS:-12}
fail=0
tab=${OUT:-$T}/multi.txt
: >"$tab"
row() { printf '%-10s %-60s %-6s %s\n' "$1" "$2" "$3" "$4" | tee -a "$tab"; [ "$3" = ok ] || [ "$3" = SKIP ] || fail=1; }
loss_of() { grep "\"step\": *$2," "$1/metrics.jsonl" | grep -o '"loss": *[0-9.e+-]*' | sed 's/.*: *//'; }
relerr() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.2e", (b != 0 ? d / b : 1) }'; }
okif() { awk -v r="$1" -v t="$2" 'BEGIN { print (r != "" && r + 0 < t + 0) ? "ok" : "FAIL" }'; }
grads_rel() {
  python3 - "$1" "$2" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert a.keys() == b.keys()
num = sum(float(np.sum((a[k].astype(np.float64) - b[k]) ** 2)) for k in b)
den = sum(float(np.sum(b[k].astype(np.float64) ** 2)) for k in b)
print(f"{(num / den) ** 0.5:.3e}")
PY
}
# the bytes of step 2 as "all_reduce A all_gather G sendrecv S" (metrics.jsonl) and the dry run's
sent_bytes() {
  python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if o.get("step") == 2 and "comm_bytes_per_step" in o:
        b = o["comm_bytes_per_step"]
        print("all_reduce %.0f all_gather %.0f sendrecv %.0f" % (b["all_reduce"], b["all_gather"], b["sendrecv"]))
PY
}
predicted_bytes() { "$G" train --dry-run "$@" 2>/dev/null | sed -n 's/^comm bytes per step per rank: //p'; }
bytes_row() { # part name run-dir dry-run-flags...
  local part=$1 name=$2 dir=$3; shift 3
  local p m; p=$(predicted_bytes "$@"); m=$(sent_bytes "$dir")
  row "$part" "bytes sent = dry run's: $name" "$([ -n "$p" ] && [ "$p" = "$m" ] && echo ok || echo FAIL)" "sent [$m] predicted [$p]"
}
# "share seconds_per_step" of the last logged step (tokens per step given)
share_time() {
  python3 -c "import json,sys; o=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(o.get('comm_exposed_share', 'nan'), float(sys.argv[2]) / o['tokens_per_second'], o['tokens_per_second'])" "$1/metrics.jsonl" "$2" 2>/dev/null || echo "nan nan 0"
}
# the share accounts for the slowdown of run b against run a: the waiting per step grows by >= frac of the step time's growth
accounts() { awk -v fs="$1" -v ft="$2" -v ss="$3" -v st="$4" -v f="$5" 'BEGIN { d = st - ft; w = ss * st - fs * ft; print (d > 0 && w >= f * d) ? "ok" : "FAIL" }'; }
[ "$one" = 1 ] && echo "one-GPU mode: the ranks share GPU 0 over NCCL's socket transport (correctness only, never speed)" | tee -a "$tab"

# ---- 1. equivalence on CUDA (tiny fixture, the staged golden shards)
base=$root/tests/fixtures/tiny-glm4/chatglm
flags="--quiet --device cuda --model $base --init-adapter $base/adapter_init --data $pre/cli/chatglm-shards --lora-target all
  --lora-rank 4 --lora-alpha 8 --learning-rate 1e-3 --lr-scheduler-type constant --logging-steps 1 --seed 3
  --gradient-checkpointing full --max-gpu-memory 16"
for ref in 2 4; do
  "$G" train $flags --max-steps 3 --per-device-train-batch-size $ref --output-dir "$T/eq1-b$ref" --dump-grads "$T/eq1-b$ref.st" \
    2>"$T/eq1-b$ref.log" || row equiv "1 GPU x $ref" FAIL "$(tail -2 "$T/eq1-b$ref.log")"
done
for v in "2:dp:" "2:shard:--shard-base" "4:dp:" "4:shard:--shard-base"; do
  IFS=: read -r n name extra <<<"$v"
  gl=$([ "$n" = 2 ] && echo "$g2" || echo "$g4")
  [ -n "$gl" ] || { row equiv "$n ranks $extra" SKIP "$ngpu GPUs here"; continue; }
  d=$T/eq-$n-$name
  if ! "$G" train $flags --max-steps 3 --gpus "$gl" --per-device-train-batch-size 1 $extra --output-dir "$d" \
       --dump-grads "$d.st" 2>"$d.log"; then
    row equiv "--gpus $gl x 1 $extra" FAIL "$(tail -3 "$d.log" | tr '\n' ' ')"; continue
  fi
  for s in 1 2 3; do
    r=$(relerr "$(loss_of "$d" $s)" "$(loss_of "$T/eq1-b$n" $s)")
    row equiv "step $s loss: --gpus $gl x 1 $extra vs 1 GPU x $n" "$(okif "$r" 1e-2)" "rel $r"
  done
  r=$(grads_rel "$d.st" "$T/eq1-b$n.st")
  row equiv "step 1 gradients: --gpus $gl x 1 $extra vs 1 GPU x $n" "$(okif "$r" 1e-2)" "rel $r"
  k=$(wc -l <"$d/metrics.jsonl")
  row equiv "only rank 0 writes metrics (--gpus $gl $extra)" "$([ "$k" = 3 ] && echo ok || echo FAIL)" "$k lines"
  bytes_row bytes "--gpus $gl $extra" "$d" $flags --gpus "$gl" --per-device-train-batch-size 1 $extra
done
# resume across rank counts: 2 ranks to step 2 (checkpoint), then 1 GPU x 2 to step 4, against 2 ranks straight
rflags="$flags --max-steps 4 --save-steps 2"
if "$G" train $rflags --gpus "$g2" --per-device-train-batch-size 1 --output-dir "$T/rs-2" 2>"$T/rs-2.log" &&
   "$G" train $rflags --per-device-train-batch-size 2 --output-dir "$T/rs-1" --resume-from-checkpoint "$T/rs-2/checkpoint-2" \
     2>"$T/rs-1.log"; then
  for s in 3 4; do
    r=$(relerr "$(loss_of "$T/rs-1" $s)" "$(loss_of "$T/rs-2" $s)")
    row resume "step $s loss: resumed on 1 GPU x 2 vs 2 ranks straight" "$(okif "$r" 1e-2)" "rel $r"
  done
else
  row resume "2 ranks -> checkpoint-2 -> 1 GPU" FAIL "$(tail -2 "$T/rs-2.log" "$T/rs-1.log" | tr '\n' ' ')"
fi
# a killed rank: kill -9 of rank 1 once step 1 is logged
"$G" train $flags --max-steps 400 --save-steps 1000 --gpus "$g2" --per-device-train-batch-size 1 --output-dir "$T/kill" \
  2>"$T/kill.log" &
sup=$!
for _ in $(seq 1 600); do [ -s "$T/kill/metrics.jsonl" ] && break; kill -0 $sup 2>/dev/null || break; sleep 0.1; done
victim=""
for p in $(pgrep -P $sup); do tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx GLMTUNE_RANK=1 && victim=$p; done
[ -n "$victim" ] && kill -9 "$victim"
others=$(pgrep -P $sup | tr '\n' ' ')
wait $sup; krc=$?
left=""; for p in $others; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
row kill "kill -9 rank 1: non-zero exit, rank 1 named, no worker left" \
  "$([ -n "$victim" ] && [ $krc != 0 ] && grep -q "rank 1" "$T/kill.log" && [ -z "$left" ] && echo ok || echo FAIL)" \
  "exit $krc; $(grep -m1 -o 'rank 1 ([^;]*' "$T/kill.log")${left:+; still running:$left}"
# a slowed link: every transfer 40 ms later; the exposed share must account for the slowdown
for v in "shard:--shard-base" "dp:"; do
  name=${v%%:*}; extra=${v#*:}
  "$G" train $flags --max-steps 3 --gpus "$g2" --per-device-train-batch-size 1 $extra --output-dir "$T/fast-$name" 2>/dev/null
  GLMTUNE_COMM_DELAY_MS=40 "$G" train $flags --max-steps 3 --gpus "$g2" --per-device-train-batch-size 1 $extra \
    --output-dir "$T/slow-$name" 2>/dev/null
  read -r fs ft _ <<<"$(share_time "$T/fast-$name" 96)"
  read -r ss st _ <<<"$(share_time "$T/slow-$name" 96)"
  row share "40 ms slower transfers ($name): comm_exposed_share accounts for it" "$(accounts "$fs" "$ft" "$ss" "$st" 0.7)" \
    "share $fs of $ft s/step -> $ss of $st s/step"
done

# ---- the 9B-shaped checkpoint (parts 2, 3) and rows of 8k tokens (parts 2 to 4)
cfg=$root/tests/fixtures/glm4-tokenizer/config.glm-4-9b-chat-1m.json
if [ "$one" = 0 ] && [ ! -f "$T/m9b/config.json" ]; then
  "$G" init-model --config "$cfg" -o "$T/m9b" --seed 1 2>"$T/init.log" || row speed "init-model 9B" FAIL "$(tail -2 "$T/init.log")"
fi
awk 'BEGIN { srand(7); for (r = 0; r < 16; r++) { printf "{\"input_ids\": ["; for (i = 0; i < 8192; i++) { id[i] = int(rand() * 151000); printf "%s%d", i ? ", " : "", id[i]; } printf "], \"labels\": ["; for (i = 0; i < 8192; i++) printf "%s%d", i ? ", " : "", i ? id[i] : -100; print "]}" } }' >"$T/rows8k.jsonl"
# (random tokens, every one but the first a target: the loss value does not matter here, only the
# work; labels must equal input_ids or be -100, as tokenize checks)
"$G" tokenize --quiet --seq-len 8192 -o "$T/s8k" "$T/rows8k.jsonl" 2>"$T/tok.log" || row speed "tokenize 8k rows" FAIL "$(tail -2 "$T/tok.log")"

if [ "$one" = 0 ]; then
# ---- 2. speed at 8k: 1 GPU vs 2 GPUs, the 9B shape
speed() { # extra flags...; prints the last window's tokens/s
  local out=$T/speed-$RANDOM
  "$G" train --quiet --model "$T/m9b" --data "$T/s8k" --output-dir "$out" --max-steps "$steps" --logging-steps $((steps / 2)) \
    --save-steps 1000000 --lora-rank 8 --device cuda "$@" 2>"$out.log" || { tail -3 "$out.log" >&2; echo 0; return; }
  tail -1 "$out/metrics.jsonl" | grep -o '"tokens_per_second": *[0-9.e+-]*' | sed 's/.*: *//'
}
t1=$(speed --per-device-train-batch-size 1)
t2=$(speed --per-device-train-batch-size 1 --gpus 2)
ratio=$(awk -v a="$t2" -v b="$t1" 'BEGIN { printf "%.3f", b > 0 ? a / b : 0 }')
row speed "9B at 8k: 1 GPU tokens/s" "$(awk -v t="$t1" 'BEGIN { print t > 0 ? "ok" : "FAIL" }')" "$t1"
row speed "9B at 8k: --gpus 2 tokens/s (total)" "$(awk -v t="$t2" 'BEGIN { print t > 0 ? "ok" : "FAIL" }')" "$t2"
row speed "speed-up of 2 GPUs (goal >= 1.95)" "$(awk -v r="$ratio" 'BEGIN { print r >= 1.95 ? "ok" : "FAIL" }')" "${ratio}x"

# ---- 3. --shard-base --max-gpu-memory 22 on 2 GPUs at 8k
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$T/mem.csv" 2>/dev/null &
mon=$!
ts=$(speed --per-device-train-batch-size 1 --gpus 2 --shard-base --max-gpu-memory 22)
kill "$mon" 2>/dev/null
peak=$(sort -n "$T/mem.csv" | tail -1)
row shard "--shard-base --max-gpu-memory 22, --gpus 2, 8k: trains" "$(awk -v t="$ts" 'BEGIN { print t > 0 ? "ok" : "FAIL" }')" "$ts tokens/s"
row shard "... peak GPU memory below 24 GB (nvidia-smi)" "$(awk -v p="${peak:-0}" 'BEGIN { print (p > 0 && p < 24 * 1024) ? "ok" : "FAIL" }')" "${peak:-?} MiB"
else
  row speed "speed and memory per GPU (parts 2, 3)" SKIP "one GPU: the ranks share it"
fi

# ---- 4. the 9B shape with 4 layers at 8k (one GPU or several): equivalence, bytes, comm share
python3 - "$cfg" "$T/cfg4.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["num_layers"] = 4
json.dump(c, open(sys.argv[2], "w"))
PY
[ -f "$T/m9b4/config.json" ] || "$G" init-model --config "$T/cfg4.json" -o "$T/m9b4" --seed 1 2>"$T/init4.log" \
  || row 9b "init-model 9B shape, 4 layers" FAIL "$(tail -2 "$T/init4.log")"
f9="--quiet --device cuda --model $T/m9b4 --data $T/s8k --lora-rank 8 --max-steps 4 --logging-steps 1 --save-steps 1000
  --learning-rate 1e-4 --gradient-checkpointing full --max-gpu-memory 50"
"$G" train $f9 --per-device-train-batch-size 2 --output-dir "$T/n1" 2>"$T/n1.log" || row 9b "1 GPU x 2" FAIL "$(tail -2 "$T/n1.log")"
for v in "rep:" "shard:--shard-base"; do
  name=${v%%:*}; extra=${v#*:}
  if ! "$G" train $f9 --gpus "$g2" --per-device-train-batch-size 1 $extra --output-dir "$T/n2-$name" 2>"$T/n2-$name.log"; then
    row 9b "--gpus $g2 x 1 $extra" FAIL "$(tail -3 "$T/n2-$name.log" | tr '\n' ' ')"; continue
  fi
  for s in 1 4; do
    r=$(relerr "$(loss_of "$T/n2-$name" $s)" "$(loss_of "$T/n1" $s)")
    row 9b "step $s loss: --gpus $g2 x 1 $extra vs 1 GPU x 2 (8k)" "$(okif "$r" 1e-2)" "rel $r"
  done
  bytes_row 9b "9B shape --gpus $g2 $extra" "$T/n2-$name" $f9 --gpus "$g2" --per-device-train-batch-size 1 $extra
done
read -r rs rt rtps <<<"$(share_time "$T/n2-rep" 16384)"
read -r ss st stps <<<"$(share_time "$T/n2-shard" 16384)"
row 9b "replicated base: tokens/s, comm_exposed_share" ok "$rtps tok/s, share $rs"
row 9b "--shard-base: tokens/s, comm_exposed_share" ok "$stps tok/s, share $ss"
row 9b "--shard-base's slowdown shows in comm_exposed_share (>= 50%)" "$(accounts "$rs" "$rt" "$ss" "$st" 0.5)" \
  "waiting $rs x $rt s/step -> $ss x $st s/step"
echo "outputs in $T"
exit $fail
