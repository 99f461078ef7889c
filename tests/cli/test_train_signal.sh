#!/usr/bin/env bash
# A Slurm preemption or time limit (SIGTERM, then SIGKILL after the grace time; or SIGUSR1 from
# `sbatch --signal`) loses nothing: glmtune train finishes the current optimizer step, writes a
# checkpoint of it and exits with 128 + the signal (143 for SIGTERM, 138 for SIGUSR1):
#  1. one process, SIGTERM mid-run: status 143, one checkpoint, at the last step metrics.jsonl logged;
#     no final adapter (the run did not finish); resuming from it to step K+20 gives the very bytes
#     of an uninterrupted run to K+20 (a constant learning rate, so the schedule does not depend on
#     the planned length);
#  2. SIGUSR1, and save_strategy no (which saves nothing otherwise): status 138, a checkpoint;
#  3. --nproc 2 (the supervisor, over mpirun): SIGTERM to glmtune reaches every rank, all stop after
#     the same step (one checkpoint, at the last step logged), status 143, no rank left running, and
#     resuming on 2 ranks to K+5 equals an uninterrupted 2-rank run to K+5 (as tests/dist/
#     test_train_kill.sh resumes after a kill).
set -uo pipefail
G=${GLMTUNE:?}
F=${GLM_FIXTURES:?the test data folder, tests/fixtures}
FIX=$F/tiny-glm4/chatglm
[ -d "$FIX" ] || { echo "FAIL: $FIX does not exist" >&2; exit 1; }
T=$(mktemp -d /tmp/glmsig.XXXXXX)
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
PIDS=
cleanup() { for p in $PIDS; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

for i in $(seq 1 40); do echo "{\"input_ids\": [1, $((i % 400 + 2)), 7, 9, 11, 13], \"labels\": [-100, -100, 7, 9, 11, 13]}"; done > "$T/rows.jsonl"
"$G" tokenize --quiet --seq-len 16 -o "$T/shards" "$T/rows.jsonl"
C="--model $FIX --data $T/shards --lora-rank 2 --device cpu --per-device-train-batch-size 1 --logging-steps 1 --lr-scheduler-type constant"
# wait_steps DIR N: until DIR/metrics.jsonl has N lines (at most 120 s)
wait_steps() { local t=0; while [ "$(cat "$1/metrics.jsonl" 2>/dev/null | wc -l)" -lt "$2" ]; do sleep 0.05; t=$((t + 1)); [ $t -lt 2400 ] || return 1; done; }
last_step() { tail -n 1 "$1/metrics.jsonl" | grep -o '"step": [0-9]*' | grep -o '[0-9]*$'; }
ckpts() { (cd "$1" && ls -d checkpoint-* 2>/dev/null | tr '\n' ' '); }
# wait_exit PID SECONDS: 0 when it ended in time (status in $status)
wait_exit() { local t=0; while kill -0 "$1" 2>/dev/null; do sleep 0.1; t=$((t + 1)); [ $t -lt $(( $2 * 10 )) ] || return 1; done; wait "$1"; status=$?; }

# ---- 1. SIGTERM, one process
"$G" train $C --max-steps 100000000 --save-steps 100000000 --output-dir "$T/a" 2>"$T/a.log" & P=$!; PIDS=$P
check "the run logs steps" wait_steps "$T/a" 50
kill -TERM $P; status=
check "SIGTERM: the run stops within 60 s" wait_exit $P 60
check "... with status 143 (got $status)" test "$status" = 143
K=$(last_step "$T/a")
check "... one checkpoint, of the last step it reached ($K): $(ckpts "$T/a")" test "$(ckpts "$T/a")" = "checkpoint-$K "
check "... said in one line, with the hint" grep -q "stopped by SIGTERM after step $K of 100000000: checkpoint-$K is in $T/a; resume with --resume-from-checkpoint (exit status 143)" "$T/a.log"
check "... no final adapter in output_dir (the run did not finish)" test ! -e "$T/a/adapter_model.safetensors"
"$G" train $C --max-steps $((K + 20)) --output-dir "$T/a" --resume-from-checkpoint --quiet 2>"$T/a2.log"; rc=$?
check "resumed from checkpoint-$K to step $((K + 20)) (exit $rc)" test $rc = 0 -a -d "$T/a/checkpoint-$((K + 20))"
"$G" train $C --max-steps $((K + 20)) --output-dir "$T/ref" --quiet 2>/dev/null
check "... the adapter equals an uninterrupted run's, byte for byte" cmp -s "$T/a/adapter_model.safetensors" "$T/ref/adapter_model.safetensors"
check "... and so does the optimizer state" cmp -s "$T/a/checkpoint-$((K + 20))/optimizer.safetensors" "$T/ref/checkpoint-$((K + 20))/optimizer.safetensors"

# ---- 2. SIGUSR1 (sbatch --signal=USR1@120), save_strategy no
"$G" train $C --max-steps 100000000 --save-strategy no --output-dir "$T/u" 2>"$T/u.log" & P=$!; PIDS=$P
check "the run logs steps" wait_steps "$T/u" 20
kill -USR1 $P; status=
check "SIGUSR1: the run stops within 60 s" wait_exit $P 60
check "... with status 138 (got $status)" test "$status" = 138
K=$(last_step "$T/u")
check "... a checkpoint of step $K even with save_strategy no: $(ckpts "$T/u")" test "$(ckpts "$T/u")" = "checkpoint-$K "

# ---- 3. --nproc 2: the supervisor passes it on to every rank (over mpirun, as SIGUSR1)
if command -v mpirun >/dev/null 2>&1 && ! "$G" train --help 2>/dev/null | grep -q "built without MPI"; then
    . "$(dirname "$0")/../dist/mpi_env.sh"
    "$G" train $C --nproc 2 --max-steps 100000000 --save-steps 100000000 --output-dir "$T/d" 2>"$T/d.log" & P=$!; PIDS=$P
    check "2 ranks log steps" wait_steps "$T/d" 30
    r0=$(sed -n 's/.*rank 0 of 2: pid \([0-9]*\),.*/\1/p' "$T/d.log" | head -1); r1=$(sed -n 's/.*rank 1 of 2: pid \([0-9]*\),.*/\1/p' "$T/d.log" | head -1)
    PIDS="$P $r0 $r1"
    kill -TERM $P; status=
    check "2 ranks, SIGTERM to glmtune: stops within 60 s" wait_exit $P 60
    check "... with status 143 (got $status)" test "$status" = 143
    K=$(last_step "$T/d")
    check "... one checkpoint, of the step both ranks reached ($K): $(ckpts "$T/d")" test "$(ckpts "$T/d")" = "checkpoint-$K "
    check "... no rank left running" test -z "$(for p in $r0 $r1; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && echo "$p"; done)"
    check "... the supervisor says what it asked" grep -q "SIGTERM: asking mpirun (2 CPU ranks) to finish the current optimizer step" "$T/d.log"
    "$G" train $C --nproc 2 --max-steps $((K + 5)) --output-dir "$T/d" --resume-from-checkpoint --quiet 2>"$T/d2.log"; rc=$?
    check "resumed on 2 ranks from checkpoint-$K (exit $rc)" test $rc = 0 -a -d "$T/d/checkpoint-$((K + 5))"
    "$G" train $C --nproc 2 --max-steps $((K + 5)) --output-dir "$T/dref" --quiet 2>/dev/null
    check "... the adapter equals an uninterrupted 2-rank run's" cmp -s "$T/d/adapter_model.safetensors" "$T/dref/adapter_model.safetensors"
else
    echo "SKIPPED part 3: no mpirun, or glmtune built without MPI"
fi

echo "test_train_signal: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
