#!/bin/bash
# tests/dist/test_comm_account.sh: the communication a multi-rank run reports, on the CPU over MPI
# (glmtune train --device cpu --nproc N), against what its dry run predicts and against a slowed
# interconnect. On a random 5-layer GLM-4-shaped model (init-model; 5
# layers so that --shard-base gathers layers in both passes, the first two and last two being
# held in the gather slots):
#   1. bytes: metrics.jsonl's comm_bytes_per_step of step 2 (every rank's counters, rank 0's
#      logged; kernels/backend.h comm_bytes) equals the dry run's "comm bytes per step per rank"
#      (lora/model/comm_plan.c) for the gradient all-reduce, --shard-base's all-gathers and the
#      context-parallel ring's sendrecvs: 2 ranks data parallel; --shard-base with accumulation 2;
#      --context-parallel 2 (full recomputation: the ring runs again in the backward);
#      4 ranks --context-parallel 2 --shard-base (2 groups). The two sides are computed
#      independently: the counters add up the ops' message sizes as they are issued, the dry run
#      derives them from the shapes.
#   2. exposed communication: with GLMTUNE_COMM_DELAY_MS=40 (every transfer held back 40 ms, a slow
#      link) a --shard-base run and a --context-parallel 2 run slow down, and comm_exposed_share
#      accounts for the slowdown: the time per step spent waiting (share x step time, the step
#      time being tokens / tokens_per_second) grows by at least 70% of what the step time grows.
#      (The share alone is not compared: 2 CPU ranks on 2 shared cores already wait much of the
#      time without the delay.)
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
[ -n "${GLMTUNE:-}" ] || { echo "SKIPPED: GLMTUNE not set"; exit 77; }
G=$GLMTUNE
tmp=$(mktemp -d /tmp/glmcomm.XXXXXX)
pass=0 fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2" >&2; fi; }

cat >"$tmp/config.json" <<'EOF'
{"model_type": "chatglm", "architectures": ["ChatGLMModel"], "add_bias_linear": false, "add_qkv_bias": true,
 "num_layers": 5, "hidden_size": 64, "num_attention_heads": 4, "multi_query_group_num": 2, "kv_channels": 16,
 "ffn_hidden_size": 160, "padded_vocab_size": 512, "layernorm_epsilon": 1.5625e-07, "rope_ratio": 1,
 "seq_length": 4096, "rmsnorm": true, "post_layer_norm": true, "original_rope": true, "torch_dtype": "bfloat16"}
EOF
"$G" init-model --config "$tmp/config.json" -o "$tmp/model" --seed 3 >/dev/null
python3 - "$tmp/rows.jsonl" <<'PY'
import random, sys
random.seed(11)
with open(sys.argv[1], "w") as f:
    for n in (40, 33, 29, 26, 22, 18, 17, 14, 12, 9, 7, 5) * 2:
        ids = [random.randrange(512) for _ in range(n)]
        f.write('{"input_ids": %s, "labels": %s}\n' % (ids, [-100] + ids[1:]))
PY
"$G" tokenize --quiet --seq-len 48 -o "$tmp/shards" "$tmp/rows.jsonl"
C="--model $tmp/model --data $tmp/shards --lora-rank 4 --lora-target all --device cpu --per-device-train-batch-size 1
   --learning-rate 1e-3 --logging-steps 1 --max-steps 3 --save-steps 1000 --quiet"

# the dry run's prediction: "all_reduce A all_gather G sendrecv S"
predict() { "$G" train --dry-run $C "$@" | sed -n 's/^comm bytes per step per rank: //p'; }
# step 2's logged bytes, in the same form
measured() {
    python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if o.get("step") == 2:
        b = o["comm_bytes_per_step"]
        print("all_reduce %.0f all_gather %.0f sendrecv %.0f" % (b["all_reduce"], b["all_gather"], b["sendrecv"]))
PY
}
# "share seconds_per_step" of the last logged step (the step's tokens: 48 per row, 2 rows)
share() {
    python3 -c "import json,sys; o=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(o['comm_exposed_share'], 96 / o['tokens_per_second'])" "$1/metrics.jsonl"
}

i=0
while read -r name flags; do
    [ -n "$name" ] || continue
    i=$((i + 1))
    p=$(predict $flags </dev/null)
    if "$G" train $C $flags --output-dir "$tmp/$name" 2>"$tmp/$name.log" </dev/null; then
        m=$(measured "$tmp/$name")
        echo "$name: predicted [$p], sent [$m]"
        check '[ -n "$p" ] && [ "$p" = "$m" ]' "$name: the bytes sent ($m) are not the dry run's ($p)"
        case $name in
            dp) check '[[ "$m" =~ ^all_reduce\ [1-9][0-9]*\ all_gather\ 0\ sendrecv\ 0$ ]]' "dp: only the all-reduce sends ($m)" ;;
            shard*) check '[[ "$m" =~ all_gather\ [1-9] ]]' "$name: gathers counted ($m)" ;;
            cp*) check '[[ "$m" =~ sendrecv\ [1-9] ]]' "$name: the ring counted ($m)" ;;
        esac
    else
        check false "$name: train failed: $(tail -3 "$tmp/$name.log")"
    fi
done <<'EOF'
dp --nproc 2
shard-acc2 --nproc 2 --shard-base --gradient-accumulation-steps 2 --gradient-checkpointing selective
cp2-full --nproc 2 --context-parallel 2 --gradient-checkpointing full
cp2-dp2-shard --nproc 4 --context-parallel 2 --shard-base --gradient-checkpointing full
EOF

# exposed communication with a slowed link
for v in "shard:--nproc 2 --shard-base" "cp:--nproc 2 --context-parallel 2"; do
    name=${v%%:*} flags=${v#*:}
    "$G" train $C $flags --output-dir "$tmp/fast-$name" 2>"$tmp/fast-$name.log" || check false "fast $name: $(tail -2 "$tmp/fast-$name.log")"
    GLMTUNE_COMM_DELAY_MS=40 "$G" train $C $flags --output-dir "$tmp/slow-$name" 2>"$tmp/slow-$name.log" \
        || check false "slow $name: $(tail -2 "$tmp/slow-$name.log")"
    read -r fs ft <<<"$(share "$tmp/fast-$name" 2>/dev/null || echo "nan nan")"
    read -r ss st <<<"$(share "$tmp/slow-$name" 2>/dev/null || echo "nan nan")"
    echo "$name: comm_exposed_share $fs of $ft s a step; every transfer 40 ms slower: $ss of $st s"
    check "awk -v fs=$fs -v ft=$ft -v ss=$ss -v st=$st 'BEGIN { d = st - ft; w = ss * st - fs * ft; exit !(d > 0.04 && w >= 0.7 * d) }'" \
        "$name: comm_exposed_share does not account for the slowdown (waiting $fs x $ft s -> $ss x $st s)"
done

echo "test_comm_account: $pass passed, $fail failed"
if [ "$fail" = 0 ]; then rm -rf "$tmp"; else echo "outputs kept in $tmp"; fi
[ "$fail" = 0 ]
