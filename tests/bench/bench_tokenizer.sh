#!/usr/bin/env bash
# tests/bench/bench_tokenizer.sh: encoder throughput, glmtune vs tiktoken, as a markdown table.
#
# usage: tests/bench/bench_tokenizer.sh [BUILD_DIR] [SHARED_DIR]
#   BUILD_DIR  holds tests/tokenize/bench_tokenizer (default: build; `ninja -C BUILD_DIR bench_tokenizer`)
#   SHARED_DIR the shared fixtures folder (default: $GLM_SHARED or ../shared)
# Texts: zh = every string of corpora/llamafactory/alpaca_zh_demo.json (Chinese), en = the same
# for alpaca_en_demo.json (English), mixed = every JSON string value of SHARED_DIR/corpora joined
# by newlines, mixed-xN = that repeated to ~20 MB. Rows: one call over the whole text on 1 thread
# (both tools: glm_tokenizer_encode / tiktoken encode_ordinary), then ~1 MiB chunks over 1 and 2
# threads (bench_tokenizer threads / tiktoken encode_ordinary_batch). MB = 1e6 input bytes; best of
# runs lasting >= MIN_TIME s each (env MIN_TIME, default 2). The "ids" column must agree between
# the tools on whole-text rows (same count and FNV-1a hash of the ids), else the script fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
shared=${2:-${GLM_SHARED:-$root/../shared}}
min_time=${MIN_TIME:-2}
threads=${THREADS:-1,2}
bench=$build/tests/tokenize/bench_tokenizer
[ -x "$bench" ] || { echo "bench_tokenizer.sh: $bench not built (ninja -C $build bench_tokenizer)" >&2; exit 2; }
[ -d "$shared/corpora" ] || { echo "bench_tokenizer.sh: $shared/corpora not found" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/bench_tiktoken.py" prepare "$shared/corpora" "$tmp/mixed.txt" "$tmp/mixed20.txt" "$tmp/zh.txt" "$tmp/en.txt"
tok="$shared/glm4-tokenizer"
for t in zh en mixed mixed20; do
  label=$t; [ $t = mixed20 ] && label=mixed-x$(( $(stat -c %s "$tmp/mixed20.txt") / $(stat -c %s "$tmp/mixed.txt") ))
  "$bench" --tokenizer "$tok" --text "$tmp/$t.txt" --label "$label" --threads "$threads" --min-time "$min_time" 2>/dev/null
  python3 "$here/bench_tiktoken.py" run "$tok" "$tmp/$t.txt" "$label" "$threads" "$min_time"
done > "$tmp/results.txt"
sizes="zh $(stat -c %s "$tmp/zh.txt") bytes, en $(stat -c %s "$tmp/en.txt") bytes, mixed $(stat -c %s "$tmp/mixed.txt") bytes, mixed-xN $(stat -c %s "$tmp/mixed20.txt") bytes"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; texts: $sizes"
echo
awk '
  { key = $2 " " $3 " " $4; v[$1, key] = $5; n[$1, key] = $6; h[$1, key] = $7
    if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
  END {
    printf "| text | mode | threads | glmtune MB/s | tiktoken MB/s | speed-up | ids (glmtune / tiktoken) |\n"
    printf "|---|---|---|---|---|---|---|\n"
    bad = 0
    for (i = 1; i <= k; i++) {
      key = order[i]; split(key, p, " ")
      g = v["glmtune", key]; t = v["tiktoken", key]
      printf "| %s | %s | %s | %.1f | %.1f | %.2fx | %s / %s |\n", p[1], p[2], p[3], g, t, (t > 0 ? g / t : 0), n["glmtune", key], n["tiktoken", key]
      if (p[2] == "whole" && (n["glmtune", key] != n["tiktoken", key] || h["glmtune", key] != h["tiktoken", key])) bad = 1
    }
    if (bad) { print "MISMATCH: glmtune and tiktoken ids differ on a whole-text row" > "/dev/stderr"; exit 1 }
  }' "$tmp/results.txt"

# The whole `glmtune tokenize` command (read, parse, convert, render the chat template, encode,
# pack, write shards) on the corpora folder copied 6 times (~24 MB of JSON), 1 and 2 threads.
# MB/s = input bytes on disk / wall seconds of the command; MB per CPU-second = the same bytes /
# (user + sys) seconds, the throughput per busy core (on a shared machine the wall time also
# counts waiting for a core). Medians of RUNS runs (env RUNS, default 5), wall and CPU each.
# The tokenizer's table cache (tokenize/bpe/bpe_cache.c) is used as a user's runs use it: the first
# run of a tokenizer file builds and saves it, the others map it; GLMTUNE_CACHE_DIR=off measures
# building the tables in every run.
glmtune=$build/tool/glmtune
runs=${RUNS:-5}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
if [ -x "$glmtune" ]; then
  for i in 1 2 3 4 5 6; do mkdir -p "$tmp/in/$i" && cp -r "$shared/corpora/." "$tmp/in/$i/"; done
  in_bytes=$(find "$tmp/in" -type f -name '*.json*' ! -name dataset_info.json -printf '%s\n' | awk '{s += $1} END {print s}')
  # a folder with a dataset_info.json gives only the files it names: the others are inputs of their own
  unregistered=$(python3 - "$tmp/in" <<'PY'
import json, os, sys
for root, _, files in sorted(os.walk(sys.argv[1])):
    if "dataset_info.json" not in files:
        continue
    named = {v.get("file_name") for v in json.load(open(os.path.join(root, "dataset_info.json"))).values()}
    for f in sorted(files):
        if f.endswith((".json", ".jsonl")) and f != "dataset_info.json" and f not in named:
            print(os.path.join(root, f))
PY
)
  echo
  echo "| whole command: glmtune tokenize --seq-len 8192 (${in_bytes} bytes of JSON), median of $runs runs | threads | seconds | MB/s | CPU seconds | MB per CPU-second |"
  echo "|---|---|---|---|---|---|"
  TIMEFORMAT='%R %U %S'
  for t in ${threads//,/ }; do
    : > "$tmp/walls"
    : > "$tmp/cpus"
    for rep in $(seq "$runs"); do
      rm -rf "$tmp/out"
      read -r wall usr sys < <({ time "$glmtune" tokenize --quiet --threads "$t" --tokenizer "$tok" --seq-len 8192 -o "$tmp/out" "$tmp/in" $unregistered >/dev/null 2>&1; } 2>&1)
      echo "$wall" >> "$tmp/walls"
      echo "$usr + $sys" | bc -l >> "$tmp/cpus"
    done
    wall=$(median < "$tmp/walls")
    cpu=$(median < "$tmp/cpus")
    awk -v b="$in_bytes" -v s="$wall" -v c="$cpu" -v t="$t" 'BEGIN { printf "| | %d | %.2f | %.1f | %.2f | %.1f |\n", t, s, b / s / 1e6, c, b / c / 1e6 }'
  done
  echo
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
