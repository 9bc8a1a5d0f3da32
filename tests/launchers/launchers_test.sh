#!/bin/bash
# //trainer:main under the other launchers its users type: DeepSpeed's `deepspeed` launcher on CPU,
# Open MPI's mpirun with no MASTER_ADDR (and a bad MASTER_PORT), and its own --nproc_per_node with
# run.resume_from: "auto". Every run's per-step losses must equal //trainer:main --nproc_per_node=2's,
# bit for bit, and leave no process or shared-memory segment behind. torchrun: torchrun_test.sh;
# Slurm: slurm_test.sh.
#
# Usage: launchers_test.sh <//trainer:main> <the venv's torch/ folder>
set -euo pipefail
TEST_NAME=launchers_test
# shellcheck source=tests/launchers/launcher_cases.sh
source "$(dirname "$0")/launcher_cases.sh"
launcher_test_setup "$1" "$2"
[ -x "$VENV_BIN/deepspeed" ] || fail "no $VENV_BIN/deepspeed: run tools/setup.sh"
command -v mpirun >/dev/null || fail "no mpirun (Debian's openmpi-bin): run tools/setup.sh"
start=$SECONDS

reference ref

# run.resume_from: "auto" under //trainer:main's own launcher: a fresh start the first time, the
# run's own newest checkpoint the next.
reference ref_auto 8 "save_interval: 4"
for steps in 4 8; do
  "$MAIN" --nproc_per_node=2 --config="$(config auto $steps 'save_interval: 4 resume_from: "auto"')" \
    >"$WORK/auto$steps.log" 2>&1 || fail "resume_from: auto, $steps steps: $(tail -n 5 "$WORK/auto$steps.log")"
done
! grep -q "zerotrain: resumed" "$WORK/auto4.log" || fail "resume_from: auto resumed with no checkpoint"
expect_line "$WORK/auto8.log" "zerotrain: resumed from $WORK/auto/checkpoints at step 4" "resume_from: auto"
[ "$(losses auto)" = "$(losses ref_auto)" ] ||
  fail "resume_from: auto: losses differ: $(diff <(losses ref_auto) <(losses auto))"
say "resume_from: auto: fresh, then resumed at step 4; 8 steps equal to the uninterrupted run"

# DeepSpeed's own launcher, in its CPU form: it adds --local_rank=N to each rank's arguments.
"$VENV_BIN/deepspeed" --num_gpus=2 --master_port="$(free_port)" --no_python "$MAIN" \
  --config="$(config deepspeed)" >"$WORK/deepspeed.log" 2>&1 ||
  fail "deepspeed launcher: $(tail -n 5 "$WORK/deepspeed.log")"
same_losses deepspeed ref
nothing_left "deepspeed launcher"

# Open MPI on one node, no MASTER_ADDR: the store is found on loopback at a port from the job id.
mpirun --allow-run-as-root -np 2 "$MAIN" --config="$(config mpirun)" >"$WORK/mpirun.log" 2>&1 ||
  fail "mpirun -np 2: $(tail -n 5 "$WORK/mpirun.log")"
same_losses mpirun ref
nothing_left "mpirun -np 2"

# Inconsistent variables: one line naming the variable, and a non-zero exit.
rc=0
mpirun --allow-run-as-root -np 2 -x MASTER_PORT=http "$MAIN" --config="$(config badport)" \
  >"$WORK/badport.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "mpirun with MASTER_PORT=http exited 0"
expect_line "$WORK/badport.log" "zerotrain: error: rendezvous: MASTER_PORT='http' is not an integer" \
  "mpirun, a bad MASTER_PORT"
say "PASSED in $((SECONDS - start)) s"
