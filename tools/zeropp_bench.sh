#!/bin/bash
# ZeRO++ against plain stage 3 where the link between two "machines" is the bottleneck: two network
# namespaces joined by a veth pair (tests/multinode/netns.sh) whose rate tc's tbf qdisc limits
# (this kernel has tbf but no netem, so no added delay), 2 ranks of //trainer:main in each; and on
# loopback, 4 ranks on one node. A GPT of 3.2M parameters at stage 3, every submodule released
# after use (stage3_max_reuse_distance 0, as a model larger than the live budget), fp32, gloo.
# Each setting runs plain, qwZ, hpZ, qgZ and all three, alternating, ROUNDS times; prints
# samples/s per rank (rank 0's report: the mean over all steps but the first) and the inter-node
# bytes rank 0 received. Needs root.
# Usage (from the repository root, after `bazel build //trainer:main`):
#   bash tools/zeropp_bench.sh [steps, default 8]     (RATES="1gbit 200mbit" ROUNDS=2)
set -euo pipefail
MAIN=$(realpath "${MAIN:-bazel-bin/trainer/main}")
STEPS=${1:-8}
RATES=${RATES:-1gbit 200mbit}
ROUNDS=${ROUNDS:-2}
ADDR_A=10.213.2.1 ADDR_B=10.213.2.2
SCRIPT_NAME=zeropp_bench
source "$(dirname "$0")/../tests/multinode/netns.sh"
make_two_nodes zeropp_bench

declare -A PARTS=(
  [plain]=""
  [qwz]="zero_quantized_weights: true"
  [hpz]="zero_hpz_partition_size: 2"
  [qgz]="zero_quantized_gradients: true"
  [all]="zero_quantized_weights: true zero_hpz_partition_size: 2 zero_quantized_gradients: true"
)
ORDER="plain qwz hpz qgz all"

config() {  # config <name> <zero_optimization fields>
  cat >"$WORK/$1.pbtxt" <<EOF
train_micro_batch_size_per_gpu: 4
zero_optimization { stage: 3 stage3_max_reuse_distance: 0 $2 }
optimizer { type: "AdamW" params { lr: 1e-3 } }
comms_logger { enabled: true }
model { name: "gpt" n_layer: 4 n_head: 4 n_embd: 256 block_size: 64 }
run { steps: $STEPS seed: 1 output_dir: "$WORK/$1" eval_interval: 0 eval_iters: 1
      sample_tokens: 0 dist_backend: "gloo" device: "cpu" }
EOF
  echo "$WORK/$1.pbtxt"
}

port=29700
run() {  # run <setting> <variant>: prints "samples/s inter-node-bytes"
  local name="$1_$2" nodes=() node ns
  port=$((port + 1))
  if [ "$1" = loopback ]; then
    in_ns "$NS_A" "$WORK/${name}0.log" OMP_NUM_THREADS=1 -- --config="$(config "$name" "${PARTS[$2]}")" \
      --nproc_per_node=4 --master_addr=127.0.0.1 --master_port=$port
    nodes+=("$LAST")
  else
    for node in 0 1; do
      ns=$NS_A && [ $node -eq 1 ] && ns=$NS_B
      in_ns "$ns" "$WORK/${name}$node.log" OMP_NUM_THREADS=1 -- \
        --config="$(config "$name" "${PARTS[$2]}")" --nproc_per_node=2 --nnodes=2 \
        --node_rank=$node --master_addr=$ADDR_A --master_port=$port
      nodes+=("$LAST")
    done
  fi
  wait_all "$name" "${nodes[@]}"
  local sps inter
  sps=$(sed -n -E 's/^ *([0-9.]+) samples\/s .*/\1/p' "$WORK/${name}0.log" | head -n 1)
  inter=$(sed -n -E 's/^received in all: [0-9]+ B, of which from other nodes: ([0-9]+) B$/\1/p' \
    "$WORK/${name}0.log")
  echo "$sps $inter"
}

shape() {  # shape <rate>: both directions of the link
  local ns dev
  for pair in "$NS_A $VETH_A" "$NS_B $VETH_B"; do
    read -r ns dev <<<"$pair"
    ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$1" burst 1mbit latency 400ms
  done
}

echo "setting variant round samples/s/rank inter_node_bytes_rank0"
for setting in loopback $RATES; do
  [ "$setting" = loopback ] || shape "$setting"
  for round in $(seq "$ROUNDS"); do
    for v in $ORDER; do
      echo "$setting $v $round $(run "$setting" "$v")"
    done
  done
done
