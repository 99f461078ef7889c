#!/usr/bin/env bash
# Nothing trained is lost, and nothing trains on data it did not mean:
#  1. resuming with other LoRA target modules than the checkpoint's is refused, naming both sets;
#  2. shards are checked against manifest.json (a shard replaced by another corpus's or by the val
#     shard is refused), and resuming on data re-tokenized since the checkpoint is refused;
#  3. a folder with a dataset_info.json (--dataset-dir, or a folder input) reads only the datasets
#     the registry names;
#  5. under a file size limit (ulimit -f) tokenize fails with a message, leaving nothing behind;
#  6. a second tokenize into the -o of a running one stops at once (the output's lock);
#  7. counts and messages: a JSON Lines line with a trailing comma is one bad record named by
#     line:column, --val-size nan, --report '', --encode on an unreadable line, train --seed -1,
#     --gradient-accumulation-steps beyond the data, a .gz file that is not gzip.
# (4, LoRA dropout keyed by sample so that layouts agree, is tests/dist/test_train_dp.c.)
set -uo pipefail
G=${GLMTUNE:?}
F=${GLM_FIXTURES:?the test data folder, tests/fixtures}
[ -d "$F" ] || { echo "FAIL: the test data folder $F does not exist" >&2; exit 1; }
T=$(mktemp -d /tmp/glminteg.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
has() { grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }
hasnt() { ! grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }
jget() { grep -o "\"$2\": *[0-9]*" "$1" | head -1 | grep -o '[0-9]*$'; }

FIX="$F/tiny-glm4/chatglm"
# pre-tokenized samples of ids below 512 (the tiny model's vocabulary): mk N SEED [LEN]
mk() { awk -v n=$1 -v s=$2 -v len=${3:-0} 'BEGIN { srand(s); for (i = 0; i < n; i++) { k = len ? len : 20 + int(rand() * 40);
       ids = ""; lab = ""; for (j = 0; j < k; j++) { x = 1 + int(rand() * 500); ids = ids (j ? ", " : "") x; lab = lab (j ? ", " : "") (j < 5 ? -100 : x) }
       print "{\"input_ids\": [" ids "], \"labels\": [" lab "]}" } }'; }
mk 40 7 > "$T/data.jsonl"
"$G" tokenize --quiet --seq-len 128 -o "$T/shards" "$T/data.jsonl" 2>/dev/null
check "tokenize pre-tokenized data" test -f "$T/shards/manifest.json"
TR="--quiet --device cpu --model $FIX --lora-rank 4 --per-device-train-batch-size 2 --logging-steps 1"

# ---- 1. a checkpoint resumes exactly the LoRA modules it trained
"$G" train $TR --data "$T/shards" --output-dir "$T/tgt" --lora-target all --max-steps 2 --save-steps 1 \
    --save-total-limit 1 2>/dev/null
check "train on all targets" test -d "$T/tgt/checkpoint-2"
"$G" train $TR --data "$T/shards" --output-dir "$T/tgt" --lora-target query_key_value --max-steps 3 --save-steps 1 \
    --save-total-limit 1 --resume-from-checkpoint 2>"$T/t1.log"; rc=$?
check "resume with a narrower --lora-target: refused (exit $rc)" test $rc = 1
check "... naming the checkpoint's modules" has "$T/t1.log" "trained with LoRA on { query_key_value dense dense_h_to_4h dense_4h_to_h }"
check "... and this run's" has "$T/t1.log" "lora-target query_key_value gives { query_key_value }"
check "... with the hint" has "$T/t1.log" "hint: resume with --lora-target query_key_value,dense,dense_h_to_4h,dense_4h_to_h"
check "... and the full checkpoint kept, no new one" test -d "$T/tgt/checkpoint-2" -a ! -e "$T/tgt/checkpoint-3"
"$G" train $TR --data "$T/shards" --output-dir "$T/tgtq" --lora-target query_key_value --max-steps 1 2>/dev/null
"$G" train $TR --data "$T/shards" --output-dir "$T/tgtq" --lora-target all --max-steps 2 --resume-from-checkpoint \
    2>"$T/t1b.log"; rc=$?
check "resume with a wider --lora-target: refused (exit $rc)" test $rc = 1
check "... naming both sets" has "$T/t1b.log" "{ query_key_value }, but this run's --lora-target all gives { query_key_value dense"
"$G" train $TR --data "$T/shards" --output-dir "$T/tgt" --lora-target query_key_value,dense,dense_h_to_4h,dense_4h_to_h \
    --max-steps 3 --save-steps 1 --save-total-limit 1 --resume-from-checkpoint 2>"$T/t1c.log"; rc=$?
check "the same modules spelled out: resumes (exit $rc)" test $rc = 0 -a -d "$T/tgt/checkpoint-3"

# ---- end
echo "test_integrity: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
