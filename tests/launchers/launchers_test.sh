#!/bin/bash
# //trainer:main under the real launchers, as their users start it: torchrun (the project venv's,
# standalone, static and c10d rendezvous, a restart after a rank is killed, its "Root Cause"),
# DeepSpeed's `deepspeed` launcher on CPU, and Open MPI's mpirun with no MASTER_ADDR. Every run's
# per-step losses must equal //trainer:main --nproc_per_node=2's, bit for bit, and leave no
# process or shared-memory segment behind. Slurm has its own test (slurm_test.sh).
#
# Usage: launchers_test.sh <//trainer:main> <the venv's torch/ folder>
set -euo pipefail
TEST_NAME=launchers_test
# shellcheck source=tests/launchers/launcher_cases.sh
source "$(dirname "$0")/launcher_cases.sh"
MAIN=$(realpath "$1")
VENV_BIN=$(realpath "$2/../../../../bin")
WORK=$(mktemp -d "${TEST_TMPDIR:-/tmp}/launchers.XXXXXX")
# Each launcher says where the store is; none may come from the test's own environment.
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK SLURM_PROCID
for tool in torchrun deepspeed; do
  [ -x "$VENV_BIN/$tool" ] || fail "no $VENV_BIN/$tool: run tools/setup.sh"
done
command -v mpirun >/dev/null || fail "no mpirun (Debian's openmpi-bin): run tools/setup.sh"
start=$SECONDS

reference ref

# torchrun, the three ways its users start one node: its agent hosts the store every time.
"$VENV_BIN/torchrun" --standalone --nproc_per_node=2 --no-python "$MAIN" \
  --config="$(config standalone)" >"$WORK/standalone.log" 2>&1 ||
  fail "torchrun --standalone: $(tail -n 5 "$WORK/standalone.log")"
same_losses standalone ref
nothing_left "torchrun --standalone"

"$VENV_BIN/torchrun" --nproc_per_node=2 --master_port="$(free_port)" --no-python "$MAIN" \
  --config="$(config static)" >"$WORK/static.log" 2>&1 ||
  fail "torchrun (static rendezvous): $(tail -n 5 "$WORK/static.log")"
same_losses static ref
nothing_left "torchrun (static rendezvous)"

"$VENV_BIN/torchrun" --nnodes=1 --nproc_per_node=2 --rdzv-backend=c10d \
  --rdzv-endpoint="127.0.0.1:$(free_port)" --rdzv-id=zt-c10d --no-python "$MAIN" \
  --config="$(config c10d)" >"$WORK/c10d.log" 2>&1 ||
  fail "torchrun --rdzv-backend=c10d: $(tail -n 5 "$WORK/c10d.log")"
same_losses c10d ref
nothing_left "torchrun --rdzv-backend=c10d"

# A rank killed mid-run: torchrun restarts the group, which resumes from its own newest
# checkpoint (no change to the config) and ends with the uninterrupted run's losses.
STEPS=60
reference ref_long $STEPS "save_interval: 4"
"$VENV_BIN/torchrun" --nproc_per_node=2 --max-restarts=1 --master_port="$(free_port)" \
  --no-python "$MAIN" --config="$(config restart $STEPS "save_interval: 4")" \
  >"$WORK/restart.log" 2>&1 &
agent=$!
victim=""
for _ in $(seq 600); do
  if [ -e "$WORK/restart/checkpoints/latest" ]; then
    for pid in $(pgrep -P "$agent"); do
      tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'RANK=1' && victim=$pid
    done
    [ -n "$victim" ] && break
  fi
  sleep 0.05
done
[ -n "$victim" ] || fail "torchrun restart: no checkpoint or no rank 1 to kill: $(tail -n 5 "$WORK/restart.log")"
kill -9 "$victim"
rc=0
wait "$agent" || rc=$?
[ "$rc" -eq 0 ] || fail "torchrun --max-restarts=1 exited $rc: $(tail -n 8 "$WORK/restart.log")"
expect_line "$WORK/restart.log" "resumed from $WORK/restart/checkpoints" "torchrun restart"
same_losses restart ref_long
nothing_left "torchrun --max-restarts=1"

# run.resume_from: "auto" under //trainer:main's own launcher: a fresh start the first time, the
# run's own newest checkpoint the next.
for steps in 4 8; do
  "$MAIN" --nproc_per_node=2 --config="$(config auto $steps 'save_interval: 4 resume_from: "auto"')" \
    >"$WORK/auto$steps.log" 2>&1 || fail "resume_from: auto, $steps steps: $(tail -n 5 "$WORK/auto$steps.log")"
done
! grep -q "zerotrain: resumed" "$WORK/auto4.log" || fail "resume_from: auto resumed with no checkpoint"
expect_line "$WORK/auto8.log" "zerotrain: resumed from $WORK/auto/checkpoints at step 4" "resume_from: auto"
[ "$(losses auto)" = "$(losses ref_long | head -n 8)" ] ||
  fail "resume_from: auto: losses differ: $(diff <(losses ref_long | head -n 8) <(losses auto))"
say "resume_from: auto: fresh, then resumed at step 4; 8 steps equal to the uninterrupted run"

# A rank's own error is torchrun's root cause, not "To enable traceback see ...".
rc=0
"$VENV_BIN/torchrun" --standalone --nproc_per_node=2 --no-python "$MAIN" \
  --config="$(config broken 4 "resume_from: \"$WORK/no-such-checkpoint\"")" \
  >"$WORK/broken.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "torchrun with a missing resume_from exited 0"
expect_line "$WORK/broken.log" "^  (message|traceback) *: zerotrain: .*no-such-checkpoint" "torchrun's root cause"
nothing_left "torchrun, a failing rank"

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
# WORLD_SIZE=3 while torchrun starts 2: the ranks that came are told who did not, within the
# run's comm_timeout_s.
rc=0
WORLD_SIZE=3 timeout 120 "$VENV_BIN/torchrun" --nproc_per_node=2 --master_port="$(free_port)" \
  --no-python env WORLD_SIZE=3 "$MAIN" --config="$(TIMEOUT_S=5 config short_world)" \
  >"$WORK/short_world.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "WORLD_SIZE=3 with 2 ranks: exit $rc"
expect_line "$WORK/short_world.log" "zerotrain: rank [01]: rendezvous: rank 2 of 3 did not reach the store at 127.0.0.1:[0-9]+ within 5000 ms" "WORLD_SIZE=3 with 2 ranks"
nothing_left "WORLD_SIZE=3 with 2 ranks"

say "PASSED in $((SECONDS - start)) s"
