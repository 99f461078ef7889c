#!/bin/bash
# tests/gpu/ab.sh: `glmtune bench` of two builds taken in turns, in one command on the GPU machine,
# for a change that must not cost speed (a refactoring) or must gain it: the run-to-run spread of
# one build is about 2% (docs/bench/2026-12-06-h200.md), so comparisons that decide are made
# inside one command, new and old alternating.
#   new: .device/gpu (tests/gpu/stage.sh of the change); old: .device/base, a directory holding
#   the earlier build's glmtune and libglm_cuda.so (copied from its own stage) and a COMMIT file.
# Settings (environment): GLM_AB_ROUNDS (2), GLM_AB_DTYPES ("fp8 bf16": --base-dtype values),
# GLM_AB_SEQ (8192), GLM_AB_STEPS (3). Writes $OUT/ab.md (one row per run, then the mean of each
# build and its ratio new / old) and each run's log as $OUT/ab_<new|old>_<dtype>_<round>.log.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/gpu/env.sh" # LD_LIBRARY_PATH from .device/gpu's staged libraries; $G the new build
base=${GLM_AB_BASE:-$root/.device/base}
[ -x "$base/glmtune" ] || { echo "no $base/glmtune: copy the earlier build's glmtune and libglm_cuda.so there"; exit 1; }
out=${OUT:-/tmp/glm-ab}
mkdir -p "$out"
md=$out/ab.md
seq=${GLM_AB_SEQ:-8192}
{
  echo "# glmtune bench, two builds in turns: $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)"
  echo
  echo "new: $(cat "$pre/COMMIT" 2>/dev/null || echo unknown); old: $(cat "$base/COMMIT" 2>/dev/null || echo unknown);" \
       "seq $seq, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "| round | base dtype | build | tokens/s | step s | peak GiB |"
  echo "|---|---|---|---|---|---|"
} >"$md"
fail=0
for r in $(seq 1 "${GLM_AB_ROUNDS:-2}"); do
  for dt in ${GLM_AB_DTYPES:-fp8 bf16}; do
    for side in new old; do
      bin=$G; [ $side = old ] && bin=$base/glmtune
      log=$out/ab_${side}_${dt}_$r.log
      "$bin" bench --base-dtype "$dt" --seq-len "$seq" --steps "${GLM_AB_STEPS:-3}" >"$log" 2>&1 || fail=1
      # the table row of this length: | seq | tokens/s | step s | TFLOP/s | MFU | peak GiB | ...
      row=$(grep -E "^\| $seq \|" "$log" | head -1)
      tps=$(echo "$row" | awk -F'|' '{gsub(/ /,"",$3); print $3}')
      st=$(echo "$row" | awk -F'|' '{gsub(/ /,"",$4); print $4}')
      pk=$(echo "$row" | awk -F'|' '{gsub(/ /,"",$7); print $7}')
      echo "| $r | $dt | $side | ${tps:-failed} | ${st:-} | ${pk:-} |" >>"$md"
      [ -n "$tps" ] || fail=1
    done
  done
done
{
  echo
  echo "| base dtype | new mean tokens/s | old mean tokens/s | new / old |"
  echo "|---|---|---|---|"
  for dt in ${GLM_AB_DTYPES:-fp8 bf16}; do
    awk -F'|' -v dt="$dt" '$3 ~ " "dt" " && $5+0 > 0 { s[$4] += $5; n[$4]++ }
      END { a = n[" new "] ? s[" new "] / n[" new "] : 0; b = n[" old "] ? s[" old "] / n[" old "] : 0;
            printf "| %s | %.0f | %.0f | %.4f |\n", dt, a, b, (b > 0 ? a / b : 0) }' "$md"
  done
} >>"$md.tail"
cat "$md.tail" >>"$md" && rm -f "$md.tail"
cat "$md"
exit $fail
