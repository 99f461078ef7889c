#!/usr/bin/env bash
# tests/compare_builds.sh OLD_GLMTUNE NEW_GLMTUNE: the sample run (samples/run.sh's steps: tokenize
# samples/data, init-model, train on the CPU, export-adapter, export-adapter --merge) with two
# builds of glmtune on the same inputs, then every output file compared byte for byte. For a
# refactoring that must not change behaviour: build the old commit in a worktree
# (git worktree add /tmp/old COMMIT; GLMTUNE_CUDA=OFF cmake/ninja there) and run this.
# Files that legitimately differ between two runs (wall-clock times, absolute paths) are listed
# in SKIP below with the reason; everything else must be identical. Exit 0: identical.
set -euo pipefail
[ $# = 2 ] || { echo "usage: tests/compare_builds.sh OLD_GLMTUNE NEW_GLMTUNE" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
old=$(realpath "$1"); new=$(realpath "$2")
W=$(mktemp -d); [ -n "${KEEP:-}" ] || trap 'rm -rf "$W"' EXIT; echo "work dir $W" >&2
run() { # $1 binary, $2 where its outputs go: both builds run in $W/run (the same absolute paths,
        # which adapter_config.json records), then the outputs move to $W/$2
    local G=$1 side=$2
    rm -rf "$W/run"; mkdir -p "$W/run"; cd "$W/run"
    ln -sfn "$root/samples" samples; mkdir -p out
    "$G" tokenize --quiet --tokenizer samples/tokenizer --seq-len 256 --val-size 0.05 --report out/tokenize-report.json \
        -o out/shards samples/data
    "$G" init-model --config samples/model-config.json --tokenizer samples/tokenizer --seed 1 -o out/model 2>/dev/null
    "$G" train --quiet --device cpu --config samples/train.yaml --model out/model --data out/shards --eval-data out/shards \
        --output-dir out/run --max-steps 12 --save-steps 6
    "$G" export-adapter --checkpoint out/run -o out/adapter 2>/dev/null
    "$G" export-adapter --checkpoint out/run --merge -o out/merged 2>/dev/null
    cd "$W"; mv "$W/run" "$W/$side"
}
(run "$old" old) >"$W/old.log" 2>&1 || { cat "$W/old.log"; echo "the old build failed" >&2; exit 1; }
(run "$new" new) >"$W/new.log" 2>&1 || { cat "$W/new.log"; echo "the new build failed" >&2; exit 1; }
# wall-clock content is not behaviour: TensorBoard event files (their names and records carry
# times) are skipped; in the JSON files the values of the timing keys are blanked before comparing,
# and a checkpoint's checksums.txt is compared without its trainer_state.json line
SKIP='(events\.out\.tfevents|train\.log)'
TIMING='"(tokens_per_second|train_runtime|train_samples_per_second|train_steps_per_second|eval_runtime|eval_samples_per_second|eval_steps_per_second|seconds|mb_per_second)": [-+0-9.eE]+'
same() { # $1 $2: identical, or identical once the timing values are blanked (JSON files)
    cmp -s "$1" "$2" && return 0
    # a checkpoint's checksums.txt: its line for trainer_state.json (which holds timings) left out
    case $1 in */checksums.txt) cmp -s <(grep -v ' trainer_state.json$' "$1") <(grep -v ' trainer_state.json$' "$2"); return ;; esac
    case $1 in *.json|*.jsonl) ;; *) return 1 ;; esac
    cmp -s <(sed -E "s/$TIMING/\"\1\": T/g" "$1") <(sed -E "s/$TIMING/\"\1\": T/g" "$2")
}
cd "$W/old/out"
n=0 bad=0 skipped=0
while IFS= read -r f; do
    if [[ $f =~ $SKIP ]]; then skipped=$((skipped + 1)); continue; fi
    n=$((n + 1))
    if [ ! -f "$W/new/out/$f" ]; then echo "only in the old run: $f"; bad=$((bad + 1))
    elif ! same "$f" "$W/new/out/$f"; then echo "differs: $f"; bad=$((bad + 1)); fi
done < <(find . -type f | sort)
extra=$(cd "$W/new/out" && find . -type f | grep -Ev "$SKIP" | sort | comm -13 <(cd "$W/old/out" && find . -type f | grep -Ev "$SKIP" | sort) -)
[ -z "$extra" ] || { echo "only in the new run: $extra"; bad=$((bad + 1)); }
echo "compared $n files byte for byte (JSON timing values blanked; $skipped TensorBoard event files skipped): $bad differ"
[ $bad = 0 ]
