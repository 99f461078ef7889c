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
# (4, LoRA dropout keyed by the tokens' places in the data so that every layout of a step agrees, is
# tests/dist/test_train_dp.c.)
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

# ---- 2. shards checked against manifest.json; a checkpoint knows the data it was trained on
mk 40 8 > "$T/other.jsonl"
"$G" tokenize --quiet --seq-len 128 --val-size 8 -o "$T/other" "$T/other.jsonl" 2>/dev/null
cp -r "$T/shards" "$T/swapped" && cp "$T/other/train-00000.bin" "$T/swapped/train-00000.bin"
"$G" train $TR --data "$T/swapped" --output-dir "$T/sw" --max-steps 1 2>"$T/sw.log"; rc=$?
check "another corpus's shard in the folder: refused (exit $rc)" test $rc = 1 -a ! -e "$T/sw/checkpoint-1"
check "... naming the shard and the manifest" has "$T/sw.log" "swapped/train-00000.bin: .* bytes, but .*swapped/manifest.json says"
check "... with the hint" has "$T/sw.log" "hint: re-run glmtune tokenize for"
# a manifest from before the sizes were kept: the header's counts and CRC decide
cp -r "$T/other" "$T/valtrain" && cp "$T/other/val-00000.bin" "$T/valtrain/train-00000.bin"
python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))
for sp in m["splits"].values():
    for e in sp["shards"]: e.pop("bytes", None)
json.dump(m, open(sys.argv[1], "w"), indent=2)' "$T/valtrain/manifest.json"
"$G" train $TR --data "$T/valtrain" --output-dir "$T/vt" --max-steps 1 2>"$T/vt.log"; rc=$?
check "the val shard copied over the train shard: refused (exit $rc)" test $rc = 1 -a ! -e "$T/vt/checkpoint-1"
check "... naming what differs from the manifest" has "$T/vt.log" "valtrain/train-00000.bin: does not match its entry in .*valtrain/manifest.json (.* rows, the manifest says"
# resume on data re-tokenized in place (same path and row count, another seed): refused
mk 40 9 30 > "$T/even.jsonl" # 40 samples of 30 tokens: 4 per row whatever the split
"$G" tokenize --quiet --seq-len 128 --val-size 4 --seed 1 -o "$T/rt" "$T/even.jsonl" 2>/dev/null
"$G" train $TR --data "$T/rt" --output-dir "$T/rtrun" --max-steps 2 --save-steps 2 2>/dev/null
check "a checkpoint keeps the data fingerprint" grep -q '"data_fingerprint": "[0-9a-f]\{16\}"' "$T/rtrun/checkpoint-2/glmtune_state.json"
rows1=$(jget "$T/rt/manifest.json" rows)
"$G" tokenize --quiet --seq-len 128 --val-size 4 --seed 2 -o "$T/rt" "$T/even.jsonl" 2>/dev/null
check "re-tokenized with another seed: the same $rows1 rows" test "$(jget "$T/rt/manifest.json" rows)" = "$rows1"
"$G" train $TR --data "$T/rt" --output-dir "$T/rtrun" --max-steps 4 --save-steps 2 --resume-from-checkpoint 2>"$T/rt.log"; rc=$?
check "resume on re-tokenized data: refused (exit $rc)" test $rc = 1 -a ! -e "$T/rtrun/checkpoint-4"
check "... saying the data changed" has "$T/rt.log" "checkpoint-2: the checkpoint was trained on other data than --data .*rt holds now"
check "... with the hint" has "$T/rt.log" "hint: resume with the shards it was trained on"
"$G" tokenize --quiet --seq-len 128 --val-size 4 --seed 1 -o "$T/rt" "$T/even.jsonl" 2>/dev/null
"$G" train $TR --data "$T/rt" --output-dir "$T/rtrun" --max-steps 4 --save-steps 2 --resume-from-checkpoint 2>/dev/null; rc=$?
check "the same data tokenized again alike: resumes (exit $rc)" test $rc = 0 -a -d "$T/rtrun/checkpoint-4"

# ---- 3. a folder with a dataset_info.json gives the datasets it names, nothing else
mkdir -p "$T/lf/sub"
alpaca() { for i in $(seq 1 $1); do printf '{"instruction": "question %d", "output": "answer %d"}\n' $i $i; done; }
alpaca 5 > "$T/lf/named.jsonl"; alpaca 7 > "$T/lf/sub/also.jsonl"; alpaca 11 > "$T/lf/stray.jsonl"; alpaca 13 > "$T/lf/sub/stray2.jsonl"
LF="--quiet --seq-len 128 --tokenizer $F/glm4-tokenizer"
printf '{"named": {"file_name": "named.jsonl"}, "also": {"file_name": "sub/also.jsonl"}}\n' > "$T/lf/dataset_info.json"
"$G" tokenize $LF --dataset-dir "$T/lf" --report "$T/lf1.json" -o "$T/lf1" 2>"$T/lf1.log"; rc=$?
check "--dataset-dir with a registry: exit $rc, the 12 records of its 2 datasets" \
    test $rc = 0 -a "$(jget "$T/lf1.json" records_read)" = 12
check "... the files it does not name said to be left out" has "$T/lf1.log" "lf: 2 files in the folder are not named by its dataset_info.json and are not read"
check "... the first one named" has "$T/lf1.log" "the first $T/lf/stray.jsonl"
"$G" tokenize $LF --report "$T/lf2.json" -o "$T/lf2" "$T/lf" 2>/dev/null; rc=$?
check "the folder as input: exit $rc, the same 12 records" test $rc = 0 -a "$(jget "$T/lf2.json" records_read)" = 12
"$G" tokenize $LF --dataset also --dataset-dir "$T/lf" --report "$T/lf3.json" -o "$T/lf3" 2>/dev/null
check "--dataset also: its 7 records" test "$(jget "$T/lf3.json" records_read)" = 7
"$G" tokenize $LF --report "$T/lf4.json" -o "$T/lf4" "$T/lf" "$T/lf/stray.jsonl" 2>/dev/null
check "an unregistered file given as an input of its own is read: 23 records" test "$(jget "$T/lf4.json" records_read)" = 23

# ---- 5. a file size limit (ulimit -f, in KiB blocks): the write fails with EFBIG, said with a hint
mk 400 1 60 > "$T/big.jsonl"
(ulimit -f 16; exec "$G" tokenize --quiet --seq-len 128 -o "$T/ulim" "$T/big.jsonl") 2>"$T/u.log"; rc=$?
check "tokenize past ulimit -f: exit 1, not killed by SIGXFSZ ($rc)" test $rc = 1
check "... says it cannot write, and why" has "$T/u.log" "train-00000.bin: cannot write: File too large"
check "... with the hint" has "$T/u.log" "hint: the file size limit of this process (ulimit -f) is too low"
check "... and leaves no output and no temporary directory" test -z "$(ls -d "$T"/ulim* 2>/dev/null)"

# ---- 6. two tokenize runs into one -o: the second stops at once, the first finishes
mk 30 3 > "$T/a.jsonl"; mk 50 4 > "$T/b.jsonl"
{ sleep 2; cat "$T/a.jsonl"; } | "$G" tokenize --quiet --seq-len 128 -o "$T/lockout" - 2>"$T/l1.log" & first=$!
for _ in $(seq 1 100); do ls -d "$T"/lockout.tmp.* >/dev/null 2>&1 && break; sleep 0.05; done
"$G" tokenize --quiet --seq-len 128 -o "$T/lockout" "$T/b.jsonl" 2>"$T/l2.log"; rc=$?
wait $first; rc1=$?
check "a second tokenize into a busy -o: refused (exit $rc)" test $rc = 2
check "... saying another tokenize uses it" has "$T/l2.log" "lockout is in use by another glmtune tokenize"
check "... with the hint" has "$T/l2.log" "hint: wait for that run to end, stop it, or choose another -o"
check "the first one finishes (exit $rc1)" test $rc1 = 0
check "... and -o holds its output (30 samples)" test "$("$G" inspect --json "$T/lockout" 2>/dev/null | wc -l)" = 30
check "... nothing left beside it" test -z "$(ls -d "$T"/lockout.* 2>/dev/null)"
"$G" tokenize --quiet --seq-len 128 -o "$T/lockout" "$T/b.jsonl" 2>/dev/null; rc=$?
check "once it is done, the next run writes -o (exit $rc)" test $rc = 0 -a "$("$G" inspect --json "$T/lockout" 2>/dev/null | wc -l)" = 50
printf '{"input_ids": [1, 2], "labels": [-100, -100]}\n' > "$T/unusable.jsonl"
"$G" tokenize --quiet --seq-len 128 -o "$T/failnew" "$T/unusable.jsonl" 2>/dev/null; rc=$?
check "a run that fails (exit $rc) leaves no -o it made, and no temporary directory" \
    test $rc != 0 -a ! -e "$T/failnew" -a -z "$(ls -d "$T"/failnew.* 2>/dev/null)"

# ---- 7. counts and messages
# a trailing comma on a JSON Lines line: that line is one bad record, named by line:column; the
# records after it keep their numbers (the broken line 4 is record 3)
{ mk 1 11; mk 1 12 | sed 's/$/,/'; mk 1 13; printf '{"input_ids": [1, 2\n'; mk 1 14; } > "$T/comma.jsonl"
"$G" tokenize --quiet --seq-len 128 --report "$T/comma.json" -o "$T/comma" "$T/comma.jsonl" 2>/dev/null; rc=$?
check "a trailing comma: tokenize goes on (exit $rc)" test $rc = 0
check "... 5 lines read as 5 records" test "$(jget "$T/comma.json" records_read)" = 5
check "... 2 dropped, 3 kept" test "$(jget "$T/comma.json" records_kept)" = 3
col=$(( $(sed -n 2p "$T/comma.jsonl" | wc -c) - 1 ))
check "... the bad line named by line:column, as record 1" has "$T/comma.json" "comma.jsonl:2:$col: record 1 .*unexpected ','"
check "... the next bad line is record 3" has "$T/comma.json" "comma.jsonl:4: record 3 "
# --val-size nan / inf, --report '': refused up front (nothing made)
for v in nan inf -inf; do
  "$G" tokenize --seq-len 128 --val-size $v -o "$T/vs" "$T/data.jsonl" 2>"$T/vs.log"; rc=$?
  check "--val-size $v: refused (exit $rc)" test $rc = 2 -a ! -e "$T/vs"
  check "... before any work" hasnt "$T/vs.log" "records read"
  check "... saying what it takes" has "$T/vs.log" "--val-size: expected a count (e.g. 200) or a fraction in (0, 1), got $v"
done
printf 'val_size: .nan\n' > "$T/vs.yaml"
"$G" tokenize --quiet --config "$T/vs.yaml" --seq-len 128 -o "$T/vs" "$T/data.jsonl" 2>"$T/vsy.log"; rc=$?
check "val_size: .nan in a YAML: refused (exit $rc)" test $rc != 0 -a ! -e "$T/vs"
"$G" tokenize --seq-len 128 --report '' -o "$T/rep" "$T/data.jsonl" 2>"$T/rep.log"; rc=$?
check "--report '': refused (exit $rc)" test $rc = 2
check "... before any work" test ! -e "$T/rep" -a -z "$(grep 'records read' "$T/rep.log")"
check "... saying it is empty" has "$T/rep.log" '--report "" is empty'
# --encode / --decode: one output line per input line, an error object where a line cannot be read
printf '{"text": "hello"}\nnot json\n\n{"txt": "x"}\n{"text": "world"}\n' |
    "$G" tokenize --tokenizer "$F/glm4-tokenizer" --encode > "$T/enc.jsonl" 2>"$T/enc.log"; rc=$?
check "--encode with unreadable lines: exit 1 ($rc)" test $rc = 1
check "... one output line per input line" test "$(wc -l < "$T/enc.jsonl")" = 5
check "... line 2: an error object" test "$(sed -n 2p "$T/enc.jsonl" | grep -c '"error":.*"line":2')" = 1
check "... line 3 (blank) blank" test -z "$(sed -n 3p "$T/enc.jsonl")"
check "... line 4: an error object" test "$(sed -n 4p "$T/enc.jsonl" | grep -c '"error":.*"line":4')" = 1
check "... lines 1 and 5 encoded" test "$(sed -n '1p;5p' "$T/enc.jsonl" | grep -c '^{"ids":\[')" = 2
check "... and the errors on stderr with their line" has "$T/enc.log" "<stdin>:2: not a JSON object"
# train --seed -1, as tokenize refuses it
"$G" train $TR --data "$T/shards" --output-dir "$T/seed" --max-steps 1 --seed -1 2>"$T/seed.log"; rc=$?
check "train --seed -1: refused (exit $rc)" test $rc = 2 -a ! -e "$T/seed"
check "... saying so" has "$T/seed.log" "--seed: expected a non-negative integer, got -1"
"$G" tokenize --quiet --seq-len 128 --seed -1 -o "$T/seedt" "$T/data.jsonl" 2>"$T/seedt.log"; rc=$?
check "tokenize --seed -1: refused too (exit $rc)" test $rc = 2
# --gradient-accumulation-steps beyond the data (14 rows): one epoch per step, said as for the batch
rows=$(jget "$T/shards/manifest.json" rows)
"$G" train $TR --data "$T/shards" --output-dir "$T/acc" --max-steps 1 --gradient-accumulation-steps 64 2>"$T/acc.log"; rc=$?
check "accumulation beyond the data: trains (exit $rc)" test $rc = 0
check "... warning that every step takes all $rows rows" has "$T/acc.log" "warning: --gradient-accumulation-steps 64: 128 row(s) per optimizer step (2 x 64) is more than the $rows in the data"
# a .gz file that is not gzip
printf 'hello, this is no archive\n' > "$T/notgz.jsonl.gz"
"$G" tokenize --quiet --seq-len 128 -o "$T/ngz" "$T/notgz.jsonl.gz" 2>"$T/ngz.log"; rc=$?
check "a .gz file that is not gzip: exit 1 ($rc)" test $rc = 1
check "... reported as not gzip" has "$T/ngz.log" "notgz.jsonl.gz: not gzip data although its name says so"
mk 3 5 > "$T/plain.jsonl.gz"
"$G" tokenize --quiet --seq-len 128 --report "$T/plain.json" -o "$T/pgz" "$T/plain.jsonl.gz" 2>"$T/pgz.log"; rc=$?
check "uncompressed JSON Lines named .gz: read (exit $rc), 3 records" test $rc = 0 -a "$(jget "$T/plain.json" records_kept)" = 3
check "... with a warning" has "$T/pgz.log" "its name says gzip, but the data is not compressed"

# ---- end
echo "test_integrity: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
