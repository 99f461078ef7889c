#!/usr/bin/env bash
# Outputs that must never be lost or replaced by the wrong kind of file:
#  1. the tokenize output swap, with a kill injected before and after each rename of the swap
#     (tests/cli/rename_shim.c, LD_PRELOAD), with RENAME_EXCHANGE and with the two-rename
#     fallback: the output name always holds a complete output (old or new), and the next run
#     cleans every leftover (<out>.tmp.<pid>, <out>.old.<pid>) or restores a missing output;
#  2. --report written through /dev/stdout (a pipe and a redirected file), a FIFO, /dev/null, a
#     device that fails writes; resolved through a symbolic link (the link stays a link);
#  3. -o through a symbolic link (tokenize and export-adapter): the target is replaced;
#  4. SIGINT / SIGTERM during tokenize: temporary directory removed, -o as it was;
#  5. export-adapter (adapter and --merge): SIGINT / SIGTERM just before the output swap removes
#     the temporary directory (the size of a merged model) and leaves -o as it was; -o is locked:
#     a second export into it meanwhile stops at once.
set -uo pipefail
G=${GLMTUNE:?}
SHIM=${GLM_RENAME_SHIM:-}
T=$(mktemp -d /tmp/glmout.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
has() { grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }

# pre-tokenized samples (no tokenizer needed): A has 30, B 50, C none usable
mk() { awk -v n=$1 -v s=$2 'BEGIN { srand(s); for (i = 0; i < n; i++) { k = 8 + int(rand() * 20); ids = ""; lab = "";
       for (j = 0; j < k; j++) { x = 1 + int(rand() * 400); ids = ids (j ? ", " : "") x; lab = lab (j ? ", " : "") (j < 3 ? -100 : x) }
       print "{\"input_ids\": [" ids "], \"labels\": [" lab "]}" } }'; }
mk 30 1 > "$T/a.jsonl"; mk 50 2 > "$T/b.jsonl"
printf '{"input_ids": [], "labels": []}\n' > "$T/c.jsonl"
samples() { "$G" inspect --json "$1" 2>/dev/null | wc -l; }
leftovers() { ls -d "$T/work/out".tmp.* "$T/work/out".old.* 2>/dev/null | wc -l; }

# ---- 1. kills at each rename of the output swap
if [ -n "$SHIM" ] && [ -f "$SHIM" ]; then
  for mode in exchange fallback; do
    if [ $mode = exchange ]; then nren=1; noex=; else nren=2; noex=1; fi
    for k in $(seq 1 $nren); do
      for when in before after; do
        rm -rf "$T/work"; mkdir -p "$T/work"
        "$G" tokenize --quiet --seq-len 64 -o "$T/work/out" "$T/a.jsonl" 2>/dev/null
        env LD_PRELOAD="$SHIM" GLM_SHIM_NAME=out GLM_SHIM_KILL_AT=$k GLM_SHIM_WHEN=$when ${noex:+GLM_SHIM_NO_EXCHANGE=1} \
            "$G" tokenize --quiet --seq-len 64 -o "$T/work/out" "$T/b.jsonl" 2>/dev/null; rc=$?
        check "$mode rename $k $when: killed (exit $rc)" test $rc = 137
        n=$(samples "$T/work/out")
        window=0; [ $mode = fallback ] && { [ $k = 1 -a $when = after ] || [ $k = 2 -a $when = before ]; } && window=1
        if [ $window = 0 ]; then
          check "$mode rename $k $when: the output is complete, old or new ($n samples)" test "$n" = 30 -o "$n" = 50
        else
          # the fallback's one window without the name: the next run restores the previous output
          "$G" tokenize --quiet --seq-len 64 -o "$T/work/out" "$T/c.jsonl" 2>"$T/restore.log"
          check "$mode rename $k $when: restored by the next run" has "$T/restore.log" "restored the previous one"
          n=$(samples "$T/work/out")
          check "$mode rename $k $when: the previous output is back ($n samples)" test "$n" = 30
        fi
        # the next run cleans what the killed one left and writes its output
        "$G" tokenize --quiet --seq-len 64 -o "$T/work/out" "$T/a.jsonl" 2>/dev/null
        check "$mode rename $k $when: next run ok, no leftovers ($(leftovers))" test "$(leftovers)" = 0 -a "$(samples "$T/work/out")" = 30
      done
    done
  done
else
  echo "SKIPPED part 1: the rename shim library was not built (GLM_RENAME_SHIM=$SHIM)"
fi

# ---- 2. --report through devices, FIFOs, /dev/stdout and links
R="--quiet --seq-len 64"
"$G" tokenize $R --report /dev/stdout -o "$T/r1" "$T/a.jsonl" 2>/dev/null | cat > "$T/piped.json"
check "--report /dev/stdout into a pipe" has "$T/piped.json" '"records_kept": 30'
echo "first line" > "$T/redir.json"
"$G" tokenize $R --report /dev/stdout -o "$T/r2" "$T/a.jsonl" 2>/dev/null >> "$T/redir.json"
check "--report /dev/stdout appended to a redirected file" test "$(head -1 "$T/redir.json")" = "first line"
check "... with the report after it" has "$T/redir.json" '"records_kept": 30'
"$G" tokenize $R --report /dev/stdout -o "$T/r2b" "$T/a.jsonl" 2>/dev/null > "$T/redir2.json"
check "--report /dev/stdout > file: the file holds the report" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/redir2.json" 2>/dev/null || has "$T/redir2.json" '"records_read": 30'
mkfifo "$T/fifo"
cat "$T/fifo" > "$T/from_fifo.json" &
reader=$!
"$G" tokenize $R --report "$T/fifo" -o "$T/r3" "$T/a.jsonl" 2>"$T/fifo.log"; rc=$?
wait $reader
check "--report FIFO: exit 0 ($rc)" test $rc = 0
check "... the reader got the report" has "$T/from_fifo.json" '"records_kept": 30'
check "... and the FIFO is still a FIFO" test -p "$T/fifo"
"$G" tokenize $R --report /dev/null -o "$T/r4" "$T/a.jsonl" 2>/dev/null; rc=$?
check "--report /dev/null: exit 0 ($rc), still a device" test $rc = 0 -a -c /dev/null
echo old > "$T/real.json"; ln -s real.json "$T/link.json"
"$G" tokenize $R --report "$T/link.json" -o "$T/r5" "$T/a.jsonl" 2>/dev/null
check "--report through a symbolic link: the link stays" test -L "$T/link.json"
check "... its target holds the report" has "$T/real.json" '"records_kept": 30'
ln -s made.json "$T/dangling.json"
"$G" tokenize $R --report "$T/dangling.json" -o "$T/r6" "$T/a.jsonl" 2>/dev/null
check "--report through a dangling link creates its target" has "$T/made.json" '"records_kept": 30'
if mknod "$T/full" c 1 7 2>/dev/null && : 2>/dev/null >"$T/full"; then
  "$G" tokenize $R -o "$T/r7" "$T/a.jsonl" 2>/dev/null
  "$G" tokenize $R --report "$T/full" -o "$T/r7" "$T/b.jsonl" 2>"$T/full.log"; rc=$?
  check "--report to a full device: exit 1 ($rc)" test $rc = 1
  check "... saying why" has "$T/full.log" "No space left"
  check "... the node is still a device" test -c "$T/full"
  check "... and the previous output is untouched" test "$(samples "$T/r7")" = 30
else
  echo "SKIPPED: cannot make or open a private 1:7 device node here (not root?): the /dev/full case"
fi
"$G" tokenize $R --report "$T" -o "$T/r8" "$T/a.jsonl" 2>"$T/dir.log"; rc=$?
check "--report a directory: usage error ($rc)" test $rc = 2
check "... naming it" has "$T/dir.log" "is a directory"

# ---- 3. -o through a symbolic link
mkdir -p "$T/elsewhere"
"$G" tokenize $R -o "$T/elsewhere/shards" "$T/a.jsonl" 2>/dev/null
ln -s elsewhere/shards "$T/shards-link"
"$G" tokenize $R -o "$T/shards-link" "$T/b.jsonl" 2>/dev/null
check "tokenize -o a symbolic link: the link stays" test -L "$T/shards-link"
check "... its target holds the new output" test "$(samples "$T/elsewhere/shards")" = 50
check "... and nothing is left beside it" test "$(ls "$T/elsewhere" | wc -l)" = 1

# a tokenize output given back to tokenize as input is refused (its manifest is not a corpus)
"$G" tokenize $R -o "$T/again" "$T/elsewhere/shards" 2>"$T/again.log"; rc=$?
check "shards as tokenize input: refused (exit $rc)" test $rc = 2
check "... with the hint to train on them" has "$T/again.log" "train --data"
# a tokenize output inside an input folder (tokenize -o data/shards data, run again) is skipped
# with a warning, not read as a corpus (its manifest.json and report.json were dropped records)
mkdir -p "$T/mixed" && cp "$T/a.jsonl" "$T/mixed/"
"$G" tokenize $R -o "$T/mixed/shards" "$T/mixed" 2>/dev/null
"$G" tokenize --seq-len 64 --report "$T/mixed.json" -o "$T/mixed/shards" "$T/mixed" >/dev/null 2>"$T/mixed.log"; rc=$?
check "shards inside an input folder: not fatal (exit $rc)" test $rc = 0
check "... skipped with a warning" has "$T/mixed.log" "mixed/shards: a glmtune tokenize output (shards) inside an input folder: skipped"
check "... nothing of it read as a record" test "$(grep -c manifest.json "$T/mixed.json")" = 0
check "... the corpus beside it tokenized" test "$(samples "$T/mixed/shards")" = "$(samples "$T/r1")"

# an output that cannot be created is named as given, not by the temporary directory beside it
"$G" tokenize $R -o /proc/glm-nowhere "$T/a.jsonl" 2>"$T/nowhere.log"
check "-o in an unwritable place: the error names -o" has "$T/nowhere.log" "/proc/glm-nowhere: cannot create the output"

# ---- 4. Ctrl-C (SIGINT) and SIGTERM while tokenizing: the run stops, removes its temporary
# directory, leaves -o as it was (absent, or the previous output) and dies of the signal. The input
# is a FIFO whose writer pauses after 40 records, so the signal always lands mid-run.
for sig in INT TERM; do
  rm -rf "$T/int"; mkdir -p "$T/int"
  [ $sig = TERM ] && "$G" tokenize --quiet --seq-len 64 -o "$T/int/out" "$T/a.jsonl" 2>/dev/null
  mkfifo "$T/int/in.jsonl"
  ( head -n 40 "$T/b.jsonl"; sleep 2; tail -n 10 "$T/b.jsonl" ) > "$T/int/in.jsonl" &
  wpid=$!
  # (a script's background job starts with SIGINT ignored, which glmtune keeps: undone here)
  env --default-signal=INT,TERM "$G" tokenize --seq-len 64 -o "$T/int/out" "$T/int/in.jsonl" 2>"$T/int/log" &
  tpid=$!
  sleep 1
  kill -$sig $tpid
  wait $tpid; rc=$?
  wait $wpid
  want=$((128 + $(kill -l $sig)))
  check "SIG$sig while tokenizing: dies of it (exit $rc, want $want)" test $rc = $want
  check "... says so" has "$T/int/log" "interrupted"
  check "... leaves no temporary directory" test "$(ls -d "$T/int/out".tmp.* 2>/dev/null | wc -l)" = 0
  if [ $sig = INT ]; then
    check "... and writes no output" test ! -e "$T/int/out"
  else
    check "... and keeps the previous output" test "$(samples "$T/int/out")" = 30
  fi
done

# ---- 5. export-adapter: a signal while the export is written, and a second export into its -o.
# The rename shim pauses the export just before it swaps its output in (its temporary directory
# full); the marker file says when.
if [ -n "$SHIM" ] && [ -f "$SHIM" ]; then
  SRC=${GLM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
  mkdir -p "$T/ex"
  "$G" init-model --config "$SRC/samples/model-config.json" -o "$T/ex/base" 2>/dev/null
  "$G" tokenize --quiet --seq-len 64 -o "$T/ex/shards" "$T/a.jsonl" 2>/dev/null
  "$G" train --quiet --device cpu --model "$T/ex/base" --data "$T/ex/shards" --output-dir "$T/ex/run" --max-steps 1 \
      --lora-rank 2 2>/dev/null
  check "export test: a checkpoint to export" test -d "$T/ex/run/checkpoint-1"
  for kind in adapter merge; do
    for sig in INT TERM; do
      rm -rf "$T/ex/w"; mkdir -p "$T/ex/w"
      m=; [ $kind = merge ] && m=--merge
      [ $sig = TERM ] && "$G" export-adapter --checkpoint "$T/ex/run" $m -o "$T/ex/w/out" 2>/dev/null
      before=$(ls "$T/ex/w/out" 2>/dev/null | tr '\n' ' ')
      env --default-signal=INT,TERM LD_PRELOAD="$SHIM" GLM_SHIM_NAME=out GLM_SHIM_KILL_AT=1 GLM_SHIM_WHEN=pause \
          GLM_SHIM_MARK="$T/ex/w/mark" "$G" export-adapter --checkpoint "$T/ex/run" $m -o "$T/ex/w/out" 2>"$T/ex/w/log" &
      epid=$!
      for i in $(seq 1 200); do [ -e "$T/ex/w/mark" ] && break; sleep 0.1; done
      check "$kind: the export paused before its swap" test -e "$T/ex/w/mark"
      check "... its temporary directory there" test "$(ls -d "$T/ex/w/out".tmp.* 2>/dev/null | wc -l)" = 1
      # a second export into the same -o meanwhile: refused at once (before: both said they wrote it)
      "$G" export-adapter --checkpoint "$T/ex/run" $m -o "$T/ex/w/out" 2>"$T/ex/w/second.log"; rc2=$?
      check "$kind: a second export into the locked -o fails (exit $rc2)" test $rc2 != 0
      check "... saying it is in use" has "$T/ex/w/second.log" "in use by another glmtune export-adapter"
      kill -$sig $epid
      wait $epid; rc=$?
      want=$((128 + $(kill -l $sig)))
      check "$kind: SIG$sig during the export: dies of it (exit $rc, want $want)" test $rc = $want
      check "... says so" has "$T/ex/w/log" "interrupted"
      check "... leaves no temporary directory" test "$(ls -d "$T/ex/w/out".* 2>/dev/null | wc -l)" = 0
      check "... and -o as it was ($before)" test "$(ls "$T/ex/w/out" 2>/dev/null | tr '\n' ' ')" = "$before"
      [ $sig = INT ] && check "... (absent: it was new)" test ! -e "$T/ex/w/out"
    done
  done
else
  echo "SKIPPED part 5: the rename shim library was not built (GLM_RENAME_SHIM=$SHIM)"
fi

echo "test_outputs: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
