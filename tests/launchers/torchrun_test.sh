#!/bin/bash
# //trainer:main under the real torchrun from the project venv, as its users start it: standalone,
# static and c10d rendezvous, a restart after a rank is killed, a failing rank as its "Root Cause",
# and a WORLD_SIZE that disagrees with the ranks that came. Every run's per-step losses must equal
# //trainer:main --nproc_per_node=2's, bit for bit, and leave no process or shared-memory segment
# behind. DeepSpeed's launcher and mpirun: launchers_test.sh; Slurm: slurm_test.sh.
#
# Usage: torchrun_test.sh <//trainer:main> <the venv's torch/ folder>
set -euo pipefail
TEST_NAME=torchrun_test
# shellcheck source=tests/launchers/launcher_cases.sh
source "$(dirname "$0")/launcher_cases.sh"
launcher_test_setup "$1" "$2"
[ -x "$VENV_BIN/torchrun" ] || fail "no $VENV_BIN/torchrun: run tools/setup.sh"
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

# A rank's own error is torchrun's root cause, not "To enable traceback see ...".
rc=0
"$VENV_BIN/torchrun" --standalone --nproc_per_node=2 --no-python "$MAIN" \
  --config="$(config broken 4 "resume_from: \"$WORK/no-such-checkpoint\"")" \
  >"$WORK/broken.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "torchrun with a missing resume_from exited 0"
expect_line "$WORK/broken.log" "^  (message|traceback) *: zerotrain: .*no-such-checkpoint" "torchrun's root cause"
nothing_left "torchrun, a failing rank"

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
