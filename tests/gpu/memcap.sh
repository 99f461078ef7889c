#!/bin/bash
# tests/gpu/memcap.sh: --max-gpu-memory as a hard cap on everything the process holds on the GPU
# (a plan over it refused before loading, bench --max-seq-len), on the GPU machine with the binaries staged by tests/gpu/stage.sh
# (.device/gpu carried, as for tests/gpu/run.sh). Each run's peak is read two ways: glmtune's own
# (NVML per process, sampled every 2 ms by bench) and nvidia-smi's, polled every 0.2 s by this
# script (the sum over the compute processes listed: on a lent machine only glmtune's).
#   1. bench --max-gpu-memory CAP --seq-len 8192,32768 (bf16 base, the 9B-1M shape): each length
#      trains within the cap, or stops with the cap's own out-of-memory message; never over it.
#   2. bench --max-seq-len --max-gpu-memory CAP: the planner's longest row, proven by one real step
#      (or the memory proof when a step would take over --max-step-seconds), peak within the cap.
#   3. bench --max-seq-len --prove-memory: the memory proof at the longest row, peak within the cap.
#   4. train with a plan over the cap (a 9B-shaped config.json and no weights at all, rows of 524288
#      tokens, --max-gpu-memory CAP): exit 1 before any weight is read, "nothing was loaded".
# Prints a table; exit 1 on any failure. Usage (on the GPU machine): tests/gpu/memcap.sh
# (GLM_CAP: the cap in GiB, default 22; GLM_MEMCAP_ARGS: more bench options, e.g. "--quantization-bit 4").
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/gpu/env.sh"
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "SKIPPED: no GPU here"; exit 77; }
cap=${GLM_CAP:-22}
extra=${GLM_MEMCAP_ARGS:-}
T=$(mktemp -d)
fail=0
row() { printf '%-44s %-8s %s\n' "$1" "$2" "$3"; [ "$2" = ok ] || fail=1; }
capmib=$(awk -v g="$cap" 'BEGIN { printf "%d", g * 1024 }')

# runs "$@" with nvidia-smi polled every 0.2 s; the peak (MiB, all compute processes) in $T/smi_peak
polled() {
  : >"$T/smi"
  ( while :; do nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits 2>/dev/null |
      awk '{ s += $1 } END { print s + 0 }' >>"$T/smi"; sleep 0.2; done ) &
  local poller=$!
  "$@"
  local rc=$?
  kill "$poller" 2>/dev/null; wait "$poller" 2>/dev/null
  sort -n "$T/smi" | tail -1 >"$T/smi_peak"
  return $rc
}
within() { awk -v p="$(cat "$T/smi_peak")" -v c="$capmib" 'BEGIN { exit !(p + 0 <= c + 0) }'; }

# ---- 1. the cap at 8k and 32k
polled timeout 600 "$G" bench --max-gpu-memory "$cap" --seq-len 8192,32768 --steps 1 --warmup 1 --json $extra \
  >"$T/b1" 2>"$T/b1.err"
p=$(cat "$T/smi_peak")
for s in 8192 32768; do
  line=$(grep "\"seq\": $s," "$T/b1")
  if echo "$line" | grep -q '"tok_s"'; then
    pk=$(echo "$line" | grep -o '"process_peak_gib": [0-9.]*' | sed 's/.*: //')
    ok=$(awk -v p="$pk" -v c="$cap" 'BEGIN { print (p + 0 <= c + 0) ? "ok" : "FAIL" }')
    row "bench $s under $cap GiB: trains" "$ok" "glmtune's peak $pk GiB; $(echo "$line" | grep -o '"tok_s": [0-9.]*')"
  elif echo "$line" | grep -q 'max-gpu-memory'; then
    row "bench $s under $cap GiB: stops at the cap" ok "$(echo "$line" | grep -o '"error": .\{0,160\}')"
  else
    row "bench $s under $cap GiB" FAIL "neither trained nor stopped by the cap: $line $(tail -3 "$T/b1.err")"
  fi
done
within && r=ok || r=FAIL
row "bench 8k,32k: nvidia-smi peak <= $cap GiB" "$r" "${p} MiB of ${capmib}"

# ---- 2. the longest row under the cap, proven
polled timeout 1200 "$G" bench --max-seq-len --max-gpu-memory "$cap" --seq-step 1024 --max-step-seconds 300 --json $extra \
  >"$T/b2" 2>"$T/b2.err"
rc=$?
p=$(cat "$T/smi_peak")
line=$(grep '"mode": "max-seq-len"' "$T/b2" | tail -1)
if [ $rc = 0 ] && echo "$line" | grep -q '"within_budget": true'; then r=ok; else r=FAIL; fi
row "--max-seq-len $cap: longest row proven" "$r" "$(echo "$line" | grep -o '"longest_T": [0-9]*\|"proven_by": "[^"]*"\|"tok_s": [0-9.]*\|"peak_gib": [0-9.]*' | tr '\n' ' ')"
within && r=ok || r=FAIL
row "--max-seq-len: nvidia-smi peak <= $cap GiB" "$r" "${p} MiB of ${capmib}"
[ "$fail" = 0 ] || { cat "$T/b2"; tail -20 "$T/b2.err"; }

# ---- 3. the memory proof at the longest row
polled timeout 1200 "$G" bench --max-seq-len --max-gpu-memory "$cap" --seq-step 1024 --prove-memory --json $extra \
  >"$T/b3" 2>"$T/b3.err"
rc=$?
p=$(cat "$T/smi_peak")
line=$(grep '"mode": "max-seq-len"' "$T/b3" | tail -1)
if [ $rc = 0 ] && echo "$line" | grep -q '"proven_by": "memory proof' && echo "$line" | grep -q '"within_budget": true'; then
  r=ok; else r=FAIL; fi
row "--prove-memory $cap: the proof within" "$r" "$(echo "$line" | grep -o '"longest_T": [0-9]*\|"step_s": [0-9.]*\|"peak_gib": [0-9.]*' | tr '\n' ' ')"
within && r=ok || r=FAIL
row "--prove-memory: nvidia-smi peak <= $cap GiB" "$r" "${p} MiB of ${capmib}"

# ---- 4. a plan over the cap: refused before any weight is read
mkdir -p "$T/noweights"
cp "$root/tests/fixtures/glm4-tokenizer/config.glm-4-9b-chat-1m.json" "$T/noweights/config.json"
awk 'BEGIN { srand(3); n = 500000; for (i = 0; i < 2; i++) { for (j = 0; j < n; j++) x[j] = 1000 + int(rand() * 100000);
     printf "{\"input_ids\": ["; for (j = 0; j < n; j++) printf "%s%d", j ? ", " : "", x[j];
     printf "], \"labels\": ["; for (j = 0; j < n; j++) printf "%s%d", j ? ", " : "", j < 5 ? -100 : x[j]; print "]}" } }' >"$T/long.jsonl"
"$G" tokenize --quiet --seq-len 524288 -o "$T/long" "$T/long.jsonl" 2>/dev/null
polled timeout 300 "$G" train --quiet --model "$T/noweights" --data "$T/long" --output-dir "$T/out" --max-steps 1 \
  --max-gpu-memory "$cap" $extra 2>"$T/e4"
rc=$?
if [ $rc = 1 ] && grep -q "nothing was loaded" "$T/e4"; then r=ok; else r=FAIL; fi
row "train, 524288 tokens over $cap GiB: refused" "$r" "exit $rc: $(grep -o 'the memory plan.\{0,120\}' "$T/e4" | head -1)"
[ "$r" = ok ] || cat "$T/e4"

echo
[ $fail = 0 ] && echo "memcap: all passed" || echo "memcap: FAILED"
rm -rf "$T"
exit $fail
