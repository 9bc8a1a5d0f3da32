#!/usr/bin/env bash
# The GPU benchmark (docs/BENCHMARKS.md, "GPU"): GPT-2 small (124M) and medium (350M), bf16,
# sequence 1024, trained by //trainer:main at ZeRO stages 0-3 with and without
# offload_optimizer cpu on the GPUs present, each row beside the same model, batch and precision
# trained by PyTorch itself (tools/gpu_bench_peer.py: DDP for stage 0, FSDP2 for the sharded
# stages, eager, SDPA). Per row: tokens/s per GPU, MFU, peak device memory, model-state bytes per
# rank against the ZeRO formula, and the ratios to the peer. Then the largest GPT the memory
# advisor says fits one GPU with optimizer offload, run, its measured peak beside the prediction.
# Staged with the GPU check and run on the GPU machine after it:
#   here:  bash tools/gpu_check.sh stage            # stages this script, the peer and the trainer
#   there: bash tools/gpu_bench.sh run               # markdown on stdout, logs in .gpu/bench/
# With the device tool: run(command="bash tools/gpu_check.sh run; bash .gpu/tools/gpu_bench.sh
# run", carry=[".gpu"]). GPU_BENCH_BUDGET_S (default 300) bounds the whole run: rows that no
# longer fit are listed as not run; GPU_BENCH_ROWS (a regex over row tags) runs a subset. `bash
# tools/gpu_bench.sh smoke` runs the same script here on the CPU with a tiny GPT and the peer over
# gloo (after `bazel build //trainer:main`): it checks the script, its configs and its parsing,
# and its figures mean nothing. Smoke runs three rows by default, which between them take every
# path of the script and the peer (DDP, FSDP2 ZeRO-2, ZeRO-3 with CPU offload), plus the
# advisor's; GPU_BENCH_ROWS=. runs all seven.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Staged: .gpu/tools/gpu_bench.sh beside .gpu/gpu_check.sh; in a checkout: tools/gpu_check.sh.
if [ -f "$here/../gpu_check.sh" ]; then
  source "$here/../gpu_check.sh"
else
  source "$here/gpu_check.sh"
fi

BUDGET_S=${GPU_BENCH_BUDGET_S:-300}
ROW_TIMEOUT_S=${GPU_BENCH_ROW_TIMEOUT_S:-60}  # each launch; the budget is checked between rows
# Only the rows whose tag (e.g. gpt2-350M_s3_cpu) matches this extended regex, and the advisor's
# row only if "advisor" matches: for a second run that fills in the rows a first one left out.
ROWS=${GPU_BENCH_ROWS:-.}
PEAK_TFLOPS=989  # dense bf16, H100/H200 SXM (torchtitan's MFU denominator)
SEQ=1024
VOCAB=50257
# name layers heads embd micro_batch
MODELS=("gpt2-124M 12 12 768 16" "gpt2-350M 24 16 1024 8")
DEVICE=cuda
PEER_FLAGS=()
PY=python3

# FLOPs per token as torchtitan counts them: 6N + 12·L·H·Q·T, N without the embeddings. GPT-2's
# output head is the token embedding (tied), so its V·d matmul is counted here as torchtitan's
# untied output layer is.
flops_per_token() {
  local l=$1 d=$2
  echo $((6 * (12 * l * d * d + 13 * l * d + 2 * d + VOCAB * d) + 12 * l * d * SEQ))
}

# A token file of random ids (nanoGPT's raw uint16 layout), enough for every row.
make_tokens() {
  "$PY" - "$1" <<'PY'
import sys, torch
torch.manual_seed(0)
torch.randint(0, 50257, (8 << 20,), dtype=torch.int32).to(torch.int16).numpy().tofile(sys.argv[1])
PY
}

# //trainer:main for one row; prints "tokens_per_s peak_mib states_mib formula_mib".
zerotrain_row() {
  local gpus=$1 l=$2 h=$3 d=$4 mb=$5 stage=$6 offload=$7 log=$8 steps=${9:-6}
  local cfg="$work/row.pbtxt" off=""
  [ "$offload" = cpu ] && off='offload_optimizer { device: "cpu" pin_memory: true }'
  cat >"$cfg" <<CFG
train_micro_batch_size_per_gpu: $mb
steps_per_print: 1000
zero_optimization { stage: $stage $off }
gradient_clipping: 0
bf16 { enabled: true }
optimizer { type: "AdamW" params { lr: 1e-4 weight_decay: 0 } }
model { name: "gpt2" n_layer: $l n_head: $h n_embd: $d block_size: $SEQ vocab_size: $VOCAB
        gelu_tanh: true dropout: 0 }
data { source: "tokens" path: "$work/tokens.bin" eval_fraction: 0 }
run { steps: $steps seed: 1 device: "$DEVICE" output_dir: "$work/out" eval_interval: 0
      sample_tokens: 0 save_on_stop: false }
CFG
  (timeout -k 10 "$ROW_TIMEOUT_S" "$main" --config="$cfg" \
    --nproc_per_node="$gpus" --memory_summary) >"$log" 2>&1 || return 1
  local tps peak states formula
  tps=$(sed -n 's/.*samples\/s (\([0-9.]*\) tokens\/s) per rank.*/\1/p' "$log" | tail -n 1)
  peak=$(sed -n 's/.*cuda peak memory[^:]*: rank 0 \([0-9.]*\) \/.*/\1/p' "$log" | tail -n 1)
  states=$(sed -n 's/.*model states \([0-9.]*\) MiB:.*/\1/p' "$log" | head -n 1)
  formula=$(sed -n 's/.*(ZeRO formula \([0-9.]*\) MiB).*/\1/p' "$log" | head -n 1)
  [ -n "$tps" ] || return 1
  echo "$tps ${peak:--} ${states:--} ${formula:--}"
}

# The peer for one row; prints "tokens_per_s peak_mib".
peer_row() {
  local gpus=$1 l=$2 h=$3 d=$4 mb=$5 stage=$6 offload=$7 log=$8 mode=fsdp2_zero2 extra=()
  [ "$stage" = 0 ] && mode=ddp
  [ "$stage" = 3 ] && mode=fsdp2_zero3
  [ "$offload" = cpu ] && extra+=(--cpu_offload)
  timeout -k 10 "$ROW_TIMEOUT_S" "$PY" -W ignore -m torch.distributed.run \
    --nproc_per_node="$gpus" --master_port=29631 "$here/gpu_bench_peer.py" --mode "$mode" \
    --layers "$l" --heads "$h" --embd "$d" --vocab "$VOCAB" --seq "$SEQ" --micro_batch "$mb" \
    ${extra[@]+"${extra[@]}"} ${PEER_FLAGS[@]+"${PEER_FLAGS[@]}"} >"$log" 2>&1 || return 1
  "$PY" -c 'import json, sys
for line in open(sys.argv[1]):
    if line.startswith("PEER "):
        r = json.loads(line[5:])
        print("%.0f %.0f" % (r["tokens_per_s_per_gpu"], r["peak_allocated_bytes"] / 2**20))' "$log"
}

# a / b to two places, "-" where either is not a positive number.
ratio() {
  "$PY" - "$1" "$2" <<'PY'
import sys
try:
    a, b = float(sys.argv[1]), float(sys.argv[2])
    print("%.2f" % (a / b) if a > 0 and b > 0 else "-")
except ValueError:
    print("-")
PY
}
mfu() { "$PY" -c "import sys; t, f = map(float, sys.argv[1:3]); print('%.1f%%' % (100 * t * f / ($PEAK_TFLOPS * 1e12)))" "$1" "$2"; }

# The largest GPT (from a ladder of GPT-2/3 shapes) the advisor says fits one GPU at stage 2 with
# offload_optimizer cpu, run for a few steps at micro batch 1: predicted and measured peak.
advisor_row() {
  local gib=${1:-} host l d h name best="" predicted
  [ -n "$gib" ] ||
    gib=$("$PY" -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory // 2**30)')
  host=$(awk '/MemTotal/ { print int($2 / 1048576) }' /proc/meminfo)
  for name_shape in "774M 36 20 1280" "1.5B 48 25 1600" "2.7B 32 32 2560" "6.7B 32 32 4096" \
    "13B 40 40 5120"; do
    read -r name l h d <<<"$name_shape"
    local params=$((VOCAB * d + SEQ * d + l * (12 * d * d + 13 * d) + 2 * d))
    local line
    line=$("$main" --estimate_memory --params="$params" \
      --largest_layer_params=$((VOCAB * d)) --nproc_per_node=1 --device_memory_gib="$gib" \
      --host_memory_gib="$host" 2>/dev/null | awk '$1 == 2 && $2 == "optimizer->cpu"')
    [[ "$line" == *yes* ]] || break
    best="$name $l $h $d"
    predicted=$(awk '{ print $3 }' <<<"$line")
  done
  if [ -z "$best" ]; then
    echo "advisor: no GPT of the ladder fits one ${gib} GiB GPU with optimizer offload"
    return 0
  fi
  read -r name l h d <<<"$best"
  if [ "$DEVICE" != cuda ]; then
    echo "advisor: $name fits a ${gib} GiB device with optimizer offload ($predicted GiB predicted); not run on $DEVICE"
    return 0
  fi
  local got
  if got=$(zerotrain_row 1 "$l" "$h" "$d" 1 2 cpu "$logs/advisor_$name.log" 3); then
    read -r tps peak _ _ <<<"$got"
    echo "advisor: largest GPT predicted to fit one ${gib} GiB GPU at stage 2 + offload_optimizer"
    echo "cpu: $name (n_layer $l, n_embd $d); predicted model states $predicted GiB per device,"
    echo "measured peak $("$PY" -c "print('%.2f' % ($peak / 1024))") GiB allocated at micro batch 1 ($tps tokens/s)"
  else
    echo "advisor: $name (predicted $predicted GiB per device) failed or timed out; see $logs/advisor_$name.log"
  fi
}

# The rows on `gpus` ranks, then the advisor's (given a device size in GiB: not measured).
bench() {
  local gpus=$1 advisor_gib=${2:-}
  work=$(mktemp -d)
  logs="${GPU_BENCH_LOGS:-$gpu/bench}"
  mkdir -p "$logs"
  make_tokens "$work/tokens.bin"
  local start=$SECONDS
  echo "GPU benchmark: $("$PY" -c "import torch; print(torch.cuda.get_device_name(0) if '$DEVICE' == 'cuda' else 'cpu (smoke)')") x $gpus," \
    "torch $("$PY" -c 'import torch; print(torch.__version__)'), $(date -u +%F)"
  echo
  echo "| model | stage | offload | zerotrain tok/s/GPU | MFU | peak MiB | states MiB (formula) | peer | peer tok/s/GPU | peer peak MiB | tok/s ratio | peak ratio |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  local m name l h d mb stage offload
  for m in "${MODELS[@]}"; do
    read -r name l h d mb <<<"$m"
    local fpt
    fpt=$(flops_per_token "$l" "$d")
    for offload in none cpu; do
      for stage in 0 1 2 3; do
        [ "$stage" = 0 ] && [ "$offload" = cpu ] && continue
        local tag="${name}_s${stage}_${offload}"
        grep -Eq "$ROWS" <<<"$tag" || continue
        if [ $((SECONDS - start)) -ge "$BUDGET_S" ]; then
          echo "| $name | $stage | $offload | not run (budget ${BUDGET_S}s spent) |||||||||"
          continue
        fi
        local z="- - - -" p="- -" peer=ddp
        [ "$stage" != 0 ] && peer=$([ "$stage" = 3 ] && echo fsdp2_zero3 || echo fsdp2_zero2)
        [ "$offload" = cpu ] && peer="$peer+cpu_offload"
        z=$(zerotrain_row "$gpus" "$l" "$h" "$d" "$mb" "$stage" "$offload" "$logs/$tag.log") ||
          z="failed - - -"
        p=$(peer_row "$gpus" "$l" "$h" "$d" "$mb" "$stage" "$offload" "$logs/${tag}_peer.log") ||
          p="failed -"
        local zt zp zs zf pt pp
        read -r zt zp zs zf <<<"$z"
        read -r pt pp <<<"$p"
        local zmfu=-
        [ "$zt" != failed ] && zmfu=$(mfu "$zt" "$fpt")
        echo "| $name | $stage | $offload | $zt | $zmfu | $zp | $zs ($zf) | $peer | $pt | $pp |" \
          "$(ratio "$zt" "$pt") | $(ratio "$zp" "$pp") |"
      done
    done
  done
  echo
  if ! grep -Eq "$ROWS" <<<advisor; then
    echo "advisor row: not asked for (GPU_BENCH_ROWS=$ROWS)"
  elif [ $((SECONDS - start)) -lt "$BUDGET_S" ]; then
    advisor_row "$advisor_gib"
  else
    echo "advisor row: not run (budget ${BUDGET_S}s spent)"
  fi
  echo
  echo "gpu_bench: $((SECONDS - start))s; logs in $logs"
  rm -rf "$work"
}

case "${1:-}" in
  run)
    use_staged_libs
    main="$gpu/bin/trainer/main"
    gpus=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
    [ "$gpus" -ge 1 ] || die "no CUDA device visible"
    bench "$gpus"
    ;;
  smoke)
    main="$root/bazel-bin/trainer/main"
    [ -x "$main" ] || die "$main is missing: bazel build //trainer:main first"
    PY="$root/.venv/bin/python"
    DEVICE=cpu
    PEER_FLAGS=(--cpu --warmup 1 --steps 2)
    GPU_BENCH_LOGS=${GPU_BENCH_LOGS:-$(mktemp -d)}
    SEQ=64
    MODELS=("tiny 2 2 64 4")
    ROWS=${GPU_BENCH_ROWS:-_s0_none\$|_s2_none\$|_s3_cpu\$|advisor}
    bench 2 80
    ;;
  *) die "usage: tools/gpu_bench.sh run|smoke (stage with tools/gpu_check.sh stage)" ;;
esac
