#!/bin/bash
# What the launcher tests share (sourced): a tiny GPT's config, its per-step losses from
# metrics.csv, the 2-rank reference run of //trainer:main --nproc_per_node=2, and the checks that
# a launcher's run left no rank process and no shared-memory segment behind.

# As root, the sourcing test runs again in a PID and mount namespace of its own, with a /dev/shm
# of its own: the checks below then see its own processes and segments alone, whatever the tests
# beside it run (so it needs no "exclusive" tag). Not as root, it runs in place.
if [ -z "${ZT_OWN_NAMESPACES:-}" ] && [ "$(id -u)" -eq 0 ]; then
  exec env ZT_OWN_NAMESPACES=1 unshare --pid --fork --kill-child --mount-proc \
    bash -c 'mount -t tmpfs zt-shm /dev/shm && exec "$@"' bash "$0" "$@"
fi

say() { echo "$TEST_NAME: $*"; }

# launcher_test_setup <//trainer:main> <the venv's torch/ folder>: what torchrun_test and
# launchers_test start with: MAIN, VENV_BIN, a WORK folder, and no rendezvous variable from the
# test's own environment (each launcher says where the store is).
launcher_test_setup() {
  MAIN=$(realpath "$1")
  VENV_BIN=$(realpath "$2/../../../../bin")
  WORK=$(mktemp -d "${TEST_TMPDIR:-/tmp}/launchers.XXXXXX")
  unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK SLURM_PROCID
}
fail() {
  say "FAIL: $*"
  exit 1
}

# A free TCP port on loopback (bound, then released; the kernel will not hand it out again soon).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# config <name> [steps] [extra run fields]: writes $WORK/<name>.pbtxt (output in $WORK/<name>/)
# and prints its path.
config() {
  local out="$WORK/$1"
  cat >"$WORK/$1.pbtxt" <<EOF
train_micro_batch_size_per_gpu: 2
steps_per_print: 1
zero_optimization { stage: 2 reduce_bucket_size: 20000 }
optimizer { type: "AdamW" params { lr: 3e-3 } }
csv_monitor { enabled: true job_name: "t" }
model { name: "gpt" n_layer: 1 n_head: 2 n_embd: 32 block_size: 16 }
run { steps: ${2:-4} seed: 1 output_dir: "$out" eval_interval: 0 eval_iters: 1
      sample_tokens: 0 dist_backend: "gloo" device: "cpu" comm_timeout_s: ${TIMEOUT_S:-60} ${3:-} }
EOF
  echo "$WORK/$1.pbtxt"
}

# "step loss" of each step of a run's metrics.csv, the last row of a step winning (a restarted
# run appends the steps it repeats), in step order.
losses() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "loss") c = i; next }
           c && $c != "" { loss[$1] = $c } END { for (s in loss) print s, loss[s] }' \
    "$WORK/$1/t/metrics.csv" 2>/dev/null | sort -n
}

# reference <name> [steps] [extra run fields]: //trainer:main's own launcher, 2 ranks.
reference() {
  "$MAIN" --config="$(config "$@")" --nproc_per_node=2 >"$WORK/$1.log" 2>&1 ||
    fail "the reference run $1 failed: $(tail -n 5 "$WORK/$1.log")"
  [ "$(losses "$1" | wc -l)" -eq "${2:-4}" ] || fail "reference $1: $(losses "$1")"
}

# same_losses <run> <reference>
same_losses() {
  local got want
  got=$(losses "$1")
  want=$(losses "$2")
  [ -n "$got" ] || fail "$1: no losses in $WORK/$1/t/metrics.csv; log: $(tail -n 5 "$WORK/$1.log")"
  [ "$got" = "$want" ] || fail "$1: losses differ from //trainer:main --nproc_per_node=2:
$(diff <(echo "$want") <(echo "$got"))"
  say "$1: $(echo "$got" | wc -l) steps, losses equal to //trainer:main --nproc_per_node=2"
}

# No rank of ours still running, and no shm segment of ours in /dev/shm that was not there before.
SHM_BEFORE=$(ls /dev/shm 2>/dev/null | grep '^zt-shm-' | sort || true)
nothing_left() {
  local left
  for _ in $(seq 50); do
    left=$(pgrep -f "^$MAIN" || true)
    [ -z "$left" ] && break
    sleep 0.1
  done
  [ -z "$left" ] || fail "$1: processes left behind: $(ps -o pid,args -p "$(echo $left | tr ' ' ,)")"
  left=$(comm -13 <(echo "$SHM_BEFORE") <(ls /dev/shm 2>/dev/null | grep '^zt-shm-' | sort || true))
  [ -z "$left" ] || fail "$1: shared-memory segments left behind: $left"
}

# expect_line <log> <regex> <what>: the log holds a line matching regex.
expect_line() {
  grep -Eq "$2" "$1" || fail "$3: no line matching /$2/ in $1: $(tail -n 8 "$1")"
}
