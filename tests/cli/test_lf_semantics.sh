#!/usr/bin/env bash
# A LLaMA-Factory YAML means here what it means in LLaMA-Factory. Expected values are
# computed in this script from the formulas of the sources named, not by glmtune's code:
#  1. packing: false (LLaMA-Factory's SFT default: hparams/parser.py sets packing = stage == "pt"
#     when the YAML leaves it out): a micro-batch is per_device_train_batch_size samples, and the
#     optimizer steps are transformers' count (trainer.py, Trainer.set_initial_training_values,
#     4.46 and later): len_dataloader = ceil(samples / (batch x world)), steps per epoch =
#     max(len_dataloader // accum + (len_dataloader % accum > 0), 1), max_steps =
#     ceil(num_train_epochs x steps per epoch). packing: true counts the shards' rows the same way.
#     The loss is normalised over the global batch's target tokens: B=2 x accum 1 trains what
#     B=1 x accum 2 does (transformers' num_items_in_batch).
#  2. the eval block evaluates: val_size's split is used when eval_strategy asks for evaluation
#     and no eval_dataset is named;
#  3. save/eval/logging_strategy epoch and no, as transformers' DefaultFlowCallback;
#     report_to: wandb is said to be unsupported;
#  4. keys a YAML leaves out take transformers' TrainingArguments defaults (learning_rate 5e-5,
#     per_device_train_batch_size 8, logging_steps 500), said in the settings dump; the command
#     line keeps glmtune's; logging_steps below 1 is ceil(ratio x max_steps);
#  5. val_size as a fraction is an exact count, as HF datasets' train_test_split (which
#     LLaMA-Factory's split_dataset calls) makes it: n_test = ceil(test_size x n_samples),
#     n_train = n_samples - n_test (arrow_dataset.py, train_test_split);
#  6. stage sft: a pretraining dataset_info entry (columns {"prompt": "text"}, as c4_demo) is
#     dropped, counted by reason (LLaMA-Factory's supervised preprocessing drops an example
#     without a response), not trained as all-target text among the chats; a YAML without
#     dataset is refused (LLaMA-Factory requires it for training), not every entry read.
set -uo pipefail
G=${GLMTUNE:?}
SRC=${GLM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
T=$(mktemp -d /tmp/glmlfs.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
# ceil_div A B, and transformers' steps: tf_steps SAMPLES BATCH WORLD ACCUM EPOCHS
tf_steps() { awk -v n="$1" -v b="$2" -v w="$3" -v g="$4" -v e="$5" 'function ceil(x) { return x == int(x) ? x : int(x) + 1 }
    BEGIN { dl = ceil(n / (b * w)); u = int(dl / g) + (dl % g > 0); if (u < 1) u = 1; print ceil(e * u) }'; }
global_step() { tr -d ' \n' < "$1/trainer_state.json" | grep -o '"global_step":[0-9]*' | cut -d: -f2; }
# metrics.jsonl steps that have KEY
steps_with() { grep "\"$2\"" "$1/metrics.jsonl" | grep -o '"step": [0-9]*' | awk '{printf "%s ", $2}'; }

# 101 samples of 10..49 tokens (pretokenized; the first 4 tokens of each are prompt), rows of 128
N=101
awk -v n=$N 'BEGIN { srand(5); for (i = 0; i < n; i++) { k = 10 + int(rand() * 40); ids = ""; lab = "";
     for (j = 0; j < k; j++) { x = 1 + int(rand() * 2000); ids = ids (j ? ", " : "") x; lab = lab (j ? ", " : "") (j < 4 ? -100 : x) }
     print "{\"input_ids\": [" ids "], \"labels\": [" lab "]}" } }' > "$T/data.jsonl"
head -n 20 "$T/data.jsonl" > "$T/val.jsonl"
"$G" tokenize --quiet --seq-len 128 -o "$T/shards" "$T/data.jsonl" 2>/dev/null
"$G" tokenize --quiet --seq-len 128 --val-size 20 -o "$T/shards_val" "$T/data.jsonl" 2>/dev/null
"$G" init-model --config "$SRC/samples/model-config.json" --seed 2 -o "$T/model" 2>/dev/null
ROWS=$(tr -d ' \n' < "$T/shards/manifest.json" | grep -o '"train":{[^}]*"rows":[0-9]*' | grep -o '[0-9]*$')
check "the 101 samples packed into fewer rows ($ROWS)" test -n "$ROWS" -a "${ROWS:-999}" -lt $N

yaml() { # FILE then key: value lines
    local f=$1; shift
    { echo "stage: sft"; echo "do_train: true"; echo "finetuning_type: lora"; echo "lora_rank: 4"; printf '%s\n' "$@"; } > "$f"
}
P="--model_name_or_path $T/model --device cpu --quiet"

# ---- 1. packing false: B samples per micro-batch, transformers' step count
yaml "$T/sft.yaml" "per_device_train_batch_size: 4" "gradient_accumulation_steps: 3" "num_train_epochs: 2.5" \
    "learning_rate: 1.0e-3" "logging_steps: 1"
exp=$(tf_steps $N 4 1 3 2.5)
"$G" train --config "$T/sft.yaml" $P --dataset "$T/shards" --output_dir "$T/sft" --dry-run > "$T/sft.dry" 2>"$T/sft.dry.log"
check "dry run: $N samples, $exp optimizer steps (transformers' arithmetic)" grep -q "schedule: $N samples, 12 per optimizer step, [0-9]* steps per epoch, $exp optimizer steps" "$T/sft.dry"
"$G" train --config "$T/sft.yaml" --model_name_or_path "$T/model" --device cpu --dataset "$T/shards" --output_dir "$T/sft" 2>"$T/sft.log"
check "packing false (the YAML's default for sft) trains $exp steps (got $(global_step "$T/sft"))" test "$(global_step "$T/sft")" = "$exp"
check "... and says packing came from LLaMA-Factory's default" grep -q '^  packing  *= false  *(LLaMA-Factory/transformers default)' "$T/sft.log"
check "... each micro-batch one row of 4 samples" grep -q "packing false: each micro-batch is 4 samples" "$T/sft.log"
# the command line: glmtune's default (packed rows) and --packing false
"$G" train $P --data "$T/shards" --output-dir "$T/cli_rows" --per-device-train-batch-size 4 --gradient-accumulation-steps 3 \
    --num-train-epochs 2.5 --dry-run > "$T/cli_rows.dry" 2>/dev/null
check "command line: packed rows by default ($(tf_steps "$ROWS" 4 1 3 2.5) steps)" grep -q "schedule: $ROWS rows, 12 per optimizer step, [0-9]* steps per epoch, $(tf_steps "$ROWS" 4 1 3 2.5) optimizer steps" "$T/cli_rows.dry"
"$G" train $P --data "$T/shards" --output-dir "$T/cli_s" --per-device-train-batch-size 4 --gradient-accumulation-steps 3 \
    --num-train-epochs 2.5 --packing false --dry-run > "$T/cli_s.dry" 2>/dev/null
check "command line: --packing false gives the YAML's count" grep -q "schedule: $N samples, 12 per optimizer step, [0-9]* steps per epoch, $exp optimizer steps" "$T/cli_s.dry"
# packing: true in the YAML: the shards' rows, counted the same way (and the one-line note)
yaml "$T/packed.yaml" "packing: true" "per_device_train_batch_size: 2" "gradient_accumulation_steps: 2" "num_train_epochs: 1"
"$G" train --config "$T/packed.yaml" $P --dataset "$T/shards" --output_dir "$T/packed" 2>"$T/packed.log"
check "packing true: rows, $(tf_steps "$ROWS" 2 1 2 1) steps (got $(global_step "$T/packed"))" test "$(global_step "$T/packed")" = "$(tf_steps "$ROWS" 2 1 2 1)"
check "... with the line that glmtune never attends across documents" grep -q "glmtune never lets a sample attend to another" "$T/packed.log"
# loss normalised over the global batch: 2 samples in one micro-batch == 1 sample x 2 accumulation
"$G" train $P --data "$T/shards" --packing false --output-dir "$T/b2" --per-device-train-batch-size 2 --max-steps 3 --logging-steps 1 --learning-rate 1e-3 2>/dev/null
"$G" train $P --data "$T/shards" --packing false --output-dir "$T/a2" --per-device-train-batch-size 1 --gradient-accumulation-steps 2 --max-steps 3 --logging-steps 1 --learning-rate 1e-3 2>/dev/null
losses() { grep '"loss"' "$1/metrics.jsonl" | grep -o '"loss": [0-9.e+-]*' | awk '{print $2}'; }
check "B=2 x accum 1 == B=1 x accum 2 (3 steps, relative 1e-5)" awk 'NR == FNR { a[FNR] = $1; next } { d = a[FNR] - $1; if (d < 0) d = -d; if (d > 1e-5 * a[FNR] || FNR > 3) bad = 1; n++ } END { exit bad || n != 3 }' <(losses "$T/b2") <(losses "$T/a2")

# ---- 2. the eval block evaluates on val_size's split
yaml "$T/eval.yaml" "val_size: 20" "per_device_train_batch_size: 4" "max_steps: 6" "eval_strategy: steps" "eval_steps: 2" "logging_steps: 1"
"$G" train --config "$T/eval.yaml" $P --dataset "$T/shards_val" --output_dir "$T/eval" 2>"$T/eval.log"
check "eval_strategy steps without eval_dataset: eval at 2 4 6 ($(steps_with "$T/eval" eval_loss))" test "$(steps_with "$T/eval" eval_loss)" = "2 4 6 "
check "... no 'no evaluation' warning" bash -c "! grep -q 'no evaluation' '$T/eval.log'"
"$G" train --config "$T/eval.yaml" $P --dataset "$T/shards" --output_dir "$T/eval_noval" 2>"$T/eval_noval.log"
check "... shards without a val split: said, training goes on" grep -q "has no val split and no eval_dataset" "$T/eval_noval.log"
yaml "$T/evalno.yaml" "per_device_train_batch_size: 4" "max_steps: 4" "eval_steps: 2"
"$G" train --config "$T/evalno.yaml" $P --dataset "$T/shards_val" --eval_dataset "$T/shards_val" --output_dir "$T/evalno" 2>"$T/evalno.log"
check "eval_strategy left out (transformers: no): no evaluation, said" test -z "$(steps_with "$T/evalno" eval_loss)"
check "... in one warning" grep -q "eval_strategy is no (transformers' default" "$T/evalno.log"

# ---- 3. strategies: epoch and no
SPE=$(tf_steps $N 4 1 3 1)
yaml "$T/epoch.yaml" "per_device_train_batch_size: 4" "gradient_accumulation_steps: 3" "num_train_epochs: 2" \
    "save_strategy: epoch" "logging_strategy: epoch" "eval_strategy: epoch" "report_to: wandb"
"$G" train --config "$T/epoch.yaml" $P --dataset "$T/shards_val" --output_dir "$T/epoch" 2>"$T/epoch.log"
SPEV=$(tf_steps $((N - 20)) 4 1 3 1)
check "save_strategy epoch: checkpoints at $SPEV and $((2 * SPEV)) only" test "$(cd "$T/epoch" && ls -d checkpoint-* | sort -t- -k2 -n | tr '\n' ' ')" = "checkpoint-$SPEV checkpoint-$((2 * SPEV)) "
check "logging_strategy epoch: loss logged at $SPEV $((2 * SPEV))" test "$(steps_with "$T/epoch" loss)" = "$SPEV $((2 * SPEV)) "
check "eval_strategy epoch: eval at $SPEV $((2 * SPEV))" test "$(steps_with "$T/epoch" eval_loss)" = "$SPEV $((2 * SPEV)) "
check "report_to: wandb is said to be unsupported" grep -q "report_to: wandb is not supported" "$T/epoch.log"
yaml "$T/nosave.yaml" "per_device_train_batch_size: 4" "max_steps: 3" "save_strategy: no" "logging_strategy: no"
"$G" train --config "$T/nosave.yaml" $P --dataset "$T/shards" --output_dir "$T/nosave" 2>"$T/nosave.log"
check "save_strategy no: no checkpoint" test -z "$(ls -d "$T/nosave"/checkpoint-* 2>/dev/null)"
check "... the final adapter in output_dir" test -f "$T/nosave/adapter_config.json" -a -f "$T/nosave/adapter_model.safetensors"
check "logging_strategy no: no loss logged" test -z "$(steps_with "$T/nosave" loss)"
# every run leaves its final adapter in output_dir (LLaMA-Factory's trainer.save_model()), the last step's weights
check "save_strategy steps: the final adapter in output_dir too" test -f "$T/sft/adapter_config.json" -a -f "$T/sft/adapter_model.safetensors"
check "... the weights of the last step ($exp)" cmp -s "$T/sft/adapter_model.safetensors" "$T/sft/checkpoint-$exp/adapter_model.safetensors"
# the YAMLs that chain on it (adapter_name_or_path: saves/.../sft): the run directory gives its final adapter,
# or, without one (a run cut short), its newest checkpoint; each said in one line
yaml "$T/chain.yaml" "adapter_name_or_path: $T/sft" "max_steps: 1" "per_device_train_batch_size: 4"
"$G" train --config "$T/chain.yaml" $P --dataset "$T/shards" --output_dir "$T/chain" 2>"$T/chain.log"
check "adapter_name_or_path: a run directory trains from its final adapter" grep -q "init-adapter $T/sft: a training run's output directory: its final adapter" "$T/chain.log"
check "... and names the adapter the run starts from" grep -q "the run starts from the LoRA adapter in $T/sft (" "$T/chain.log"
cp -r "$T/sft" "$T/sft_cut"; rm -f "$T/sft_cut/adapter_config.json" "$T/sft_cut/adapter_model.safetensors"
"$G" train --config "$T/chain.yaml" $P --dataset "$T/shards" --output_dir "$T/chain2" --adapter_name_or_path "$T/sft_cut" 2>"$T/chain2.log"
check "... a run directory without one: its newest checkpoint" grep -q "without a final adapter: its newest checkpoint, $T/sft_cut/checkpoint-$exp" "$T/chain2.log"
check "... which trains" test -f "$T/chain2/adapter_model.safetensors"
mkdir -p "$T/empty_run"
"$G" train --config "$T/chain.yaml" $P --dataset "$T/shards" --output_dir "$T/chain3" --adapter_name_or_path "$T/empty_run" 2>"$T/chain3.log"
check "... a directory with neither: an error with the hint" grep -q "holds no adapter .* and no complete checkpoint-N; hint" "$T/chain3.log"

# ---- 4. defaults of a YAML that leaves keys out, and ratios
yaml "$T/bare.yaml" "max_steps: 8" "logging_steps: 0.25"
"$G" train --config "$T/bare.yaml" --model_name_or_path "$T/model" --device cpu --dataset "$T/shards" --output_dir "$T/bare" 2>"$T/bare.log"
check "learning_rate: transformers' 5e-5" grep -q '^  learning_rate  *= 5e-0*5  *(LLaMA-Factory/transformers default)' "$T/bare.log"
check "per_device_train_batch_size: transformers' 8" grep -q '^  per_device_train_batch_size  *= 8  *(LLaMA-Factory/transformers default)' "$T/bare.log"
check "save_steps: transformers' 500" grep -q '^  save_steps  *= 500  *(LLaMA-Factory/transformers default)' "$T/bare.log"
check "eval_strategy: transformers' no" grep -q '^  eval_strategy  *= "no"  *(LLaMA-Factory/transformers default)' "$T/bare.log"
LOG=$(awk 'BEGIN { x = 0.25 * 8; print (x == int(x) ? x : int(x) + 1) }')
check "logging_steps 0.25 of 8 steps: every $LOG ($(steps_with "$T/bare" loss))" test "$(steps_with "$T/bare" loss)" = "$(seq $LOG $LOG 8 | tr '\n' ' ')"
"$G" train --model "$T/model" --device cpu --data "$T/shards" --output-dir "$T/cli_def2" --max-steps 1 2>"$T/cli_def.log"
check "the command line keeps glmtune's learning rate default" grep -q '^  learning_rate  *= 0.0001  *(default)' "$T/cli_def.log"

# ---- 6. cutoff_len under a YAML: a long chat is cut as LLaMA-Factory cuts it (processor_utils.py
# infer_seqlen, applied per (source, target) pair by supervised.py with one token kept for the end);
# the command line keeps dropping it (too_long) unless --truncate. Two pre-tokenized chats of
# (source, target) runs 30,50,20,40 and 100,100 at cutoff_len 64; expected ids computed here.
mk() { awk -v runs="$1" -v seed="$2" 'BEGIN { srand(seed); n = split(runs, r, ","); ids = ""; lab = ""; k = 0
    for (p = 1; p <= n; p++) for (j = 0; j < r[p]; j++) { x = 1 + int(rand() * 2000); ids = ids (k ? ", " : "") x
        lab = lab (k ? ", " : "") (p % 2 ? -100 : x); k++ }
    print "{\"input_ids\": [" ids "], \"labels\": [" lab "]}" }'; }
{ mk 30,50,20,40 7; mk 100,100 8; } > "$T/long.jsonl"
# expected: LLaMA-Factory's arithmetic, by hand: infer(src, tgt, budget) -> kept lengths
expect() { awk -v T=64 'function infer(s, t, c) { if (t * 2 < c) mt = c; else if (s * 2 < c) mt = c - s; else mt = int(c * (t / (s + t)))
        kt = t < mt ? t : mt; ms = c - kt; if (ms < 0) ms = 0; ks = s < ms ? s : ms }
    { line = $0; sub(/.*"input_ids": \[/, "", line); sub(/\].*/, "", line); n = split(line, id, ", ")
      lab = $0; sub(/.*"labels": \[/, "", lab); sub(/\].*/, "", lab); split(lab, lb, ", ")
      total = 1; out = ""; tg = ""; i = 1; last = 0
      while (i <= n && total < T) { s0 = i; while (i <= n && lb[i] == -100) i++; s1 = i; while (i <= n && lb[i] != -100) i++
        infer(s1 - s0, i - s1, T - total)
        for (q = 0; q < ks; q++) { out = out (out == "" ? "" : ",") id[s0 + q]; tg = tg 0; last = 0 }
        for (q = 0; q < kt; q++) { out = out "," id[s1 + q]; tg = tg 1; last = 1 }
        total += ks + kt }
      print "[" out "," id[n] "] " tg last }' "$1"; }
printf 'stage: sft\ncutoff_len: 64\n' > "$T/cut.yaml"
"$G" tokenize --quiet --config "$T/cut.yaml" -o "$T/cut" "$T/long.jsonl" 2>"$T/cut.log"
got=$("$G" inspect --json "$T/cut" 2>/dev/null | awk '{ ids = $0; sub(/.*"ids": *\[/, "", ids); sub(/\].*/, "", ids); gsub(/ /, "", ids)
      t = $0; sub(/.*"targets": *\[/, "", t); sub(/\].*/, "", t); gsub(/[ ,]/, "", t); print "[" ids "] " t }' | sort)
check "cutoff_len: both chats cut to LLaMA-Factory's shares (64 tokens each)" test "$got" = "$(expect "$T/long.jsonl" | sort)"
check "... counted in the report" grep -q "2  *note: truncated" <("$G" tokenize --config "$T/cut.yaml" -o "$T/cut_r" "$T/long.jsonl" 2>&1)
check "the command line keeps dropping them (too_long)" grep -q "too_long" <("$G" tokenize --seq-len 64 -o "$T/cut_cli2" "$T/long.jsonl" 2>&1)

# ---- 7. the rest: stage against the shards, dataset_info's hub keys, a trailing user turn
TOKS=$SRC/samples/tokenizer
printf '{"text": "plain text for pretraining number %d, long enough to be a sample."}\n' $(seq 1 30) > "$T/pt.jsonl"
"$G" tokenize --quiet --tokenizer "$TOKS" --format text --seq-len 128 -o "$T/ptshards" "$T/pt.jsonl" 2>/dev/null
yaml "$T/st.yaml" "max_steps: 1"
"$G" train --config "$T/st.yaml" $P --dataset "$T/ptshards" --output_dir "$T/st" 2>"$T/st.log"
check "stage sft on plain-text (pt) shards: said" grep -q "stage: sft, but the shards in .* hold plain text" "$T/st.log"
mkdir -p "$T/dsi"
printf '[{"instruction": "Say hi", "input": "", "output": "hi"}, {"instruction": "Say yo", "input": "", "output": "yo"}]\n' > "$T/dsi/d.json"
printf '{"d": {"file_name": "d.json", "split": "test", "subset": "en", "folder": "x"}}\n' > "$T/dsi/dataset_info.json"
"$G" tokenize --tokenizer "$TOKS" --dataset d --dataset-dir "$T/dsi" --seq-len 128 -o "$T/dsio" 2>"$T/dsi.log"
check "dataset_info split/subset/folder: answered in one line" test "$(grep -c 'split: test, subset: en, folder: x not used' "$T/dsi.log")" = 1
printf '%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]}' \
    '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}' > "$T/trail.jsonl"
"$G" tokenize --tokenizer "$TOKS" --seq-len 128 -o "$T/trail_cli" "$T/trail.jsonl" 2>"$T/trail_cli.log"
check "a trailing user turn: kept on the command line, noted" grep -q "1  *note: trailing_user_turn_kept" "$T/trail_cli.log"
printf 'stage: sft\ncutoff_len: 128\n' > "$T/trail.yaml"
"$G" tokenize --config "$T/trail.yaml" --model_name_or_path "$TOKS" -o "$T/trail_lf" "$T/trail.jsonl" 2>"$T/trail_lf.log"
check "... under a YAML the sample is dropped as LLaMA-Factory drops it" grep -q "records kept  *1$" "$T/trail_lf.log"
check "... counted by reason" grep -q "trailing_user_turn" "$T/trail_lf.log"
check "--chat-template's help says templates must render each message alone" grep -q "applied to each message alone" <("$G" tokenize --help)

# ---- 5. tokenize's LLaMA-Factory data keys (tests/fixtures: the GLM-4 tokenizer, the chat fixtures)
F=${GLM_FIXTURES:?the test data folder, tests/fixtures}
[ -d "$F" ] || { echo "FAIL: the test data folder $F does not exist" >&2; exit 1; }
TOK=$F/glm4-tokenizer
# default_system: the fixture's conversation rendered by transformers' apply_chat_template with the
# model's own chat_template (make_fixtures.py), given here without its system message
printf '%s\n' '{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And times 3?"}, {"role": "assistant", "content": "12"}]}' > "$T/nosys.jsonl"
want=$(sed -n 2p "$F/chat_golden.jsonl" | grep -o '"input_ids": \[[^]]*\]' | tr -d ' ' | sed 's/"input_ids"://')
check "the fixture has the system turn" grep -q 'You are a terse assistant' <(sed -n 2p "$F/chat_golden.jsonl")
printf 'stage: sft\ncutoff_len: 256\ndefault_system: You are a terse assistant.\n' > "$T/sys.yaml"
"$G" tokenize --quiet --config "$T/sys.yaml" --model_name_or_path "$TOK" -o "$T/sys" "$T/nosys.jsonl" 2>"$T/sys.log"
got=$("$G" inspect --json "$T/sys" 2>/dev/null | grep -o '"ids": *\[[^]]*\]' | head -1 | tr -d ' ' | sed 's/"ids"://')
check "default_system: the ids of transformers' rendering with that system message" test -n "$want" -a "$got" = "$want"
"$G" tokenize --quiet --config "$T/sys.yaml" --model_name_or_path "$TOK" -o "$T/sys2" <(sed -n 2p "$F/chat_golden.jsonl") 2>/dev/null
got2=$("$G" inspect --json "$T/sys2" 2>/dev/null | grep -o '"ids": *\[[^]]*\]' | head -1 | tr -d ' ' | sed 's/"ids"://')
check "default_system: a sample with its own system message keeps it" test "$got2" = "$want"
# default_system with tools: LLaMA-Factory renders `system or default_system` with the tool text in the first
# turn; the model's chat_template puts the system text after its tool block. Expected: that template
# rendered by jinja2 as transformers renders it (data/make_tools_system.py), chat_golden's tool case
# with the system text in its tools' system message. The tools come as a record key (formats.c puts
# them on an empty system message of their own) or on the sample's own system message.
shown_text() { "$G" inspect "$1" 2>/dev/null | awk '/^--- sample 0/ {on = 1; next} /^--- [0-9]+ shard/ {on = 0} on' | sed 's/⟦//g; s/⟧//g'; }
D=$SRC/tests/cli/data
printf 'stage: sft\ncutoff_len: 512\ndefault_system: You are a weather bot.\n' > "$T/tsys.yaml"
"$G" tokenize --quiet --config "$T/tsys.yaml" --model_name_or_path "$TOK" -o "$T/tsys" "$D/tools_no_system.jsonl" 2>/dev/null
check "default_system with tools: rendered with the tools, as the template renders that system message" \
    cmp -s <(shown_text "$T/tsys") "$D/default_system_tools.expected"
"$G" tokenize --quiet --tokenizer "$TOK" --default-system "You are a weather bot." -o "$T/tsys_cli" "$D/tools_no_system.jsonl" 2>/dev/null
check "... the same with --default-system" cmp -s <(shown_text "$T/tsys_cli") "$D/default_system_tools.expected"
"$G" tokenize --quiet --config "$T/tsys.yaml" --model_name_or_path "$TOK" -o "$T/tsys2" "$D/tools_own_system.jsonl" 2>/dev/null
check "... a sample with tools and its own system keeps it" \
    cmp -s <(shown_text "$T/tsys2") "$D/own_system_tools.expected"
# eval_dataset: its entries are the val split (an entry in dataset too: both splits); val_size excludes it
L=$F/corpora/llamafactory
printf 'stage: sft\ndataset: identity\neval_dataset: alpaca_en_demo,identity\nmax_samples: 40\ncutoff_len: 1024\nstreaming: false\ntool_format: glm4\neval_strategy: steps\neval_steps: 2\nmax_steps: 2\nper_device_train_batch_size: 2\n' > "$T/ev.yaml"
"$G" tokenize --quiet --config "$T/ev.yaml" --model_name_or_path "$TOK" --dataset_dir "$L" -o "$T/ev" 2>"$T/ev.log"
check "eval_dataset: 80 samples in val, identity's 40 in train" test "$(tr -d ' \n' < "$T/ev/manifest.json" | grep -o '"\(val\|train\)":{"rows":[0-9]*,"samples":[0-9]*' | sed 's/"rows":[0-9]*,//' | sort | tr '\n' ' ')" = '"train":{"samples":40 "val":{"samples":80 '
check "streaming and tool_format answered in one line each" test "$(grep -c 'is not used by tokenize' "$T/ev.log")" = 2
sed 's/^max_samples: 40/max_samples: 40\nval_size: 0.1/' "$T/ev.yaml" > "$T/ev2.yaml"
"$G" tokenize --quiet --config "$T/ev2.yaml" --model_name_or_path "$TOK" --dataset_dir "$L" -o "$T/ev2" 2>"$T/ev2.log"
check "eval_dataset with val_size: refused, as in LLaMA-Factory" grep -q "eval_dataset .* and val_size .* are both set" "$T/ev2.log"

# ---- 5. val_size 0.1 of 1,090 samples: 981 / 109 (before: drawn per sample, 970 / 120); of 1,001: 900 / 101
splits() { tr -d ' \n' < "$1/manifest.json" | grep -o '"\(val\|train\)":{"rows":[0-9]*,"samples":[0-9]*' | sed 's/"rows":[0-9]*,//' | sort | tr '\n' ' '; }
for n in 1090 1001; do
  awk -v n=$n 'BEGIN { for (i = 0; i < n; i++) print "{\"input_ids\": [1, 2, " (i % 500 + 3) ", 4], \"labels\": [-100, 2, " (i % 500 + 3) ", 4]}" }' > "$T/vs$n.jsonl"
  nt=$(awk -v n=$n 'BEGIN { x = 0.1 * n; c = (x == int(x)) ? x : int(x) + 1; print c }')
  for seed in 1 42; do
    "$G" tokenize --quiet --seq-len 64 --val-size 0.1 --seed $seed -o "$T/vs$n-$seed" "$T/vs$n.jsonl" 2>/dev/null
    check "val_size 0.1 of $n samples (seed $seed): $((n - nt)) train, $nt val" test "$(splits "$T/vs$n-$seed")" = "\"train\":{\"samples\":$((n - nt)) \"val\":{\"samples\":$nt "
  done
done

# ---- 5b. tokenized_path: LLaMA-Factory trains from it when it exists; glmtune tokenize --config writes it
mkdir -p "$T/tp"; cp "$F/corpora/llamafactory/identity.json" "$T/tp/"
printf '{"identity": {"file_name": "identity.json"}}\n' > "$T/tp/dataset_info.json"
printf 'stage: sft\ndo_train: true\nfinetuning_type: lora\ndataset: identity\ncutoff_len: 1024\ntokenized_path: %s\nmax_steps: 2\n' "$T/tp-shards" > "$T/tp.yaml"
"$G" train --config "$T/tp.yaml" --model_name_or_path "$T/model" --device cpu --output_dir "$T/tp-out" --dry-run >/dev/null 2>"$T/tp0.log"
check "tokenized_path not there yet: says that glmtune tokenize --config writes it" grep -q "tokenized_path: $T/tp-shards does not exist yet: LLaMA-Factory would tokenize the dataset and save it there; .*glmtune tokenize --config $T/tp.yaml" "$T/tp0.log"
"$G" tokenize --quiet --config "$T/tp.yaml" --model_name_or_path "$TOKS" --dataset_dir "$T/tp" 2>/dev/null
check "glmtune tokenize --config writes the shards to tokenized_path" test -f "$T/tp-shards/manifest.json"
"$G" train --config "$T/tp.yaml" --model_name_or_path "$T/model" --device cpu --output_dir "$T/tp-out" 2>"$T/tp1.log"; rc=$?
check "train --config reads tokenized_path's shards (exit $rc), with no --dataset" test $rc = 0 -a "$(global_step "$T/tp-out" 2>/dev/null)" = 2
check "... and says so" grep -q "tokenized_path: $T/tp-shards holds shards (manifest.json): train reads them, as LLaMA-Factory loads its tokenized_path (dataset identity is not read again)" "$T/tp1.log"
"$G" train --config "$T/tp.yaml" --model_name_or_path "$T/model" --device cpu --dataset "$T/shards" --output_dir "$T/tp-out2" --dry-run >/dev/null 2>"$T/tp2.log"
check "... the command line's --dataset wins, said" grep -q "holds shards, but the command line's --dataset $T/shards is read instead" "$T/tp2.log"

# ---- 6. stage sft and a pretraining entry; a YAML without dataset
mkdir -p "$T/pt"
cp "$F/corpora/llamafactory/identity.json" "$T/pt/"
head -n 20 "$F/pretrain/c4_demo.jsonl" > "$T/pt/c4_demo.jsonl"
printf '{"identity": {"file_name": "identity.json"}, "c4_demo": {"file_name": "c4_demo.jsonl", "columns": {"prompt": "text"}}}\n' > "$T/pt/dataset_info.json"
printf 'stage: sft\ndataset: identity,c4_demo\nmax_samples: 10\ncutoff_len: 1024\n' > "$T/pt.yaml"
"$G" tokenize --quiet --config "$T/pt.yaml" --model_name_or_path "$TOK" --dataset_dir "$T/pt" -o "$T/pt-out" 2>"$T/pt.log"
check "stage sft: identity's 10 samples kept, c4_demo's none" test "$(splits "$T/pt-out")" = '"train":{"samples":10 "val":{"samples":0 '
check "... its 10 records dropped as pretraining_entry" grep -q '"pretraining_entry": *10' "$T/pt-out/report.json"
check "... said with a hint" grep -q 'is a pretraining entry.*hint' "$T/pt.log"
printf 'stage: pt\ndataset: c4_demo\nmax_samples: 10\ncutoff_len: 1024\n' > "$T/pt-pt.yaml"
"$G" tokenize --quiet --config "$T/pt-pt.yaml" --model_name_or_path "$TOK" --dataset_dir "$T/pt" -o "$T/pt-pt" 2>/dev/null
check "stage pt: c4_demo's records are the text" grep -q '"records_kept": *10' "$T/pt-pt/report.json"
printf 'stage: sft\ncutoff_len: 1024\n' > "$T/nods.yaml"
"$G" tokenize --quiet --config "$T/nods.yaml" --model_name_or_path "$TOK" --dataset_dir "$T/pt" -o "$T/nods" 2>"$T/nods.log"; rc=$?
check "a YAML without dataset: refused (exit $rc), nothing written" test $rc != 0 -a ! -e "$T/nods"
check "... saying LLaMA-Factory requires it, with a hint" grep -q 'names no dataset: LLaMA-Factory requires dataset.*hint' "$T/nods.log"

echo "test_lf_semantics: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
