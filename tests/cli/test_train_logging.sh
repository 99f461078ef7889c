#!/usr/bin/env bash
# Training logs as transformers' Trainer writes them, and resumes that do not leave stale points:
#  1. the logged loss is the mean over the logging window, target_tokens its sum, and grad_norm the
#     window's last step's (transformers' _maybe_log_save_evaluate logs grad_norm.item() of the
#     step it logs at, not a mean):
#     checked against the per-step values of the same run logged every step (the means computed
#     here by hand in awk), with logging_first_step, and a last partial window;
#  2. metrics.jsonl, the TensorBoard event file (read back record by record through the TFRecord
#     and Event protobuf format by tests/cli/tb_dump.c) and loss_curve.svg carry the same points;
#  3. trainer_state.json (checkpoint and output_dir) has transformers' TrainerState fields;
#  4. resume: metrics.jsonl is cut back to the checkpoint's step, the new event file starts with a
#     SessionLog START at checkpoint step + 1, and TensorBoard's view (its purge rule applied to
#     the files in name order; with the tensorboard Python package when installed, its own
#     EventAccumulator) has each step once, with the resumed run's values;
#  5. on a terminal (script(1) gives a pty), messages start on their own line, never glued to the
#     progress line.
set -uo pipefail
G=${GLMTUNE:?}
TB=${GLM_TB_DUMP:?}
SRC=${GLM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
T=$(mktemp -d /tmp/glmlog.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
has() { grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }

awk 'BEGIN { srand(11); for (i = 0; i < 300; i++) { k = 10 + int(rand() * 40); ids = ""; lab = "";
     for (j = 0; j < k; j++) { x = 1 + int(rand() * 2000); ids = ids (j ? ", " : "") x; lab = lab (j ? ", " : "") (j < 4 ? -100 : x) }
     print "{\"input_ids\": [" ids "], \"labels\": [" lab "]}" } }' > "$T/data.jsonl"
"$G" tokenize --quiet --seq-len 64 -o "$T/shards" "$T/data.jsonl" 2>/dev/null
"$G" init-model --config "$SRC/samples/model-config.json" --seed 2 -o "$T/model" 2>/dev/null
TR="--quiet --device cpu --model $T/model --data $T/shards --lora-rank 4 --per-device-train-batch-size 2 --learning-rate 5e-3 --seed 3"

# vals FILE KEY: "step value" of the metrics.jsonl lines that have KEY
vals() { awk -v k="\"$2\": " '{ i = index($0, k); if (!i) next; v = substr($0, i + length(k)); sub(/[,}].*/, "", v);
         j = index($0, "\"step\": "); s = substr($0, j + 8); sub(/[,}].*/, "", s); print s, v }' "$1"; }
# close A B: relative difference below 1e-12 (the same double sums in the same order)
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = (b < 0 ? -b : b); exit !(d <= 1e-12 * m + 1e-300) }'; }

# ---- 0. the data line counts samples (documents) as glmtune inspect does, packed rows or not
insp=$("$G" inspect "$T/shards" | grep -- '^--- .* shard(s): ' | sed 's/^--- [0-9]* shard(s): \([0-9]*\) rows of \([0-9]*\) tokens, \([0-9]*\) samples ---$/\1 rows x \2 tokens, \3 samples/')
for p in true false; do
    "$G" train $TR --output-dir "$T/data-$p" --max-steps 1 --packing $p 2>"$T/data-$p.err" >/dev/null
    check "train --packing $p: data: $insp (inspect's count)" has "$T/data-$p.err" "data: $insp ("
done
check "... inspect counts more samples than rows here (packing)" bash -c "echo '$insp' | awk '{ exit !(\$5 > \$1) }'"

# ---- 1. window means against the per-step values
"$G" train $TR --output-dir "$T/every" --max-steps 7 --logging-steps 1 2>/dev/null
"$G" train $TR --output-dir "$T/win" --max-steps 7 --logging-steps 3 2>/dev/null
"$G" train $TR --output-dir "$T/first" --max-steps 7 --logging-steps 3 --logging_first_step 2>/dev/null
check "7 steps logged one by one" test "$(vals "$T/every/metrics.jsonl" loss | wc -l)" = 7
# expected[w] = mean of the per-step values over window w, by hand: windows (1-3) (4-6) (7); first: (1) (2-3) (4-6) (7)
means() { # FILE KEY WINDOW-ENDS...: "end mean" per window
    local f=$1 k=$2; shift 2
    vals "$f" "$k" | awk -v ends="$*" 'BEGIN { n = split(ends, e, " "); w = 1 } { s += $2; c++; if ($1 == e[w]) { printf "%d %.17g\n", $1, s / c; s = 0; c = 0; w++ } }'
}
sums() { local f=$1 k=$2; shift 2
    vals "$f" "$k" | awk -v ends="$*" 'BEGIN { n = split(ends, e, " "); w = 1 } { s += $2; if ($1 == e[w]) { printf "%d %d\n", $1, s; s = 0; w++ } }'
}
cmp_series() { # WHAT EXPECTED-TEXT GOT-TEXT: same steps, values close
    local what=$1 exp=$2 got=$3
    if [ "$(echo "$exp" | awk '{print $1}')" != "$(echo "$got" | awk '{print $1}')" ]; then
        echo "$what: steps differ: expected [$exp] got [$got]" >&2; return 1; fi
    paste -d' ' <(echo "$exp") <(echo "$got") | while read -r s1 e s2 g; do close "$g" "$e" || { echo "$what: step $s1: $g vs $e" >&2; exit 1; }; done
}
check "loss = mean over each window of 3 (and the last, partial one)" cmp_series loss "$(means "$T/every/metrics.jsonl" loss 3 6 7)" "$(vals "$T/win/metrics.jsonl" loss)"
check "grad_norm = the last step's of the window" cmp_series grad_norm "$(vals "$T/every/metrics.jsonl" grad_norm | awk '$1 == 3 || $1 == 6 || $1 == 7')" "$(vals "$T/win/metrics.jsonl" grad_norm)"
check "target_tokens = sum over the window" test "$(sums "$T/every/metrics.jsonl" target_tokens 3 6 7)" = "$(vals "$T/win/metrics.jsonl" target_tokens)"
check "logging_first_step: step 1 alone, then windows" cmp_series first "$(means "$T/every/metrics.jsonl" loss 1 3 6 7)" "$(vals "$T/first/metrics.jsonl" loss)"
check "the per-step losses are the same in every run (logging changes nothing)" test "$(vals "$T/every/metrics.jsonl" loss | sed -n 7p)" = "$(vals "$T/win/metrics.jsonl" loss | sed -n 3p)"
grep -q '"tokens_per_second": [0-9]' "$T/win/metrics.jsonl"; check "tokens_per_second logged per window" test $? = 0

# ---- 2. the event file and the SVG carry the same points
ev=$(ls "$T/win/runs"/events.out.tfevents.*)
"$TB" "$ev" > "$T/win.tb"; rc=$?
check "event file reads back (CRCs, protobuf) ($rc)" test $rc = 0
check "... starts with file_version brain.Event:2" test "$(head -1 "$T/win.tb")" = "version brain.Event:2"
tbloss=$(awk '$1 == "scalar" && $3 == "train/loss" { print $2, $4 }' "$T/win.tb")
f32close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = (b < 0 ? -b : b); exit !(d <= 1e-6 * m) }'; }
ok=1; [ "$(echo "$tbloss" | awk '{print $1}')" = "$(vals "$T/win/metrics.jsonl" loss | awk '{print $1}')" ] || ok=0
paste -d' ' <(echo "$tbloss") <(vals "$T/win/metrics.jsonl" loss) | while read -r a b c d; do f32close "$b" "$d" || exit 1; done || ok=0
check "TensorBoard train/loss = metrics.jsonl loss (float32), same steps" test $ok = 1
check "loss_curve.svg has the 3 logged points" test "$(grep -o 'class="train-raw"[^>]*points="[^"]*"' "$T/win/loss_curve.svg" | sed 's/.*points="//; s/"$//' | wc -w)" = 3

# ---- 3. trainer_state.json in transformers' schema
for f in "$T/win/checkpoint-7/trainer_state.json" "$T/win/trainer_state.json"; do
    for k in epoch global_step max_steps logging_steps eval_steps save_steps train_batch_size num_train_epochs \
             num_input_tokens_seen total_flos log_history best_metric best_global_step best_model_checkpoint \
             is_local_process_zero is_world_process_zero is_hyper_param_search trial_name trial_params stateful_callbacks; do
        grep -q "\"$k\":" "$f" || { echo "missing $k in $f" >&2; ok=0; }
    done
done
check "trainer_state.json has every TrainerState field" test $ok = 1
check "... and no other (glmtune's state is in glmtune_state.json)" test "$(grep -c '"format"\|"data_loader"\|"rng"' "$T/win/checkpoint-7/trainer_state.json")" = 0 -a -f "$T/win/checkpoint-7/glmtune_state.json"
check "log_history entries as transformers writes them" grep -q '"loss":[0-9.e-]*,"grad_norm":[0-9.e-]*,"learning_rate":[0-9.e-]*,"epoch":[0-9.e-]*,"step":3}' <(tr -d ' \n' < "$T/win/checkpoint-7/trainer_state.json")
# the Trainer's resume: TrainerControl.from_state(state.stateful_callbacks["TrainerControl"]) = TrainerControl(**args), then attributes
python3 - "$T/win" <<'PY' 2>"$T/sc.err"; rc=$?
import json, sys
for p, stop in ((sys.argv[1] + "/checkpoint-7/trainer_state.json", True), (sys.argv[1] + "/trainer_state.json", True)):
    tc = json.load(open(p))["stateful_callbacks"]["TrainerControl"]
    assert sorted(tc) == ["args", "attributes"] and tc["attributes"] == {}, p
    assert tc["args"] == {"should_epoch_stop": False, "should_evaluate": False, "should_log": False,
                          "should_save": True, "should_training_stop": stop}, (p, tc)
PY
check "stateful_callbacks holds transformers' TrainerControl record ($rc: $(tail -1 "$T/sc.err"))" test $rc = 0
check "output_dir/trainer_state.json ends with the run summary" grep -q '"train_runtime"' "$T/win/trainer_state.json"
if python3 -c 'import transformers' 2>/dev/null; then
    python3 - "$T/win" <<'PY' 2>"$T/ts.err"; rc=$?
import sys
from transformers import TrainerState
for p in (sys.argv[1] + "/checkpoint-7/trainer_state.json", sys.argv[1] + "/trainer_state.json"):
    s = TrainerState.load_from_json(p)
    assert s.global_step == 7 and s.max_steps == 7 and s.logging_steps == 3, p
    assert [h["step"] for h in s.log_history if "loss" in h] == [3, 6, 7], p
PY
    check "transformers' TrainerState.load_from_json reads both ($rc)" test $rc = 0
else
    echo "SKIPPED: transformers is not installed here: TrainerState.load_from_json not tried"
fi
"$G" export-adapter --checkpoint "$T/win" -o "$T/win-adapter" 2>/dev/null
check "export-adapter still finds the checkpoint of an output dir holding trainer_state.json" test -f "$T/win-adapter/adapter_model.safetensors"

# ---- 4. resume: no stale points in metrics.jsonl or TensorBoard
"$G" train $TR --output-dir "$T/res" --max-steps 10 --save-steps 4 --logging-steps 1 2>/dev/null
vals "$T/res/metrics.jsonl" loss > "$T/orig.loss"
rm -rf "$T/res/checkpoint-10"  # as if killed after logging steps 9 and 10, before the last save
sleep 1
"$G" train $TR --output-dir "$T/res" --max-steps 10 --save-steps 4 --logging-steps 1 --resume-from-checkpoint 2>"$T/resume.log"; rc=$?
check "resume from checkpoint-8 (exit $rc)" has "$T/resume.log" "resuming from .*checkpoint-8"
check "metrics.jsonl: each step 1..10 exactly once" test "$(vals "$T/res/metrics.jsonl" loss | awk '{print $1}' | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 10 "
check "... the resumed steps equal the first run's" test "$(vals "$T/res/metrics.jsonl" loss)" = "$(cat "$T/orig.loss")"
files=$(ls "$T/res/runs"/events.out.tfevents.* | sort)
check "two event files" test "$(echo "$files" | wc -l)" = 2
newf=$(echo "$files" | tail -1)
"$TB" "$(echo "$files" | head -1)" > "$T/first.tb"
check "the first event file: file_version, then SessionLog START at step 1 (TensorBoard's Python loader purges on the resumed file's marker only then)" test "$(head -2 "$T/first.tb" | tr '\n' '|')" = "version brain.Event:2|session 1 1|"
"$TB" "$newf" > "$T/new.tb"
check "the new event file: file_version, then SessionLog START at step 9 (checkpoint 8 + 1)" test "$(head -2 "$T/new.tb" | tr '\n' '|')" = "version brain.Event:2|session 9 1|"
# TensorBoard's view: files in name order; a START at step s drops every earlier point with step >= s
for f in $files; do "$TB" "$f"; done | awk '$1 == "session" && $3 == 1 { for (k in v) if (st[k] >= $2) delete v[k]; next }
    $1 == "scalar" && $3 == "train/loss" { n++; v[n] = $4; st[n] = $2 } END { for (i = 1; i <= n; i++) if (i in v) print st[i], v[i] }' > "$T/view.loss"
check "TensorBoard view: each step once" test "$(awk '{print $1}' "$T/view.loss" | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 10 "
ok=1; paste -d' ' "$T/view.loss" <(vals "$T/res/metrics.jsonl" loss) | while read -r a b c d; do f32close "$b" "$d" || exit 1; done || ok=0
check "... with metrics.jsonl's values" test $ok = 1
if python3 -c 'import tensorboard' 2>/dev/null; then
    python3 - "$T/res/runs" <<'PY' > "$T/ea.loss" 2>"$T/ea.err"; rc=$?
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1])
ea.Reload()
for e in ea.Scalars("train/loss"):
    print(e.step, "%.9g" % e.value)
PY
    check "tensorboard's EventAccumulator reads the run ($rc)" test $rc = 0
    check "... and shows each step once, the resumed values" test "$(cat "$T/ea.loss")" = "$(cat "$T/view.loss")"
    # the loader of tensorboard --load_fast=false (plugin_event_accumulator): it purged on the resumed
    # file's START only when the first file had a START too (steps 9 and 10 showed twice before)
    python3 - "$T/res/runs" <<'PY' > "$T/pea.steps" 2>"$T/pea.err"; rc=$?
import sys
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1])
ea.Reload()
print(" ".join(str(e.step) for e in ea.Tensors("train/loss")))
PY
    check "tensorboard's plugin_event_accumulator (--load_fast=false): each step once ($rc: $(cat "$T/pea.steps"))" test "$(cat "$T/pea.steps")" = "1 2 3 4 5 6 7 8 9 10"
else
    echo "SKIPPED: the tensorboard Python package is not installed here: EventAccumulator not tried"
fi

# ---- 5. a terminal: messages never glued to the progress line
if command -v script >/dev/null && script -qec true /dev/null >/dev/null 2>&1; then
    script -qec "$G train --device cpu --model $T/model --data $T/shards --lora-rank 4 --output-dir $T/tty --max-steps 3 --save-steps 1 --logging-steps 1" /dev/null > "$T/tty.out" 2>&1
    check "a progress line is drawn in place on the terminal" grep -q $'\rstep 1/3' "$T/tty.out"
    check "... and the checkpoint messages are printed" grep -q 'glmtune: step 3: saved' "$T/tty.out"
    check "... every message starts on its own line" test "$(grep -c $'\x1b\\[Kglmtune' "$T/tty.out")" = 0
else
    echo "SKIPPED: script(1) cannot give a pseudo-terminal here: the terminal case is not run"
fi
"$G" train $TR --output-dir "$T/lp" --max-steps 1 --loraplus_lr_ratio 16 --quiet 2>/dev/null
"$G" train --device cpu --model "$T/model" --data "$T/shards" --output-dir "$T/lp2" --max-steps 1 --loraplus_lr_ratio 16 2>"$T/lp.log"
check "LoRA+ reaches the optimizer" has "$T/lp.log" "LoRA+: the lora_B weights learn at 16 x"

# ---- 6. --verbose (anywhere on the line): debug messages, among them how many micro-batches were
# uploaded during the previous one's backward (glm_model_prefetch): all but the first when the run
# stays inside an epoch (4 steps x 2 micro-batches of the 35 rows per epoch's 140); the losses are
# those of the run without --verbose
"$G" train $TR --output-dir "$T/vb" --max-steps 4 --gradient-accumulation-steps 2 --logging-steps 1 --verbose 2>"$T/vb.log"
"$G" --verbose train $TR --output-dir "$T/vb2" --max-steps 4 --gradient-accumulation-steps 2 --logging-steps 1 2>"$T/vb2.log"
check "--verbose: the next micro-batch uploaded ahead in 7 of 8" has "$T/vb.log" "debug: 7 of 8 micro-batches were uploaded during the previous one's backward, 0 were still"
check "... glmtune --verbose train is the same" has "$T/vb2.log" "debug: 7 of 8 micro-batches were uploaded"
"$G" train $TR --output-dir "$T/nv" --max-steps 4 --gradient-accumulation-steps 2 --logging-steps 1 2>"$T/nv.log"
check "... without --verbose, no debug line" test "$(grep -c 'debug:' "$T/nv.log")" = 0
check "... and the same losses" test "$(vals "$T/vb/metrics.jsonl" loss)" = "$(vals "$T/nv/metrics.jsonl" loss)"

echo "test_train_logging: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
