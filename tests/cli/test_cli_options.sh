#!/usr/bin/env bash
# The options of every command through the one option engine (common/args.h): each spelling a
# command has accepted (aliases, -o, snake_case, --x=v and --x v, bool words) still parses, each
# option is listed by the command's --help, and the usage errors name the option with a hint: an
# unknown option with the closest one, a missing value, a value that is not a number or is out
# of range. --x=v and --x v give the same output.
set -uo pipefail
G=${GLMTUNE:?}
T=$(mktemp -d /tmp/glmopts.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
has() { grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }

# accepts CMD ARGS...: the arguments parse (checked by a --help after them: the parse stops there
# with exit 0 and the help, while an unknown option or a bad value before it fails with exit 2)
accepts() {
    local cmd=$1; shift
    "$G" "$cmd" "$@" --help >"$T/acc.out" 2>"$T/acc.err" && grep -q "^usage: glmtune $cmd" "$T/acc.out" ||
        { echo "--- glmtune $cmd $* --help:" >&2; cat "$T/acc.err" >&2; return 1; }
}
# usage_error CMD 'MESSAGE' ARGS...: exit 2, the message on stderr
usage_error() {
    local cmd=$1 msg=$2; shift 2
    "$G" "$cmd" "$@" >"$T/ue.out" 2>"$T/ue.err"; local rc=$?
    [ $rc = 2 ] || { echo "--- glmtune $cmd $*: exit $rc, not 2" >&2; cat "$T/ue.err" >&2; return 1; }
    has "$T/ue.err" "$msg"
}
# lists CMD NAME...: --help names every option
lists() {
    local cmd=$1; shift
    "$G" "$cmd" --help >"$T/help.$cmd" || return 1
    for n in "$@"; do grep -q -- "--$n\b" "$T/help.$cmd" || { echo "--- glmtune $cmd --help lacks --$n" >&2; return 1; }; done
}

# --- tokenize
check "tokenize --help lists every option" lists tokenize tokenizer output config format text-column dataset dataset-dir \
    eval-dataset default-system max-samples chat-template seq-len train-on mask-history train-on-prompt keep-reasoning \
    merge-consecutive-turns truncate val-size seed strict threads report shard-rows quiet verbose encode decode
check "tokenize --help names the other spellings" lists tokenize model-name-or-path tokenized-path cutoff-len \
    preprocessing-num-workers
check "... -o" has "$T/help.tokenize" "-o, --output OUTDIR"
for a in "--tokenizer t" "--model-name-or-path t" "--model_name_or_path=t" "-o out" "-o=out" "--output out" \
         "--tokenized-path out" "--tokenized_path out" "--config c.yaml" "--format text" "--text-column t" "--dataset a,b" \
         "--dataset-dir d" "--dataset_dir d" "--eval-dataset e" "--default-system s" "--max-samples 5" "--max_samples=5" \
         "--chat-template f" "--seq-len 64" "--seq-len=64" "--cutoff-len 64" "--cutoff_len=64" "--train-on last,prompt" \
         "--mask-history" "--mask-history true" "--mask-history=false" "--mask_history" "--train-on-prompt" \
         "--train-on-prompt false" "--train_on_prompt=1" "--keep-reasoning" "--merge-consecutive-turns" \
         "--merge_consecutive_turns" "--truncate" "--truncate=yes" "--truncate no" "--no-truncate" "--keep-reasoning on" \
         "--keep_reasoning=0" "--no-keep-reasoning" "--val-size 0.1" "--val-size 20" "--seed 1" "--strict" "--threads 2" \
         "--preprocessing-num-workers 2" "--preprocessing_num_workers=2" "--report r.json" "--shard-rows 10" "--quiet" "-q" \
         "--encode" "--decode" "in.json - other.json"; do
    # shellcheck disable=SC2086
    check "tokenize $a" accepts tokenize $a
done
check "tokenize: unknown option, with the closest" usage_error tokenize "unknown option --seqlen; hint: did you mean --seq-len?" --seqlen 64 x
check "tokenize: snake_case unknown option" usage_error tokenize "did you mean --max-samples?" --max_sample 3 x
check "tokenize: missing value" usage_error tokenize "--tokenizer needs a value" -o out x.json --tokenizer
check "tokenize: bad number" usage_error tokenize '--threads: expected a non-negative integer, got "x"' --threads=x
check "tokenize: bad number as typed" usage_error tokenize '--cutoff-len: expected a non-negative integer, got "1e3"' --cutoff-len 1e3
check "tokenize: bad bool" usage_error tokenize '--mask-history: expected true or false, got "maybe"' --mask-history=maybe
check "tokenize: a negated flag takes no value" usage_error tokenize "--no-truncate takes no value" --no-truncate=yes
check "tokenize: a flag's bad word" usage_error tokenize '--truncate: expected true or false, got "maybe"' --truncate=maybe

# --x=v and --x v (and the alias) make the same shards
printf '{"input_ids": [5, 6, 7, 8, 9], "labels": [-100, -100, 7, 8, 9]}\n{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}\n' > "$T/pre.jsonl"
"$G" tokenize --quiet --seq-len 16 --seed 3 -o "$T/a" "$T/pre.jsonl" 2>/dev/null
"$G" tokenize --quiet --seq-len=16 --seed=3 --output="$T/b" "$T/pre.jsonl" 2>/dev/null
"$G" tokenize --quiet --cutoff_len 16 --seed 3 --tokenized-path "$T/c" -- "$T/pre.jsonl" 2>/dev/null
check "--seq-len 16 made shards" test -f "$T/a/manifest.json"
for d in b c; do
    check "tokenize $d: the same shards as --x v" bash -c "cd '$T/a' && for f in *.bin; do cmp -s \"\$f\" '$T/$d/'\"\$f\" || exit 1; done"
done
"$G" tokenize --quiet --seq-len 16 --mask-history true -o "$T/m" "$T/pre.jsonl" 2>"$T/m.err"; rc=$?
check "--mask-history true: the word is its value, not an input (exit $rc)" test $rc = 0

# every flag reads a bool word as its value (README): --strict yes / --strict=false / --no-strict
printf '{"input_ids": [5, 6, 7, 8, 9], "labels": [-100, -100, 7, 8, 9]}\n{"input_ids": "x"}\n' > "$T/bad.jsonl"
"$G" tokenize --quiet --seq-len 16 --strict yes -o "$T/s1" "$T/bad.jsonl" 2>"$T/s1.err"; rc=$?
check "tokenize --strict yes IN: yes is --strict's value, the bad record is fatal (exit $rc)" \
    bash -c "[ $rc = 1 ] && grep -q -- '--strict stops' '$T/s1.err' && ! grep -q 'yes: cannot open' '$T/s1.err'"
for a in "--strict=false" "--no-strict" "--strict off" "--strict 0"; do
    # shellcheck disable=SC2086
    "$G" tokenize --quiet --seq-len 16 $a -o "$T/s2" "$T/bad.jsonl" 2>"$T/s2.err"; rc=$?
    check "tokenize $a IN: not strict, the bad record skipped (exit $rc)" bash -c "[ $rc = 0 ] && [ -f '$T/s2/manifest.json' ]"
    rm -rf "$T/s2"
done

# --- inspect
check "inspect --help lists every option" lists inspect json tokenizer sample samples split
for a in "--json" "--json=true" "--json yes out" "--no-json" "--tokenizer t" "--sample 1" "--sample=1" "--samples 2" "--split val" "--split=val" "out"; do
    # shellcheck disable=SC2086
    check "inspect $a" accepts inspect $a
done
check "inspect: unknown option" usage_error inspect "unknown option --sampel; hint: did you mean --sample?" --sampel 2 x
check "inspect: missing value" usage_error inspect "--split needs a value" x --split
check "inspect: bad number" usage_error inspect '--sample: expected a non-negative integer, got "x"' --sample x out
check "inspect: one path" usage_error inspect "one OUTDIR or SHARD, got a second: 'b'" a b
"$G" inspect --json "$T/a" >"$T/i1"; "$G" inspect --json --split=train --sample=0 "$T/a" >"$T/i2"
check "inspect: --x=v as --x v" cmp -s "$T/i1" "$T/i2"

# --- export-adapter
check "export-adapter --help lists every option" lists export-adapter checkpoint output dtype merge base
check "... and still says which vLLM loads what" has "$T/help.export-adapter" "no vLLM version loads one with gate_up_proj"
for a in "--checkpoint c" "--checkpoint=c" "--output o" "-o o" "-o=o" "--dtype bf16" "--dtype=float16" "--merge" \
         "--merge=true" "--merge no" "--no-merge" "--base b"; do
    # shellcheck disable=SC2086
    check "export-adapter $a" accepts export-adapter $a
done
check "export-adapter: unknown option" usage_error export-adapter "did you mean --checkpoint?" --chekpoint c -o o
check "export-adapter: missing value" usage_error export-adapter "--checkpoint needs a value" -o o --checkpoint
check "export-adapter: no positional arguments" usage_error export-adapter "unexpected argument 'c'" c
check "export-adapter: bad dtype, every accepted name listed" usage_error export-adapter \
    '--dtype: expected fp32 (also float32, f32), bf16 (bfloat16) or fp16 (float16, f16); q8_0 with --format gguf --merge only, got "int4"' \
    --checkpoint c -o o --dtype int4
check "export-adapter --format gguf --merge: bad dtype names q8_0" usage_error export-adapter \
    '--dtype: expected fp32 (also float32, f32), bf16 (bfloat16) or fp16 (float16, f16), or q8_0, got "int4"' \
    --checkpoint c -o o --format gguf --merge --dtype int4
"$G" --help >"$T/top.help" 2>&1
check "glmtune --help: export-adapter's line names --format gguf" bash -c "grep -A1 '^  export-adapter ' '$T/top.help' | grep -q -- '--format gguf'"

# --- init-model
check "init-model --help lists every option" lists init-model config output layout seed tokenizer
for a in "--config c" "--out o" "--output o" "-o o" "--layout hf" "--seed 3" "--seed=3" "--tokenizer t"; do
    # shellcheck disable=SC2086
    check "init-model $a" accepts init-model $a
done
check "init-model: unknown option" usage_error init-model "did you mean --layout?" --layuot hf
check "init-model: missing value" usage_error init-model "--seed needs a value" --config c -o o --seed
check "init-model: bad number" usage_error init-model '--seed: expected a non-negative integer, got "-1"' --seed -1

# --- bench
check "bench --help lists every option" lists bench shape model config seq-len steps warmup batch-size \
    gradient-checkpointing max-gpu-memory lora-rank lora-alpha lora-target quantization-bit quantization-type \
    double-quantization device json max-seq-len seq-step max-step-seconds prove-memory
for a in "--shape glm-4-9b-chat" "--model m" "--config c" "--seq-len 32,48" "--seq-len=32" "--steps 2" "--warmup 0" \
         "--batch-size 2" "--gradient-checkpointing full" "--max-gpu-memory 12,16" "--max-gpu-memory=0.5" "--lora-rank 4" \
         "--lora-alpha 8" "--lora-target all" "--quantization-bit 4" "--quantization-type fp4" "--double-quantization false" \
         "--double-quantization 1" "--device cpu" "--json" "--json=on" "--json false" "--no-json" "--max-seq-len" \
         "--seq-step 32" "--max-step-seconds 5" "--prove-memory" "--prove-memory=0"; do
    # shellcheck disable=SC2086
    check "bench $a" accepts bench $a
done
check "bench: unknown option" usage_error bench "did you mean --steps?" --step 3
check "bench: missing value" usage_error bench "--steps needs a value" --steps
check "bench: out of range" usage_error bench "--steps 0: expected 1 .. 1000" --steps 0
check "bench: out of range in a list" usage_error bench "--seq-len 1: expected 2 .. 1073741824 tokens" --seq-len 32,1
check "bench: bad number" usage_error bench '--lora-alpha: expected a number, got "abc"' --lora-alpha abc
check "bench: bad choice" usage_error bench '--device: expected cuda or cpu, got "tpu"' --device tpu
check "bench: 0 or 4 bits" usage_error bench "--quantization-bit 3: expected 4 (QLoRA) or 0" --quantization-bit 3

# --- train (its own table, read by the same engine)
check "train: unknown option" usage_error train "unknown option --lerning-rate; hint: did you mean --learning-rate?" --lerning-rate 1
check "train: missing value" usage_error train "--save-steps needs a value" --save-steps
check "train: stray argument" usage_error train "unexpected argument 'stray'" stray
for a in "--learning-rate 1e-4" "--learning_rate=1e-4" "--model_name_or_path m" "--dataset d" "--cutoff_len 64" \
         "--use-rslora" "--use-rslora false" "--no-use-rslora" "--no_use_rslora" "--resume-from-checkpoint" \
         "--gradient-checkpointing" "--no-gradient-checkpointing" "--lora_target_modules q_proj" "--flash_attn fa2"; do
    # shellcheck disable=SC2086
    check "train $a" bash -c '"$0" train "$@" --help >/dev/null 2>&1' "$G" $a
done

echo "test_cli_options: $pass passed, $fail failed"
rm -rf "$T"
[ $fail = 0 ]
