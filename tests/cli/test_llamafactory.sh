#!/usr/bin/env bash
# LLaMA-Factory's own LoRA examples (../shared/llamafactory-configs: llama3_lora_sft.yaml,
# qwen3_lora_sft.yaml, qwen3_lora_pretrain.yaml, unchanged) run through `glmtune train --config`
# with only the model, dataset and output paths overridden on the command line, the way the
# README's "Coming from LLaMA-Factory" section shows: every key of the file is used (it appears in
# the resolved settings as coming from the config or, for the overridden paths, the command line)
# or answered in exactly one line; the run trains (3 epochs, cosine, warmup 0.1, accumulation 8
# as the file says) and leaves a checkpoint, trainer_state.json and a PEFT adapter. The shards are
# LLaMA-Factory's demo data `identity` (its dataset_info.json), tokenized at the file's cutoff_len
# with the sample tokenizer (the tokenize side of the same YAML is `glmtune tokenize --config`).
set -uo pipefail
G=${GLMTUNE:?}
S=${GLM_SHARED:-}
SRC=${GLM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ -z "$S" ] || [ ! -d "$S/llamafactory-configs" ]; then echo "SKIPPED: ../shared not found (GLM_SHARED=$S)"; exit 77; fi
T=$(mktemp -d /tmp/glmlf.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }

"$G" tokenize --quiet --tokenizer "$SRC/samples/tokenizer" --seq-len 2048 --dataset identity \
    -o "$T/shards" "$S/corpora/llamafactory/dataset_info.json" 2>/dev/null
check "identity tokenized at cutoff_len 2048" test -f "$T/shards/manifest.json"
"$G" init-model --config "$SRC/samples/model-config.json" --tokenizer "$SRC/samples/tokenizer" --seed 1 -o "$T/model" 2>/dev/null

for y in "$S"/llamafactory-configs/*.yaml; do
    name=$(basename "$y" .yaml)
    out="$T/$name"
    "$G" train --config "$y" --model_name_or_path "$T/model" --dataset "$T/shards" --output_dir "$out" \
        --device cpu 2>"$T/$name.log"; rc=$?
    check "$name: trains unchanged, only paths overridden (exit $rc)" test $rc = 0
    check "$name: a checkpoint and trainer_state.json" test -f "$out/trainer_state.json" -a -n "$(ls -d "$out"/checkpoint-* 2>/dev/null)"
    # every key of the file: used (resolved settings, from config or the overriding command line) or answered once
    for k in $(grep -o '^[a-z_0-9]*:' "$y" | tr -d ':'); do
        case $k in
            model_name_or_path) used=model;; dataset) used=data;; cutoff_len) used=seq_len;; ddp_timeout) used=comm_timeout;;
            *) used=$k;;
        esac
        if grep -q "^  $used  *=.*(config)\|^  $used  *=.*(command line)" "$T/$name.log"; then
            pass=$((pass + 1))
        elif [ "$k" = stage ] || [ "$k" = do_train ] || [ "$k" = finetuning_type ]; then
            pass=$((pass + 1)) # checked values (sft/pt, true, lora): what glmtune does
        else
            lines=$(grep -c "yaml:[0-9]*: $k\b" "$T/$name.log")
            check "$name: $k answered in exactly one line ($lines)" test "$lines" = 1
        fi
    done
    check "$name: the file's schedule is used" grep -q "^  lr_scheduler_type  *= \"cosine\"  *(config)" "$T/$name.log"
    check "$name: ... and its accumulation" grep -q "^  gradient_accumulation_steps  *= 8  *(config)" "$T/$name.log"
    "$G" export-adapter --checkpoint "$out" -o "$out-adapter" 2>/dev/null
    check "$name: exports a PEFT adapter" test -f "$out-adapter/adapter_config.json"
done

# a path not overridden says what to do: the file's dataset names are tokenized first, its hub id
# model is not downloaded
y="$S/llamafactory-configs/llama3_lora_sft.yaml"
"$G" train --config "$y" --model_name_or_path "$T/model" --output_dir "$T/nodata" --device cpu 2>"$T/nodata.log"
check "the YAML's dataset names, not overridden: the hint says to tokenize them" grep -q "glmtune tokenize --config" "$T/nodata.log"
"$G" train --config "$y" --dataset "$T/shards" --output_dir "$T/nomodel" --device cpu 2>"$T/nomodel.log"
check "the YAML's hub id model, not overridden: the hint says so" grep -q "Hugging Face Hub id" "$T/nomodel.log"

echo "test_llamafactory: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
