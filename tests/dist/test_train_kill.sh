#!/bin/bash
# tests/dist/test_train_kill.sh: failures of a data-parallel run on the CPU over MPI
# (glmtune train --device cpu --nproc 2):
#   1. kill -9 of rank 1 mid-run: the run stops (no hang) with a non-zero status and a message
#      naming rank 1; the last checkpoint is complete: it exports, and the run resumes from it on
#      2 ranks to the end.
#   2. SIGINT to glmtune (Ctrl-C): every rank stops, status 130, the message says so, no rank is
#      left running, the last checkpoint resumes.
#   3. a rank that stops answering (SIGSTOP): the others' collective times out (--comm-timeout 3),
#      the error names the rank and the call, and every rank is stopped (MPI_Abort);
#   4. an error that one rank finds (rank 0 checks the output directory, which holds an earlier
#      run): every rank stops at once with a non-zero status, rank 0 saying why and rank 1 that it
#      stops, without waiting for the collective timeout.
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
[ -n "${GLMTUNE:-}" ] || { echo "SKIPPED: GLMTUNE not set"; exit 77; }
F=${GLM_FIXTURES:?the test data folder, tests/fixtures}
[ -d "$F/tiny-glm4" ] || { echo "FAIL: $F/tiny-glm4 does not exist (GLM_FIXTURES: the test data folder)" >&2; exit 1; }
G=$GLMTUNE
FIX=$F/tiny-glm4/chatglm
tmp=$(mktemp -d /tmp/glmkill.XXXXXX)
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }
cleanup() { # only the processes this test started, by pid
    for p in ${PIDS:-}; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# data: 40 single-document rows
python3 - "$tmp/rows.jsonl" <<'PY' 2>/dev/null || for i in $(seq 1 40); do echo "{\"input_ids\": [1, $((i % 400 + 2)), 7, 9, 11, 13], \"labels\": [-100, -100, 7, 9, 11, 13]}"; done >"$tmp/rows.jsonl"
import sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        f.write('{"input_ids": [1, %d, 7, 9, 11, 13], "labels": [-100, -100, 7, 9, 11, 13]}\n' % (i % 400 + 2))
PY
"$G" tokenize --quiet --seq-len 16 -o "$tmp/shards" "$tmp/rows.jsonl"
C="--model $FIX --data $tmp/shards --lora-rank 2 --device cpu --nproc 2 --per-device-train-batch-size 1 --logging-steps 50"

# waits (at most $2 s) until the file glob $1 exists
# waits (at most $3 s) until output dir $1 holds a checkpoint of step $2 or later (with
# --save-total-limit a given checkpoint-N lives only until two newer ones exist: polling for it races)
wait_ckpt() {
    local t=0 n
    while :; do
        n=$(ls -d "$1"/checkpoint-* 2>/dev/null | sed 's/.*checkpoint-//' | sort -n | tail -1)
        [ -n "$n" ] && [ "$n" -ge "$2" ] && return 0
        sleep 0.2; t=$((t + 1)); [ $t -lt $(( $3 * 5 )) ] || return 1
    done
}
# alive PID: running (a zombie waiting for its parent counts as ended); waits up to 5 s for it to go
alive() { local t=0; while [ -e /proc/$1 ] && ! grep -q '^[0-9]* ([^)]*) Z' /proc/$1/stat 2>/dev/null; do sleep 0.2; t=$((t + 1)); [ $t -lt 25 ] || return 0; done; return 1; }
rank_pid() { sed -n "s/.*rank $2 of 2: pid \([0-9]*\),.*/\1/p" "$1" | head -1; }
# start_run OUT LOG STEP [flags...]: a 2-rank run into OUT (stderr to LOG) in the background, until
# it holds a checkpoint of step STEP or later; sets L (glmtune's pid), r0 and r1 (the ranks') and PIDS
start_run() {
    out=$1
    local log=$2 step=$3
    shift 3
    "$G" train $C --output-dir "$out" --max-steps 1000000 --save-steps 20 "$@" 2>"$log" &
    L=$!; PIDS="$L"
    check 'wait_ckpt "$out" '"$step"' 120' "a checkpoint appears"
    r1=$(rank_pid "$log" 1); r0=$(rank_pid "$log" 0)
    PIDS="$L $r0 $r1"
}
wait_exit() { # pid, seconds: 0 when it ended in time (its status in $status), 1 when not
    local t=0
    while kill -0 "$1" 2>/dev/null; do sleep 0.2; t=$((t + 1)); [ $t -lt $(( $2 * 5 )) ] || return 1; done
    set +e; wait "$1"; status=$?; set -e
    return 0
}

# 1. kill -9 rank 1
start_run "$tmp/run-kill" "$tmp/kill.log" 40 --save-total-limit 2
check '[ -n "$r1" ] && [ -n "$r0" ]' "the ranks' pids are logged: $(head -c 2000 "$tmp/kill.log")"
kill -9 "$r1"
status=0
check 'wait_exit $L 60' "the run stops within 60 s after rank 1 was killed"
check '[ $status -ne 0 ]' "non-zero status after a killed rank (got $status)"
check '! alive "$r0"' "rank 0 was stopped too"
check 'grep -q "rank 1" "$tmp/kill.log" && grep -Eq "signal 9|Killed" "$tmp/kill.log"' \
    "the message names rank 1 and the signal: $(tail -c 1500 "$tmp/kill.log")"
last=$(ls -d "$out"/checkpoint-* | sed 's/.*checkpoint-//' | sort -n | tail -1)
check '"$G" export-adapter --checkpoint "$out" -o "$tmp/kill-export" >/dev/null 2>&1' "the last checkpoint exports"
check '"$G" train $C --output-dir "$out" --resume-from-checkpoint --max-steps $((last + 3)) --quiet 2>"$tmp/resume1.log"' \
    "resume on 2 ranks from checkpoint-$last: $(tail -c 1500 "$tmp/resume1.log" 2>/dev/null)"
check '[ -d "$out/checkpoint-$((last + 3))" ]' "the resumed run reached step $((last + 3))"

# 2. Ctrl-C (SIGINT to glmtune)
start_run "$tmp/run-int" "$tmp/int.log" 40 --save-total-limit 2
kill -INT "$L"
status=0
check 'wait_exit $L 60' "the run stops within 60 s of SIGINT"
check '[ $status -eq 130 ]' "status 130 after SIGINT (got $status)"
check '! alive "$r0" && ! alive "$r1"' "no rank left running"
check 'grep -q "interrupted" "$tmp/int.log"' "the message says it was interrupted: $(tail -c 1000 "$tmp/int.log")"
last=$(ls -d "$out"/checkpoint-* | sed 's/.*checkpoint-//' | sort -n | tail -1)
check '"$G" train $C --output-dir "$out" --resume-from-checkpoint --max-steps $((last + 2)) --quiet 2>"$tmp/resume2.log"' \
    "resume after Ctrl-C from checkpoint-$last: $(tail -c 1500 "$tmp/resume2.log" 2>/dev/null)"

# 2b. kill -9 of glmtune itself (the supervisor): mpirun and the ranks go with it (they were left
#     training, orphaned, holding the output directory's lock); the last checkpoint resumes
start_run "$tmp/run-sup" "$tmp/sup.log" 20 --save-total-limit 2
kill -9 "$L"
check '! alive "$r0" && ! alive "$r1"' "no rank left running after the supervisor was killed"
last=$(ls -d "$out"/checkpoint-* | sed 's/.*checkpoint-//' | sort -n | tail -1)
check '"$G" train $C --output-dir "$out" --resume-from-checkpoint --max-steps $((last + 2)) --quiet 2>"$tmp/resume3.log"' \
    "resume after the supervisor was killed, from checkpoint-$last: $(tail -c 1500 "$tmp/resume3.log" 2>/dev/null)"

# 3. a rank that stops answering (SIGSTOP: alive, silent): the other's collective times out after
#    --comm-timeout, names its rank and the call, and stops every rank (MPI_Abort): no silent hang
start_run "$tmp/run-stop" "$tmp/stop.log" 20 --comm-timeout 3
kill -STOP "$r1"
status=0
check 'wait_exit $L 60' "the run stops within 60 s when rank 1 stops answering"
kill -CONT "$r1" 2>/dev/null || true
check '[ $status -ne 0 ]' "non-zero status (got $status)"
check 'grep -q "rank 0 of 2: MPI_Iallreduce .* did not complete within 3 s" "$tmp/stop.log" && grep -q "stopping every rank" "$tmp/stop.log"' \
    "rank 0 names itself, the call and the timeout: $(grep -i "error" "$tmp/stop.log" | head -5)"
check '! alive "$r0" && ! alive "$r1"' "no rank left running"

# 4. a failure that only rank 0 sees (it checks the output directory): every rank stops at once
set +e
timeout 60 "$G" train $C --output-dir "$out" --max-steps 5 --quiet 2>"$tmp/refuse.log"
status=$?
set -e
check '[ $status -ne 0 ] && [ $status -ne 124 ]' "refused without hanging (status $status)"
check 'grep -q "holds an earlier run" "$tmp/refuse.log" && grep -q "rank 1: error: stopping" "$tmp/refuse.log"' \
    "rank 0 says why, rank 1 that it stops: $(cat "$tmp/refuse.log")"

# 5. mpirun not on PATH: the error says so with the hint to install it (was: "mpirun's message above
#    names the rank that failed first", with no such message)
set +e
env PATH=/nonexistent "$G" train $C --output-dir "$tmp/run-nompi" --max-steps 2 --quiet 2>"$tmp/nompi.log"
status=$?
set -e
check '[ $status -ne 0 ] && grep -q "apt-get install openmpi-bin" "$tmp/nompi.log" && ! grep -q "names the rank" "$tmp/nompi.log"' \
    "mpirun missing: named, with the hint: $(cat "$tmp/nompi.log")"

# 6. --nproc far beyond the cores (each rank a whole training process) is refused before any starts
set +e
"$G" train $C --nproc 4096 --output-dir "$tmp/run-many" --max-steps 2 --quiet 2>"$tmp/many.log"
status=$?
set -e
check '[ $status -eq 2 ] && grep -q "more than 8 ranks per core" "$tmp/many.log" && [ ! -e "$tmp/run-many" ]' \
    "--nproc 4096 refused (status $status): $(cat "$tmp/many.log")"

echo "test_train_kill: $pass passed, $fail failed"
[ $fail -eq 0 ] && rm -rf "$tmp"
[ $fail -eq 0 ]
