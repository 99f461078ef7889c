#!/usr/bin/env bash
# Fuzzes every parser of user files with libFuzzer (+ AddressSanitizer, UndefinedBehaviorSanitizer):
#   fuzz_jsonsplit    JSON splitter + record parse + record conversion (tokenize's input)
#   fuzz_shard        shard reader (train's input), checksums fixed up to reach the structure checks
#   fuzz_safetensors  safetensors headers and data (models, adapters, checkpoints)
#   fuzz_options      train options: YAML config files and command lines
#   fuzz_template     the chat template interpreter (lexer, parser, evaluator, builtins)
#   fuzz_config       a model's config.json (both layouts), written back as config.json
#   fuzz_stindex      model.safetensors.index.json beside two small shards
#   fuzz_adapter      adapter_config.json as --init-adapter / resume check it, with the adapter's tensors
#   fuzz_tokenizer    tokenizer folders: tokenizer.model (tiktoken or SentencePiece) + tokenizer_config.json
#   fuzz_archive      corpus files through libarchive: tar, zip, gz, zst, xz, bz2 (first byte: the suffix)
#   fuzz_dsinfo       LLaMA-Factory's dataset_info.json, then its entries' records as tokenize reads them
#   fuzz_tokconfig    glmtune tokenize --config's YAML keys
# Not part of CI's default run; ctest replays each target's tests/fuzz/regressions/<target>/ through
# replay_<target> (the harness without libFuzzer) in every build, the sanitizer build included.
#
# usage: tests/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default 180 s, every target)
# Installs clang and the libFuzzer runtime from Debian packages when missing, builds with clang
# into build-fuzz/ (nice, at most 2 jobs), seeds each corpus from the repository's samples and
# tests (tests/fixtures: fixture adapters, corpora, LLaMA-Factory configs), runs each
# target for the given time, one after the other, and prints one table row per target:
# executions, corpus growth, findings. Findings are kept under build-fuzz/artifacts/<target>/;
# reproduce one with: build-fuzz/tests/fuzz/fuzz_<target> build-fuzz/artifacts/<target>/<file>
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-180}
shift || true
TARGETS=${*:-jsonsplit shard safetensors options template config stindex adapter tokenizer archive dsinfo tokconfig}
S=${GLM_FIXTURES:-tests/fixtures}
B=build-fuzz

. tests/deps.sh
glm_install_deps
missing=()
for p in clang libclang-rt-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
mkdir -p "$B"
echo "building the fuzz targets in $B (log: $B/build.log)" >&2
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGLMTUNE_CUDA=OFF -DGLMTUNE_FUZZ=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >"$B/configure.log" 2>&1 || { cat "$B/configure.log"; exit 1; }
nice cmake --build "$B" -j 2 --target glmtune $(for t in $TARGETS; do echo fuzz_$t; done) >"$B/build.log" 2>&1 \
    || { tail -40 "$B/build.log"; exit 1; }
G="$B/tool/glmtune"
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1

# ---- seed corpora
C="$B/corpus"
W="$B/seed-work"
rm -rf "$W"
mkdir -p "$W" "$C"/{jsonsplit,shard,safetensors,options,template,config,stindex,adapter,tokenizer,archive,dsinfo,tokconfig}
n=0
seed() { # DIR PREFIX-BYTE-OCTAL FILE: one seed, the control byte then the file
    local d=$1 pre=$2 f=$3
    n=$((n + 1))
    { [ -n "$pre" ] && printf "\\$pre"; cat "$f"; } > "$C/$d/seed-$n"
}
for f in samples/data/*; do seed jsonsplit 000 "$f"; seed jsonsplit 013 "$f"; seed jsonsplit 107 "$f"; done
head -c 4000 tests/tokenize/data/tojson_cases.jsonl > "$W/tojson.jsonl" && seed jsonsplit 010 "$W/tojson.jsonl"
find "$S/corpora" -type f \( -name '*.json' -o -name '*.jsonl' \) -size -64k | sort | head -40 |
    while read -r f; do seed jsonsplit 000 "$f"; done
# shards, a checkpoint and a tiny model from the samples, made by this build's glmtune
awk 'BEGIN { srand(1); for (i = 0; i < 40; i++) { k = 5 + int(rand() * 20); ids = ""; lab = "";
     for (j = 0; j < k; j++) { x = 1 + int(rand() * 60); ids = ids (j ? ", " : "") x; lab = lab (j ? ", " : "") (j < 2 ? -100 : x) }
     print "{\"input_ids\": [" ids "], \"labels\": [" lab "]}" } }' > "$W/pre.jsonl"
"$G" tokenize --quiet --seq-len 32 --val-size 4 -o "$W/shards" "$W/pre.jsonl" 2>/dev/null
cp "$W"/shards/*.bin "$C/shard/"
cat > "$W/tiny.json" <<'JSON'
{"model_type": "chatglm", "hidden_size": 16, "num_layers": 1, "num_attention_heads": 2, "multi_query_group_num": 1,
 "kv_channels": 8, "ffn_hidden_size": 24, "padded_vocab_size": 64, "layernorm_epsilon": 1e-5, "rope_ratio": 1}
JSON
"$G" init-model --config "$W/tiny.json" -o "$W/model" 2>/dev/null
"$G" train --quiet --device cpu --model "$W/model" --data "$W/shards" --output-dir "$W/run" --max-steps 1 --lora-rank 2 2>/dev/null
for f in "$W"/model/model.safetensors "$W"/run/checkpoint-1/*.safetensors; do cp "$f" "$C/safetensors/$(basename "$(dirname "$f")")-$(basename "$f")"; done
for l in chatglm hf; do cp "$S/tiny-glm4/$l/adapter_init/adapter_model.safetensors" "$C/safetensors/fixture-$l.safetensors"; done
seed options 000 samples/train.yaml
for f in "$S"/llamafactory-configs/*.yaml; do seed options 000 "$f"; done
printf -- '--model_name_or_path\nm\n--dataset=d\n--output_dir\no\n--lr_scheduler_kwargs\n{"min_lr_rate": 0.1}\n--no-gradient-checkpointing\n--do_train\n--optim\nadamw_torch\n--warmup_steps\n0.1\n' > "$W/argv"
seed options 001 "$W/argv"
while IFS= read -r line; do n=$((n + 1)); printf '%s' "$line" > "$C/template/case-$n"; done < tests/tokenize/data/template_cases.jsonl
cp samples/tokenizer/chat_template.jinja "$C/template/sample.jinja"
cp samples/tokenizer/tokenizer_config.json "$C/template/sample-tokenizer_config.json"
cp "$S/glm4-tokenizer/tokenizer_config.json" "$C/template/glm4-tokenizer_config.json"

# model configs, indexes, adapter configs
cp samples/model-config.json "$C/config/samples-model-config.json"
cp "$W/tiny.json" "$C/config/tiny.json"; cp "$W/model/config.json" "$C/config/init-model.json"
for l in chatglm hf; do
    cp "$S/tiny-glm4/$l/config.json" "$C/config/tiny-$l.json"
    cp "$S/tiny-glm4/$l/model.safetensors.index.json" "$C/stindex/tiny-$l.json"
    cp "$S/tiny-glm4/$l/adapter_init/adapter_config.json" "$C/adapter/fixture-$l.json"
    [ -f "$W/run/checkpoint-1/adapter_config.json" ] && cp "$W/run/checkpoint-1/adapter_config.json" "$C/adapter/checkpoint.json"
done
cp "$S"/glm4-tokenizer/config.*.json "$C/config/"
# tokenizers: the first lines of GLM-4's tiktoken file, with and without its tokenizer_config.json;
# the samples' SentencePiece model (cut at 16 KiB by -max_len)
for k in 50 300; do
    head -n $k "$S/glm4-tokenizer/tokenizer.model" > "$C/tokenizer/glm4-$k"
    { head -n $k "$S/glm4-tokenizer/tokenizer.model"; printf '#tokenizer_config.json\n'; cat "$S/glm4-tokenizer/tokenizer_config.json"; } > "$C/tokenizer/glm4-$k-config"
done
{ cat samples/tokenizer/tokenizer.model; printf '\n#tokenizer_config.json\n'; cat samples/tokenizer/tokenizer_config.json; } > "$C/tokenizer/sample-spm"
# archives of the samples' corpora (first byte: the suffix index in fuzz_archive.c)
A0="$W/arch"; mkdir -p "$A0"; head -c 3000 samples/data/chat_messages.jsonl > "$A0/a.jsonl"; head -c 3000 samples/data/alpaca.json > "$A0/b.json"
(cd "$A0" && tar cf t.tar a.jsonl b.json && gzip -k -n a.jsonl && zip -q -X z.zip b.json a.jsonl.gz 2>/dev/null; zstd -q a.jsonl -o a.jsonl.zst; xz -k b.json; bzip2 -k a.jsonl) || true
arch() { [ -f "$A0/$2" ] && { printf "\\$1"; cat "$A0/$2"; } > "$C/archive/$2" || true; }
arch 000 t.tar; arch 003 z.zip; arch 004 a.jsonl.gz; arch 006 a.jsonl.zst; arch 007 b.json.xz; arch 010 a.jsonl.bz2; arch 011 a.jsonl
[ -f "$A0/t.tar" ] && { printf '\001'; gzip -n -c "$A0/t.tar"; } > "$C/archive/t.tar.gz"
# LLaMA-Factory registries and YAMLs
cp "$S/corpora/llamafactory/dataset_info.json" "$C/dsinfo/llamafactory.json"
cp samples/train.yaml "$C/tokconfig/"; cp "$S"/llamafactory-configs/*.yaml "$C/tokconfig/"

# every regression input (seeds and fixed findings: tests/fuzz/regressions/<target>/) joins its corpus
for d in tests/fuzz/regressions/*/; do t=$(basename "$d"); if [ -d "$C/$t" ]; then cp "$d"* "$C/$t/"; fi; done

# ---- run
printf '| target | seconds | executions | exec/s | edges covered | corpus files (start -> end) | findings |\n|---|---|---|---|---|---|---|\n' > "$B/results.md"
status=0
for t in $TARGETS; do
    A="$B/artifacts/$t"
    mkdir -p "$A"
    seeds=$(ls "$C/$t" | wc -l)
    echo "fuzzing $t for $SECS s ($seeds seeds)" >&2
    # inputs up to 16 KiB (the splitter feeds some of them a byte at a time); records and headers
    # longer than that are covered by the unit tests
    nice "$B/tests/fuzz/fuzz_$t" -max_total_time="$SECS" -print_final_stats=1 -timeout=20 -rss_limit_mb=2048 \
        -max_len=16384 -artifact_prefix="$A/" -close_fd_mask=3 "$C/$t" > "$B/$t.log" 2>&1 || true
    cov=$(grep -o 'DONE *cov: [0-9]*' "$B/$t.log" | grep -o '[0-9]*$' || echo "?")
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$B/$t.log" | grep -o '[0-9]*$' || echo "?")
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$B/$t.log" | grep -o '[0-9]*$' || echo "?")
    final=$(ls "$C/$t" | wc -l)
    finds=$(ls "$A" | wc -l)
    [ "$finds" = 0 ] || status=1
    what=$([ "$finds" = 0 ] && echo none || ls "$A" | tr '\n' ' ')
    printf '| %s | %s | %s | %s | %s | %s -> %s | %s |\n' "$t" "$SECS" "$execs" "$rate" "$cov" "$seeds" "$final" "$what" >> "$B/results.md"
done
cat "$B/results.md"
exit $status
