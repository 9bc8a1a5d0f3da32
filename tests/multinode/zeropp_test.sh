#!/bin/bash
# ZeRO++ across two "machines": two network namespaces joined by a veth pair (netns.sh), 2 ranks
# of //trainer:main in each, a small GPT at stage 3 for 50 steps (every submodule released after
# use, so the backward gathers again, as in a model larger than the live budget): plain, with
# zero_quantized_weights (qwZ), with zero_hpz_partition_size: 2 (hpZ, one node each), both, with
# zero_quantized_gradients (qgZ) and with all three. Every quantized run's losses must stay within
# 1% of plain stage 3's at every step, hpZ's must equal them digit for digit; rank 0's comms
# logger must show hpZ's within-node gathers taking nothing from the other node, and the
# inter-node bytes falling by what each part promises. Needs root (ip netns); without it it says why and passes.
#
# Usage: zeropp_test.sh <path of //trainer:main>
set -euo pipefail

MAIN=$(realpath "$1")
STEPS=${STEPS:-50}
ADDR_A=10.213.1.1 ADDR_B=10.213.1.2
source "$(dirname "$0")/netns.sh"
make_two_nodes zeropp

config() {  # config <name> [extra zero_optimization fields]
  cat >"$WORK/$1.pbtxt" <<EOF
train_micro_batch_size_per_gpu: 4
zero_optimization { stage: 3 stage3_param_persistence_threshold: 0 stage3_max_reuse_distance: 0
                    ${2:-} }
optimizer { type: "AdamW" params { lr: ${LR:-1e-3} } }
csv_monitor { enabled: true job_name: "t" }
comms_logger { enabled: true }
model { name: "gpt" n_layer: 2 n_head: 2 n_embd: 64 block_size: 32 }
run { steps: $STEPS seed: 1 output_dir: "$WORK/$1" eval_interval: 0 eval_iters: 1
      sample_tokens: 0 dist_backend: "gloo" device: "cpu" }
EOF
  echo "$WORK/$1.pbtxt"
}

port=29600
run_two_nodes() {  # run_two_nodes <name> [extra zero_optimization fields]
  local nodes=() node ns
  port=$((port + 1))
  for node in 0 1; do
    ns=$NS_A && [ $node -eq 1 ] && ns=$NS_B
    in_ns "$ns" "$WORK/$1$node.log" OMP_NUM_THREADS=1 -- --config="$(config "$@")" \
      --nproc_per_node=2 --nnodes=2 --node_rank=$node --master_addr=$ADDR_A --master_port=$port
    nodes+=("$LAST")
  done
  wait_all "$1" "${nodes[@]}"
  [ "$(losses "$1" | wc -l)" -eq "$STEPS" ] || fail "$1: $(losses "$1" | wc -l) losses"
}

# "<received> <from other nodes>" of rank 0's comms logger report (node 0's log), in all or, with
# an op name, for that op's rows (calls x bytes per call), with a group size for those rows only.
wire() {
  if [ -z "${2:-}" ]; then
    sed -n -E 's/^received in all: ([0-9]+) B, of which from other nodes: ([0-9]+) B$/\1 \2/p' \
      "$WORK/${1}0.log"
  else
    sed -n '/^collectives of rank 0/,$p' "$WORK/${1}0.log" |
      awk -v op="$2" -v n="${3:-}" '$1 == op && (n == "" || $2 == n) { r += $4 * $8; i += $4 * $9 }
                                    END { print r + 0, i + 0 }'
  fi
}

within_one_percent() {  # within_one_percent <run> <reference run>
  local worst
  worst=$(paste -d' ' <(losses "$1") <(losses "$2") | awk '
    { d = $2 - $4; if (d < 0) d = -d; r = d / ($4 < 0 ? -$4 : $4); if (r > w) { w = r; s = $1 } }
    END { printf "%.5f %d", w, s }')
  awk -v w="${worst% *}" 'BEGIN { exit !(w <= 0.01) }' ||
    fail "$1: step ${worst#* } loss is ${worst% *} (relative) from $2's:
$(paste -d' ' <(losses "$1") <(losses "$2"))"
  say "$1: $STEPS steps, every loss within 1% of $2's (worst ${worst% *} at step ${worst#* })"
}

calls() {  # calls <run> <op> <ranks>: how many such ops rank 0 made
  sed -n '/^collectives of rank 0/,$p' "$WORK/${1}0.log" |
    awk -v op="$2" -v n="$3" '$1 == op && $2 == n { c += $4 } END { print c + 0 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
at_least() { awk -v r="$1" -v want="$2" 'BEGIN { exit !(r >= want) }'; }

start=$SECONDS
run_two_nodes plain
run_two_nodes qwz "zero_quantized_weights: true"
run_two_nodes hpz "zero_hpz_partition_size: 2"
run_two_nodes qwz_hpz "zero_quantized_weights: true zero_hpz_partition_size: 2"
run_two_nodes qgz "zero_quantized_gradients: true"
run_two_nodes all "zero_quantized_weights: true zero_hpz_partition_size: 2
                   zero_quantized_gradients: true"
for run in qwz qwz_hpz qgz all; do within_one_percent $run plain; done
[ "$(losses hpz)" = "$(losses plain)" ] || fail "hpz: losses differ from plain stage 3's:
$(diff <(losses plain) <(losses hpz))"
say "hpz: $STEPS steps, losses equal to plain stage 3's, digit for digit"

# rank 0 receives from the other node: qwZ cuts the gathers' share about 4x (fp32 -> INT8 and a
# scale per block); hpZ keeps the backward's gathers within the node (halving the rest); without
# qgZ the gradients' all-reduces (Gloo's reduce-scatter moves what an all-reduce does, so the
# engine all-reduces) are untouched, which bounds the whole run's cut; qgZ replaces them.
read -r _ plain_inter <<<"$(wire plain)"
read -r _ plain_gather <<<"$(wire plain all_gather)"
[ -n "${plain_inter:-}" ] || fail "no comms logger totals in the logs"
[ "$plain_gather" -gt 0 ] || fail "plain: no gather bytes from the other node (nodes not told apart)"
for run in qwz hpz qwz_hpz qgz all; do
  read -r _ inter <<<"$(wire $run)"
  read -r _ gather <<<"$(wire $run all_gather)"
  eval "${run}_all=$(ratio "$plain_inter" "$inter") ${run}_gathers=$(ratio "$plain_gather" "$gather")"
  say "$run: inter-node bytes received by rank 0: all-gathers $plain_gather -> $gather" \
    "($(ratio "$plain_gather" "$gather")x fewer), all ops $plain_inter -> $inter" \
    "($(ratio "$plain_inter" "$inter")x fewer)"
done
for run in hpz qwz_hpz all; do
  read -r _ pair_inter <<<"$(wire $run all_gather 2)"
  pairs=$(calls $run all_gather 2)
  [ "$pairs" -gt 0 ] && [ "$pair_inter" -eq 0 ] ||
    fail "$run: $pairs gathers within a node, $pair_inter bytes of them from the other node"
  # Every segment is gathered once per step from the shard (the forward) and otherwise within
  # the node: the 4-rank gathers are those of the forward alone.
  [ "$(calls $run all_gather 4)" -lt "$(calls plain all_gather 4)" ] ||
    fail "$run: no fewer 4-rank gathers than plain stage 3"
  say "$run: $pairs gathers within the node, none of their bytes from the other node"
done
at_least "$qwz_gathers" 3.5 || fail "qwZ cut the inter-node gather bytes ${qwz_gathers}x, want >= 3.5x"
at_least "$qwz_all" 1.3 || fail "qwZ cut the inter-node bytes ${qwz_all}x, want >= 1.3x"
at_least "$hpz_gathers" 1.8 || fail "hpZ cut the inter-node gather bytes ${hpz_gathers}x, want >= 1.8x"
at_least "$qwz_hpz_gathers" 7 ||
  fail "qwZ + hpZ cut the inter-node gather bytes ${qwz_hpz_gathers}x, want >= 7x"
# qgZ: the gradients cross nodes once, as INT8 partial sums of a node's share (no reduce-scatter or
# all-reduce of gradients remains).
[ "$(calls qgz all_reduce 4)" -lt "$(calls plain all_reduce 4)" ] ||
  fail "qgz: as many 4-rank all-reduces as plain stage 3"
[ "$(calls qgz all_to_all 2)" -gt 0 ] || fail "qgz: no all-to-all in the comms logger"
at_least "$qgz_all" 1.5 || fail "qgZ cut the inter-node bytes ${qgz_all}x, want >= 1.5x"
at_least "$all_all" 3.5 || fail "all three cut the inter-node bytes ${all_all}x, want >= 3.5x"
say "PASSED in $((SECONDS - start)) s"
