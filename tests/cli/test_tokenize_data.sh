#!/usr/bin/env bash
# glmtune tokenize: what gets trained, through the CLI. Pretraining text (its windows against
# tests/cli/data/pretrain_windows.expected, made by tests/tokenize/data/make_target_cases.py with
# tiktoken; LLaMA-Factory's c4_demo directly and through LLaMA-Factory's own dataset_info.json,
# identical shards); loss flags counted in the report; role order and empty turns dropped by
# reason; dataset_info: a missing file is an error naming entry and path, two entries on one
# file are each selectable, num_samples draws as LLaMA-Factory does, --max-samples; one
# LLaMA-Factory YAML (tests/fixtures/llamafactory-configs) driving `tokenize --config` and
# `train --config` with only paths overridden; stage rm/ppo/dpo/kto refused by name; unknown
# YAML keys; --snake_case spellings; preference data (DPO pairs, KTO labels) dropped by reason, not trained.
set -uo pipefail
G=${GLMTUNE:?}
F=${GLM_FIXTURES:?the test data folder, tests/fixtures}
SRC=${GLM_SRC:?}
[ -d "$F" ] || { echo "FAIL: the test data folder $F does not exist" >&2; exit 1; }
TOK="$F/glm4-tokenizer"
T=$(mktemp -d /tmp/glmdata.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
jget() { grep -o "\"$2\": *[0-9.e+-]*" "$1" | head -1 | sed 's/.*: *//'; }
samples() { $G inspect --json "$1" | sed 's/"file":"[^"]*",//' | sort; } # inspect lines, file left out
differ() { ! cmp -s "$1" "$2"; }

# 1. pretraining text: windows of --seq-len tokens, exactly the expected documents
$G tokenize --quiet --tokenizer "$TOK" --seq-len 16 -o "$T/win" "$SRC/tests/cli/data/pretrain_windows.jsonl" 2>/dev/null
samples "$T/win" > "$T/win.got"
check "text windows equal tiktoken's (diff $T/win.got)" cmp -s "$T/win.got" "$SRC/tests/cli/data/pretrain_windows.expected"
check "3 texts cut into 6 windows" test "$(jget "$T/win/report.json" texts_split) $(jget "$T/win/report.json" windows)" = "3 6"
check "two one-token tails counted" grep -q '"one_token_tails_left_out": 2' "$T/win/report.json"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 16 --truncate -o "$T/wint" "$SRC/tests/cli/data/pretrain_windows.jsonl" 2>/dev/null
check "--truncate: one document per text" test "$(jget "$T/wint/report.json" samples)" = 4
check "--truncate keeps the end-of-text token" test "$($G inspect --json "$T/wint" | grep -c '151329\],"targets"')" = 4

# 2. c4_demo (300 records) as pretraining text, directly and through LLaMA-Factory's registry entry
C4="$F/pretrain/c4_demo.jsonl"
if [ -f "$C4" ]; then
    mkdir -p "$T/lf"
    cp "$F/corpora/llamafactory/dataset_info.json" "$T/lf/" # LLaMA-Factory's own: c4_demo = {prompt: text}
    ln -s "$C4" "$T/lf/c4_demo.jsonl"
    $G tokenize --quiet --tokenizer "$TOK" --seq-len 16384 -o "$T/c4" "$C4" 2>/dev/null # the longest: 8545
    $G tokenize --quiet --tokenizer "$TOK" --seq-len 16384 --dataset c4_demo -o "$T/c4r" "$T/lf" 2>/dev/null
    check "c4_demo: 300 texts" grep -q '"text": 300' "$T/c4/report.json"
    samples "$T/c4" > "$T/c4.got"; samples "$T/c4r" > "$T/c4r.got"
    check "c4_demo through dataset_info: the same samples" cmp -s "$T/c4.got" "$T/c4r.got"
    check "c4_demo: every sample [gMASK]<sop> ... <|endoftext|>" \
        test "$($G inspect --json "$T/c4" | grep -c '"ids":\[151331,151333,.*,151329\],"targets":\[0,0,1')" = 300
    # token counts from tiktoken (make_target_cases.py), and all but the prefix are targets
    check "c4_demo: tokens as tiktoken counts them" test "$(jget "$T/c4/report.json" tokens)" = "$(awk '{s+=$2} END {print s}' "$SRC/tests/cli/data/c4_demo.expected")"
    check "c4_demo: targets = tokens - 2 per text" test "$(jget "$T/c4/report.json" target_tokens)" = $(( $(jget "$T/c4/report.json" tokens) - 600 ))
    $G tokenize --quiet --tokenizer "$TOK" --seq-len 2048 -o "$T/c4w" "$C4" 2>/dev/null
    check "c4_demo at 2048: long texts used, cut into windows" test "$(jget "$T/c4w/report.json" tokens)" = "$(jget "$T/c4/report.json" tokens)"
    check "... 11 texts into 28 windows" test "$(jget "$T/c4w/report.json" texts_split) $(jget "$T/c4w/report.json" windows)" = "11 28"
else
    echo "SKIPPED part 2: $C4 not found"
fi

# 3. loss flags and role order in a file mixing loss: false turns and normal ones
cat > "$T/flags.jsonl" <<'EOF'
{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "loss": false}, {"role": "user", "content": "q2"}, {"role": "assistant", "content": "b"}]}
{"conversations": [{"from": "human", "value": "q", "weight": 1}, {"from": "gpt", "value": "a", "weight": 0}]}
{"messages": [{"role": "user", "content": "q"}, {"role": "user", "content": "q again"}, {"role": "assistant", "content": "a"}]}
{"messages": [{"role": "assistant", "content": "hello first"}, {"role": "user", "content": "q"}]}
{"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}, {"role": "assistant", "content": "a"}]}
{"messages": [{"role": "user", "content": "   "}, {"role": "assistant", "content": "a"}]}
{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "weight": 0.5}]}
EOF
$G tokenize --tokenizer "$TOK" --seq-len 256 --report "$T/flags.json" -o "$T/flags" "$T/flags.jsonl" 2>"$T/flags.log"
check "2 kept" test "$(jget "$T/flags.json" records_kept)" = 2
check "3 turns decided by a flag, 2 not trained" test "$(jget "$T/flags.json" turns) $(jget "$T/flags.json" not_trained)" = "3 2"
check "role_order: 3 records" grep -q '"role_order": 3' "$T/flags.json"
check "empty_turn: 1 record" grep -q '"empty_turn": 1' "$T/flags.json"
check "bad_loss_flag: 1 record" grep -q '"bad_loss_flag": 1' "$T/flags.json"
check "role_order names record and turn" grep -q 'flags.jsonl:3: record 2: messages\[1\] (user) follows another user turn' "$T/flags.log"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 256 --merge_consecutive_turns -o "$T/merged" "$T/flags.jsonl" 2>/dev/null
check "--merge-consecutive-turns keeps the two-user record" test "$(jget "$T/merged/report.json" records_kept)" = 3
$G tokenize --quiet --tokenizer "$TOK" --seq-len 256 --strict -o "$T/strict" "$T/flags.jsonl" 2>"$T/strict.log"; rc=$?
check "--strict: role_order is fatal (exit $rc)" test $rc = 1 -a ! -e "$T/strict"

# 4. train_on names users know, in their spellings
printf '%s\n' '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}, {"role": "assistant", "content": "b"}]}' > "$T/conv.jsonl"
for how in "--train-on all" "--mask-history" "--mask_history true" "--train-on-prompt" "--train_on_prompt=true" "--train-on last"; do
    rm -rf "$T/to"; $G tokenize --quiet --tokenizer "$TOK" --seq-len 256 $how -o "$T/to" "$T/conv.jsonl" 2>/dev/null
    echo "$how $(jget "$T/to/report.json" target_tokens)"
done > "$T/to.txt"
a=$(awk '/^--train-on all/ {print $NF}' "$T/to.txt"); l=$(awk '/^--train-on last/ {print $NF}' "$T/to.txt")
p=$(awk '/^--train-on-prompt/ {print $NF}' "$T/to.txt")
check "mask_history trains fewer tokens ($l < $a)" test "$l" -lt "$a"
check "train_on_prompt trains more ($p > $a)" test "$p" -gt "$a"
check "--mask-history = --mask_history true = --train-on last" test "$(grep -c "^--mask.* $l\$" "$T/to.txt")" = 2
check "--train_on_prompt=true = --train-on-prompt" test "$(awk '/^--train_on_prompt=true/ {print $NF}' "$T/to.txt")" = "$p"

# 5. dataset_info: a missing file, two entries on one file, num_samples, --max-samples
mkdir -p "$T/reg"
ln -s "$F/corpora/llamafactory/alpaca_en_demo.json" "$T/reg/alpaca.json"
cat > "$T/reg/dataset_info.json" <<'EOF'
{"plain": {"file_name": "alpaca.json"},
 "short": {"file_name": "alpaca.json", "columns": {"prompt": "instruction", "response": "output"}, "num_samples": 10},
 "many": {"file_name": "alpaca.json", "num_samples": 1600},
 "gone": {"file_name": "nowhere.json"}}
EOF
$G tokenize --quiet --tokenizer "$TOK" --dataset gone -o "$T/gone" "$T/reg" 2>"$T/gone.log"; rc=$?
check "a selected entry whose file is missing fails (exit $rc)" test $rc = 1
check "... naming entry and path" grep -q '"gone".*nowhere.json does not exist' "$T/gone.log"
$G tokenize --quiet --tokenizer "$TOK" -o "$T/all" "$T/reg" 2>"$T/all.log"
check "unselected missing files are said, not silent" grep -q 'gone (nowhere.json)' "$T/all.log"
check "every entry read, three on one file: 250 + 10 + 1600" test "$(jget "$T/all/report.json" records_read)" = 1860
$G tokenize --quiet --tokenizer "$TOK" --dataset plain -o "$T/plain" "$T/reg" 2>/dev/null
check "entry plain: 250 records" test "$(jget "$T/plain/report.json" records_read)" = 250
$G tokenize --quiet --tokenizer "$TOK" --dataset short --seed 1 -o "$T/s1" "$T/reg" 2>/dev/null
$G tokenize --quiet --tokenizer "$TOK" --dataset short --seed 1 -o "$T/s1b" "$T/reg" 2>/dev/null
$G tokenize --quiet --tokenizer "$TOK" --dataset short --seed 2 -o "$T/s2" "$T/reg" 2>/dev/null
check "num_samples 10 of 250 (the second entry on the file)" test "$(jget "$T/s1/report.json" records_read)" = 10
check "num_samples: the same draw for the same seed" cmp -s "$T/s1/train-00000.bin" "$T/s1b/train-00000.bin"
check "num_samples: another draw for another seed" differ "$T/s1/train-00000.bin" "$T/s2/train-00000.bin"
$G tokenize --quiet --tokenizer "$TOK" --dataset many -o "$T/many" "$T/reg" 2>/dev/null
check "num_samples 1600 of 250: every record 6 times, 100 more" test "$(jget "$T/many/report.json" records_read)" = 1600
$G tokenize --quiet --tokenizer "$TOK" --dataset "many" --max-samples 20 -o "$T/m20" "$T/reg" 2>/dev/null
check "num_samples capped by max_samples" test "$(jget "$T/m20/report.json" records_read)" = 20
$G tokenize --quiet --tokenizer "$TOK" --max_samples 7 -o "$T/max" "$F/corpora/fastchat" "$F/corpora/torchtune/alpaca_tiny.json" 2>/dev/null
check "--max-samples per input: 7 + 7" test "$(jget "$T/max/report.json" records_read)" = 14
check "... reported" grep -q '"rest_not_read": true' "$T/max/report.json"

# 6. one LLaMA-Factory YAML for tokenize and train, only paths overridden (pretraining)
Y="$F/llamafactory-configs/qwen3_lora_pretrain.yaml"
if [ -f "$Y" ] && [ -f "$C4" ]; then
    $G tokenize --quiet --config "$Y" --model_name_or_path "$TOK" --dataset_dir "$T/lf" -o "$T/pt" 2>"$T/pt.log"
    check "tokenize --config pretrain YAML (stage: pt, dataset: c4_demo)" grep -q '"text": 300' "$T/pt/report.json"
    check "cutoff_len 2048 from the YAML" grep -q '"seq_len": 2048' "$T/pt/manifest.json"
    (cd "$T" && $G tokenize --quiet --config "$Y" --model_name_or_path "$TOK" -o "$T/ptd" 2>"$T/ptd.log"); rc=$?
    check "no dataset_dir and no ./data: exit 2 ($rc)" test $rc = 2
    check "... says where datasets are looked up and how to point there" grep -q 'by default "data" in the current folder.*hint: --dataset-dir' "$T/ptd.log"
    check "long texts cut into windows, not dropped" test "$(jget "$T/pt/report.json" tokens)" = "$(jget "$T/c4/report.json" tokens)"
    samples "$T/pt" > "$T/pt.got"; samples "$T/c4w" > "$T/c4w.got"
    check "the same samples as the command-line run at 2048" cmp -s "$T/pt.got" "$T/c4w.got"
    cat > "$T/mcfg.json" <<'JSON'
{"model_type": "chatglm", "hidden_size": 32, "num_layers": 1, "num_attention_heads": 2,
 "multi_query_group_num": 1, "kv_channels": 16, "ffn_hidden_size": 64, "padded_vocab_size": 151552,
 "layernorm_epsilon": 1.5625e-07, "rope_ratio": 1, "add_qkv_bias": true, "seq_length": 8192}
JSON
    $G init-model --config "$T/mcfg.json" --tokenizer "$TOK" --seed 3 -o "$T/model" 2>/dev/null
    # paths overridden; --max-steps 1 --gradient-accumulation-steps 1 only keep the test short
    $G train --quiet --config "$Y" --model "$T/model" --data "$T/pt" --output-dir "$T/run" --device cpu \
        --max-steps 1 --gradient-accumulation-steps 1 2>"$T/train.log"
    check "train --config the same YAML (exit $?)" test -d "$T/run/checkpoint-1"
else
    echo "SKIPPED part 6: $Y or $C4 not found"
fi
for y in qwen3_lora_sft llama3_lora_sft; do # the SFT examples: identity + alpaca_en_demo, max_samples 1000 (more than the 250 here)
    $G tokenize --quiet --config "$F/llamafactory-configs/$y.yaml" --model_name_or_path "$TOK" \
        --dataset_dir "$F/corpora/llamafactory" -o "$T/$y" 2>"$T/$y.log"
    check "$y.yaml: identity + alpaca_en_demo" test "$(jget "$T/$y/report.json" records_kept)" = $((91 + 250))
    check "$y.yaml: template answered with one line" grep -q "template: .* is not used" "$T/$y.log"
done

# 7. stages glmtune does not train, and typos, are refused by name
sed 's/^stage: sft/stage: dpo/' "$F/llamafactory-configs/qwen3_lora_sft.yaml" > "$T/dpo.yaml"
$G tokenize --quiet --config "$T/dpo.yaml" --model_name_or_path "$TOK" --dataset_dir "$F/corpora/llamafactory" -o "$T/dpo" 2>"$T/dpo.log"; rc=$?
check "tokenize refuses stage: dpo (exit $rc)" test $rc = 1 -a ! -e "$T/dpo"
check "... by name" grep -q "stage: dpo is refused: it is DPO" "$T/dpo.log"
check "... with the hint that preference training is planned" grep -q "preference training is not available yet (it is planned: stage: dpo)" "$T/dpo.log"
sed 's/^stage: sft/stage: kto/' "$F/llamafactory-configs/qwen3_lora_sft.yaml" > "$T/kto.yaml"
$G tokenize --quiet --config "$T/kto.yaml" --model_name_or_path "$TOK" --dataset_dir "$F/corpora/llamafactory" -o "$T/kto" 2>"$T/kto.log"; rc=$?
check "tokenize refuses stage: kto, with the hint (exit $rc)" test $rc = 1 -a ! -e "$T/kto" &&
    grep -q "stage: kto is refused: it is KTO.*preference training is not available yet (it is planned: stage: dpo)" "$T/kto.log"
$G train --config "$T/dpo.yaml" --model "$T/model" --data "$T/pt" --output-dir "$T/rdpo" 2>"$T/rdpo.log"; rc=$?
check "train refuses stage: dpo (exit $rc)" test $rc != 0 -a ! -e "$T/rdpo"
for st in rm ppo kto; do
    sed "s/^stage: sft/stage: $st/" "$F/llamafactory-configs/qwen3_lora_sft.yaml" > "$T/$st.yaml"
    $G train --config "$T/$st.yaml" --model "$T/model" --data "$T/pt" --output-dir "$T/r$st" 2>"$T/r$st.log"
    check "train refuses stage: $st by name" grep -q "stage: $st is refused" "$T/r$st.log"
done
# 8. preference data given to tokenize directly is not trained as SFT: records of preference pairs
# (LLaMA-Factory's dpo_en_demo layout, its alpaca pairs, TRL's prompt/chosen/rejected) are dropped as
# preference_pair, KTO records (kto_en_demo's messages + label, TRL's prompt/completion/label) as kto_label,
# each with the hint; --strict stops at the first; a "ranking" dataset_info entry named by --dataset is refused
mkdir -p "$T/pref"
cat > "$T/pref/dpo.json" <<'JSON'
[
  {"conversations": [{"from": "human", "value": "Name a primary colour."}], "chosen": {"from": "gpt", "value": "Red."}, "rejected": {"from": "gpt", "value": "Pink."}},
  {"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}, {"from": "human", "value": "And 3+3?"}], "chosen": {"from": "gpt", "value": "6"}, "rejected": {"from": "gpt", "value": "7"}},
  {"instruction": "Say hi.", "input": "", "chosen": "Hi!", "rejected": "No."}
]
JSON
cat > "$T/pref/kto.json" <<'JSON'
[
  {"messages": [{"content": "Summarise: the cat sat.", "role": "user"}, {"content": "A cat sat.", "role": "assistant"}], "label": true},
  {"messages": [{"content": "Summarise: the dog ran.", "role": "user"}, {"content": "Ooh ooh ah ah!", "role": "assistant"}], "label": false}
]
JSON
printf '%s\n' '{"prompt": "The sky is", "chosen": " blue.", "rejected": " green."}' \
    '{"prompt": "The grass is", "completion": " purple.", "label": false}' > "$T/pref/trl.jsonl"
printf '%s\n' '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}' > "$T/pref/sft.jsonl"
$G tokenize --tokenizer "$TOK" -o "$T/pref_out" "$T/pref/dpo.json" "$T/pref/kto.json" "$T/pref/trl.jsonl" "$T/pref/sft.jsonl" 2>"$T/pref.log"; rc=$?
check "preference files: exit 0, only the SFT record kept ($rc)" test $rc = 0 -a "$(jget "$T/pref_out/report.json" records_kept)" = 1
check "... 4 dropped as preference_pair" grep -q '"preference_pair": *4' "$T/pref_out/report.json"
check "... 3 dropped as kto_label (the undesirable ones too)" grep -q '"kto_label": *3' "$T/pref_out/report.json"
check "... the summary names the reason, the file and line, and the hint" \
    grep -q "dpo.json:2: record 0: a preference pair.*preference training is not available in glmtune yet (it is planned: stage: dpo)" "$T/pref.log"
check "... and for KTO the label" grep -q "kto.json:.*record 1: a KTO record (its answer labelled undesirable (false)" "$T/pref.log"
$G tokenize --quiet --strict --tokenizer "$TOK" -o "$T/pref_strict" "$T/pref/kto.json" 2>"$T/pref_strict.log"; rc=$?
check "--strict: the first KTO record is fatal (exit $rc)" test $rc = 1 -a ! -e "$T/pref_strict" &&
    grep -q "\[kto_label\]" "$T/pref_strict.log"
printf '{"pairs": {"file_name": "dpo.json", "ranking": true, "formatting": "sharegpt", "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"}}, "sft": {"file_name": "sft.jsonl", "formatting": "openai"}}\n' > "$T/pref/dataset_info.json"
$G tokenize --quiet --tokenizer "$TOK" --dataset-dir "$T/pref" --dataset pairs -o "$T/pref_reg" 2>"$T/pref_reg.log"; rc=$?
check "a ranking entry named by --dataset: refused with the hint (exit $rc)" test $rc != 0 -a ! -e "$T/pref_reg" &&
    grep -q 'dataset "pairs" cannot be used: it is a ranking.*(it is planned: stage: dpo)' "$T/pref_reg.log"

printf 'dataset: identity\ncutof_len: 512\n' > "$T/typo.yaml"
$G tokenize --quiet --config "$T/typo.yaml" --model_name_or_path "$TOK" --dataset_dir "$F/corpora/llamafactory" -o "$T/typo" 2>"$T/typo.log"; rc=$?
check "an unknown key fails (exit $rc) naming file:line and the close key" grep -q "typo.yaml:2: unknown key 'cutof_len'.*cutoff_len" "$T/typo.log"

echo "test_tokenize_data: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
