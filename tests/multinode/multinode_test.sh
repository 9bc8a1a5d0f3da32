#!/bin/bash
# Two "machines" on one host: two network namespaces joined by a veth pair, 2 ranks of
# //trainer:main in each. Trains through --nnodes=2, through the real torchrun --nnodes=2 (its
# static and c10d rendezvous), the real mpirun -np 4 (with MASTER_ADDR; without it, the one-line
# error), through torchrun's variables and through Slurm's, and checks that each run's per-step losses (metrics.csv) equal, as text with every
# digit written, those of one 4-rank node. Then cuts the link mid-run and checks that every rank
# of both nodes fails within run.comm_timeout_s, naming a peer on the other side. With `tc
# netem` (where the kernel has sch_netem) a run with added delay and loss must still give the
# same losses. Needs root (ip netns); without it, or where namespaces cannot be made, it says
# why and passes.
#
# Usage: multinode_test.sh <path of //trainer:main> <the venv's torch/ folder>
set -euo pipefail

MAIN=$(realpath "$1")
TORCHRUN=$(realpath "$2/../../../../bin")/torchrun
ADDR_A=10.213.0.1 ADDR_B=10.213.0.2
TIMEOUT_S=5  # run.comm_timeout_s of the link-cut run
source "$(dirname "$0")/netns.sh"
make_two_nodes multinode

# A tiny model for a few steps; every run writes <out>/t/metrics.csv from rank 0.
config() {  # config <name> [extra run fields]
  local out="$WORK/$1"
  cat >"$WORK/$1.pbtxt" <<EOF
train_micro_batch_size_per_gpu: 2
steps_per_print: 1
zero_optimization { stage: 2 reduce_bucket_size: 20000 }
optimizer { type: "AdamW" params { lr: 3e-3 } }
csv_monitor { enabled: true job_name: "t" }
model { name: "gpt" n_layer: 1 n_head: 2 n_embd: 32 block_size: 16 }
run { steps: ${STEPS:-4} seed: 1 output_dir: "$out" eval_interval: 0 eval_iters: 1
      sample_tokens: 0 dist_backend: "gloo" device: "cpu" ${2:-} }
EOF
  echo "$WORK/$1.pbtxt"
}

same_losses() {  # same_losses <run>: equal to the 4-rank reference, step by step
  local got
  got=$(losses "$1")
  [ -n "$got" ] || fail "$1: no losses in $WORK/$1/t/metrics.csv"
  [ "$got" = "$REFERENCE" ] || fail "$1: losses differ from one 4-rank node:
$(diff <(echo "$REFERENCE") <(echo "$got"))"
  say "$1: $(echo "$got" | wc -l) steps, losses equal to one 4-rank node"
}

start=$SECONDS
# The reference: one node with 4 ranks, inside namespace A (its own ports).
in_ns "$NS_A" "$WORK/ref.log" -- --config="$(config ref)" --nproc_per_node=4 \
  --master_addr=127.0.0.1 --master_port=29500
wait_all "one node, 4 ranks" "$LAST"
REFERENCE=$(losses ref)
[ "$(echo "$REFERENCE" | wc -l)" -eq "${STEPS:-4}" ] || fail "reference: $REFERENCE"

# Our launcher: --nnodes=2, one launcher per node.
nodes=()
for node in 0 1; do
  ns=$NS_A && [ $node -eq 1 ] && ns=$NS_B
  in_ns "$ns" "$WORK/nnodes$node.log" -- --config="$(config nnodes)" --nproc_per_node=2 \
    --nnodes=2 --node_rank=$node --master_addr=$ADDR_A --master_port=29501
  nodes+=("$LAST")
done
wait_all "--nnodes=2" "${nodes[@]}"
same_losses nnodes

# The real torchrun, one agent per node: its static rendezvous (node 0's agent hosts the store)
# and its c10d one.
[ -x "$TORCHRUN" ] || fail "no $TORCHRUN: run tools/setup.sh"
for rdzv in static c10d; do
  nodes=()
  for node in 0 1; do
    ns=$NS_A && [ $node -eq 1 ] && ns=$NS_B
    if [ $rdzv = static ]; then
      how=(--node_rank=$node --master_addr=$ADDR_A --master_port=29505)
    else
      # Both namespaces share one host name, which resolves to neither node's address: tell
      # torchrun each node's address and which node hosts the endpoint, as users of such
      # machines do (else it hands the workers MASTER_ADDR=<host name>).
      how=(--rdzv-backend=c10d --rdzv-endpoint=$ADDR_A:29506 --rdzv-id=zt-mn
        --local-addr=$([ $node -eq 0 ] && echo $ADDR_A || echo $ADDR_B)
        --rdzv-conf=is_host=$([ $node -eq 0 ] && echo true || echo false))
    fi
    PROGRAM="$TORCHRUN" in_ns "$ns" "$WORK/torchrun_$rdzv$node.log" -- --nnodes=2 \
      --nproc_per_node=2 "${how[@]}" --no-python "$MAIN" --config="$(config torchrun_$rdzv "comm_timeout_s: 60")"
    nodes+=("$LAST")
  done
  wait_all "torchrun --nnodes=2 ($rdzv rendezvous)" "${nodes[@]}"
  same_losses torchrun_$rdzv
done

# Open MPI across the two "machines": mpirun in namespace A starts namespace B's daemon through an
# rsh agent that enters B (as ssh would log in). Its variables do not say where rank 0 runs, so
# without MASTER_ADDR every rank fails at once with the line naming it; with it, the same losses.
command -v mpirun >/dev/null || fail "no mpirun (Debian's openmpi-bin): run tools/setup.sh"
cat >"$WORK/ns_rsh.sh" <<EOF
#!/bin/sh
host=\$1
shift
case \$host in $ADDR_A) ns=$NS_A ;; $ADDR_B) ns=$NS_B ;; *) echo "ns_rsh: unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$WORK/ns_rsh.sh"
printf '%s slots=2\n%s slots=2\n' $ADDR_A $ADDR_B >"$WORK/hostfile"
MPIRUN="mpirun --allow-run-as-root -np 4 --hostfile $WORK/hostfile --mca plm_rsh_agent $WORK/ns_rsh.sh --mca oob_tcp_if_include 10.213.0.0/24 -x OMP_NUM_THREADS=1"
rc=0
PROGRAM="$MPIRUN $MAIN" in_ns "$NS_A" "$WORK/mpirun_noaddr.log" -- --config="$(config mpirun_noaddr)"
wait "$LAST" || rc=$?
[ "$rc" -ne 0 ] || fail "mpirun across nodes without MASTER_ADDR exited 0"
grep -q "MASTER_ADDR is not set and this Open MPI job spans 2 nodes" "$WORK/mpirun_noaddr.log" ||
  fail "mpirun across nodes without MASTER_ADDR: $(grep zerotrain "$WORK/mpirun_noaddr.log" | head -n 2)"
say "mpirun -np 4 across two nodes without MASTER_ADDR: $(grep -m 1 'zerotrain: error' "$WORK/mpirun_noaddr.log")"
PROGRAM="$MPIRUN -x MASTER_ADDR=$ADDR_A $MAIN" in_ns "$NS_A" "$WORK/mpirun.log" -- \
  --config="$(config mpirun "comm_timeout_s: 60")"
wait_all "mpirun -np 4 across two nodes" "$LAST"
same_losses mpirun

# torchrun's and Slurm's variables, one process per rank.
for scheme in torchrun slurm; do
  ranks=()
  for rank in 0 1 2 3; do
    ns=$NS_A && [ $rank -ge 2 ] && ns=$NS_B
    if [ $scheme = torchrun ]; then
      vars=(RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$((rank % 2)) LOCAL_WORLD_SIZE=2)
    else
      vars=(SLURM_PROCID=$rank SLURM_NTASKS=4 SLURM_LOCALID=$((rank % 2)) SLURM_NTASKS_PER_NODE=2)
    fi
    in_ns "$ns" "$WORK/$scheme$rank.log" "${vars[@]}" MASTER_ADDR=$ADDR_A MASTER_PORT=29502 \
      OMP_NUM_THREADS=1 -- --config="$(config $scheme)"
    ranks+=("$LAST")
  done
  wait_all "$scheme variables" "${ranks[@]}"
  same_losses $scheme
done

# Added latency and loss: slower, same losses. Skipped where the kernel has no sch_netem.
if ip netns exec "$NS_A" tc qdisc add dev "$VETH_A" root netem delay 2ms loss 1% \
  2>"$WORK/netem.err"; then
  nodes=()
  for node in 0 1; do
    ns=$NS_A && [ $node -eq 1 ] && ns=$NS_B
    in_ns "$ns" "$WORK/netem$node.log" -- --config="$(config netem)" --nproc_per_node=2 \
      --nnodes=2 --node_rank=$node --master_addr=$ADDR_A --master_port=29503
    nodes+=("$LAST")
  done
  wait_all "netem" "${nodes[@]}"
  same_losses netem
  ip netns exec "$NS_A" tc qdisc del dev "$VETH_A" root
else
  say "SKIPPED the netem case: tc qdisc add ... netem failed: $(head -n 1 "$WORK/netem.err")"
fi

# The link cut mid-run: every rank of both nodes must fail within the timeout (plus the
# launcher's grace), naming a rank or the address of the other node.
nodes=()
for node in 0 1; do
  ns=$NS_A && [ $node -eq 1 ] && ns=$NS_B
  STEPS=100000 config cut "comm_timeout_s: $TIMEOUT_S" >/dev/null
  in_ns "$ns" "$WORK/cut$node.log" -- --config="$WORK/cut.pbtxt" --nproc_per_node=2 \
    --nnodes=2 --node_rank=$node --master_addr=$ADDR_A --master_port=29504
  nodes+=("$LAST")
done
for _ in $(seq 600); do
  [ "$(losses cut | wc -l)" -ge 2 ] && break
  sleep 0.1
done
[ "$(losses cut | wc -l)" -ge 2 ] || fail "the link-cut run did not start training: $(tail -n 3 "$WORK"/cut*.log)"
ip -n "$NS_A" link set "$VETH_A" down
cut_at=$SECONDS
for node in 0 1; do
  rc=0
  wait "${nodes[$node]}" || rc=$?
  [ "$rc" -ne 0 ] || fail "node $node exited 0 after the link was cut"
done
took=$((SECONDS - cut_at))
# The timeout, the launcher's 5 s grace for stopping the other local rank, and start-up slack.
[ "$took" -le $((TIMEOUT_S + 5 + 5)) ] || fail "the nodes took ${took} s to fail after the cut"
for node in 0 1; do
  # The other node's ranks (2 and 3 seen from node 0) or its address.
  # A list may also name a rank of its own node that stopped first ("ranks 1, 2, 3").
  if [ $node -eq 0 ]; then peer='ranks? ([0-9]+, )*[23]\b|10\.213\.0\.2'; else peer='ranks? ([0-9]+, )*[01]\b|10\.213\.0\.1'; fi
  err=$(grep -E "zerotrain: error:" "$WORK/cut$node.log" | tail -n 1)
  echo "$err" | grep -Eq "$peer" || fail "node $node's error names no peer: $err"
  say "link cut, node $node: exit non-zero after ${took} s: $err"
done
say "PASSED in $((SECONDS - start)) s"
