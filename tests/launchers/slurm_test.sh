#!/bin/bash
# //trainer:main under real Slurm (Debian's slurm-wlm and munge): the test starts its own one-node
# cluster (a munge key made for it, a generated slurm.conf, slurmctld and slurmd on free ports,
# everything under one temporary directory, all stopped at the end even on failure), then runs
# `srun -N1 -n2` and an `sbatch --wait` script with no MASTER_ADDR/MASTER_PORT (derived from the
# step's node list and job id), and stops running jobs with `scancel --signal=USR1` and `scancel`:
# every rank must save at the step it stopped after, end, and leave that checkpoint loadable. Losses must equal //trainer:main --nproc_per_node=2's. Where Slurm cannot
# start here the test fails with the reason; it never skips.
#
# Usage: slurm_test.sh <//trainer:main>
set -euo pipefail
TEST_NAME=slurm_test
# shellcheck source=tests/launchers/launcher_cases.sh
source "$(dirname "$0")/launcher_cases.sh"
MAIN=$(realpath "$1")
WORK=$(mktemp -d "${TEST_TMPDIR:-/tmp}/slurm.XXXXXX")
# Unix socket paths are short (108 bytes): the cluster lives directly under /tmp.
CLUSTER=$(mktemp -d /tmp/zt-slurm.XXXXXX)
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK
for tool in munged slurmctld slurmd srun sbatch scancel squeue sinfo; do
  command -v "$tool" >/dev/null || fail "no $tool (Debian's slurm-wlm and munge): run tools/setup.sh"
done

stop_cluster() {
  local f pid
  # Only this test's cluster: never a real one the machine may belong to.
  if [ "${SLURM_CONF:-}" = "$CLUSTER/slurm.conf" ]; then
    scancel --full --signal=KILL --user="$(id -un)" 2>/dev/null || true
  fi
  for f in slurmd slurmctld munged; do
    pid=$(cat "$CLUSTER/$f.pid" 2>/dev/null || true)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
  sleep 0.5
  for f in slurmd slurmctld munged; do
    pid=$(cat "$CLUSTER/$f.pid" 2>/dev/null || true)
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  done
  pkill -9 -f "^$MAIN" 2>/dev/null || true
  rm -rf "$CLUSTER"
}
trap stop_cluster EXIT

start_cluster() {
  mkdir -p "$CLUSTER/state" "$CLUSTER/spool" "$CLUSTER/munge"
  chmod 700 "$CLUSTER/munge"
  head -c 1024 /dev/urandom >"$CLUSTER/munge/munge.key"
  chmod 600 "$CLUSTER/munge/munge.key"
  munged --force --key-file="$CLUSTER/munge/munge.key" --socket="$CLUSTER/munge/sock" \
    --pid-file="$CLUSTER/munged.pid" --log-file="$CLUSTER/munged.log" \
    --seed-file="$CLUSTER/munge/seed" 2>"$CLUSTER/munged.err" ||
    fail "munged did not start: $(cat "$CLUSTER/munged.err" "$CLUSTER/munged.log" 2>/dev/null | tail -n 3)"
  # The node's CPUs from getconf, not nproc: nproc honours OMP_NUM_THREADS, which a shell that
  # starts ranks often sets to 1, and a node of one CPU leaves the two tasks pending until the
  # timeout.
  cat >"$CLUSTER/slurm.conf" <<EOF
ClusterName=zerotrain-test
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$CLUSTER/munge/sock
CredType=cred/munge
StateSaveLocation=$CLUSTER/state
SlurmdSpoolDir=$CLUSTER/spool
SlurmctldPidFile=$CLUSTER/slurmctld.pid
SlurmdPidFile=$CLUSTER/slurmd.pid
SlurmctldLogFile=$CLUSTER/slurmctld.log
SlurmdLogFile=$CLUSTER/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
FirstJobId=$((1000 + RANDOM))
KillWait=10
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(getconf _NPROCESSORS_ONLN) State=UNKNOWN
PartitionName=zt Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  export SLURM_CONF="$CLUSTER/slurm.conf"
  slurmctld -f "$SLURM_CONF" -i >"$CLUSTER/slurmctld.out" 2>&1 ||
    fail "slurmctld did not start: $(tail -n 3 "$CLUSTER/slurmctld.out" "$CLUSTER/slurmctld.log" 2>/dev/null)"
  slurmd -f "$SLURM_CONF" -N localhost >"$CLUSTER/slurmd.out" 2>&1 ||
    fail "slurmd did not start: $(tail -n 3 "$CLUSTER/slurmd.out" "$CLUSTER/slurmd.log" 2>/dev/null)"
  for _ in $(seq 150); do
    [ "$(sinfo -h -o %t 2>/dev/null)" = "idle" ] && return
    sleep 0.2
  done
  fail "the one-node cluster never became idle (sinfo: $(sinfo 2>&1 | tail -n 1)): $(tail -n 3 "$CLUSTER/slurmctld.log" "$CLUSTER/slurmd.log" 2>/dev/null)"
}

start=$SECONDS
start_cluster
say "cluster up in $((SECONDS - start)) s"
reference ref

timeout 300 srun -N1 -n2 "$MAIN" --config="$(config srun)" >"$WORK/srun.log" 2>&1 ||
  fail "srun -N1 -n2: $(tail -n 5 "$WORK/srun.log")"
same_losses srun ref
nothing_left "srun -N1 -n2"

cat >"$WORK/job.sh" <<EOF
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --output=$WORK/sbatch.log
srun "$MAIN" --config="$(config sbatch)"
EOF
timeout 300 sbatch --wait "$WORK/job.sh" >"$WORK/sbatch.out" 2>&1 ||
  fail "sbatch --wait: $(cat "$WORK/sbatch.out"; tail -n 5 "$WORK/sbatch.log")"
same_losses sbatch ref
nothing_left "sbatch --wait"

# A running job stopped two ways: `scancel --signal=USR1` (what `srun --signal=USR1@120` sends
# before a preemption) and a plain `scancel` (SIGTERM, then SIGKILL after KillWait). Either way
# every rank finishes its step, saves a checkpoint at that step and exits 3; the checkpoint loads
# (--generate reads it through run.resume_from).
for how in USR1 TERM; do
  cat >"$WORK/long_$how.sh" <<EOF
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --output=$WORK/long_$how.log
srun "$MAIN" --config="$(config long_$how 100000 "save_interval: 1000")"
EOF
  job=$(sbatch --parsable "$WORK/long_$how.sh") || fail "sbatch: $job"
  for _ in $(seq 1200); do
    [ "$(losses long_$how | wc -l)" -ge 3 ] && break
    sleep 0.1
  done
  [ "$(losses long_$how | wc -l)" -ge 3 ] || fail "the job to stop did not train: $(tail -n 5 "$WORK/long_$how.log")"
  if [ $how = USR1 ]; then scancel --signal=USR1 "$job"; else scancel "$job"; fi
  for _ in $(seq 300); do
    [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break
    sleep 0.1
  done
  [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] || fail "job $job still in the queue 30 s after scancel ($how)"
  nothing_left "scancel ($how)"
  line=$(grep -m 1 "zerotrain: rank 0: stopped after step" "$WORK/long_$how.log") ||
    fail "scancel ($how): rank 0 did not say it stopped: $(tail -n 5 "$WORK/long_$how.log")"
  step=$(echo "$line" | sed 's/.*stopped after step \([0-9]*\) on request.*/\1/')
  [ "$(cat "$WORK/long_$how/checkpoints/latest")" = "global_step$step" ] ||
    fail "scancel ($how): latest is $(cat "$WORK/long_$how/checkpoints/latest"), not the stop's step $step: $line"
  "$MAIN" --config="$(config long_$how 100000 "resume_from: \"$WORK/long_$how/checkpoints\"")" \
    --generate --prompt_tokens=1,2 --max_new_tokens=4 >"$WORK/load_$how.log" 2>&1 ||
    fail "scancel ($how): the checkpoint does not load: $(tail -n 5 "$WORK/load_$how.log")"
  say "scancel ($how): every rank stopped after step $step and saved it; the checkpoint loads"
done

say "PASSED in $((SECONDS - start)) s"
