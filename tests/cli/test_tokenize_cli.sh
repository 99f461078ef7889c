#!/usr/bin/env bash
# glmtune tokenize / inspect through the CLI: real corpora with the real GLM-4 tokenizer (per-file
# counts), determinism across runs and thread counts, archives and compression, validation split,
# --truncate / --train-on last, bad input (skip and count, --strict fatal, nothing usable = failure,
# no half-written output), usage errors (exit 2), --encode/--decode.
set -uo pipefail
G=${GLMTUNE:?}
F=${GLM_FIXTURES:?the test data folder, tests/fixtures}
[ -d "$F" ] || { echo "FAIL: the test data folder $F does not exist" >&2; exit 1; }
TOK="$F/glm4-tokenizer"
T=$(mktemp -d /tmp/glmtok.XXXXXX)
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
check() { local what=$1; shift; if "$@"; then ok; else bad "$what"; fi; }
jget() { # jget FILE KEY: the first integer value of "KEY": N in a JSON file
    grep -o "\"$2\": *[0-9.e+-]*" "$1" | head -1 | sed 's/.*: *//'
}

# 0. the top level: `glmtune help CMD` is CMD's help; version spellings; an unknown option named
check "help tokenize: the tokenize help" sh -c '"$0" help tokenize | head -1 | grep -q "usage: glmtune tokenize"' "$G"
check "version / -V / --version" sh -c 'for v in version -V --version; do "$0" $v | grep -q "^glmtune [0-9]" || exit 1; done' "$G"
check "--versoin: refused, pointing at --version" sh -c '! "$0" --versoin 2>&1 | grep -q -- "--version" && exit 1; ! "$0" --versoin 2>/dev/null' "$G"

# 1. every corpus file, per-file counts equal to SOURCES.md's record counts (llamafactory/ holds a
# dataset_info.json, so the folder gives only the files it names: the other two are inputs of their own)
LFX="$F/corpora/llamafactory/reason_tool_use_demo_50.jsonl $F/corpora/llamafactory/v1_sft_demo.jsonl"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 8192 --report "$T/r1.json" -o "$T/o1" "$F/corpora" $LFX 2>"$T/log1"
check "tokenize corpora (exit $?)" test -f "$T/o1/manifest.json"
check "... the files the registry does not name are said to be left out of the folder" \
    grep -q "llamafactory: 2 files in the folder are not named by its dataset_info.json" "$T/log1"
while IFS='|' read -r _ file _ _ _ recs _; do
    f=$(echo "$file" | xargs); n=$(echo "$recs" | tr -d ' ,')
    case "$f" in *dataset_info.json|"") continue;; esac
    [[ "$n" =~ ^[0-9]+$ ]] || continue
    got=$(grep -A2 "corpora/$f\"" "$T/r1.json" | grep -o '"records_read": [0-9]*' | head -1 | grep -o '[0-9]*$')
    kept=$(grep -A3 "corpora/$f\"" "$T/r1.json" | grep -o '"records_kept": [0-9]*' | head -1 | grep -o '[0-9]*$')
    # dropped on purpose (test_corpora.c says why): an empty turn, two tool results answering no call
    want=$n; case "$f" in *missingturns*) want=$((n - 1));; *glaive_toolcall_zh*) want=$((n - 2));; esac
    check "$f: read ${got:-none} of $n records" test "${got:-x}" = "$n"
    check "$f: kept ${kept:-none} of $want records" test "${kept:-x}" = "$want"
done < <(grep '^| [a-z]*/' "$F/corpora/SOURCES.md")
check "report has packing_efficiency" grep -q '"packing_efficiency"' "$T/r1.json"
check "report has target_tokens" grep -q '"target_tokens"' "$T/r1.json"

# 2. determinism: same inputs and seed -> byte-identical shards, whatever the thread count
$G tokenize --quiet --threads 1 --tokenizer "$TOK" --seq-len 8192 -o "$T/o2" "$F/corpora" $LFX 2>/dev/null
check "same shards with 1 thread" cmp -s "$T/o1/train-00000.bin" "$T/o2/train-00000.bin"

# 3. archives and compression give the same samples
mkdir -p "$T/arch"
cp "$F/corpora/llamafactory/alpaca_zh_demo.json" "$F/corpora/fastchat/dummy_conversation.json" "$T/arch/"
(cd "$T/arch" && tar czf ../a.tar.gz *.json && zip -q ../a.zip *.json && gzip -k alpaca_zh_demo.json && zstd -q dummy_conversation.json)
$G tokenize --quiet --tokenizer "$TOK" --seq-len 2048 -o "$T/plain" "$T/arch/alpaca_zh_demo.json" "$T/arch/dummy_conversation.json" 2>/dev/null
for x in "$T/a.tar.gz" "$T/a.zip" "$T/arch/alpaca_zh_demo.json.gz $T/arch/dummy_conversation.json.zst"; do
    rm -rf "$T/x"
    $G tokenize --quiet --tokenizer "$TOK" --seq-len 2048 -o "$T/x" $x 2>/dev/null
    check "$x: same token count as the plain files" test "$(jget "$T/x/report.json" tokens)" = "$(jget "$T/plain/report.json" tokens)"
done

# 4. inspect --json maps samples back to file and record
$G inspect --json "$T/plain" > "$T/samples.jsonl"
check "inspect --json: one line per sample" test "$(wc -l < "$T/samples.jsonl")" = "$(jget "$T/plain/report.json" records_kept)"
check "inspect --json fields" grep -q '"file": *"[^"]*alpaca_zh_demo.json", *"record": *[0-9]*, *"ids": *\[151331, *151333' "$T/samples.jsonl"
$G inspect "$T/plain" > "$T/inspect.txt"
check "inspect shows decoded text with targets" grep -q '<|assistant|>' "$T/inspect.txt"

# 5. validation split, --train-on last, --truncate
$G tokenize --quiet --tokenizer "$TOK" --seq-len 2048 --val-size 50 -o "$T/v" "$F/corpora/fastchat" 2>/dev/null
check "val split of 50 samples" grep -q '"samples": 50' "$T/v/report.json"
check "val shard written" test -f "$T/v/val-00000.bin"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 2048 --train-on last -o "$T/last" "$F/corpora/axolotl/conversation.json" 2>/dev/null
$G tokenize --quiet --tokenizer "$TOK" --seq-len 2048 -o "$T/all" "$F/corpora/axolotl/conversation.json" 2>/dev/null
check "--train-on last trains fewer tokens" test "$(jget "$T/last/report.json" target_tokens)" -lt "$(jget "$T/all/report.json" target_tokens)"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 256 -o "$T/drop" "$F/corpora/axolotl" 2>/dev/null
check "too long samples dropped and counted" grep -q '"too_long": 1' "$T/drop/report.json"
check "... and the empty turn" grep -q '"empty_turn": 1' "$T/drop/report.json"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 256 --truncate -o "$T/trunc" "$F/corpora/axolotl" 2>/dev/null
check "--truncate keeps them" test "$(jget "$T/trunc/report.json" records_kept)" = 3
$G inspect --json "$T/trunc" > "$T/trunc.jsonl"
check "--truncate keeps the end-of-turn token" test "$(grep -c '151336\], *"targets"' "$T/trunc.jsonl")" = 3

# 6. bad input: skipped and counted with locations; --strict fatal; nothing usable = failure
printf '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}\n{"messages": [oops\n{"messages":[{"role":"wizard","content":"x"}]}\n{"conversations":[{"from":"human","value":"\xff\xfe"}]}\n{"note": "no layout"}\n' > "$T/bad.jsonl"
$G tokenize --tokenizer "$TOK" --seq-len 512 -o "$T/b" "$T/bad.jsonl" 2>"$T/blog"
check "lenient run succeeds with 1 kept" test "$(jget "$T/b/report.json" records_kept)" = 1
check "bad JSON counted with file:line" grep -q "bad.jsonl:2" "$T/blog"
check "5 records read" test "$(jget "$T/b/report.json" records_read)" = 5
for reason in invalid_json unknown_role invalid_utf8 unsupported_layout; do
    check "dropped reason $reason counted" grep -q "\"$reason\": 1" "$T/b/report.json"
done
$G tokenize --strict --tokenizer "$TOK" --seq-len 512 -o "$T/bs" "$T/bad.jsonl" 2>"$T/bslog"; rc=$?
check "--strict fails (exit $rc)" test $rc = 1
check "--strict names file and line" grep -q "bad.jsonl:2" "$T/bslog"
check "--strict leaves no output" test ! -e "$T/bs"
printf '{"messages": [oops\n' > "$T/allbad.jsonl"
$G tokenize --tokenizer "$TOK" -o "$T/ab" "$T/allbad.jsonl" 2>"$T/ablog"; rc=$?
check "nothing usable is a failure (exit $rc)" test $rc = 1
check "... and writes nothing" test ! -e "$T/ab"
printf 'garbage' | gzip | head -c 10 > "$T/trunc.json.gz"
$G tokenize --tokenizer "$TOK" -o "$T/tg" "$T/trunc.json.gz" 2>"$T/tglog"; rc=$?
check "truncated .gz fails (exit $rc)" test $rc = 1
check "... naming the file" grep -q "trunc.json.gz" "$T/tglog"
# a JSON array cut off mid-record (head -c of a download): the complete records before the cut
# are kept, the cut-off tail is counted as truncated_json with file, offset and hint; --strict fatal
head -c 5000 "$F/corpora/llamafactory/alpaca_en_demo.json" > "$T/cut.json"
$G tokenize --tokenizer "$TOK" --seq-len 2048 -o "$T/cut" "$T/cut.json" 2>"$T/cutlog"; rc=$?
check "cut-off array: not fatal (exit $rc)" test $rc = 0
check "... the 6 complete records kept" test "$(jget "$T/cut/report.json" records_kept)" = 6
check "... the tail counted as truncated_json" grep -q '"truncated_json": 1' "$T/cut/report.json"
check "... named with file, offset and hint" grep -q "cut.json:32: record 6 (offset 4951).*byte offset 5000.*cut off; hint" "$T/cutlog"
$G tokenize --strict --tokenizer "$TOK" --seq-len 2048 -o "$T/cuts" "$T/cut.json" 2>"$T/cutslog"; rc=$?
check "cut-off array with --strict fails (exit $rc)" test $rc = 1 -a ! -e "$T/cuts"
check "... naming the file" grep -q "cut.json:32" "$T/cutslog"
# a forced --format on records of another layout: the hint names the forced layout's own key
$G tokenize --tokenizer "$TOK" --format sharegpt -o "$T/sg" "$F/corpora/llamafactory/alpaca_en_demo.json" 2>"$T/sglog"; rc=$?
check "--format sharegpt on Alpaca records: nothing usable (exit $rc)" test $rc = 1 -a ! -e "$T/sg"
check "... the hint names \"conversations\"" grep -q 'alpaca_en_demo.json:2: record 0: no "conversations" list in the record; hint: check --format (sharegpt records need "conversations")' "$T/sglog"
check "... and not \"messages\"" sh -c '! grep -q "\"messages\"" "$0"' "$T/sglog"
mkdir -p "$T/notours" && touch "$T/notours/precious.txt"
$G tokenize --tokenizer "$TOK" -o "$T/notours" "$F/corpora/axolotl/alpaca.json" 2>/dev/null; rc=$?
check "refuses to replace a directory it did not write (exit $rc)" test $rc = 2 -a -f "$T/notours/precious.txt"
$G tokenize --tokenizer "$TOK" --seq-len 2048 -o "$T/o1" "$F/corpora/axolotl/alpaca.json" 2>/dev/null
check "replaces its own earlier output" test "$(jget "$T/o1/report.json" records_read)" = 2
# the user's own files in an earlier output (notes, eval results) are never deleted: refused, naming
# the first one, with -o as it was; its own files alone (train and val shards) are replaced
$G tokenize --quiet --tokenizer "$TOK" --seq-len 512 --val-size 2 -o "$T/mine" "$F/corpora/torchtune" 2>/dev/null
check "an earlier output with a val split" test -f "$T/mine/val-00000.bin"
echo notes > "$T/mine/NOTES.md" && mkdir -p "$T/mine/eval_results" && echo '{}' > "$T/mine/eval_results/r.json"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 512 -o "$T/mine" "$F/corpora/torchtune" 2>"$T/minelog"; rc=$?
check "an earlier output holding the user's files: exit 2 ($rc)" test $rc = 2
check "... the files kept" test -f "$T/mine/NOTES.md" -a -f "$T/mine/eval_results/r.json" -a -f "$T/mine/val-00000.bin"
check "... naming the first, with a hint" grep -q "^glmtune: error: -o $T/mine already holds NOTES.md, which tokenize does not write: .*hint: choose another -o" "$T/minelog"
check "... nothing left beside it" test -z "$(ls -d "$T"/mine.* 2>/dev/null)"
rm "$T/mine/NOTES.md"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 512 -o "$T/mine" "$F/corpora/torchtune" 2>"$T/minelog"; rc=$?
check "... then the folder eval_results: exit 2 ($rc)" test $rc = 2 -a -f "$T/mine/eval_results/r.json"
check "... named" grep -q "already holds eval_results," "$T/minelog"
# a file put into -o while tokenize runs (here: before its input ends) is refused before the swap
rm -r "$T/mine/eval_results" && mkfifo "$T/fifo"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 512 -o "$T/mine" - < "$T/fifo" 2>"$T/late.err" & tpid=$!
exec 3>"$T/fifo"
cat "$F/corpora/torchtune/alpaca_tiny.json" >&3
echo late > "$T/mine/late.txt"
exec 3>&-
wait $tpid; rc=$?
check "a file added during the run: exit 2 ($rc)" test $rc = 2 -a -f "$T/mine/late.txt" -a -f "$T/mine/val-00000.bin"
check "... named" grep -q "already holds late.txt" "$T/late.err"
rm "$T/mine/late.txt"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 512 -o "$T/mine" "$F/corpora/torchtune" 2>/dev/null; rc=$?
check "its own files alone are replaced (exit $rc)" test $rc = 0 -a ! -e "$T/mine/val-00000.bin" -a -f "$T/mine/train-00000.bin"
# the user's own manifest.json (a common name) is not taken for tokenize's
mkdir -p "$T/usermf" && echo '{"my": "project manifest"}' > "$T/usermf/manifest.json"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 512 -o "$T/usermf" "$F/corpora/torchtune" 2>"$T/usermf.err"; rc=$?
check "a folder with the user's own manifest.json: exit 2 ($rc), kept" test $rc = 2 -a "$(cat "$T/usermf/manifest.json")" = '{"my": "project manifest"}'
check "... said" grep -q "its manifest.json is not one tokenize wrote" "$T/usermf.err"
# --report inside -o would be replaced with it: refused before the run
$G tokenize --quiet --tokenizer "$TOK" --seq-len 512 --report "$T/mine/mine-report.json" -o "$T/mine" "$F/corpora/torchtune" 2>"$T/rin.err"; rc=$?
check "--report inside -o: exit 2 ($rc)" test $rc = 2 -a ! -e "$T/mine/mine-report.json"
check "... said" grep -q "is inside -o .*, which the run replaces as a whole" "$T/rin.err"
# -o . (the current directory) and a FIFO are refused up front
(cd "$T" && $G tokenize --quiet --tokenizer "$TOK" --seq-len 512 -o . "$F/corpora/torchtune" 2>"$T/dot.err"); rc=$?
check "-o .: exit 2 ($rc)" test $rc = 2
check "... said" grep -q "cannot be the current, a parent or the root directory" "$T/dot.err"
mkfifo "$T/ofifo"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 512 -o "$T/ofifo" "$F/corpora/torchtune" 2>"$T/ofifo.err"; rc=$?
check "-o FIFO: exit 2 ($rc), nothing read" test $rc = 2 && check "... said" grep -q "exists and is not a directory" "$T/ofifo.err"

# 6b. file names that are not UTF-8, inputs given twice, an unwritable --report
odd="$T/$(printf 'lat\xe9').jsonl"
printf '{"instruction":"x","output":"y"}\n' > "$odd"
$G tokenize --quiet --tokenizer "$TOK" --seq-len 64 -o "$T/odd" "$odd" "$odd" 2>/dev/null
check "a file given twice is read twice" test "$(jget "$T/odd/report.json" records_read)" = 2
$G inspect --json "$T/odd" > "$T/odd.jsonl"; rc=$?
check "inspect --json with a non-UTF-8 file name (exit $rc)" test $rc = 0 -a "$(wc -l < "$T/odd.jsonl")" = 2
check "... the name shown with U+FFFD" grep -q "lat$(printf '\357\277\275')" "$T/odd.jsonl"
$G tokenize --tokenizer "$TOK" --report /nonexistent/r.json -o "$T/nr" "$F/corpora/axolotl/alpaca.json" 2>/dev/null; rc=$?
check "--report into a missing directory: exit 2 before any work ($rc)" test $rc = 2 -a ! -e "$T/nr"
mkdir -p "$T/repdir"
$G tokenize --tokenizer "$TOK" --report "$T/repdir" -o "$T/nr" "$F/corpora/axolotl/alpaca.json" 2>"$T/repdir.err"; rc=$?
check "--report a directory: exit 2 before any work ($rc)" test $rc = 2 -a ! -e "$T/nr"
check "... with the whole message, once" test "$(cat "$T/repdir.err")" = "glmtune: error: --report: $T/repdir is a directory; hint: name a file"
$G inspect --sample 99999 "$T/odd" >/dev/null 2>&1; rc=$?
check "inspect --sample out of range: exit 2 ($rc)" test $rc = 2

# 7. usage errors exit 2
$G tokenize --tokenizer "$TOK" --bogus -o "$T/u" x.json 2>/dev/null; check "unknown option: exit 2" test $? = 2
$G tokenize --tokenizer "$TOK" --seqlen 64 -o "$T/u" x.json 2>"$T/u.err"; check "misspelt option: exit 2" test $? = 2
check "... suggests the option meant" grep -q "did you mean --seq-len?" "$T/u.err"
$G tokenize --tokenizer "$TOK" "$F/corpora/axolotl/alpaca.json" 2>/dev/null; check "no -o: exit 2" test $? = 2
$G tokenize --tokenizer "$TOK" --train-on some -o "$T/u" x 2>/dev/null; check "bad --train-on: exit 2" test $? = 2
$G tokenize --tokenizer /nonexistent -o "$T/u" "$F/corpora/axolotl/alpaca.json" 2>"$T/ulog"; rc=$?
check "missing tokenizer fails naming it (exit $rc)" test $rc != 0 -a -n "$(grep /nonexistent "$T/ulog")"

# 8. pre-tokenized input needs no tokenizer; --encode/--decode round trip
printf '{"input_ids": [5, 6, 7, 8], "labels": [-100, -100, 7, 8]}\n' > "$T/pre.jsonl"
$G tokenize --quiet --seq-len 16 -o "$T/pre" "$T/pre.jsonl" 2>/dev/null
check "pre-tokenized: 2 targets" test "$(jget "$T/pre/report.json" target_tokens)" = 2
printf '{"text": "GLM-4 的分词器 tokenizes 😀 text."}\n{"text": ""}\n' | $G tokenize --tokenizer "$TOK" --encode > "$T/enc.jsonl"
$G tokenize --tokenizer "$TOK" --decode < "$T/enc.jsonl" > "$T/dec.jsonl"
check "encode/decode round trip" grep -q '"GLM-4 的分词器 tokenizes 😀 text."' "$T/dec.jsonl"
check "empty text encodes to no ids" grep -q '{"ids": *\[\]}' "$T/enc.jsonl"

# "-" is standard input (compressed too), read as the file it names
gzip -c "$F/corpora/torchtune/alpaca_tiny.json" | $G tokenize --quiet --tokenizer "$TOK" --seq-len 1024 -o "$T/dash" - 2>"$T/dash.log"
check "- reads standard input (exit $?)" test -f "$T/dash/manifest.json"
check "... every record of it" grep -q '"records_read": 100' "$T/dash/report.json"

echo "test_tokenize_cli: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
