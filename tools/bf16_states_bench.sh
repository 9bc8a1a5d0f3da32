#!/bin/bash
# Usage (from the repository root, after `bazel build //trainer:main`):
#   bash tools/bf16_states_bench.sh default 10; bash tools/bf16_states_bench.sh big 6
# Logs and configs go to $OUT (default /tmp/bf16_states_bench); docs/BENCHMARKS.md has the tables.
# Model states and peak RSS per rank: bf16 model with fp32 master and Adam states, with bf16 master
# and states, with Muon; and under offload_optimizer cpu with fp32 states, bf16 master, bf16 master
# + bf16 states (DeepSpeedCPUAdam's fp32_optimizer_states false). 2 ranks, stages 1-3.
root=$(pwd)
main=${MAIN:-$root/bazel-bin/trainer/main}
out=${OUT:-/tmp/bf16_states_bench}
mkdir -p "$out" && cd "$out" || exit 1
model=$1   # default | big
steps=$2
extra=""
[ "$model" = big ] && extra='model { n_layer: 8 n_embd: 768 n_head: 12 block_size: 64 }'
echo "run { steps: $steps seed: 1 eval_interval: 0 eval_iters: 1 sample_tokens: 0 output_dir: \"$out/out\" } $extra" > run_$model.pbtxt
for st in 1 2 3; do
 for v in adam bf16states muon off_adam off_master off_master_states; do
  opt='{"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1, "torch_adam": true}}'
  bf='"bf16": {"enabled": true}'
  off=""
  case $v in
   bf16states) bf='"bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}';;
   muon) opt='{"type": "Muon", "params": {"lr": 0.001, "weight_decay": 0.1}}';;
   off_adam) off=', "offload_optimizer": {"device": "cpu"}'; opt='{"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1}}';;
   off_master) off=', "offload_optimizer": {"device": "cpu"}'; opt='{"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1}}'; bf='"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}';;
   off_master_states) off=', "offload_optimizer": {"device": "cpu"}'; opt='{"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1, "fp32_optimizer_states": false}}'; bf='"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}';;
  esac
  rs=""; [ "$v" = muon ] && [ $st = 3 ] && rs=', "reduce_scatter": false'
  echo "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_clipping\": 1.0, \"optimizer\": $opt, \"zero_optimization\": {\"stage\": $st$rs$off}, $bf}" > c_${model}_${v}_$st.json
  rm -rf out
  "$main" --config=$root/trainer/configs/default.pbtxt --config=run_$model.pbtxt --ds_config=c_${model}_${v}_$st.json > log_${model}_${v}_$st.txt 2>&1
  echo "== $model $v stage $st rc=$?"; grep -E "samples/s|model states .* MiB:|offloaded" log_${model}_${v}_$st.txt | head -4
 done
done
