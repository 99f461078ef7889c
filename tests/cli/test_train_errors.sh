#!/usr/bin/env bash
# glmtune train / export-adapter on bad input: truncated safetensors, a missing tensor, wrong
# shapes, ids outside the vocabulary, shards of another tokenizer, a corrupt checkpoint, a kill
# during checkpoint writes, non-finite losses, refused and unknown settings. Each must give a
# clear error (or a warning and a fallback) and leave the previous checkpoint intact.
set -uo pipefail
G=${GLMTUNE:?}
F=${GLM_FIXTURES:?the test data folder, tests/fixtures}
SRC=${GLM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -d "$F" ] || { echo "FAIL: the test data folder $F does not exist" >&2; exit 1; }
T=$(mktemp -d /tmp/glmerr.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
has() { grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }

FIX="$F/tiny-glm4/chatglm"
# 40 pre-tokenized samples of 20-60 ids below 512 (the tiny model's vocabulary)
awk 'BEGIN { srand(7); for (i = 0; i < 40; i++) { n = 20 + int(rand() * 40); ids = ""; lab = "";
     for (j = 0; j < n; j++) { x = int(rand() * 512); ids = ids (j ? ", " : "") x; lab = lab (j ? ", " : "") (j < 5 ? -100 : x) }
     print "{\"input_ids\": [" ids "], \"labels\": [" lab "]}" } }' > "$T/data.jsonl"
$G tokenize --quiet --seq-len 128 -o "$T/shards" "$T/data.jsonl" 2>/dev/null
check "tokenize pre-tokenized data" test -f "$T/shards/manifest.json"
TR="--quiet --device cpu --data $T/shards --lora-rank 4 --per-device-train-batch-size 2 --logging-steps 1"

# a model directory with a truncated shard / a missing tensor / a wrong shape
cp -r "$FIX" "$T/trunc" && truncate -s 100000 "$T/trunc/model-00002-of-00002.safetensors"
$G train $TR --model "$T/trunc" --output-dir "$T/r" --max-steps 1 2>"$T/e1"; rc=$?
check "truncated safetensors: exit 1 ($rc)" test $rc = 1
check "... names the file" has "$T/e1" "model-00002-of-00002.safetensors"
cp -r "$FIX" "$T/miss"
sed -i 's/"transformer.encoder.layers.1.mlp.dense_4h_to_h.weight"/"transformer.encoder.layers.1.mlp.dense_4h_to_h.weightX"/' "$T/miss/model.safetensors.index.json"
$G train $TR --model "$T/miss" --output-dir "$T/r" --max-steps 1 2>"$T/e2"; rc=$?
check "missing tensor: exit 1 ($rc)" test $rc = 1
check "... names the tensor" has "$T/e2" "layers.1.mlp.dense_4h_to_h.weight"
cp -r "$FIX" "$T/shape" && sed -i 's/"ffn_hidden_size": 160/"ffn_hidden_size": 128/' "$T/shape/config.json"
$G train $TR --model "$T/shape" --output-dir "$T/r" --max-steps 1 2>"$T/e3"; rc=$?
check "wrong shape: exit 1 ($rc)" test $rc = 1
check "... says expected and found" has "$T/e3" "expected \\[256, 64\\]"

# a memory plan that does not fit the budget: an error before any weight is read (the truncated shard
# above is never opened), naming the plan's total, the budget and the hints; nothing written
$G train $TR --model "$T/trunc" --output-dir "$T/rmem" --max-steps 1 --max-gpu-memory 0.0001 2>"$T/em"; rc=$?
check "plan over --max-gpu-memory: exit 1 ($rc)" test $rc = 1
check "... says the plan and the budget" has "$T/em" "the memory plan for 2 x 128 tokens takes"
check "... before loading" has "$T/em" "nothing was loaded"
check "... hints a 4-bit base" has "$T/em" "quantization-bit 4"
check "... hints context parallel" has "$T/em" "context-parallel"
check "... hints shorter rows" has "$T/em" "shorter --seq-len"
check "... never read the weights" bash -c "! grep -q 'model-00002-of-00002' '$T/em'"
check "... no checkpoint written" bash -c "! ls '$T/rmem'/checkpoint-* >/dev/null 2>&1"
$G train --dry-run $TR --model "$FIX" --seq-len 128 --max-gpu-memory 0.0001 >"$T/emd" 2>&1; rc=$?
check "its dry run: exit 1 ($rc)" test $rc = 1
check "... says it does not fit" has "$T/emd" "does NOT fit"

# ids outside the model's vocabulary
printf '{"input_ids": [1, 2, 3, 700, 5], "labels": [-100, 2, 3, 700, 5]}\n' > "$T/big.jsonl"
$G tokenize --quiet --seq-len 128 -o "$T/bigshards" "$T/big.jsonl" 2>/dev/null
$G train --quiet --device cpu --model "$FIX" --data "$T/bigshards" --output-dir "$T/r" --max-steps 1 2>"$T/e4"; rc=$?
check "token id outside the vocabulary: exit 1 ($rc)" test $rc = 1
check "... says so" has "$T/e4" "outside the model's vocabulary"

# shards made with another tokenizer than the model's
$G init-model --config "$SRC/samples/model-config.json" --tokenizer "$F/glm4-tokenizer" -o "$T/withtok" 2>/dev/null
$G tokenize --quiet --tokenizer "$SRC/samples/tokenizer" --seq-len 128 -o "$T/spm" "$SRC/samples/data/alpaca.json" 2>/dev/null
$G train --quiet --device cpu --model "$T/withtok" --data "$T/spm" --output-dir "$T/r" --max-steps 1 2>"$T/e5"; rc=$?
check "shards of another tokenizer: exit 1 ($rc)" test $rc = 1
check "... says so" has "$T/e5" "another tokenizer"

# refused and unknown settings
printf 'model_name_or_path: %s\nfp16: true\n' "$FIX" > "$T/fp16.yaml"
$G train --config "$T/fp16.yaml" --data "$T/shards" --output-dir "$T/r" 2>"$T/e6"; rc=$?
check "fp16 refused: exit != 0 ($rc)" test $rc != 0
check "... with the reason" has "$T/e6" "fp16"
$G train $TR --model "$FIX" --output-dir "$T/r" --fp16 2>"$T/e6b"; rc=$?
check "--fp16 refused: exit 2 ($rc)" test $rc = 2
check "... with the reason" has "$T/e6b" "diverge"
$G train $TR --model "$FIX" --output-dir "$T/r" --lerning-rate 1e-3 2>"$T/e7"; rc=$?
check "unknown flag: exit 2 ($rc)" test $rc = 2
check "... suggests the closest" has "$T/e7" "learning-rate"
$G train $TR --model "$FIX" --output-dir "$T/r" --max-steps= 2>"$T/e7b"; rc=$?
check "--max-steps= (empty): exit 2 ($rc)" test $rc = 2
check "... says the value is empty" has "$T/e7b" "max-steps: the value is empty"
# a micro-batch larger than the data (14 rows): one epoch per step, said once, planned for 14 rows
$G train --device cpu --data "$T/shards" --lora-rank 4 --model "$FIX" --output-dir "$T/big" --per-device-train-batch-size 64 --max-steps 1 2>"$T/e7c"; rc=$?
check "micro-batch > rows: trains ($rc)" test $rc = 0
check "... warns that every step takes all rows" has "$T/e7c" "more than the 14 row(s) in the data"
check "... the log and plan say 14 rows" has "$T/e7c" "14 rows each"
check "... the memory plan is for 14 rows" has "$T/e7c" "memory plan: 14 x 128"

# non-finite losses: skipped, and N in a row abort
$G train $TR --model "$FIX" --output-dir "$T/nan" --learning-rate 1e30 --lr-scheduler-type constant \
    --max-steps 20 --max-nonfinite 3 --save-steps 100 2>"$T/e8"; rc=$?
check "non-finite steps abort: exit 1 ($rc)" test $rc = 1
check "... with a clear message" has "$T/e8" "in a row had a non-finite"

# checkpoints: corrupt the newest, resume falls back to the previous one with a warning
$G train $TR --model "$FIX" --output-dir "$T/ck" --max-steps 4 --save-steps 2 2>/dev/null
check "checkpoints 2 and 4" test -d "$T/ck/checkpoint-2" -a -d "$T/ck/checkpoint-4"
printf 'XXXX' | dd of="$T/ck/checkpoint-4/adapter_model.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
$G export-adapter --checkpoint "$T/ck/checkpoint-4" -o "$T/ex" 2>"$T/e9"; rc=$?
check "export of a corrupt checkpoint: exit 1 ($rc)" test $rc = 1
check "... names the file" has "$T/e9" "adapter_model.safetensors"
check "... with an export's hint, not a resume's" has "$T/e9" "hint: export another checkpoint of the run"
# an export of the run exports its newest checkpoint or nothing: no older weights without a word
$G export-adapter --checkpoint "$T/ck" -o "$T/ex" 2>"$T/e9c"; rc=$?
check "export of a run whose newest checkpoint is corrupt: exit 1 ($rc)" test $rc = 1 -a ! -e "$T/ex"
check "... naming it and the reason" has "$T/e9c" "the newest checkpoint, $T/ck/checkpoint-4, is not usable (.*adapter_model.safetensors: corrupt"
check "... with a hint naming the complete one" has "$T/e9c" "hint: .*--checkpoint $T/ck/checkpoint-2\$"
$G export-adapter --checkpoint "$T/ck/" -o "$T/ex" 2>"$T/e9s"
check "... the run given with a trailing slash: no doubled slash" sh -c '! grep -q "ck//" "$0"' "$T/e9s"
check "... and no warning about skipping it" sh -c '! grep -q skipping "$0"' "$T/e9c"
$G export-adapter --checkpoint "$T/ck/checkpoint-2" -o "$T/ex" 2>/dev/null; rc=$?
check "... which exports when named (exit $rc)" test $rc = 0 -a -f "$T/ex/adapter_model.safetensors"
$G train $TR --model "$FIX" --output-dir "$T/ck" --max-steps 6 --save-steps 2 --resume-from-checkpoint 2>"$T/e10"; rc=$?
check "resume skips the corrupt checkpoint (exit $rc)" test $rc = 0
check "... saying so" has "$T/e10" "checkpoint-4"
check "... and resumes from checkpoint-2" has "$T/e10" "resuming from .*checkpoint-2"
$G train $TR --model "$FIX" --output-dir "$T/nores" --max-steps 1 --resume-from-checkpoint "$T/nope/checkpoint-9" 2>"$T/e10b"; rc=$?
check "resume from a path that does not exist: exit != 0 ($rc)" test $rc != 0
check "... says it does not exist" has "$T/e10b" "nope/checkpoint-9 does not exist"
check "... and creates no output directory" test ! -e "$T/nores"
# a transformers / LLaMA-Factory checkpoint-N: adapter and trainer_state.json, no glmtune_state.json nor checksums.txt
mkdir -p "$T/hf-run" && cp -r "$T/ck/checkpoint-2" "$T/hf-run/checkpoint-2" && rm "$T/hf-run/checkpoint-2/glmtune_state.json" "$T/hf-run/checkpoint-2/checksums.txt"
$G train $TR --model "$FIX" --output-dir "$T/hfres" --max-steps 1 --resume-from-checkpoint "$T/hf-run/checkpoint-2" 2>"$T/e10c"; rc=$?
check "resume from a transformers checkpoint: exit != 0 ($rc)" test $rc != 0
check "... says it is not a glmtune checkpoint, with the --init-adapter hint" has "$T/e10c" "hf-run/checkpoint-2 is not a glmtune checkpoint (no glmtune_state.json).*hint: use --init-adapter $T/hf-run/checkpoint-2 to start from its adapter"
check "... not an interrupted save" sh -c '! grep -q interrupted "$0"' "$T/e10c"
$G train $TR --model "$FIX" --output-dir "$T/hfinit" --max-steps 1 --init-adapter "$T/hf-run/checkpoint-2" 2>"$T/e10d"; rc=$?
check "... and --init-adapter takes it (exit $rc)" test $rc = 0

cat > "$T/big.json" <<'JSON'
{"model_type": "chatglm", "hidden_size": 256, "num_layers": 4, "num_attention_heads": 4, "multi_query_group_num": 2,
 "kv_channels": 64, "ffn_hidden_size": 688, "padded_vocab_size": 512, "layernorm_epsilon": 1e-5, "rope_ratio": 1}
JSON
$G init-model --config "$T/big.json" -o "$T/bigmodel" 2>/dev/null
# an output directory that holds an earlier run is refused, unless resuming or overwriting
$G train $TR --model "$FIX" --output-dir "$T/ck" --max-steps 1 2>"$T/e12"; rc=$?
check "a fresh run into an earlier run's directory: exit 2 ($rc)" test $rc = 2
check "... with the ways out" has "$T/e12" "overwrite-output-dir"
$G train $TR --model "$FIX" --output-dir "$T/ck" --max-steps 2 --overwrite-output-dir 2>/dev/null; rc=$?
check "--overwrite-output-dir starts afresh (exit $rc)" test $rc = 0 -a ! -d "$T/ck/checkpoint-6" -a -d "$T/ck/checkpoint-2"
check "... with only the new metrics" test "$(grep -c '"loss"' "$T/ck/metrics.jsonl")" = 2
# a second run into a directory that a running one uses stops before touching it (the lock)
$G train $TR --model "$FIX" --output-dir "$T/busy" --max-steps 100000000 --save-steps 100000000 2>/dev/null & busy=$!
for _ in $(seq 1 100); do [ -d "$T/busy" ] && break; sleep 0.1; done
sleep 0.5
$G train $TR --model "$FIX" --output-dir "$T/busy" --max-steps 1 --overwrite-output-dir 2>"$T/e9b"; rc=$?
kill $busy 2>/dev/null; wait $busy 2>/dev/null
check "a second run into a busy directory: exit 2 ($rc)" test $rc = 2
check "... says another run uses it" has "$T/e9b" "in use by another glmtune train"

# --data may name the manifest
$G train $TR --model "$FIX" --data "$T/shards/manifest.json" --output-dir "$T/man" --max-steps 1 2>/dev/null
check "--data DIR/manifest.json" test -d "$T/man/checkpoint-1"
# export: --base only with --merge, and only a base shaped like the training base
$G export-adapter --checkpoint "$T/man" --base "$FIX" -o "$T/x1" 2>/dev/null; rc=$?
check "--base without --merge: exit 2 ($rc)" test $rc = 2
$G export-adapter --checkpoint "$T/man" --merge --base "$T/bigmodel" -o "$T/x2" 2>"$T/e13"; rc=$?
check "--merge into a differently shaped base: exit 1 ($rc)" test $rc = 1
check "... saying why" has "$T/e13" "not shaped like"
$G export-adapter --checkpoint "$T/man" --merge --dtype fp16 -o "$T/m16" 2>/dev/null
check "--merge --dtype fp16: every tensor F16" test "$(grep -a -c '"BF16"' "$T"/m16/*.safetensors | awk -F: '{s += $2} END {print s}')" = 0
check "... and config.json says float16" has "$T/m16/config.json" '"torch_dtype": "float16"'

# export -o never replaces a run, a checkpoint, the base model or other files
$G export-adapter --checkpoint "$T/man" -o "$T/man" 2>"$T/e14"; rc=$?
check "export -o the run directory: exit 2 ($rc)" test $rc = 2 -a -d "$T/man/checkpoint-1"
$G export-adapter --checkpoint "$T/man" -o "$T/man/checkpoint-1" 2>/dev/null; rc=$?
check "export -o the checkpoint: exit 2 ($rc)" test $rc = 2 -a -f "$T/man/checkpoint-1/trainer_state.json"
cp -r "$FIX" "$T/basecopy" && rm -rf "$T/basecopy/adapter_init" "$T/basecopy/golden.safetensors"
$G export-adapter --checkpoint "$T/man" --merge --base "$T/basecopy" -o "$T/basecopy" 2>/dev/null; rc=$?
check "export --merge -o the base model: exit 2 ($rc)" test $rc = 2
mkdir -p "$T/precious" && echo keep > "$T/precious/thesis.txt"
$G export-adapter --checkpoint "$T/man" -o "$T/precious" 2>/dev/null; rc=$?
check "export -o a directory with other files: exit 2 ($rc)" test $rc = 2 -a -f "$T/precious/thesis.txt"
$G export-adapter --checkpoint "$T/man" -o "$T/ex2" 2>/dev/null && $G export-adapter --checkpoint "$T/man" -o "$T/ex2" 2>/dev/null
check "export -o an earlier export replaces it (exit $?)" test -f "$T/ex2/adapter_model.safetensors"
# init-model does not overwrite a model; a YAML with a second document is refused
$G init-model --config "$T/big.json" -o "$T/bigmodel" 2>/dev/null; rc=$?
check "init-model into an existing model: exit 2 ($rc)" test $rc = 2
# init-model writes aside and renames into place: a killed run leaves no half-written model (the
# next run removes its leftovers), a directory with other files is refused, sizes beyond the
# disk are refused before anything is written
mkdir -p "$T/im.tmp.999999" && echo junk > "$T/im.tmp.999999/model.safetensors"
$G init-model --config "$T/big.json" -o "$T/im" 2>"$T/e16"; rc=$?
check "init-model after a killed run: exit 0 ($rc)" test $rc = 0 -a -f "$T/im/model.safetensors" -a ! -e "$T/im.tmp.999999"
check "... its leftovers removed and said" has "$T/e16" "left by an interrupted run"
mkdir -p "$T/imkeep" && echo keep > "$T/imkeep/notes.txt"
$G init-model --config "$T/big.json" -o "$T/imkeep" 2>"$T/e17"; rc=$?
check "init-model into a directory with other files: exit 2 ($rc)" test $rc = 2 -a -f "$T/imkeep/notes.txt" -a ! -e "$T/imkeep/config.json"
sed 's/"hidden_size": 256/"hidden_size": 2000000000/' "$T/big.json" > "$T/huge.json"
$G init-model --config "$T/huge.json" -o "$T/imhuge" 2>"$T/e18"; rc=$?
check "init-model of a model larger than the disk: exit 1 ($rc)" test $rc = 1 -a ! -e "$T/imhuge"
check "... says how much it needs" has "$T/e18" "GiB free"
check "... and leaves no temp directory" test -z "$(ls -d "$T"/imhuge.tmp.* 2>/dev/null)"
printf 'lora_rank: 8\n---\nlora_rank: 4\n' > "$T/two.yaml"
$G train --config "$T/two.yaml" --model "$FIX" --data "$T/shards" --output-dir "$T/two" 2>"$T/e15"; rc=$?
check "a second YAML document: exit 2 ($rc)" test $rc = 2
check "... said" has "$T/e15" "second YAML document"

# a kill during checkpoint writes leaves only complete checkpoints
$G train $TR --model "$T/bigmodel" --output-dir "$T/kill" --max-steps 100000 --save-steps 1 --lora-rank 64 2>/dev/null &
pid=$!
for _ in $(seq 1 100); do [ -d "$T/kill/checkpoint-3" ] && break; sleep 0.1; done
sleep 0.$((RANDOM % 9 + 1))
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
n_ok=0; n_bad=0
for d in "$T/kill"/checkpoint-*; do
    if $G export-adapter --checkpoint "$d" -o "$T/kx" 2>/dev/null; then n_ok=$((n_ok + 1)); else n_bad=$((n_bad + 1)); fi
done
check "after kill -9: $n_ok checkpoints complete, $n_bad broken" test $n_ok -ge 3 -a $n_bad = 0
latest=$(ls -d "$T/kill"/checkpoint-* | sed 's/.*-//' | sort -n | tail -1)
$G train $TR --model "$T/bigmodel" --output-dir "$T/kill" --max-steps $((latest + 1)) --save-steps 1 --lora-rank 64 \
    --resume-from-checkpoint 2>"$T/e11"; rc=$?
check "resume after the kill (exit $rc)" test $rc = 0 -a -d "$T/kill/checkpoint-$((latest + 1))"

# Ctrl-C / SIGTERM of a single-process run: it says so, names what stays, and exits with 128 + the signal
for sig in INT TERM; do
  env --default-signal=INT,TERM $G train $TR --model "$FIX" --output-dir "$T/int$sig" --max-steps 100000 --save-steps 1 \
      2>"$T/int$sig.log" &
  pid=$!
  for _ in $(seq 1 200); do [ -d "$T/int$sig/checkpoint-2" ] && break; sleep 0.1; done
  kill -$sig $pid; wait $pid; rc=$?
  want=$((128 + $(kill -l $sig)))
  check "SIG$sig of train: exit $rc (want $want)" test $rc = $want
  if [ $sig = INT ]; then
    check "... says it was interrupted and what stays" has "$T/int$sig.log" "interrupted: stopping; the checkpoints in"
  else # SIGTERM (a Slurm preemption): the step ends, a checkpoint of it is written (tests/cli/test_train_signal.sh)
    check "... says it stops after the step with a checkpoint" has "$T/int$sig.log" "asked to stop (SIGTERM/SIGUSR1): finishing the current optimizer step"
    check "... and where the checkpoint is" has "$T/int$sig.log" "stopped by SIGTERM after step [0-9]* of 100000: checkpoint-[0-9]* is in $T/int$sig"
  fi
  check "... the last checkpoint exports" $G export-adapter --checkpoint "$T/int$sig" -o "$T/int$sig-x"
done

# directories given with a trailing slash (as the README writes -o shards/): the same as without
$G tokenize --quiet --seq-len 128 -o "$T/slash/" "$T/data.jsonl" 2>"$T/sl1"; rc=$?
check "tokenize -o dir/: exit 0 ($rc)" test $rc = 0 -a -f "$T/slash/manifest.json"
$G train $TR --model "$FIX/" --data "$T/slash/" --output-dir "$T/slrun/" --max-steps 2 --save-steps 1 2>"$T/sl2"; rc=$?
check "train with dir/ paths: exit 0 ($rc)" test $rc = 0 -a -d "$T/slrun/checkpoint-2"
check "... no doubled slash in the messages" bash -c "! grep -q '//' '$T/sl2'"
$G train $TR --model "$FIX" --data "$T/slash" --output-dir "$T/slrun" --max-steps 3 --save-steps 1 \
    --resume-from-checkpoint 2>"$T/sl3"; rc=$?
check "resume without the slashes: exit 0, the paths not reported as changed ($rc)" \
    bash -c "test $rc = 0 && ! grep -q 'resuming with model\|resuming with data' '$T/sl3'"
$G export-adapter --checkpoint "$T/slrun/" -o "$T/sladapter/" 2>"$T/sl4"; rc=$?
check "export-adapter -o dir/: exit 0 ($rc)" test $rc = 0 -a -f "$T/sladapter/adapter_model.safetensors"
$G tokenize --quiet --seq-len 128 -o "" "$T/data.jsonl" 2>"$T/sl5"; rc=$?
check "tokenize -o '': exit 2 ($rc)" test $rc = 2
check "... says it is empty" has "$T/sl5" "is empty"

# --dry-run plans the rows a micro-batch can really have: min(per_device_train_batch_size, the shard set's rows)
ROWS=$(tr -d ' \n' < "$T/shards/manifest.json" | grep -o '"train":{[^}]*"rows":[0-9]*' | grep -o '[0-9]*$')
$G train $TR --model "$FIX" --per-device-train-batch-size 512 --dry-run >"$T/big.dry" 2>/dev/null
$G train $TR --model "$FIX" --per-device-train-batch-size "$ROWS" --dry-run >"$T/rows.dry" 2>/dev/null
check "dry run, batch 512 on $ROWS rows: says the micro-batch is $ROWS rows" has "$T/big.dry" "micro-batch: $ROWS rows, not per_device_train_batch_size 512: the shards hold $ROWS rows"
check "... and plans $ROWS rows, as the run uses ($(grep 'memory plan' "$T/big.dry"))" has "$T/big.dry" "memory plan: $ROWS x 128 tokens"
check "... the same peak as batch $ROWS" test "$(grep 'predicted peak' "$T/big.dry")" = "$(grep 'predicted peak' "$T/rows.dry")"
# resuming into a read-only output directory: refused before the model loads, with a hint (as another user,
# since root writes anywhere; skipped where that cannot be done)
$G train $TR --model "$FIX" --output-dir "$T/ro" --max-steps 2 2>/dev/null
chmod -R a-w "$T/ro"; chmod a+rx "$T"
AS=""; [ "$(id -u)" = 0 ] && AS="setpriv --reuid=65534 --regid=65534 --clear-groups"
if [ -d "$T/ro/checkpoint-2" ] && $AS test -r "$FIX/config.json" -a ! -w "$T/ro" 2>/dev/null; then
    $AS $G train $TR --model "$FIX" --output-dir "$T/ro" --max-steps 4 --resume-from-checkpoint 2>"$T/ro.log" >/dev/null; rc=$?
    check "resume into a read-only output directory: refused (exit $rc)" test $rc = 1
    check "... saying so, with the hint" has "$T/ro.log" "output-dir $T/ro is not writable (Permission denied): the resumed run .*hint: .*--output-dir NEW --resume-from-checkpoint $T/ro/checkpoint-N"
    check "... before the model loads" test -z "$(grep -e 'layout, L=' -e 'resuming from' "$T/ro.log")"
    $AS $G train $TR --model "$FIX" --output-dir "$T/ro/new" --max-steps 1 2>"$T/ro2.log" >/dev/null
    check "a fresh run under a read-only directory: refused, naming it" has "$T/ro2.log" "$T/ro (where --output-dir $T/ro/new would be made) is not writable"
else
    echo "SKIPPED: the read-only output directory checks (cannot run as another user here)"
fi
chmod -R u+w "$T/ro"

echo "test_train_errors: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
