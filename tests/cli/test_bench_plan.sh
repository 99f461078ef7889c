#!/usr/bin/env bash
# glmtune train --dry-run (the memory plan without loading weights) and glmtune bench on the CPU
# backend: the 9B-1M shape planned for a 24 GB card (fits at 8k, not at 64k, with the reason),
# the modes, context parallel at 1M tokens on 8 x 137 GiB (and on 2, where only the planned
# offload would fit), usage errors, and a small benchmark with its table and JSON.
set -uo pipefail
G=${GLMTUNE:?}
F=${GLM_FIXTURES:?the test data folder, tests/fixtures}
[ -d "$F" ] || { echo "FAIL: the test data folder $F does not exist" >&2; exit 1; }
T=$(mktemp -d /tmp/glmplan.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
has() { grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }
not_has() { ! grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }
CFG="$F/glm4-tokenizer/config.glm-4-9b-chat-1m.json"

# a 24 GB card: 8k fits with recomputation, 64k does not (exit 1, the reason and what to change)
$G train --dry-run --quiet --model "$CFG" --seq-len 8192 --device cuda --max-gpu-memory 22 >"$T/p8" 2>&1; rc=$?
check "dry run 8k in 22 GiB: exit 0 ($rc)" test $rc = 0
check "... prints the plan" has "$T/p8" "memory plan: 1 x 8192 tokens"
check "... recomputes layers" has "$T/p8" "full: keep the layer input"
check "... the predicted peak, with the CUDA context, under the 22 GiB" bash -c "grep -Eq 'predicted peak: [0-9.]+ GiB; with the CUDA context and library workspaces 2[01][.][0-9]+ GiB' '$T/p8'"
check "... the weights (17.67 GiB of bf16)" has "$T/p8" "weights 17.67"
$G train --dry-run --quiet --model "$CFG" --seq-len 65536 --device cuda --max-gpu-memory 22 >"$T/p64" 2>&1; rc=$?
check "dry run 64k in 22 GiB: exit 1 ($rc)" test $rc = 1
check "... says it does not fit" has "$T/p64" "does NOT fit"
check "... and what to change" has "$T/p64" "shorter --seq-len"
# --shard-base over 4 ranks of 24 GB: each holds a quarter of the base; 32k fits (it does not unsharded)
$G train --dry-run --quiet --model "$CFG" --seq-len 32768 --device cuda --max-gpu-memory 22 --shard-base --gpus 4 >"$T/s32" 2>&1; rc=$?
check "--shard-base --gpus 4, 32k in 22 GiB: exit 0 ($rc)" test $rc = 0
check "... says 4 ranks" has "$T/s32" "data parallel: 4 ranks"
check "... the global batch" has "$T/s32" "global batch 1 x 1 accumulation x 4 ranks = 4 rows"
check "... the trainable parameters" has "$T/s32" "LoRA r=8, 21340160 trainable parameters"
check "... shows the shard and the gather slots" has "$T/s32" "this rank holds 1/4 of every base matrix (4.42 GiB)"
check "... the weights with the slots" has "$T/s32" "weights 6.34 (shard + gather slots)"
$G train --dry-run --quiet --model "$CFG" --seq-len 32768 --device cuda --max-gpu-memory 22 --gpus 4 >"$T/u32" 2>&1; rc=$?
check "unsharded 32k in 22 GiB: exit 1 ($rc)" test $rc = 1
check "... suggests --shard-base" has "$T/u32" "shard-base splits the frozen base"
$G train --dry-run --quiet --model "$CFG" --seq-len 8192 --device cuda --max-gpu-memory 22 --shard-base --gpus 2 >"$T/s8" 2>&1; rc=$?
check "--shard-base --gpus 2, 8k in 22 GiB: exit 0 ($rc)" test $rc = 0
check "... 1/2 of the base" has "$T/s8" "this rank holds 1/2 of every base matrix"
$G train --dry-run --quiet --model "$CFG" --seq-len 8192 --device cuda --max-gpu-memory 22 --gpus 0,x >"$T/ug" 2>&1; rc=$?
check "--gpus 0,x: exit 2 ($rc)" test $rc = 2
check "... says what --gpus takes" has "$T/ug" "list of device ids"
# the weights alone too big: the hint says so (not "shorter rows"); an absurd budget stays sane
$G train --dry-run --quiet --model "$CFG" --seq-len 8192 --device cuda --max-gpu-memory 0.5 >"$T/p05" 2>&1; rc=$?
check "0.5 GiB: exit 1 ($rc)" test $rc = 1
check "... the weights alone take" has "$T/p05" "weights alone take"
check "... and that the CUDA context alone takes more than the cap" has "$T/p05" "is less than the CUDA context and library workspaces alone (0.97 GiB)"
# --device auto on a machine without a GPU plans for the CPU, and says how to plan for a GPU
$G train --dry-run --quiet --model "$CFG" --seq-len 8192 >"$T/pauto" 2>&1
if grep -q "^device: cpu" "$T/pauto"; then
  check "no GPU, --device auto: the plan says it is the CPU's and names --max-gpu-memory" has "$T/pauto" "no GPU here, so the plan is the CPU backend's; --max-gpu-memory G plans for a GPU of G GiB"
fi
$G train --dry-run --quiet --model "$CFG" --seq-len 8192 --device cuda --max-gpu-memory 1e9 >"$T/pbig" 2>&1; rc=$?
check "1e9 GiB: exit 0 ($rc)" test $rc = 0
check "... keeps every layer, no negative numbers" bash -c "grep -q 'layers 0-39: keep all' '$T/pbig' && ! grep -q -- ' -[0-9]' '$T/pbig'"
# an H200-sized budget keeps every activation at 8k; full checkpointing asked for is honoured
$G train --dry-run --quiet --model "$CFG" --seq-len 8192 --device cuda --max-gpu-memory 137 >"$T/p137" 2>&1
check "137 GiB at 8k: keep all" has "$T/p137" "layers 0-39: keep all activations"
$G train --dry-run --quiet --model "$CFG" --seq-len 8192 --device cuda --max-gpu-memory 137 --gradient-checkpointing full >"$T/pf" 2>&1
check "--gradient-checkpointing full: every layer full" has "$T/pf" "layers 0-39: full"
$G train --dry-run --quiet --model "$CFG" --seq-len 8192 --device cuda --max-gpu-memory 137 --gradient-checkpointing >"$T/pb" 2>&1
check "the bare flag means full (transformers)" has "$T/pb" "checkpointing full"
# context parallel: GLM-4-9B-Chat-1M at 1,048,576 tokens on 8 x 137 GiB (one group of 8 ranks)
$G train --dry-run --quiet --model "$CFG" --seq-len 1048576 --device cuda --max-gpu-memory 137 --context-parallel 8 --gpus 8 >"$T/cp8" 2>&1; rc=$?
check "1M, --context-parallel 8 --gpus 8, 137 GiB: exit 0 ($rc)" test $rc = 0
check "... one group of 8" has "$T/cp8" "context parallel: 8 ranks per row, 1 data-parallel group (8 ranks)"
check "... one row per step" has "$T/cp8" "(micro-batch 1 row per group; global batch 1 x 1 accumulation x 1 group = 1 row)"
check "... 2 of 16 chunks per rank" has "$T/cp8" "each holds 2 of the 16 chunks of 65536 tokens of a row"
check "... 131072 tokens per rank" has "$T/cp8" "131072 tokens per micro-batch"
check "... the ring's buffers" has "$T/cp8" "ring buffers 3.52"
check "... the layer inputs of 131072 tokens" has "$T/cp8" "layer inputs 41.00"
check "... the longest row" has "$T/cp8" "longest row that fits 8 ranks of 137 GiB with --context-parallel 8"
check "... on the GPUs" has "$T/cp8" "tokens with the layer inputs on the GPUs"
check "... and offloaded" has "$T/cp8" "tokens with the layer inputs offloaded to page-locked host memory"
# 2 GPUs: 1M does not fit with the layer inputs on the GPUs (exit 1); offloaded it would, but not in
# the 64 GiB of host memory planned for (GLMTUNE_HOST_MEMORY_GIB: 92 GiB needed per rank)
GLMTUNE_HOST_MEMORY_GIB=64 $G train --dry-run --quiet --model "$CFG" --seq-len 1048576 --device cuda --max-gpu-memory 137 --context-parallel 2 --gpus 2 >"$T/cp2" 2>&1; rc=$?
check "1M, --context-parallel 2 --gpus 2: exit 1 ($rc)" test $rc = 1
check "... does not fit" has "$T/cp2" "does NOT fit"
check "... names --context-parallel" has "$T/cp2" "more ranks per row (--context-parallel N with --gpus)"
check "... fits offloaded, with the hint's host memory (the fewest layer inputs offloaded)" has "$T/cp2" "1048576 tokens (--seq-len) with offloading: fits (132.21 GiB per rank on the GPU, 92.0 GiB of host memory per rank: more than the host memory planned for, see above)"
check "... the hint says what offloading would take" has "$T/cp2" "Offloading 23 of the 40 layer inputs to host memory would make it fit, but takes 92.00 GiB of page-locked host memory per rank, more than the 30.00 GiB this run may use"
# planned without a GPU: GLMTUNE_ATTENTION=glmtune plans no cuDNN workspace and the lean backward
# (37.2 KB a token across the row instead of 45.2); an unknown value is refused as a run refuses it
GLMTUNE_HOST_MEMORY_GIB=126 GLMTUNE_ATTENTION=glmtune $G train --dry-run --quiet --model "$CFG" --seq-len 131072 --device cuda --max-gpu-memory 22 --quantization-bit 4 >"$T/own" 2>&1; rc=$?
check "GLMTUNE_ATTENTION=glmtune, 128k in 22 GiB, 4-bit: exit 0 ($rc)" test $rc = 0
check "... says so" has "$T/own" "attention: glmtune's kernels (GLMTUNE_ATTENTION=glmtune): no library workspace planned"
check "... the lean backward's working buffers" has "$T/own" "37.2 KB per token across the row"
check "... no cuDNN workspace" not_has "$T/own" "cuDNN's attention workspace"
GLMTUNE_HOST_MEMORY_GIB=126 $G train --dry-run --quiet --model "$CFG" --seq-len 131072 --device cuda --max-gpu-memory 22 --quantization-bit 4 >"$T/auto" 2>&1
check "auto: cuDNN's workspace, per token" has "$T/auto" "cuDNN's attention workspace in it: 32.8 KB more per token"
GLMTUNE_ATTENTION=bogus $G train --dry-run --quiet --model "$CFG" --seq-len 8192 --device cuda --max-gpu-memory 22 >"$T/bogus" 2>&1; rc=$?
check "GLMTUNE_ATTENTION=bogus: exit 2 ($rc)" test $rc = 2
check "... names the values" has "$T/bogus" "GLMTUNE_ATTENTION=bogus: expected auto, cudnn or glmtune"
$G trian >"$T/trian" 2>&1; rc=$?
check "glmtune trian: exit 2 ($rc) with a suggestion" has "$T/trian" "did you mean train?"
# with 512 GiB of host memory a run offloads the layer inputs by itself: the plan says so (exit 0)
GLMTUNE_HOST_MEMORY_GIB=512 $G train --dry-run --quiet --model "$CFG" --seq-len 1048576 --device cuda --max-gpu-memory 137 --context-parallel 2 --gpus 2 >"$T/cp2h" 2>&1; rc=$?
check "1M, --context-parallel 2 --gpus 2, 512 GiB of host memory: exit 0 ($rc)" test $rc = 0
check "... the fewest layer inputs offloaded (within 137 GiB less the CUDA context)" has "$T/cp2h" "layer inputs offloaded to host memory: 23 of 40 (layers 0-22), 92.00 GiB of page-locked host memory per rank"
check "... the host memory it was held against" has "$T/cp2h" "host memory for offloading: at most 243.2 GiB per rank (512.0 GiB from GLMTUNE_HOST_MEMORY_GIB less a 25.6 GiB margin, shared by the 2 ranks of this run); this plan uses it"
# 8 data-parallel ranks on one machine share its memory: 328 GiB per rank is more than (1000 GiB - 5%) / 8
GLMTUNE_HOST_MEMORY_GIB=1000 $G train --dry-run --quiet --model "$CFG" --seq-len 1048576 --device cuda --max-gpu-memory 137 --gpus 8 >"$T/dp8h" 2>&1; rc=$?
check "1M, --gpus 8, 1000 GiB of host memory: exit 1 ($rc)" test $rc = 1
check "... no offload beyond the machine's share" not_has "$T/dp8h" "layer inputs offloaded to host memory"
check "... the share printed" has "$T/dp8h" "at most 118.8 GiB per rank (1000.0 GiB from GLMTUNE_HOST_MEMORY_GIB less a 50.0 GiB margin, shared by the 8 ranks of this run)"
GLMTUNE_HOST_MEMORY_GIB=12GiB $G train --dry-run --quiet --model "$CFG" --seq-len 8192 --device cuda --max-gpu-memory 22 >"$T/badenv" 2>&1
check "GLMTUNE_HOST_MEMORY_GIB=12GiB: a warning" has "$T/badenv" 'GLMTUNE_HOST_MEMORY_GIB="12GiB" is not a positive number of GiB'
$G train --dry-run --quiet --model "$CFG" --seq-len 3000000000 --device cuda --max-gpu-memory 137 >"$T/huge" 2>&1; rc=$?
check "--seq-len 3000000000: a usage error ($rc)" test $rc = 2
check "... the range named" has "$T/huge" "--seq-len must be in 0..1073741824"
# 8 GPUs in 2 data-parallel groups of 4; a padded row
$G train --dry-run --quiet --model "$CFG" --seq-len 1000003 --device cuda --max-gpu-memory 137 --context-parallel 4 --gpus 8 >"$T/cp4" 2>&1; rc=$?
check "1000003 tokens, --context-parallel 4 --gpus 8: exit 0 ($rc)" test $rc = 0
check "... 2 groups of 4" has "$T/cp4" "context parallel: 4 ranks per row, 2 data-parallel groups (8 ranks)"
check "... padded to a multiple of 8" has "$T/cp4" "the row padded from 1000003 to 1000008 tokens"
$G train --dry-run --quiet --model "$CFG" --seq-len 1048576 --device cuda --max-gpu-memory 137 --context-parallel 4 --gpus 6 >"$T/cpu6" 2>&1; rc=$?
check "--context-parallel 4 --gpus 6: exit 2 ($rc)" test $rc = 2
check "... says it does not divide" has "$T/cpu6" "--context-parallel 4 does not divide the 6 GPUs of --gpus 6"
# usage errors
$G train --dry-run --quiet --model "$CFG" --device cuda --max-gpu-memory 22 >"$T/u1" 2>&1; rc=$?
check "dry run without --data or --seq-len: exit 2 ($rc)" test $rc = 2
check "... names --seq-len" has "$T/u1" "seq-len"
$G train --dry-run --quiet --model "$CFG" --seq-len 8192 --gradient-checkpointing sometimes >"$T/u2" 2>&1; rc=$?
check "unknown checkpointing mode: exit 2 ($rc)" test $rc = 2
check "... lists the modes" has "$T/u2" "auto, none, selective or full"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  $G train --dry-run --quiet --model "$CFG" --seq-len 8192 --device cuda >"$T/u3" 2>&1; rc=$?
  check "no GPU and no --max-gpu-memory: exit 2 ($rc)" test $rc = 2
  check "... hints --max-gpu-memory" has "$T/u3" "max-gpu-memory"
fi

# glmtune bench on the CPU backend (a tiny shape): the tables, then JSON
TINY="$F/tiny-glm4/chatglm"
$G bench --device cpu --config "$TINY" --seq-len 32,48 --steps 2 >"$T/b" 2>&1; rc=$?
check "bench on the cpu: exit 0 ($rc)" test $rc = 0
check "... the speed table" has "$T/b" "| 48 |"
check "... the phase table" has "$T/b" "attention bwd"
check "... the plans" has "$T/b" "memory plan: 1 x 48 tokens"
$G bench --device cpu --config "$TINY" --seq-len 40 --steps 1 --warmup 0 --json >"$T/bj" 2>&1
check "bench --json: one valid object with tokens/s" python3 -c "
import json,sys
o=json.loads(open('$T/bj').read().strip().splitlines()[-1])
assert o['seq']==40 and o['tok_s']>0 and 'attention fwd' in o['phase_ms'], o
assert o['mfu'] is None and o['peak_gib'] is None, o  # no GPU: null, as the table's n/a"
$G bench --device cpu --config "$TINY" --seq-len 1 >"$T/be" 2>&1; rc=$?
check "bench --seq-len 1: exit 2 ($rc)" test $rc = 2
$G bench --device cpu --shape glm-5 >"$T/be2" 2>&1; rc=$?
check "bench unknown shape: exit 1 and the known ones ($rc)" has "$T/be2" "glm-4-9b-chat-1m"
# bench --max-seq-len on the CPU backend: for each budget the planner's longest row, proven by a step
# (or the memory proof); the row lengths agree with train --dry-run's plans (T fits, T + step does not)
$G bench --device cpu --config "$TINY" --max-seq-len --max-gpu-memory 0.003,0.00001 --seq-len 1024 --seq-step 32 >"$T/ml" 2>&1; rc=$?
check "bench --max-seq-len: exit 0 ($rc)" test $rc = 0
check "... the table" has "$T/ml" "| budget GiB | longest T | proven by |"
check "... budgets in ascending order, nothing fits 1e-05" bash -c "grep -q '^| 1e-05 | none: even 32 tokens' '$T/ml' && grep -A1 '^| 1e-05' '$T/ml' | grep -q '^| 0.003 |'"
tml=$(awk -F'|' '$2 ~ /0.003/ {gsub(/ /, "", $3); print $3}' "$T/ml")
check "... a longest row for 0.003 GiB ($tml)" test -n "$tml"
check "... proven by one training step" has "$T/ml" "| 0.003 | $tml | one training step |"
$G train --dry-run --quiet --device cpu --model "$TINY" --seq-len "$tml" --max-gpu-memory 0.003 --lora-rank 8 --lora-alpha 16 >"$T/mlf" 2>&1; rc=$?
check "... train --dry-run at $tml fits (exit $rc)" test $rc = 0
$G train --dry-run --quiet --device cpu --model "$TINY" --seq-len $((tml + 32)) --max-gpu-memory 0.003 --lora-rank 8 --lora-alpha 16 >"$T/mln" 2>&1; rc=$?
check "... and at $((tml + 32)) does not (exit $rc)" test $rc = 1
$G bench --device cpu --config "$TINY" --max-seq-len --max-gpu-memory 0.003 --seq-len 1024 --seq-step 32 --max-step-seconds 1e-9 >"$T/mp" 2>&1; rc=$?
check "a step over --max-step-seconds: the memory proof (exit $rc)" has "$T/mp" "| 0.003 | $tml | memory proof: every buffer at T, layers 0-1 fwd+bwd"
check "... its time labelled extrapolated" has "$T/mp" "(extrapolated)"
$G bench --device cpu --config "$TINY" --max-seq-len --max-gpu-memory 0.003 --seq-len 1024 --seq-step 32 --prove-memory --json >"$T/mj" 2>&1
check "--prove-memory --json: one object per budget" python3 -c "
import json
o=json.loads(open('$T/mj').read().strip().splitlines()[-1])
assert o['mode']=='max-seq-len' and o['longest_T']==$tml and o['proven_by'].startswith('memory proof') and o['step_s']>0, o
assert o['peak_gib'] is None and o['within_budget'] is None, o  # no device on the CPU"
$G bench --device cpu --config "$TINY" --max-gpu-memory 12,16 >"$T/mb" 2>&1; rc=$?
check "a list of budgets without --max-seq-len: exit 2 ($rc)" test $rc = 2
check "... says it is for --max-seq-len" has "$T/mb" "list of budgets is for --max-seq-len"
$G bench --device cpu --config "$TINY" --prove-memory >"$T/mb2" 2>&1; rc=$?
check "--prove-memory alone: exit 2 ($rc)" test $rc = 2
$G bench --device cpu --config "$TINY" --max-seq-len --seq-len 8192,16384 >"$T/mb3" 2>&1; rc=$?
check "--max-seq-len with two --seq-len: exit 2 ($rc)" test $rc = 2
$G bench --device cpu --config "$TINY" --max-seq-len --max-gpu-memory 22,x >"$T/mb4" 2>&1; rc=$?
check "--max-gpu-memory 22,x: exit 2 ($rc)" test $rc = 2
$G bench --device cpu --config "$TINY" --max-seq-len --max-step-seconds 0 >"$T/mb5" 2>&1; rc=$?
check "--max-step-seconds 0: exit 2 ($rc)" test $rc = 2
# a CUDA build: its module loads (every symbol it takes from the program exported), GPU or not
if [ -f "$(dirname "$G")/libglm_cuda.so" ]; then
  $G bench --device cuda --config "$TINY" --seq-len 32 --steps 1 --warmup 0 >"$T/cm" 2>&1
  check "libglm_cuda.so loads" bash -c "! grep -q 'could not be loaded' '$T/cm' || { cat '$T/cm' >&2; false; }"
fi
# errors a user meets first carry a hint
$G train --dry-run --model "$CFG" --lora-rank abc >"$T/eint" 2>&1
check "--lora-rank abc: the hint names a whole number and the default" has "$T/eint" "wants an integer, got 'abc'; hint: a whole number such as 8"
printf 'a: [1, 2\n' >"$T/bad.yaml"
$G train --config "$T/bad.yaml" >"$T/eyaml" 2>&1
check "a YAML that does not parse: file:line and a hint" has "$T/eyaml" "bad.yaml:2:1: bad YAML: .*; hint: a training YAML is one mapping"
$G train --model "$CFG" --data "$T" >"$T/eout" 2>&1
check "no --output-dir: a hint" has "$T/eout" "--output-dir is required; hint: --output-dir runs/a"
$G inspect "$T/none" >"$T/einsp" 2>&1
check "inspect of a missing path: the reason and a hint" has "$T/einsp" "none: cannot open: .*; hint: pass a glmtune tokenize output dir or a .bin shard"
$G bench --seq-len 512 >"$T/enogpu" 2>&1
if grep -q "cuda backend:" "$T/enogpu" && ! command -v nvidia-smi >/dev/null; then
  check "bench without a GPU: says there is none, not the runtime's driver wording" has "$T/enogpu" "no NVIDIA GPU with a working driver on this machine"
fi
echo "test_bench_plan: $pass passed, $fail failed"
rm -rf "$T"
[ $fail = 0 ]
