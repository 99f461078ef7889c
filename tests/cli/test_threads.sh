#!/usr/bin/env bash
# glmtune tokenize under a limit on threads: every pthread_create is checked; with no room for a
# worker thread the reading thread does the work, with room for some the run carries on with
# those; the shards are the same as with --threads 1. The limit is a real one: a pids cgroup
# (v2 or v1) when this machine lets us make one, else RLIMIT_NPROC (`ulimit -u`) for an
# unprivileged user; with neither, that part is skipped with a message. Also: --threads far
# above the CPU count is capped with a warning.
set -uo pipefail
G=${GLMTUNE:?}
T=$(mktemp -d /tmp/glmthr.XXXXXX)
chmod 755 "$T"
pass=0; fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi; }
has() { grep -q -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; return 1; }; }

# 2000 pre-tokenized records: 4 batches of 512 for the workers
awk 'BEGIN { srand(5); for (i = 0; i < 2000; i++) { k = 8 + int(rand() * 40); ids = ""; lab = "";
     for (j = 0; j < k; j++) { x = 1 + int(rand() * 900); ids = ids (j ? ", " : "") x; lab = lab (j ? ", " : "") (j < 4 ? -100 : x) }
     print "{\"input_ids\": [" ids "], \"labels\": [" lab "]}" } }' > "$T/data.jsonl"
chmod 644 "$T/data.jsonl"
"$G" tokenize --quiet --threads 1 --seq-len 128 -o "$T/ref" "$T/data.jsonl" 2>/dev/null
check "reference run" test -f "$T/ref/train-00000.bin"

# --threads far above the CPU count: capped, with a warning
"$G" tokenize --quiet --threads 100000 --seq-len 128 -o "$T/many" "$T/data.jsonl" 2>"$T/many.log"; rc=$?
check "--threads 100000: exit 0 ($rc)" test $rc = 0
check "... capped with a warning" has "$T/many.log" "capped at"
check "... same shards" cmp -s "$T/ref/train-00000.bin" "$T/many/train-00000.bin"

# pids_limited N CMD...: runs CMD with at most N tasks (processes + threads) for it; returns 200
# when no way to impose a limit is available here.
LIMIT_HOW=""
pids_limited() {
    local n=$1; shift
    # the sanitizer build (tests/sanitize.sh): LeakSanitizer's check at exit needs a thread of its
    # own, which the limit forbids; the run keeps AddressSanitizer's other checks
    [ -z "${ASAN_OPTIONS:-}" ] || set -- env "ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0" "$@"
    local v1=/sys/fs/cgroup/pids
    if [ -d "$v1" ] && [ -w "$v1" ] && mkdir "$v1/glmtune-test.$$" 2>/dev/null; then
        local cg="$v1/glmtune-test.$$"
        echo "$n" > "$cg/pids.max"
        ( echo $BASHPID > "$cg/cgroup.procs" && exec "$@" ); local rc=$?
        rmdir "$cg" 2>/dev/null
        LIMIT_HOW="a pids cgroup (v1) with pids.max $n"
        return $rc
    fi
    local v2=/sys/fs/cgroup
    if [ -f "$v2/cgroup.subtree_control" ] && grep -qw pids "$v2/cgroup.subtree_control" && mkdir "$v2/glmtune-test.$$" 2>/dev/null; then
        local cg="$v2/glmtune-test.$$"
        echo "$n" > "$cg/pids.max"
        ( echo $BASHPID > "$cg/cgroup.procs" && exec "$@" ); local rc=$?
        rmdir "$cg" 2>/dev/null
        LIMIT_HOW="a pids cgroup (v2) with pids.max $n"
        return $rc
    fi
    if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
        # RLIMIT_NPROC binds an unprivileged user only; nobody owns (almost) no other task
        local others; others=$(ps -L -u 65534 --no-headers 2>/dev/null | wc -l)
        setpriv --reuid=65534 --regid=65534 --clear-groups bash -c 'ulimit -u "$0" && exec "$@"' $((others + n)) "$@"; local rc=$?
        LIMIT_HOW="ulimit -u (RLIMIT_NPROC) for user nobody"
        return $rc
    fi
    if [ "$(id -u)" != 0 ]; then
        local mine; mine=$(ps -L -u "$(id -u)" --no-headers | wc -l)
        ( ulimit -u $((mine + n)) && exec "$@" ); local rc=$?
        LIMIT_HOW="ulimit -u (RLIMIT_NPROC)"
        return $rc
    fi
    return 200
}

mkdir -m 777 "$T/lim"
for n in 1 2; do
    pids_limited $n "$G" tokenize --quiet --threads 2 --seq-len 128 -o "$T/lim/out$n" "$T/data.jsonl" 2>"$T/lim$n.log"; rc=$?
    if [ $rc = 200 ]; then
        echo "SKIPPED: no way to limit threads here (no writable pids cgroup, no setpriv, root without it)"
        break
    fi
    echo "limit: $LIMIT_HOW"
    check "at most $n task(s): exit 0, no crash ($rc)" test $rc = 0
    check "... the worker thread that could not start is reported" has "$T/lim$n.log" "could not start worker thread $n of 2"
    check "... same shards as --threads 1" cmp -s "$T/ref/train-00000.bin" "$T/lim/out$n/train-00000.bin"
done

# train on the CPU under the same limit: OpenBLAS (loaded on first use) starts only the threads
# that can start, instead of dying in its constructor (raise(SIGINT) in OpenBLAS 0.3.x)
SRC=${GLM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
"$G" init-model --config "$SRC/samples/model-config.json" --seed 1 -o "$T/lim/model" 2>/dev/null
pids_limited 1 "$G" train --quiet --device cpu --model "$T/lim/model" --data "$T/ref" --output-dir "$T/lim/run" \
    --max-steps 2 --lora-rank 4 2>"$T/train.log"; rc=$?
if [ $rc != 200 ]; then
    check "train under a limit of one task: exit 0 ($rc)" test $rc = 0
    check "... with a checkpoint" test -d "$T/lim/run/checkpoint-2"
    if [ "$(nproc)" -gt 1 ]; then check "... saying OpenBLAS runs with fewer threads" has "$T/train.log" "only 1 of"; fi
fi

echo "test_threads: $pass passed, $fail failed"
[ $fail = 0 ] && rm -rf "$T"
[ $fail = 0 ]
